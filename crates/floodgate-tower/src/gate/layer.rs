//! [`FloodgateLayer`]: what every wrapped service shares.
//!
//! The layer is one `Arc` to one state: the pipeline, the extractor, the
//! optional worker gauge, the clock, the counters and the refusal hook. [`Layer::layer`] and
//! every clone of the resulting [`Floodgate`] service point at it, so limits hold across
//! clones, across routes and across threads (unlike tower's `RateLimit`, whose state is per
//! clone). The builder methods change a layer not yet shared in place; on a clone, they give
//! it a state of its own (its counters start from the clone's).
//!
//! [`Layer::layer`]: tower::Layer::layer
//! [`Floodgate`]: super::service::Floodgate

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::utilization::WorkerGauge;
use floodgate::limiter::LimiterKind;
use floodgate::pipeline::scope::{Field, KeyTemplate};
use floodgate::pipeline::Pipeline;
use floodgate::store::Store;
use floodgate::{Clock, SystemClock};

use crate::extract::Extractor;
use crate::response::RefusalFn;

/// Applies [`Floodgate`](super::service::Floodgate) to services. Cheap to clone; clones share everything.
///
/// ```
/// use floodgate_tower::FloodgateLayer;
/// use http::{Request, Response};
/// use std::convert::Infallible;
/// use std::net::SocketAddr;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Two requests per address, then one every 1000 s.
/// let layer = FloodgateLayer::per_ip(0.001, 2)?;
/// let hello = service_fn(|_: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// });
/// let service = layer.layer(hello);
/// let from = |peer: [u8; 4]| {
///     let mut request = Request::new(String::new());
///     request.extensions_mut().insert(SocketAddr::from((peer, 50123)));
///     request
/// };
/// assert_eq!(service.clone().oneshot(from([192, 0, 2, 1])).await?.status(), 200);
/// assert_eq!(service.clone().oneshot(from([192, 0, 2, 1])).await?.status(), 200);
/// let refused = service.clone().oneshot(from([192, 0, 2, 1])).await?;
/// assert_eq!(refused.status(), 429);
/// assert!(refused.headers().contains_key("retry-after"));
/// // Another address has a bucket of its own.
/// assert_eq!(service.clone().oneshot(from([192, 0, 2, 2])).await?.status(), 200);
/// # Ok(()) }
/// ```
pub struct FloodgateLayer<S> {
    shared: Arc<Shared<S>>,
}

/// The state a layer and every service it makes share (see the [module documentation](self)).
pub(crate) struct Shared<S> {
    pub(crate) pipeline: Arc<Pipeline<S>>,
    pub(crate) extractor: Arc<Extractor>,
    pub(crate) gauge: Option<Arc<WorkerGauge>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// What each request's answer needs, shared with its response future.
    pub(crate) answers: Arc<Answers>,
    /// Requests the extractor could not place.
    pub(crate) unidentified: AtomicU64,
    /// Whether a stage counts by the request's user (see [`counts_by_user`]).
    pub(crate) needs_user: bool,
}

/// What answering a request needs once its verdict is known: the refusal hook, and the count
/// of requests let through because the middleware itself failed.
pub(crate) struct Answers {
    pub(crate) fail_opens: AtomicU64,
    pub(crate) on_refusal: Option<Arc<RefusalFn>>,
}

impl Answers {
    /// No hook, nothing counted.
    pub(crate) fn new() -> Answers {
        Answers {
            fail_opens: AtomicU64::new(0),
            on_refusal: None,
        }
    }
}

impl Clone for Answers {
    fn clone(&self) -> Self {
        Answers {
            fail_opens: AtomicU64::new(self.fail_opens.load(Ordering::Relaxed)),
            on_refusal: self.on_refusal.clone(),
        }
    }
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared {
            pipeline: Arc::clone(&self.pipeline),
            extractor: Arc::clone(&self.extractor),
            gauge: self.gauge.clone(),
            clock: Arc::clone(&self.clock),
            answers: Arc::clone(&self.answers),
            unidentified: AtomicU64::new(self.unidentified.load(Ordering::Relaxed)),
            needs_user: self.needs_user,
        }
    }
}

impl<S> FloodgateLayer<S> {
    /// A layer running `pipeline` with the default [`Extractor`] and no worker gauge.
    ///
    /// A pipeline none of whose stages counts by the request's user (shedders only, or stages
    /// keyed by other fields) does not need the client's address: a request without one is
    /// then limited as [`ANONYMOUS`](crate::ANONYMOUS) rather than refused as
    /// [`Unidentified`](crate::Unidentified).
    pub fn new(pipeline: impl Into<Arc<Pipeline<S>>>) -> Self
    where
        S: Store<str, AnyAlgorithm> + 'static,
    {
        let pipeline = pipeline.into();
        FloodgateLayer {
            shared: Arc::new(Shared {
                needs_user: counts_by_user(&pipeline),
                pipeline,
                extractor: Arc::new(Extractor::new()),
                gauge: None,
                clock: Arc::new(SystemClock::new()),
                answers: Arc::new(Answers::new()),
                unidentified: AtomicU64::new(0),
            }),
        }
    }

    /// The state this layer's services share.
    pub(crate) fn shared(&self) -> &Arc<Shared<S>> {
        &self.shared
    }

    /// Changes this layer's state: in place when no service or clone shares it yet, else in a
    /// copy of its own.
    fn with(mut self, change: impl FnOnce(&mut Shared<S>)) -> Self {
        change(Arc::make_mut(&mut self.shared));
        self
    }

    /// Shapes every refusal: `hook` gets the refusal and the response the middleware would
    /// send (see [`crate::response`]) and answers the one to send. A hook that panics lets
    /// the request through, counted in [`FloodgateLayer::fail_opens`].
    ///
    /// ```
    /// use floodgate_tower::FloodgateLayer;
    /// use http::header::HeaderValue;
    ///
    /// # fn main() -> Result<(), floodgate::ConfigError> {
    /// let layer = FloodgateLayer::per_ip(10.0, 20)?.on_refusal(|refusal, mut response| {
    ///     let stage = HeaderValue::from_str(refusal.stage.as_str()).unwrap();
    ///     response.headers_mut().insert("x-refused-by", stage);
    ///     response
    /// });
    /// # let _ = layer; Ok(())
    /// # }
    /// ```
    pub fn on_refusal<F>(self, hook: F) -> Self
    where
        F: Fn(
                &floodgate::pipeline::Refusal,
                http::Response<bytes::Bytes>,
            ) -> http::Response<bytes::Bytes>
            + Send
            + Sync
            + 'static,
    {
        self.with(|shared| Arc::make_mut(&mut shared.answers).on_refusal = Some(Arc::new(hook)))
    }

    /// Times requests on `clock` (default the system clock): a request's latency, from the
    /// middleware's call to the end of its response, is the sample an adaptive concurrency
    /// stage learns from. Requests are timed only when the pipeline has such a stage.
    pub fn clock(self, clock: Arc<dyn Clock>) -> Self {
        self.with(|shared| shared.clock = clock)
    }

    /// Reads what the pipeline needs of each request with `extractor` instead of the default rules.
    pub fn extractor(self, extractor: Extractor) -> Self {
        self.with(|shared| shared.extractor = Arc::new(extractor))
    }

    /// Marks one worker of `gauge` busy from the moment a request reaches the middleware until
    /// its response ends (refused requests included, until refused). Give the same gauge to
    /// the pipeline's [`UtilizationShedder`](floodgate::limiter::utilization::UtilizationShedder)
    /// as its source, so that it sheds by this service's own in-flight count.
    pub fn worker_gauge(self, gauge: Arc<WorkerGauge>) -> Self {
        self.with(|shared| shared.gauge = Some(gauge))
    }

    /// The pipeline, for its stats and modes (`set_mode` works while serving).
    pub fn pipeline(&self) -> &Arc<Pipeline<S>> {
        &self.shared.pipeline
    }

    /// Requests let through because the middleware itself failed (the extractor or the
    /// pipeline panicked, or a refusal could not be built). Store errors are counted by the
    /// pipeline ([`Pipeline::stats`]), not here.
    pub fn fail_opens(&self) -> u64 {
        self.shared.answers.fail_opens.load(Ordering::Relaxed)
    }

    /// Requests answered 500 because the extractor could not place them
    /// ([`Unidentified`](crate::Unidentified): no client address, no key): a set-up mistake,
    /// also logged (`WARN`, target `floodgate_tower`) the first time.
    pub fn unidentified(&self) -> u64 {
        self.shared.unidentified.load(Ordering::Relaxed)
    }
}

impl<S> Shared<S> {
    /// Counts a request the extractor could not place, and says why the first time.
    pub(crate) fn note_unidentified(&self, why: &crate::Unidentified) {
        if self.unidentified.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(target: "floodgate_tower", "{why}");
        }
    }
}

impl<S> Clone for FloodgateLayer<S> {
    fn clone(&self) -> Self {
        FloodgateLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for FloodgateLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FloodgateLayer")
            .field("extractor", &self.shared.extractor)
            .field("gauge", &self.shared.gauge)
            .field("fail_opens", &self.fail_opens())
            .field("on_refusal", &self.shared.answers.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether a stage of `pipeline` counts, or decides, by the request's user: a request rate or
/// concurrency stage keyed by default (by user) or by a template naming `user`, a level keyed
/// by one, or a condition on `user`.
fn counts_by_user<S: Store<str, AnyAlgorithm> + 'static>(pipeline: &Pipeline<S>) -> bool {
    let names_user = |template: &KeyTemplate| template.fields().any(|f| *f == Field::User);
    pipeline.stages().any(|stage| {
        let scope = stage.scope_of();
        let keyed = matches!(
            stage.limiter().kind(),
            LimiterKind::RequestRate | LimiterKind::Concurrency
        );
        (keyed && scope.key_template().is_none_or(names_user))
            || stage.levels().iter().any(|level| names_user(level.key()))
            || scope
                .condition()
                .conditions()
                .iter()
                .any(|(f, _)| *f == Field::User)
    })
}
