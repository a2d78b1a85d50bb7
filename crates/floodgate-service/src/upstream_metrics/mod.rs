//! envoyproxy/ratelimit's Prometheus series, named as a statsd_exporter mapping names them,
//! so that the dashboards and alerts written for upstream's `USE_PROMETHEUS` keep working.
//! They are served on the Prometheus listener (`stats.prometheus`), after Floodgate's own
//! series. The mapping is the file `stats.prometheus.mapping_file` names (upstream's
//! `PROMETHEUS_MAPPER_YAML`; [`mapping`] says what of it applies), or the one upstream
//! builds in, under which each of [`crate::statsd`]'s names becomes:
//!
//! | statsd name | Prometheus series |
//! |---|---|
//! | `ratelimit.service.rate_limit.D.K1.<stat>` | `ratelimit_service_rate_limit_<stat>{domain="D",key1="K1"}` |
//! | `ratelimit.service.rate_limit.D.K1.K2[.…].<stat>` | `ratelimit_service_rate_limit_<stat>{domain="D",key1="K1",key2="K2"}` (later parts dropped, as upstream's mapping drops them) |
//! | `ratelimit.service.call.should_rate_limit.E` | `ratelimit_service_should_rate_limit_error{err_type="E"}` |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}` |
//! | `ratelimit_server.ShouldRateLimit.response_time` | `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`, a histogram in seconds (in milliseconds with `stats.prometheus.response_time_as_milliseconds`, upstream's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`) |
//! | `ratelimit.service.config_load_success`, `…_error` | `ratelimit_service_config_load_success`, `…_error` |
//! | any other (`global_shadow_mode`, `domain_not_found`, `over_limit_with_local_cache`) | its dots written `_`, as statsd_exporter's fallback names it |
//!
//! `<stat>` is one of `total_hits`, `over_limit`, `near_limit`, `within_limit`, `shadow_mode`.
//! Series with the same name and labels (keys sharing their first parts) are added together.
//! A mapping's `scale` multiplies what it maps, as statsd_exporter does: counts, and the
//! response time, which statsd has in milliseconds (the built-in mapping scales it by 0.001,
//! to seconds, unless milliseconds are asked for; a file's entry without `scale` leaves it in
//! milliseconds). The response-time histogram has Floodgate's bucket bounds (10 µs to 1 s,
//! in the series' unit), not statsd_exporter's, and times the `/json` calls too.

pub(crate) mod mapping;

use std::collections::BTreeMap;

use self::mapping::{Mapping, StatsdType};
use crate::metrics::Metrics;
use crate::prometheus::{Exposition, Kind};
use crate::statsd::Totals;

/// The statsd name of the response time, an observer.
const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// Appends upstream's series for `totals` (from [`crate::statsd::totals`]) and the response
/// time histogram of `metrics` to a Prometheus text page, named by `mapping`.
pub(crate) fn render(totals: &Totals, metrics: &Metrics, mapping: &Mapping, out: &mut String) {
    // name → labels → value, so that each name's TYPE line comes once and merged series add.
    let mut series: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (name, &n) in totals {
        if name == RESPONSE_TIME {
            continue;
        }
        if let Some(mapped) = mapping.map(name, StatsdType::Counter) {
            let labels = mapping::label_text(&mapped.labels);
            *series
                .entry(mapped.name)
                .or_default()
                .entry(labels)
                .or_default() += n as f64 * mapped.scale.unwrap_or(1.0);
        }
    }
    // Upstream's series carry no HELP lines (an empty help writes none).
    let mut text = Exposition::on(out);
    for (name, by_labels) in &series {
        let mut family = text.family(name, Kind::Counter, "");
        for (labels, n) in by_labels {
            family.sample_labelled(labels, n);
        }
    }
    if let Some(mapped) = mapping.map(RESPONSE_TIME, StatsdType::Observer) {
        // statsd's timer is in milliseconds; the series' unit is a millisecond × scale.
        let nanos_per_unit = 1e6 / mapped.scale.unwrap_or(1.0);
        let (buckets, sum, count) = metrics.store_histogram_in(nanos_per_unit);
        let labels: Vec<(&str, &str)> = mapped
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        text.family(&mapped.name, Kind::Histogram, "")
            .histogram(&labels, buckets, sum, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        render(
            &totals,
            &Metrics::default(),
            &Mapping::upstream_default(false),
            &mut out,
        );
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

    /// The response-time histogram's `_bucket`, `_sum` and `_count` lines under `mapping`,
    /// after two calls of 3 ms and 40 ms.
    fn response_time(mapping: &Mapping) -> Vec<String> {
        let metrics = Metrics::default();
        metrics.store_latency(std::time::Duration::from_millis(3));
        metrics.store_latency(std::time::Duration::from_millis(40));
        let mut out = String::new();
        render(&Totals::new(), &metrics, mapping, &mut out);
        out.lines()
            .filter(|l| l.starts_with("ratelimit_service_response_time_seconds"))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_response_time_is_in_seconds_or_in_upstreams_legacy_milliseconds() {
        let seconds = response_time(&Mapping::upstream_default(false));
        let labels = "grpc_method=\"ShouldRateLimit\"";
        for line in [
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"0.00001\"}} 0"),
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"0.005\"}} 1"),
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"0.1\"}} 2"),
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"1\"}} 2"),
            format!("ratelimit_service_response_time_seconds_sum{{{labels}}} 0.043"),
            format!("ratelimit_service_response_time_seconds_count{{{labels}}} 2"),
        ] {
            assert!(seconds.contains(&line), "{line} in {seconds:#?}");
        }
        // PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: the same series, observing milliseconds.
        let millis = response_time(&Mapping::upstream_default(true));
        for line in [
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"0.01\"}} 0"),
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"5\"}} 1"),
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"100\"}} 2"),
            format!("ratelimit_service_response_time_seconds_bucket{{{labels},le=\"1000\"}} 2"),
            format!("ratelimit_service_response_time_seconds_sum{{{labels}}} 43"),
            format!("ratelimit_service_response_time_seconds_count{{{labels}}} 2"),
        ] {
            assert!(millis.contains(&line), "{line} in {millis:#?}");
        }
        assert_eq!(seconds.len(), millis.len());
    }

    #[test]
    fn a_files_scale_applies_to_counts_and_times() {
        let mapping = Mapping::parse(
            "mappings:\n  - match: ratelimit.service.rate_limit.*.*.total_hits\n    name: hits\n    scale: 0.5\n  - match: ratelimit_server.*.response_time\n    name: rt_us\n    scale: 1000\n",
            "m.yaml",
        )
        .unwrap();
        let totals = Totals::from([("ratelimit.service.rate_limit.d.q.total_hits".to_string(), 5)]);
        let metrics = Metrics::default();
        metrics.store_latency(std::time::Duration::from_micros(2500));
        let mut out = String::new();
        render(&totals, &metrics, &mapping, &mut out);
        assert!(out.contains("hits 2.5\n"), "{out}");
        assert!(out.contains("rt_us_bucket{le=\"10\"} 0\n"), "{out}");
        assert!(out.contains("rt_us_bucket{le=\"2500\"} 1\n"), "{out}");
        assert!(out.contains("rt_us_sum 2500\n"), "{out}");
    }

    #[test]
    fn a_mapping_file_renames_relabels_and_drops() {
        let mapping = Mapping::parse(
            "mappings:\n  - match: ratelimit.service.rate_limit.*.*.total_hits\n    name: rl_hits\n    labels: {scope: \"$1/$2\"}\n  - match: ratelimit_server.*.response_time\n    action: drop\n",
            "m.yaml",
        )
        .unwrap();
        let totals = Totals::from([("ratelimit.service.rate_limit.d.q.total_hits".to_string(), 4)]);
        let mut out = String::new();
        render(&totals, &Metrics::default(), &mapping, &mut out);
        assert!(out.contains("rl_hits{scope=\"d/q\"} 4\n"), "{out}");
        assert!(!out.contains("response_time"), "{out}");
    }
}
