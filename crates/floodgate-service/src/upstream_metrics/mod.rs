//! envoyproxy/ratelimit's Prometheus series, named as its default statsd_exporter mapping
//! names them, so that the dashboards and alerts written for upstream's `USE_PROMETHEUS`
//! keep working. They are served on the Prometheus listener (`stats.prometheus`), after
//! Floodgate's own series.
//!
//! Each of [`crate::statsd`]'s names becomes:
//!
//! | statsd name | Prometheus series |
//! |---|---|
//! | `ratelimit.service.rate_limit.D.K1.<stat>` | `ratelimit_service_rate_limit_<stat>{domain="D",key1="K1"}` |
//! | `ratelimit.service.rate_limit.D.K1.K2[.…].<stat>` | `ratelimit_service_rate_limit_<stat>{domain="D",key1="K1",key2="K2"}` (later parts dropped, as upstream's mapping drops them) |
//! | `ratelimit.service.call.should_rate_limit.E` | `ratelimit_service_should_rate_limit_error{err_type="E"}` |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}` |
//! | `ratelimit_server.ShouldRateLimit.response_time` | `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`, a histogram in seconds |
//! | `ratelimit.service.config_load_success`, `…_error` | `ratelimit_service_config_load_success`, `…_error` |
//! | any other (`global_shadow_mode`, `domain_not_found`, `over_limit_with_local_cache`) | its dots written `_`, as statsd_exporter's fallback names it |
//!
//! `<stat>` is one of `total_hits`, `over_limit`, `near_limit`, `within_limit`, `shadow_mode`.
//! Series with the same name and labels (keys sharing their first parts) are added together.
//! The response-time histogram has Floodgate's bucket bounds (10 µs to 1 s), not
//! statsd_exporter's, and times the `/json` calls too.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::metrics::Metrics;
use crate::prometheus::{escape_label, Exposition, Kind};
use crate::statsd::Totals;

/// The stats upstream's mapping gives labelled series.
const MAPPED_STATS: [&str; 5] = [
    "near_limit",
    "over_limit",
    "total_hits",
    "within_limit",
    "shadow_mode",
];

/// Appends upstream's series for `totals` (from [`crate::statsd::totals`]) and the response
/// time histogram of `metrics` to a Prometheus text page.
pub fn render(totals: &Totals, metrics: &Metrics, out: &mut String) {
    // name → labels → value, so that each name's TYPE line comes once and merged series add.
    let mut series: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (name, &n) in totals {
        if name == "ratelimit_server.ShouldRateLimit.response_time" {
            continue;
        }
        let (metric, labels) = map(name);
        *series.entry(metric).or_default().entry(labels).or_default() += n;
    }
    // Upstream's series carry no HELP lines (an empty help writes none).
    let mut text = Exposition::on(out);
    for (name, by_labels) in &series {
        let mut family = text.family(name, Kind::Counter, "");
        for (labels, n) in by_labels {
            family.sample_labelled(labels, n);
        }
    }
    let (buckets, sum, count) = metrics.store_histogram();
    text.family(
        "ratelimit_service_response_time_seconds",
        Kind::Histogram,
        "",
    )
    .histogram(&[("grpc_method", "ShouldRateLimit")], buckets, sum, count);
}

/// One statsd name's series name and labels (`key="value",…`).
fn map(name: &str) -> (String, String) {
    if let Some(rest) = name.strip_prefix("ratelimit.service.rate_limit.") {
        if let Some((key, stat)) = rest.rsplit_once('.') {
            if MAPPED_STATS.contains(&stat) {
                let mut parts = key.split('.');
                if let (Some(domain), Some(key1)) = (parts.next(), parts.next()) {
                    let mut labels = format!(
                        "domain=\"{}\",key1=\"{}\"",
                        escape_label(domain),
                        escape_label(key1)
                    );
                    if let Some(key2) = parts.next() {
                        let _ = write!(labels, ",key2=\"{}\"", escape_label(key2));
                    }
                    return (format!("ratelimit_service_rate_limit_{stat}"), labels);
                }
            }
        }
    }
    if let Some(kind) = name.strip_prefix("ratelimit.service.call.should_rate_limit.") {
        return (
            "ratelimit_service_should_rate_limit_error".to_string(),
            format!("err_type=\"{}\"", escape_label(kind)),
        );
    }
    if let Some(method) = name
        .strip_prefix("ratelimit_server.")
        .and_then(|r| r.strip_suffix(".total_requests"))
    {
        return (
            "ratelimit_service_total_requests".to_string(),
            format!("grpc_method=\"{}\"", escape_label(method)),
        );
    }
    (fallback_name(name), String::new())
}

/// statsd_exporter's name for an unmapped statsd name: every character outside
/// `[A-Za-z0-9_]` written `_`.
fn fallback_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_as_upstreams_default_mapping() {
        assert_eq!(
            map("ratelimit.service.rate_limit.edge.path_/a.total_hits"),
            (
                "ratelimit_service_rate_limit_total_hits".to_string(),
                "domain=\"edge\",key1=\"path_/a\"".to_string()
            )
        );
        assert_eq!(
            map("ratelimit.service.rate_limit.edge.a_1.b.c_2.over_limit").1,
            "domain=\"edge\",key1=\"a_1\",key2=\"b\""
        );
        assert_eq!(
            map("ratelimit.service.rate_limit.edge.a.over_limit_with_local_cache"),
            (
                "ratelimit_service_rate_limit_edge_a_over_limit_with_local_cache".to_string(),
                String::new()
            )
        );
        assert_eq!(
            map("ratelimit.service.call.should_rate_limit.redis_error"),
            (
                "ratelimit_service_should_rate_limit_error".to_string(),
                "err_type=\"redis_error\"".to_string()
            )
        );
        assert_eq!(
            map("ratelimit_server.ShouldRateLimit.total_requests").1,
            "grpc_method=\"ShouldRateLimit\""
        );
        assert_eq!(
            map("ratelimit.service.config_load_success").0,
            "ratelimit_service_config_load_success"
        );
    }

    #[test]
    fn series_sharing_labels_add_up_and_each_name_is_typed_once() {
        let totals = Totals::from([
            (
                "ratelimit.service.rate_limit.d.a.b.x.total_hits".to_string(),
                2,
            ),
            (
                "ratelimit.service.rate_limit.d.a.b.y.total_hits".to_string(),
                3,
            ),
            ("ratelimit.service.rate_limit.d.q.total_hits".to_string(), 1),
        ]);
        let mut out = String::new();
        render(&totals, &Metrics::default(), &mut out);
        assert_eq!(
            out.matches("# TYPE ratelimit_service_rate_limit_total_hits counter")
                .count(),
            1
        );
        assert!(out.contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a\",key2=\"b\"} 5\n"
        ));
        assert!(
            out.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"q\"} 1\n")
        );
        assert!(out.contains(
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 0\n"
        ));
    }
}
