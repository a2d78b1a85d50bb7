//! What the layer knows and did, as plain values: per host, per quota, in total.

/// Counts of what the layer did, per host or in total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests that reached the wire (first attempts and retries).
    pub sent: u64,
    /// Answers the server did not refuse.
    pub succeeded: u64,
    /// Answers that refused: 429 and 503 (gRPC `RESOURCE_EXHAUSTED` and `UNAVAILABLE`).
    pub throttled: u64,
    /// Attempts that failed without an answer (connection errors, timeouts, other errors).
    pub errors: u64,
    /// Retries made (each paid from the budget).
    pub retries: u64,
    /// Retries not made because the budget could not pay for them.
    pub budget_exhausted: u64,
    /// Requests (or retries) that waited locally before they were sent.
    pub local_waits: u64,
    /// Requests refused locally: by adaptive throttling, or because they would have waited
    /// longer than `max_wait`.
    pub refused_locally: u64,
}

impl Counters {
    pub(crate) fn add(&mut self, other: &Counters) {
        self.sent += other.sent;
        self.succeeded += other.succeeded;
        self.throttled += other.throttled;
        self.errors += other.errors;
        self.retries += other.retries;
        self.budget_exhausted += other.budget_exhausted;
        self.local_waits += other.local_waits;
        self.refused_locally += other.refused_locally;
    }
}

/// What the layer knows about one quota of a host.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySnapshot {
    /// The policy's name.
    pub policy: String,
    /// The first bytes of its partition key in hex (never the whole key: it may be a
    /// credential).
    pub partition: Option<String>,
    /// The quota `q`.
    pub limit: Option<u64>,
    /// The window `w`, seconds.
    pub window_seconds: Option<f64>,
    /// The requests the pacer believes are left (negative while more are in flight than the
    /// server had left).
    pub left: Option<f64>,
    /// Seconds until the server said requests may pass again, while it said none may.
    pub exhausted_for_seconds: Option<f64>,
}

/// What the layer knows about one host (and partition).
#[derive(Clone, Debug, PartialEq)]
pub struct HostSnapshot {
    /// `scheme://authority`, with `#` and a hash of the partition header's value when the
    /// layer partitions by one.
    pub host: String,
    /// The dialect the host last spoke: `ietf` or `x-ratelimit`.
    pub dialect: Option<&'static str>,
    /// The quotas it announced.
    pub policies: Vec<PolicySnapshot>,
    /// Seconds left of its last `Retry-After`.
    pub blocked_for_seconds: Option<f64>,
    /// True when the host is paced adaptively (it sent no limit fields lately).
    pub adaptive: bool,
    /// The CUBIC send rate, requests per second, once a refusal has turned it on.
    pub send_rate: Option<f64>,
    /// The measured send rate, requests per second.
    pub measured_rate: f64,
    /// The probability that adaptive throttling refuses a request now.
    pub reject_probability: f64,
    /// Retry budget units left.
    pub budget_left: u32,
    /// The adaptive concurrency limit, when enabled.
    pub concurrency_limit: Option<u32>,
    /// Requests in flight, when the concurrency limit is enabled.
    pub in_flight: Option<u32>,
    /// The host's counters.
    pub counters: Counters,
}
