//! A smooth limiter's state as its four fields, whole, for a store that keeps states on disk
//! (`store::file`): taking the parts and building from them gives back the same state bit for bit.

use super::SmoothState;

impl SmoothState {
    /// `(stored permits, rate per second, next free µs, latest µs seen)`, exactly as held.
    pub(crate) fn to_parts(self) -> (f64, f64, i64, i64) {
        (self.stored, self.rate, self.next_free, self.seen)
    }

    /// The state [`SmoothState::to_parts`] took apart; `None` when a float is not finite or the
    /// rate not above zero, which no operation produces.
    pub(crate) fn from_parts(stored: f64, rate: f64, next_free: i64, seen: i64) -> Option<Self> {
        (stored.is_finite() && rate.is_finite() && rate > 0.0).then_some(SmoothState {
            stored,
            rate,
            next_free,
            seen,
        })
    }
}
