//! Cached mode's metrics: what each sync reports (the overshoot it saw per limiter, its round
//! trip) and the store's counters, as Prometheus text.

use std::collections::BTreeMap;
use std::sync::Mutex;

use floodgate::store::cached::SyncReport;
use floodgate::store::CachedStore;

use crate::prometheus::{Exposition, Family, Kind};

/// Upper bounds of the overshoot histogram's buckets, in units of the limit (requests, or
/// cost): how far beyond its limit a key's global state was when a sync saw it.
const OVERSHOOT_BUCKETS: [f64; 10] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// Upper bounds of the sync round trip's buckets, in seconds.
const SYNC_SECONDS: [f64; 8] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];

/// One histogram: counts per bucket (the last is `+Inf`), count and sum.
#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    /// Counts `value` in the first bucket whose upper bound holds it (the last is `+Inf`).
    fn observe(&mut self, value: f64, bounds: &[f64]) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len() + 1];
        }
        let i = bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(bounds.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += value;
    }

    /// Writes the histogram's series to `family`, with `labels`.
    fn write(&self, family: &mut Family<'_>, labels: &[(&str, &str)], bounds: &[f64]) {
        let mut cumulative = 0;
        let buckets = bounds.iter().zip(&self.buckets).map(|(bound, n)| {
            cumulative += n;
            (*bound, cumulative)
        });
        family.histogram(labels, buckets, self.sum, self.count);
    }
}

/// What the sync loop reports, kept for `/metrics`.
#[derive(Debug, Default)]
pub struct CachedMetrics {
    inner: Mutex<Reports>,
}

#[derive(Debug, Default)]
struct Reports {
    /// Limiter (the key's namespace) → overshoot histogram. Bounded by the configured limiters.
    overshoot: BTreeMap<String, Histogram>,
    round_trip: Histogram,
}

impl CachedMetrics {
    /// Records one sync's report.
    pub fn record(&self, report: &SyncReport) {
        if report.keys == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if report.error.is_none() {
            inner
                .round_trip
                .observe(report.round_trip.as_secs_f64(), &SYNC_SECONDS);
        }
        for (limiter, beyond) in &report.overshoot {
            inner
                .overshoot
                .entry(limiter.clone())
                .or_default()
                .observe(*beyond as f64, &OVERSHOOT_BUCKETS);
        }
    }

    /// The cached store's metrics, as Prometheus text.
    pub fn write(&self, out: &mut String, store: &CachedStore) {
        let stats = store.stats();
        let mut text = Exposition::on(out);
        text.family(
            "floodgate_cached_sync_lag_seconds",
            Kind::Gauge,
            "Time since the last successful sync with Redis: how much older than the sync interval the views may be.",
        )
        .sample(&[], store.view_age().as_secs_f64());
        text.family(
            "floodgate_cached_syncs_total",
            Kind::Counter,
            "Syncs with Redis by result (a failed one keeps its cost for the next).",
        )
        .sample(&[("result", "ok")], stats.syncs)
        .sample(&[("result", "failed")], stats.failed_syncs);
        text.family(
            "floodgate_cached_cost_total",
            Kind::Counter,
            "Cost admitted locally: sent (acknowledged by Redis), unsent (a sync could not send it and kept it, counted each time), lost (its key was evicted before it was sent).",
        )
        .sample(&[("state", "sent")], stats.sent_cost)
        .sample(&[("state", "unsent")], stats.unsent_cost)
        .sample(&[("state", "lost")], stats.lost_cost);
        text.family(
            "floodgate_cached_loads_total",
            Kind::Counter,
            "Keys this node had never seen: loaded from Redis within the load budget, or missed (decided at the node's share).",
        )
        .sample(&[("result", "loaded")], stats.loads)
        .sample(&[("result", "missed")], stats.missed_loads);
        text.family(
            "floodgate_cached_decided_at_share_total",
            Kind::Counter,
            "Decisions made at this node's share of the limit (an unknown key, or views too old).",
        )
        .sample(&[], stats.decided_at_share);
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut overshoot = text.family(
            "floodgate_cached_overshoot",
            Kind::Histogram,
            "Units beyond the limit in a key's global state when a sync saw it over, per limiter.",
        );
        for (limiter, histogram) in &inner.overshoot {
            histogram.write(&mut overshoot, &[("limiter", limiter)], &OVERSHOOT_BUCKETS);
        }
        let mut round_trip = text.family(
            "floodgate_cached_sync_seconds",
            Kind::Histogram,
            "Round trip of a successful sync.",
        );
        if inner.round_trip.count > 0 {
            inner.round_trip.write(&mut round_trip, &[], &SYNC_SECONDS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_per_limiter() {
        let metrics = CachedMetrics::default();
        let report = SyncReport {
            keys: 2,
            overshoot: vec![("api".into(), 3), ("api".into(), 700)],
            round_trip: std::time::Duration::from_micros(800),
            ..SyncReport::default()
        };
        metrics.record(&report);
        let inner = metrics.inner.lock().unwrap();
        let mut out = String::new();
        let mut text = Exposition::on(&mut out);
        let mut family = text.family("o", Kind::Histogram, "");
        inner.overshoot["api"].write(&mut family, &[("limiter", "api")], &OVERSHOOT_BUCKETS);
        assert!(
            out.contains("o_bucket{limiter=\"api\",le=\"2\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("o_bucket{limiter=\"api\",le=\"5\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("o_bucket{limiter=\"api\",le=\"+Inf\"} 2"),
            "{out}"
        );
        assert!(out.contains("o_sum{limiter=\"api\"} 703"), "{out}");
        assert_eq!(inner.round_trip.count, 1);
    }
}
