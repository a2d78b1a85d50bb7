//! [`FloodgateLayer`]: what every wrapped service shares.
//!
//! The layer holds the pipeline, the extractor, the optional worker gauge and the fail-open
//! counter, each behind an `Arc`. [`Layer::layer`] and every clone of the resulting
//! [`Floodgate`] service point at the same ones, so limits hold across clones, across routes
//! and across threads (unlike tower's `RateLimit`, whose state is per clone).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use floodgate::limiter::utilization::WorkerGauge;
use floodgate::pipeline::Pipeline;
use floodgate::{Clock, SystemClock};
use tower::Layer;

use crate::extract::Extractor;
use crate::service::Floodgate;

/// Applies [`Floodgate`] to services. Cheap to clone; clones share everything.
pub struct FloodgateLayer<S> {
    pub(crate) pipeline: Arc<Pipeline<S>>,
    pub(crate) extractor: Arc<Extractor>,
    pub(crate) gauge: Option<Arc<WorkerGauge>>,
    pub(crate) fail_opens: Arc<AtomicU64>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl<S> FloodgateLayer<S> {
    /// A layer running `pipeline` with the default [`Extractor`] and no worker gauge.
    pub fn new(pipeline: impl Into<Arc<Pipeline<S>>>) -> Self {
        FloodgateLayer {
            pipeline: pipeline.into(),
            extractor: Arc::new(Extractor::new()),
            gauge: None,
            fail_opens: Arc::new(AtomicU64::new(0)),
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// Times requests on `clock` (default the system clock): a request's latency, from the
    /// middleware's call to the end of its response, is the sample an adaptive concurrency
    /// stage learns from. Requests are timed only when the pipeline has such a stage.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Builds descriptors with `extractor` instead of the default rules.
    pub fn extractor(mut self, extractor: Extractor) -> Self {
        self.extractor = Arc::new(extractor);
        self
    }

    /// Marks one worker of `gauge` busy from the moment a request reaches the middleware until
    /// its response ends (refused requests included, until refused). Give the same gauge to
    /// the pipeline's [`UtilizationShedder`](floodgate::limiter::utilization::UtilizationShedder)
    /// as its source, so that it sheds by this service's own in-flight count.
    pub fn worker_gauge(mut self, gauge: Arc<WorkerGauge>) -> Self {
        self.gauge = Some(gauge);
        self
    }

    /// The pipeline, for its stats and modes (`set_mode` works while serving).
    pub fn pipeline(&self) -> &Arc<Pipeline<S>> {
        &self.pipeline
    }

    /// Requests let through because the middleware itself failed (the extractor or the
    /// pipeline panicked, or a refusal could not be built). Store errors are counted by the
    /// pipeline ([`Pipeline::stats`]), not here.
    pub fn fail_opens(&self) -> u64 {
        self.fail_opens.load(Ordering::Relaxed)
    }
}

impl<S> Clone for FloodgateLayer<S> {
    fn clone(&self) -> Self {
        FloodgateLayer {
            pipeline: Arc::clone(&self.pipeline),
            extractor: Arc::clone(&self.extractor),
            gauge: self.gauge.clone(),
            fail_opens: Arc::clone(&self.fail_opens),
            clock: Arc::clone(&self.clock),
        }
    }
}

impl<S> fmt::Debug for FloodgateLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FloodgateLayer")
            .field("extractor", &self.extractor)
            .field("gauge", &self.gauge)
            .field("fail_opens", &self.fail_opens())
            .finish_non_exhaustive()
    }
}

impl<Inner, S> Layer<Inner> for FloodgateLayer<S> {
    type Service = Floodgate<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        Floodgate::new(inner, self.clone())
    }
}
