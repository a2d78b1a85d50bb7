//! Plain counters under keys the caller names, as envoyproxy/ratelimit keeps its fixed windows:
//! one whole number per key (the cost counted in that key's window), added to, read, and given
//! back, with a time to live set on every increment. The Redis and memcached stores both count
//! this way (`increment_counters`, `read_counters`), so that a service sharing the backend with
//! upstream's pods counts in the same keys. Nothing here is one of the algorithms' twins: the
//! keys are written as given (no namespace) and hold bare integers.

/// One counter to add to (Redis: `INCRBY key by`, then `EXPIRE key ttl_seconds`; memcached:
/// `incr key by`, or `add key by` with the TTL when the key is absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterIncrement<'a> {
    /// The key, as written.
    pub key: &'a str,
    /// What to add (0 reads the count and, on Redis, refreshes the TTL), or with `refund` what
    /// to take away.
    pub by: u64,
    /// Take `by` away instead (Envoy's `is_negative_hits`): the count lowered, never below 0
    /// (on Redis a count that would be is removed; memcached keeps 0); the key keeps its TTL,
    /// and a key that does not exist stays absent.
    pub refund: bool,
    /// The key's time to live after this call, in seconds (at least 1).
    pub ttl_seconds: u64,
}
