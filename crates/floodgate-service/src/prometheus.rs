//! Prometheus' text exposition format, written one way for every metric the service exports
//! (`GET /metrics`): each family's `# HELP` and `# TYPE` once, then its samples, label values
//! escaped.
//!
//! ```
//! use floodgate_service::prometheus::{Exposition, Kind};
//!
//! let mut page = String::new();
//! Exposition::on(&mut page)
//!     .family("floodgate_reloads_total", Kind::Counter, "Configuration reloads by result.")
//!     .sample(&[("result", "ok")], 3)
//!     .sample(&[("result", "failed")], 0);
//! let lines: Vec<&str> = page.lines().collect();
//! assert_eq!(lines, [
//!     "# HELP floodgate_reloads_total Configuration reloads by result.",
//!     "# TYPE floodgate_reloads_total counter",
//!     "floodgate_reloads_total{result=\"ok\"} 3",
//!     "floodgate_reloads_total{result=\"failed\"} 0",
//! ]);
//! ```
//!
//! A module that exports metrics appends its families to the page through an `Exposition` of
//! its own: families are the module's, so each is described once. Writing to a `String`
//! cannot fail, so nothing here returns an error.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::{Display, Write};

/// What a family measures, as its `# TYPE` line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows (until the process restarts).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, a sum and a count ([`Family::histogram`]).
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Families being appended to a page of text.
#[derive(Debug)]
pub struct Exposition<'p> {
    out: &'p mut String,
    /// The families opened so far: each is described once.
    described: HashSet<String>,
}

impl<'p> Exposition<'p> {
    /// Appends to `page`.
    pub fn on(page: &'p mut String) -> Exposition<'p> {
        Exposition {
            out: page,
            described: HashSet::new(),
        }
    }

    /// Opens the family `name`: writes its `# HELP` (with `help`; none when `help` is empty,
    /// as envoyproxy/ratelimit's series have none) and `# TYPE` lines the first time it is
    /// opened here, nothing the next times (a family whose samples come from several places).
    pub fn family<'a>(&'a mut self, name: &'a str, kind: Kind, help: &str) -> Family<'a> {
        if self.described.insert(name.to_string()) {
            if !help.is_empty() {
                let _ = writeln!(self.out, "# HELP {name} {help}");
            }
            let _ = writeln!(self.out, "# TYPE {name} {}", kind.name());
        }
        Family {
            out: &mut *self.out,
            name,
        }
    }
}

/// One family's samples, being written ([`Exposition::family`]).
#[derive(Debug)]
pub struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
}

impl Family<'_> {
    /// One sample: `name{label="value",…} value` (no braces without labels).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Display) -> &mut Self {
        self.line("", labels, None, value);
        self
    }

    /// One sample whose labels are already written, `label="value",…`, each value escaped
    /// with [`escape_label`] (for labels computed once and used as a map's key).
    pub fn sample_labelled(&mut self, labels: &str, value: impl Display) -> &mut Self {
        let out = &mut *self.out;
        out.push_str(self.name);
        if !labels.is_empty() {
            let _ = write!(out, "{{{labels}}}");
        }
        let _ = writeln!(out, " {value}");
        self
    }

    /// A histogram's samples: `name_bucket` for each `(upper bound, cumulative count)` in
    /// `buckets` and for `+Inf` (`count`), then `name_sum` and `name_count`, each with
    /// `labels`.
    pub fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        buckets: impl IntoIterator<Item = (f64, u64)>,
        sum: f64,
        count: u64,
    ) -> &mut Self {
        for (bound, cumulative) in buckets {
            self.line("_bucket", labels, Some(&bound.to_string()), cumulative);
        }
        self.line("_bucket", labels, Some("+Inf"), count);
        self.line("_sum", labels, None, sum);
        self.line("_count", labels, None, count);
        self
    }

    fn line(
        &mut self,
        suffix: &str,
        labels: &[(&str, &str)],
        le: Option<&str>,
        value: impl Display,
    ) {
        let out = &mut *self.out;
        out.push_str(self.name);
        out.push_str(suffix);
        if !labels.is_empty() || le.is_some() {
            out.push('{');
            let le = le.map(|bound| ("le", bound));
            for (i, (label, text)) in labels.iter().copied().chain(le).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{label}=\"{}\"", escape_label(text));
            }
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }
}

/// A label value escaped as the text format requires: `\` as `\\`, `"` as `\"`, a newline
/// as `\n`.
pub fn escape_label(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    Cow::Owned(
        value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_described_once_and_labels_escaped() {
        let mut page = String::new();
        let mut text = Exposition::on(&mut page);
        text.family("x_total", Kind::Counter, "Xs.")
            .sample(&[("domain", "a\"b\\c\nd")], 1);
        text.family("x_total", Kind::Counter, "Xs.").sample(&[], 2);
        text.family("y", Kind::Gauge, "")
            .sample_labelled("k=\"v\"", 3);
        assert_eq!(
            page,
            "# HELP x_total Xs.\n# TYPE x_total counter\n\
             x_total{domain=\"a\\\"b\\\\c\\nd\"} 1\nx_total 2\n\
             # TYPE y gauge\ny{k=\"v\"} 3\n"
        );
    }

    #[test]
    fn a_histogram_has_its_buckets_sum_and_count() {
        let mut page = String::new();
        Exposition::on(&mut page)
            .family("t_seconds", Kind::Histogram, "Time.")
            .histogram(&[("store", "redis")], [(0.001, 1), (0.01, 3)], 0.02, 4);
        assert_eq!(
            page,
            "# HELP t_seconds Time.\n# TYPE t_seconds histogram\n\
             t_seconds_bucket{store=\"redis\",le=\"0.001\"} 1\n\
             t_seconds_bucket{store=\"redis\",le=\"0.01\"} 3\n\
             t_seconds_bucket{store=\"redis\",le=\"+Inf\"} 4\n\
             t_seconds_sum{store=\"redis\"} 0.02\n\
             t_seconds_count{store=\"redis\"} 4\n"
        );
    }
}
