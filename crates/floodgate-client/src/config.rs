//! The layer and its settings: every knob, its default, and the checks `build` runs.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use floodgate::ConfigError;
use http::HeaderName;
use tower::Layer;

use crate::backoff::Backoff;
use crate::replay::{CloneBody, NeverReplay};
use crate::service::Polite;
use crate::settings::{ConcurrencySettings, Settings};
use crate::signal::MAX_HORIZON;
use crate::state::{ClientState, Shared};
use crate::timer::{Timer, TokioTimer};

/// Builds a [`PoliteLayer`]; every setting has a default (see each method).
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use bytes::Bytes;
/// use floodgate::{ManualClock, Nanos};
/// use floodgate_client::{LocalRefusal, ManualTimer, PoliteLayer};
/// use http_body_util::Full;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// // A server that says this client has used its quota of 100 for the next 60 s.
/// let server = service_fn(|_: http::Request<Full<Bytes>>| async {
///     let response = http::Response::builder()
///         .header("ratelimit-policy", "\"default\";q=100;w=60")
///         .header("ratelimit", "\"default\";r=0;t=60")
///         .body(String::from("ok"))
///         .unwrap();
///     Ok::<_, Infallible>(response)
/// });
/// let clock = ManualClock::new(Nanos::from_secs(1_700_000_000));
/// let layer = PoliteLayer::builder()
///     .max_wait(Duration::from_secs(2)) // wait up to 2 s for the quota, not 60
///     .timer(Arc::new(ManualTimer::new(clock)))
///     .build()?;
/// let client = layer.layer(server);
/// let request = || http::Request::get("http://api.example/v1/things").body(Full::default());
/// assert_eq!(client.clone().oneshot(request()?).await?.status(), 200);
/// // The next request would be refused: the layer does not send it.
/// let refused = client.oneshot(request()?).await.unwrap_err();
/// assert!(matches!(refused.refusal(), Some(LocalRefusal::WouldWait { .. })), "{refused}");
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct PoliteLayerBuilder {
    settings: Settings,
    timer: Option<Arc<dyn Timer>>,
}

impl PoliteLayerBuilder {
    /// The longest a request waits locally for the server's limits before it is sent; a
    /// request that would wait longer fails at once with
    /// [`LocalRefusal::WouldWait`](crate::LocalRefusal::WouldWait) (a retry that would wait
    /// longer is not made, and the refusal is returned). Default 5 s; at most one day.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.settings.max_wait = max_wait;
        self
    }

    /// The fraction of a policy's rate (`q / w`) the pacers refill at between answers, in
    /// (0, 1]. Default 0.97: a little under the limit, so that timing noise between client and
    /// server does not turn into refusals. Answers resynchronise the count whatever this is.
    pub fn headroom(mut self, headroom: f64) -> Self {
        self.settings.headroom = headroom;
        self
    }

    /// The attempts a request may make, the first included, 1 to 10. Default 3. `1` turns
    /// retries off.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts;
        self
    }

    /// The full-jitter backoff: the n-th retry waits uniformly up to `min(cap, base · 2ⁿ⁻¹)`.
    /// Default base 100 ms, cap 20 s.
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.settings.backoff = Backoff { base, cap };
        self
    }

    /// The retry budget per host: `capacity` units, a retry costs `retry_cost` (`timeout_cost`
    /// after a timeout), a success refunds `refund`. Default 500, 5, 10, 1 (the AWS SDKs').
    pub fn retry_budget(
        mut self,
        capacity: u32,
        retry_cost: u32,
        timeout_cost: u32,
        refund: u32,
    ) -> Self {
        self.settings.budget_capacity = capacity;
        self.settings.retry_cost = retry_cost;
        self.settings.timeout_cost = timeout_cost;
        self.settings.success_refund = refund;
        self
    }

    /// Whether a host that sends no limit fields is paced at a rate CUBIC finds from its
    /// refusals, and CUBIC's `beta` in (0, 1) and `c` > 0. Default on, 0.7, 0.4.
    pub fn adaptive_rate(mut self, enabled: bool, beta: f64, c: f64) -> Self {
        self.settings.adaptive_rate = enabled;
        self.settings.beta = beta;
        self.settings.cubic_c = c;
        self
    }

    /// Whether requests are refused locally when the server accepts less than `1/k` of them
    /// (Google SRE's adaptive throttling, `k` ≥ 1) over `window` (≥ 1 s). Default on, 2,
    /// 120 s.
    pub fn adaptive_throttle(mut self, enabled: bool, k: f64, window: Duration) -> Self {
        self.settings.adaptive_throttle = enabled;
        self.settings.throttle_k = k;
        self.settings.throttle_window = window;
        self
    }

    /// Caps requests in flight per host with an adaptive (AIMD) limit. Default off.
    pub fn concurrency(mut self, settings: ConcurrencySettings) -> Self {
        self.settings.concurrency = Some(settings);
        self
    }

    /// Fails an attempt that has no response after `timeout` (it counts as a timeout: retried
    /// for safe requests at the budget's timeout cost). Default none (the inner service's own
    /// timeouts apply).
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.settings.attempt_timeout = Some(timeout);
        self
    }

    /// Keeps separate state per value of this request header within a host (for example the
    /// API key header, when one client calls on behalf of several accounts, each with its own
    /// quota). Values are kept only as a keyed hash. Default: one state per host.
    pub fn partition_by_header(mut self, name: HeaderName) -> Self {
        self.settings.partition_header = Some(name);
        self
    }

    /// Seeds the random numbers (jitter, throttling draws) for reproducible runs. Default: a
    /// random seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = Some(seed);
        self
    }

    /// The most hosts (and partitions) remembered; the least recently used is forgotten beyond
    /// it. Default 4,096.
    pub fn max_hosts(mut self, max_hosts: usize) -> Self {
        self.settings.max_hosts = max_hosts;
        self
    }

    /// The timer the layer reads time from and waits on. Default [`TokioTimer`].
    pub fn timer(mut self, timer: Arc<dyn Timer>) -> Self {
        self.timer = Some(timer);
        self
    }

    /// Checks every setting; the error names the first invalid one and its value.
    pub fn build(self) -> Result<PoliteLayer, ConfigError> {
        let s = &self.settings;
        check_waiting(s)?;
        check_retries(s)?;
        check_adaptive(s)?;
        if let Some(c) = s.concurrency {
            check_concurrency(&c)?;
        }
        if s.attempt_timeout
            .is_some_and(|t| t.is_zero() || t > MAX_HORIZON)
        {
            return Err(ConfigError::invalid(
                "attempt_timeout",
                format!("{:?}", s.attempt_timeout),
                "must be positive and at most one day",
            ));
        }
        if s.max_hosts == 0 {
            return Err(ConfigError::invalid("max_hosts", 0, "must be at least 1"));
        }
        let timer = self.timer.unwrap_or_else(|| Arc::new(TokioTimer::new()));
        Ok(PoliteLayer {
            shared: Arc::new(Shared::new(self.settings, timer)),
        })
    }
}

/// Checks how long a request may wait (`max_wait`) and how close to a policy's rate the
/// pacers go (`headroom`).
fn check_waiting(s: &Settings) -> Result<(), ConfigError> {
    if s.max_wait > MAX_HORIZON {
        return Err(ConfigError::invalid(
            "max_wait",
            format!("{:?}", s.max_wait),
            "at most one day",
        ));
    }
    if !(s.headroom > 0.0 && s.headroom <= 1.0) {
        return Err(ConfigError::invalid(
            "headroom",
            s.headroom,
            "must be in (0, 1]",
        ));
    }
    Ok(())
}

/// Checks the retries: the attempts, the backoff and the retry budget's costs.
fn check_retries(s: &Settings) -> Result<(), ConfigError> {
    if !(1..=10).contains(&s.max_attempts) {
        return Err(ConfigError::invalid(
            "max_attempts",
            s.max_attempts,
            "must be 1 to 10",
        ));
    }
    if s.backoff.base.is_zero() || s.backoff.cap < s.backoff.base || s.backoff.cap > MAX_HORIZON {
        return Err(ConfigError::invalid(
            "backoff",
            format!("base {:?}, cap {:?}", s.backoff.base, s.backoff.cap),
            "base must be positive and at most cap, cap at most one day",
        ));
    }
    if s.retry_cost == 0 || s.timeout_cost == 0 {
        return Err(ConfigError::invalid(
            "retry_budget",
            format!(
                "retry cost {}, timeout cost {}",
                s.retry_cost, s.timeout_cost
            ),
            "costs must be positive",
        ));
    }
    Ok(())
}

/// Checks the adaptive rate (CUBIC's `beta` and `c`) and the adaptive throttle (`k` and its
/// window).
fn check_adaptive(s: &Settings) -> Result<(), ConfigError> {
    if !(s.beta > 0.0 && s.beta < 1.0) {
        return Err(ConfigError::invalid("beta", s.beta, "must be in (0, 1)"));
    }
    if !(s.cubic_c > 0.0 && s.cubic_c.is_finite()) {
        return Err(ConfigError::invalid("c", s.cubic_c, "must be positive"));
    }
    if !(s.throttle_k >= 1.0 && s.throttle_k.is_finite()) {
        return Err(ConfigError::invalid(
            "k",
            s.throttle_k,
            "must be at least 1",
        ));
    }
    if s.throttle_window < Duration::from_secs(1) || s.throttle_window > MAX_HORIZON {
        return Err(ConfigError::invalid(
            "throttle_window",
            format!("{:?}", s.throttle_window),
            "must be 1 s to one day",
        ));
    }
    Ok(())
}

/// Checks the concurrency limit's bounds and backoff.
fn check_concurrency(c: &ConcurrencySettings) -> Result<(), ConfigError> {
    if c.min == 0 || c.min > c.initial || c.initial > c.max {
        return Err(ConfigError::invalid(
            "concurrency",
            format!("min {}, initial {}, max {}", c.min, c.initial, c.max),
            "need 1 ≤ min ≤ initial ≤ max",
        ));
    }
    if !(c.backoff > 0.0 && c.backoff < 1.0) {
        return Err(ConfigError::invalid(
            "concurrency.backoff",
            c.backoff,
            "must be in (0, 1)",
        ));
    }
    Ok(())
}

/// The client-side layer: wraps an HTTP client service (hyper's, reqwest through
/// `ReqwestService` (feature `reqwest`), a tonic channel) so that it learns the server's
/// limits, paces, retries within a budget and adapts.
///
/// Services made by one layer (and their clones) share one state per host: build one layer per
/// client, not per request. See the crate documentation for what each part does.
#[derive(Clone)]
pub struct PoliteLayer {
    pub(crate) shared: Arc<Shared>,
}

impl PoliteLayer {
    /// A layer with every default.
    pub fn new() -> PoliteLayer {
        PoliteLayer::builder()
            .build()
            .expect("the defaults are valid")
    }

    /// A builder starting from the defaults.
    pub fn builder() -> PoliteLayerBuilder {
        PoliteLayerBuilder::default()
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// A handle on the layer's state, for metrics: what each host announced, the rates, the
    /// budget, the counters.
    pub fn state(&self) -> ClientState {
        ClientState {
            shared: self.shared.clone(),
        }
    }

    /// A layer on the same state whose services never copy requests, for bodies that cannot be
    /// cloned (tonic's, streams): pacing and learning apply, retries do not.
    pub fn never_replay(&self) -> PoliteLayerWith<NeverReplay> {
        PoliteLayerWith {
            shared: self.shared.clone(),
            replay: NeverReplay,
        }
    }

    /// A layer on the same state that copies requests with `replay` for retries.
    pub fn replay<R: Clone>(&self, replay: R) -> PoliteLayerWith<R> {
        PoliteLayerWith {
            shared: self.shared.clone(),
            replay,
        }
    }
}

impl Default for PoliteLayer {
    fn default() -> Self {
        PoliteLayer::new()
    }
}

impl fmt::Debug for PoliteLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoliteLayer")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for PoliteLayer {
    type Service = Polite<S, CloneBody>;

    fn layer(&self, inner: S) -> Self::Service {
        Polite::new(inner, self.shared.clone(), CloneBody)
    }
}

/// A [`PoliteLayer`] with another way of copying requests for retries (see
/// [`PoliteLayer::never_replay`] and [`PoliteLayer::replay`]).
#[derive(Clone)]
pub struct PoliteLayerWith<R> {
    shared: Arc<Shared>,
    replay: R,
}

impl<R> fmt::Debug for PoliteLayerWith<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoliteLayerWith").finish_non_exhaustive()
    }
}

impl<S, R: Clone> Layer<S> for PoliteLayerWith<R> {
    type Service = Polite<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Polite::new(inner, self.shared.clone(), self.replay.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_name_the_field_and_value() {
        let err = |b: PoliteLayerBuilder| b.build().unwrap_err().to_string();
        assert!(err(PoliteLayer::builder().headroom(1.5)).contains("`headroom`: 1.5"));
        assert!(err(PoliteLayer::builder().max_attempts(0)).contains("`max_attempts`: 0"));
        assert!(err(PoliteLayer::builder().adaptive_rate(true, 1.0, 0.4)).contains("`beta`: 1"));
        assert!(
            err(PoliteLayer::builder().adaptive_throttle(true, 0.5, Duration::from_secs(60)))
                .contains("`k`: 0.5")
        );
        assert!(
            err(PoliteLayer::builder().backoff(Duration::ZERO, Duration::from_secs(1)))
                .contains("`backoff`")
        );
        assert!(err(PoliteLayer::builder().concurrency(ConcurrencySettings {
            initial: 0,
            ..ConcurrencySettings::default()
        }))
        .contains("`concurrency`"));
        assert!(
            err(PoliteLayer::builder().max_wait(Duration::from_secs(100_000)))
                .contains("`max_wait`")
        );
        assert!(PoliteLayer::builder().build().is_ok());
    }
}
