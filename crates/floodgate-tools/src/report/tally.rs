//! What one limiter did to a stream of requests: the summary's counts, its longest refusal
//! streak, the distribution of `retry_after`, and time series for the charts — all in memory
//! bounded by constants, never by the number of requests.

use std::time::Duration;

use floodgate::Nanos;

/// The most time buckets a series keeps; past it, neighbours merge and the width doubles.
pub const MAX_BUCKETS: usize = 1024;

/// The first bucket width: 125 ms, doubled each time the series outgrows [`MAX_BUCKETS`]
/// (125 ms · 2ⁿ: whole seconds merge from whole buckets).
const FIRST_WIDTH: Nanos = Nanos(125_000_000);

/// One decision as the tally reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Whether the request was admitted.
    pub allowed: bool,
    /// When refused: the earliest time the same request could pass, in seconds (`None`: never,
    /// or not refused).
    pub retry_after: Option<f64>,
    /// Requests in flight after this decision, where the limiter counts them.
    pub in_flight: Option<u64>,
    /// The utilization shedder's shed amount after this decision.
    pub shed_amount: Option<f64>,
    /// The utilization the shedder sampled for this decision (0..1).
    pub utilization: Option<f64>,
    /// An adaptive concurrency limiter's whole limit at this decision.
    pub limit: Option<u64>,
    /// How long the admitted request takes, in seconds, where it depends on load (`simulate`
    /// traffic with a `knee`).
    pub latency: Option<f64>,
}

/// One time bucket of a series.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bucket {
    /// Requests offered in the bucket.
    pub offered: u64,
    /// Requests admitted in the bucket.
    pub admitted: u64,
    /// The most requests in flight seen in the bucket (`None` if none was reported).
    pub in_flight: Option<u64>,
    /// The last shed amount seen in the bucket.
    pub shed_amount: Option<f64>,
    /// The utilization samples' sum and count (see [`Bucket::utilization`]).
    utilization_sum: f64,
    utilization_samples: u64,
    /// The last adaptive limit seen in the bucket.
    pub limit: Option<u64>,
    /// The admitted requests' latencies' sum and count (see [`Bucket::latency`]).
    latency_sum: f64,
    latency_samples: u64,
}

impl Bucket {
    fn merge(self, later: Bucket) -> Bucket {
        Bucket {
            offered: self.offered + later.offered,
            admitted: self.admitted + later.admitted,
            in_flight: max_option(self.in_flight, later.in_flight),
            shed_amount: later.shed_amount.or(self.shed_amount),
            utilization_sum: self.utilization_sum + later.utilization_sum,
            utilization_samples: self.utilization_samples + later.utilization_samples,
            limit: later.limit.or(self.limit),
            latency_sum: self.latency_sum + later.latency_sum,
            latency_samples: self.latency_samples + later.latency_samples,
        }
    }

    /// The mean latency of the requests admitted in the bucket, in seconds, where modelled.
    pub fn latency(&self) -> Option<f64> {
        (self.latency_samples > 0).then(|| self.latency_sum / self.latency_samples as f64)
    }

    /// The mean utilization the shedder sampled in the bucket, if it sampled any.
    pub fn utilization(&self) -> Option<f64> {
        (self.utilization_samples > 0)
            .then(|| self.utilization_sum / self.utilization_samples as f64)
    }

    /// Requests refused in the bucket.
    pub fn refused(&self) -> u64 {
        self.offered - self.admitted
    }
}

fn max_option(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// A limiter's decisions, tallied.
#[derive(Clone, Debug)]
pub struct Tally {
    offered: u64,
    admitted: u64,
    longest_streak: u64,
    streak: u64,
    retry_after: Histogram,
    /// Refusals without a `retry_after` (the request can never pass).
    never: u64,
    width: Nanos,
    buckets: Vec<Bucket>,
    /// The last decision's time.
    last: Nanos,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            offered: 0,
            admitted: 0,
            longest_streak: 0,
            streak: 0,
            retry_after: Histogram::default(),
            never: 0,
            width: FIRST_WIDTH,
            buckets: Vec::new(),
            last: Nanos::ZERO,
        }
    }
}

impl Tally {
    /// Counts one decision made at `at` (time from the run's start). Times must not go back.
    pub fn record(&mut self, at: Nanos, sample: &Sample) {
        self.offered += 1;
        self.last = self.last.max(at);
        if sample.allowed {
            self.admitted += 1;
            self.streak = 0;
        } else {
            self.streak += 1;
            self.longest_streak = self.longest_streak.max(self.streak);
            match sample.retry_after {
                Some(secs) if secs.is_finite() && secs >= 0.0 => self.retry_after.add(secs),
                _ => self.never += 1,
            }
        }
        let bucket = self.bucket(at);
        bucket.offered += 1;
        bucket.admitted += u64::from(sample.allowed);
        self.observe_in(at, sample);
    }

    /// Notes a gauge reading at `at` that is not a decision (a release lowering the count).
    pub fn observe(&mut self, at: Nanos, sample: &Sample) {
        self.last = self.last.max(at);
        self.observe_in(at, sample);
    }

    fn observe_in(&mut self, at: Nanos, sample: &Sample) {
        let bucket = self.bucket(at);
        bucket.in_flight = max_option(bucket.in_flight, sample.in_flight);
        bucket.shed_amount = sample.shed_amount.or(bucket.shed_amount);
        if let Some(u) = sample.utilization {
            bucket.utilization_sum += u;
            bucket.utilization_samples += 1;
        }
        bucket.limit = sample.limit.or(bucket.limit);
        if let Some(latency) = sample.latency {
            bucket.latency_sum += latency;
            bucket.latency_samples += 1;
        }
    }

    fn bucket(&mut self, at: Nanos) -> &mut Bucket {
        let mut index = (at.0 / self.width.0) as usize;
        while index >= MAX_BUCKETS {
            self.coarsen();
            index = (at.0 / self.width.0) as usize;
        }
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, Bucket::default());
        }
        &mut self.buckets[index]
    }

    /// Doubles the bucket width, merging neighbours.
    fn coarsen(&mut self) {
        self.width = Nanos(self.width.0 * 2);
        let merged = self
            .buckets
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => a.merge(*b),
                [a] => *a,
                _ => unreachable!("chunks of two"),
            })
            .collect();
        self.buckets = merged;
    }

    /// Requests offered.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// Requests admitted.
    pub fn admitted(&self) -> u64 {
        self.admitted
    }

    /// Requests refused.
    pub fn refused(&self) -> u64 {
        self.offered - self.admitted
    }

    /// The most refusals in a row, in decision order.
    pub fn longest_refusal_streak(&self) -> u64 {
        self.longest_streak
    }

    /// Refusals that can never pass (no `retry_after`).
    pub fn never(&self) -> u64 {
        self.never
    }

    /// The `q` quantile (0..=1) of the refusals' `retry_after`, in seconds, within 1% (see
    /// [`Histogram`]); `None` without a refusal that gives one.
    pub fn retry_after_quantile(&self, q: f64) -> Option<f64> {
        self.retry_after.quantile(q)
    }

    /// The width of the series' buckets.
    pub fn bucket_width(&self) -> Duration {
        Duration::from_nanos(self.width.0)
    }

    /// The series, one bucket per [`Tally::bucket_width`] from time 0.
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// The series merged into buckets of at least `min_width` and at most `max_points` of them
    /// (whole multiples of [`Tally::bucket_width`]): the width, and the buckets.
    pub fn coarse(&self, min_width: Duration, max_points: usize) -> (Duration, Vec<Bucket>) {
        let base = self.width.0.max(1);
        let by_width = u64::try_from(min_width.as_nanos())
            .unwrap_or(u64::MAX)
            .div_ceil(base);
        let by_count = (self.buckets.len() as u64).div_ceil(max_points.max(1) as u64);
        let factor = by_width.max(by_count).max(1);
        let buckets = self
            .buckets
            .chunks(usize::try_from(factor).unwrap_or(usize::MAX))
            .map(|chunk| {
                chunk
                    .iter()
                    .copied()
                    .reduce(Bucket::merge)
                    .unwrap_or_default()
            })
            .collect();
        (Duration::from_nanos(base.saturating_mul(factor)), buckets)
    }

    /// The latest time recorded.
    pub fn last(&self) -> Nanos {
        self.last
    }
}

/// A log-linear histogram of non-negative seconds: 128 sub-buckets per power of two of
/// nanoseconds, each keeping its values' count and sum. A quantile is read as the mean of the
/// values in the bucket that holds it, so it is within 1/128 (< 1%) of the exact value, and
/// exact when the bucket's values are all equal; 128 KiB however many values it holds.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    sums: Vec<f64>,
    total: u64,
}

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 * SUB) as usize],
            sums: vec![0.0; (64 * SUB) as usize],
            total: 0,
        }
    }
}

impl Histogram {
    /// Adds a value in seconds (saturating at `u64::MAX` nanoseconds).
    pub fn add(&mut self, secs: f64) {
        let nanos = (secs * 1e9).round().clamp(0.0, u64::MAX as f64) as u64;
        let i = Self::index(nanos);
        self.counts[i] += 1;
        self.sums[i] += nanos as f64;
        self.total += 1;
    }

    /// Values below 128 ns get a bucket each; above, the bucket is the power of two and the
    /// next seven bits below the leading one.
    fn index(nanos: u64) -> usize {
        if nanos < SUB {
            return nanos as usize;
        }
        let exponent = 63 - nanos.leading_zeros(); // ≥ SUB_BITS
        let mantissa = (nanos >> (exponent - SUB_BITS)) & (SUB - 1);
        ((u64::from(exponent - SUB_BITS + 1) << SUB_BITS) | mantissa) as usize
    }

    /// The range of nanoseconds bucket `index` holds: `[low, high)`.
    #[cfg(test)]
    fn range(index: usize) -> (u64, u64) {
        let index = index as u64;
        if index < SUB {
            return (index, index + 1);
        }
        let exponent = (index >> SUB_BITS) - 1 + u64::from(SUB_BITS);
        let mantissa = index & (SUB - 1);
        let step = 1u64 << (exponent - u64::from(SUB_BITS));
        let low = (1u64 << exponent) + mantissa * step;
        (low, low.saturating_add(step))
    }

    /// Values added.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether no value was added.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The nearest-rank `q` quantile in seconds: the mean of the bucket holding the ⌈q·n⌉-th
    /// smallest value.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(self.sums[index] / *count as f64 / 1e9);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(allowed: bool, retry_after: Option<f64>) -> Sample {
        Sample {
            allowed,
            retry_after,
            ..Sample::default()
        }
    }

    #[test]
    fn counts_streaks_and_quantiles() {
        let mut t = Tally::default();
        let pattern = [true, false, false, true, false, false, false, true];
        for (i, allowed) in pattern.into_iter().enumerate() {
            let retry = (!allowed).then_some(i as f64);
            t.record(Nanos::from_secs(i as u64), &sample(allowed, retry));
        }
        assert_eq!((t.offered(), t.admitted(), t.refused()), (8, 3, 5));
        assert_eq!(t.longest_refusal_streak(), 3);
        // Refusals' retry_after: 1, 2, 4, 5, 6 s.
        let p50 = t.retry_after_quantile(0.5).unwrap();
        assert!((p50 - 4.0).abs() < 0.04, "{p50}");
        let p99 = t.retry_after_quantile(0.99).unwrap();
        assert!((p99 - 6.0).abs() < 0.06, "{p99}");
    }

    #[test]
    fn refusals_that_can_never_pass_are_counted_apart() {
        let mut t = Tally::default();
        t.record(Nanos::ZERO, &sample(false, None));
        assert_eq!(t.never(), 1);
        assert_eq!(t.retry_after_quantile(0.5), None);
    }

    #[test]
    fn series_stay_bounded_and_keep_their_totals() {
        let mut t = Tally::default();
        for s in 0..10_000u64 {
            t.record(Nanos::from_secs(s), &sample(s % 2 == 0, Some(1.0)));
        }
        assert!(t.buckets().len() <= MAX_BUCKETS);
        let offered: u64 = t.buckets().iter().map(|b| b.offered).sum();
        let admitted: u64 = t.buckets().iter().map(|b| b.admitted).sum();
        assert_eq!((offered, admitted), (10_000, 5_000));
        // 10,000 s in at most 1,024 buckets: 125 ms doubled seven times is 16 s.
        assert_eq!(t.bucket_width(), Duration::from_secs(16));
    }

    #[test]
    fn coarse_series_merge_whole_buckets() {
        let mut t = Tally::default();
        for ms in (0..5_000u64).step_by(50) {
            t.record(Nanos::from_millis(ms), &sample(true, None));
        }
        let (width, buckets) = t.coarse(Duration::from_secs(1), 200);
        assert_eq!(width, Duration::from_secs(1));
        assert_eq!(buckets.len(), 5);
        assert!(buckets.iter().all(|b| b.offered == 20));
        let (width, buckets) = t.coarse(Duration::ZERO, 10);
        assert_eq!((width, buckets.len()), (Duration::from_millis(500), 10));
    }

    #[test]
    fn gauges_keep_the_maximum_and_the_last_value() {
        let mut t = Tally::default();
        let at = Nanos::from_millis(10);
        let gauge = |n, amount| Sample {
            allowed: true,
            in_flight: Some(n),
            shed_amount: Some(amount),
            ..Sample::default()
        };
        t.record(at, &gauge(5, 0.1));
        t.observe(at, &gauge(2, 0.3));
        let b = t.buckets()[0];
        assert_eq!(b.in_flight, Some(5));
        assert_eq!(b.shed_amount, Some(0.3));
        assert_eq!(b.offered, 1);
    }

    proptest! {
        /// The bound the summary states: every quantile within 1% of the exact nearest-rank
        /// quantile of the values added.
        #[test]
        fn quantiles_are_within_one_percent(
            values in proptest::collection::vec(1e-6f64..1e5, 1..300),
            q in 0.0f64..=1.0,
        ) {
            let mut h = Histogram::default();
            for v in &values {
                h.add(*v);
            }
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
            let exact = sorted[rank - 1];
            let read = h.quantile(q).unwrap();
            prop_assert!((read - exact).abs() <= exact * 0.01 + 1e-9, "{read} vs {exact}");
        }

        #[test]
        fn every_value_falls_in_its_bucket(nanos in any::<u64>()) {
            let (low, high) = Histogram::range(Histogram::index(nanos));
            prop_assert!(low <= nanos && (nanos < high || high == u64::MAX));
        }
    }
}
