//! What `simulate` and `replay --summary/--chart` show: per limiter, a summary row (offered,
//! admitted, refused, the longest refusal streak, `retry_after`'s median and 99th percentile)
//! and a self-contained HTML page with the charts (inline SVG, no script, nothing fetched).

use std::fmt::Write as _;

pub(crate) mod chart;
mod tally;

pub use chart::{line_chart, ChartError, Series, OFFERED};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Its charts could not be drawn.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// The file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
}
pub use tally::{Bucket, Histogram, Sample, Tally, MAX_BUCKETS};

use floodgate_service::http::home::escape;

/// One limiter's part of a report.
#[derive(Clone, Debug)]
pub struct LimiterRun {
    /// Its name in the report (the spec's `name`, or the spec itself).
    pub name: String,
    /// Its spec, as JSON.
    pub spec: String,
    /// What it did.
    pub tally: Tally,
}

/// A report: a title, the run's parameters, and the limiters' tallies over the same requests.
#[derive(Clone, Debug)]
pub struct Report {
    /// The page's title.
    pub title: String,
    /// The run's parameters, as (label, value) lines.
    pub details: Vec<(String, String)>,
    /// The limiters, in the order given.
    pub limiters: Vec<LimiterRun>,
    /// The run's length in seconds (the charts' x axis); the latest decision's time when `None`.
    pub duration: Option<f64>,
}

/// The charts' shortest interval: rates are per second over at least this.
const CHART_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The most points a chart's line has.
const CHART_POINTS: usize = 240;

/// The summary table's columns.
const COLUMNS: [&str; 7] = [
    "limiter",
    "offered",
    "admitted",
    "refused",
    "longest refusal streak",
    "retry_after p50",
    "retry_after p99",
];

impl Report {
    /// The summary's rows: one per limiter, cells as text.
    fn rows(&self) -> Vec<[String; 7]> {
        self.limiters
            .iter()
            .map(|l| {
                let t = &l.tally;
                let quantile = |q| t.retry_after_quantile(q).map_or("-".to_string(), seconds);
                [
                    l.name.clone(),
                    t.offered().to_string(),
                    t.admitted().to_string(),
                    t.refused().to_string(),
                    t.longest_refusal_streak().to_string(),
                    quantile(0.5),
                    quantile(0.99),
                ]
            })
            .collect()
    }

    /// The summary as a text table (for a terminal): a header, then one line per limiter.
    pub fn table(&self) -> String {
        text_table(&COLUMNS, &self.rows())
    }

    fn x_max(&self) -> f64 {
        self.duration.unwrap_or_else(|| {
            self.limiters
                .iter()
                .map(|l| l.tally.last().as_secs_f64())
                .fold(0.0, f64::max)
        })
    }

    /// The charts, as `<svg>` elements: offered and admitted, refused, then requests in flight
    /// and the utilization shedder's controller where a limiter reports them.
    pub fn charts(&self) -> Result<Vec<String>, ChartError> {
        let data = ChartData::new(self);
        let mut charts = vec![data.offered_and_admitted()?, data.refused()?];
        // A chart of one gauge per limiter, for the limiters that report it.
        let gauges: [(&str, &str, Gauge<'_>); 3] = [
            (
                "In flight (most in each interval)",
                "requests",
                &|b: &Bucket| b.in_flight.map(|n| n as f64),
            ),
            (
                "Adaptive concurrency: the learned limit",
                "requests in flight",
                &|b: &Bucket| b.limit.map(|n| n as f64),
            ),
            (
                "Latency of admitted requests (mean in each interval)",
                "milliseconds",
                &|b: &Bucket| b.latency().map(|s| s * 1e3),
            ),
        ];
        for (title, unit, gauge) in gauges {
            charts.extend(data.gauge(title, unit, gauge)?);
        }
        charts.extend(data.controller()?);
        Ok(charts)
    }

    /// Writes [`Report::html`] to the file `out` (`simulate --out`, `replay --chart`).
    pub fn write(&self, out: &std::path::Path) -> Result<(), WriteError> {
        let page = self.html()?;
        std::fs::write(out, page).map_err(|source| WriteError::Io {
            path: out.display().to_string(),
            source,
        })
    }

    /// The report as one self-contained HTML page.
    pub fn html(&self) -> Result<String, ChartError> {
        let charts = self.charts()?;
        let mut page = String::with_capacity(64 * 1024);
        page.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        let _ = writeln!(page, "<title>{}</title>", escape(&self.title));
        let _ = writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>");
        let _ = writeln!(page, "<h1>{}</h1>", escape(&self.title));
        page.push_str("<dl class=\"details\">\n");
        for (label, value) in &self.details {
            let _ = writeln!(
                page,
                "<dt>{}</dt><dd><code>{}</code></dd>",
                escape(label),
                escape(value)
            );
        }
        for (i, l) in self.limiters.iter().enumerate() {
            let _ = writeln!(
                page,
                "<dt>limiter {}</dt><dd>{} <code>{}</code></dd>",
                i + 1,
                escape(&l.name),
                escape(&l.spec)
            );
        }
        page.push_str("</dl>\n<h2>Summary</h2>\n");
        summary_table(&mut page, &COLUMNS, &self.rows());
        let _ = writeln!(
            page,
            "<p class=\"note\">The longest refusal streak counts refusals in a row in decision \
             order, across keys. <code>retry_after</code> quantiles are within 1% and leave out \
             refusals that can never pass. Rates are per second over intervals of {}.</p>",
            seconds(self.limiters.first().map_or(1.0, |l| {
                l.tally.coarse(CHART_INTERVAL, CHART_POINTS).0.as_secs_f64()
            }))
        );
        page.push_str("<h2>Charts</h2>\n");
        for chart in charts {
            let _ = writeln!(page, "<figure class=\"chart\">{chart}</figure>");
        }
        page.push_str("</body>\n</html>\n");
        Ok(page)
    }
}

/// One value per interval of a limiter's series, for the gauges' charts.
type Gauge<'g> = &'g dyn Fn(&Bucket) -> Option<f64>;

/// A report's limiters at the charts' resolution (each one's series merged once), which every
/// chart draws from.
struct ChartData<'r> {
    limiters: &'r [LimiterRun],
    /// The x axis's end, in seconds.
    x_max: f64,
    /// Per limiter: the length of its intervals in seconds, and its buckets.
    series: Vec<(f64, Vec<Bucket>)>,
}

impl<'r> ChartData<'r> {
    fn new(report: &'r Report) -> ChartData<'r> {
        ChartData {
            limiters: &report.limiters,
            x_max: report.x_max(),
            series: report
                .limiters
                .iter()
                .map(|l| {
                    let (width, buckets) = l.tally.coarse(CHART_INTERVAL, CHART_POINTS);
                    (width.as_secs_f64(), buckets)
                })
                .collect(),
        }
    }

    /// Limiter `i`'s points `(middle of the interval, value)`; `value` gets the bucket and the
    /// interval's length in seconds, and leaves out the intervals it has nothing for.
    fn points(&self, i: usize, value: &dyn Fn(&Bucket, f64) -> Option<f64>) -> Vec<(f64, f64)> {
        let (width, buckets) = &self.series[i];
        buckets
            .iter()
            .enumerate()
            .filter_map(|(n, b)| value(b, *width).map(|v| ((n as f64 + 0.5) * width, v)))
            .collect()
    }

    /// The requests offered (the first limiter's, the same for all) and each limiter's
    /// admitted, per second.
    fn offered_and_admitted(&self) -> Result<String, ChartError> {
        let mut admitted = Vec::new();
        if !self.limiters.is_empty() {
            admitted.push(Series {
                name: "offered".into(),
                color: OFFERED,
                points: self.points(0, &|b, w| Some(b.offered as f64 / w)),
            });
        }
        for (i, l) in self.limiters.iter().enumerate() {
            admitted.push(Series {
                name: format!("admitted: {}", l.name),
                color: i,
                points: self.points(i, &|b, w| Some(b.admitted as f64 / w)),
            });
        }
        line_chart(
            "Offered and admitted",
            "requests per second",
            self.x_max,
            None,
            &admitted,
        )
    }

    /// One series per limiter, named after it, of `value` (see [`ChartData::points`]).
    fn per_limiter(&self, value: &dyn Fn(&Bucket, f64) -> Option<f64>) -> Vec<Series> {
        self.limiters
            .iter()
            .enumerate()
            .map(|(i, l)| Series {
                name: l.name.clone(),
                color: i,
                points: self.points(i, value),
            })
            .collect()
    }

    /// Each limiter's refusals per second.
    fn refused(&self) -> Result<String, ChartError> {
        let refused = self.per_limiter(&|b, w| Some(b.refused() as f64 / w));
        line_chart("Refused", "refusals per second", self.x_max, None, &refused)
    }

    /// The chart of `gauge` for the limiters that report it; `None` when none does.
    fn gauge(
        &self,
        title: &str,
        unit: &str,
        gauge: Gauge<'_>,
    ) -> Result<Option<String>, ChartError> {
        let mut series = self.per_limiter(&|b, _| gauge(b));
        series.retain(|s| !s.points.is_empty());
        if series.is_empty() {
            return Ok(None);
        }
        line_chart(title, unit, self.x_max, None, &series).map(Some)
    }

    /// The utilization shedders' shed amount, and the utilization each one read; `None`
    /// without a shedder.
    fn controller(&self) -> Result<Option<String>, ChartError> {
        let mut controller = Vec::new();
        for (i, l) in self.limiters.iter().enumerate() {
            let shed = self.points(i, &|b, _| b.shed_amount);
            if shed.is_empty() {
                continue;
            }
            controller.push(Series {
                name: format!("shed amount: {}", l.name),
                color: i,
                points: shed,
            });
            let utilization = self.points(i, &|b, _| b.utilization());
            if !utilization.is_empty() {
                controller.push(Series {
                    name: format!("utilization (mean): {}", l.name),
                    color: OFFERED,
                    points: utilization,
                });
            }
        }
        if controller.is_empty() {
            return Ok(None);
        }
        line_chart(
            "Utilization shedder: shed amount and utilization",
            "fraction (shed amount < 0: at rest)",
            self.x_max,
            None,
            &controller,
        )
        .map(Some)
    }
}

/// `columns` and `rows` as a text table for a terminal: the first column aligned left, the
/// others right, two spaces apart.
pub(crate) fn text_table<R: AsRef<[String]>>(columns: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                out.push_str(cell);
                out.extend(std::iter::repeat_n(' ', pad));
            } else {
                out.push_str("  ");
                out.extend(std::iter::repeat_n(' ', pad));
                out.push_str(cell);
            }
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&mut columns.iter().copied());
    for row in rows {
        line(&mut row.as_ref().iter().map(String::as_str));
    }
    out
}

/// Writes the summary `<table>` of `columns` and `rows` into `page`.
pub(crate) fn summary_table<R: AsRef<[String]>>(page: &mut String, columns: &[&str], rows: &[R]) {
    page.push_str("<table id=\"summary\">\n<tr>");
    for c in columns {
        let _ = write!(page, "<th>{}</th>", escape(c));
    }
    page.push_str("</tr>\n");
    for row in rows {
        page.push_str("<tr>");
        for cell in row.as_ref() {
            let _ = write!(page, "<td>{}</td>", escape(cell));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n");
}

/// The reports' style sheet.
pub(crate) const STYLE: &str =
    "body{font-family:system-ui,sans-serif;max-width:62rem;margin:2rem auto;\
padding:0 1rem;color:#222;line-height:1.45}table{border-collapse:collapse}\
th,td{padding:.25rem .8rem;border-bottom:1px solid #ddd;text-align:right}\
th:first-child,td:first-child{text-align:left}.details{display:grid;\
grid-template-columns:max-content 1fr;gap:.2rem 1rem}.details dd{margin:0}\
.note{color:#555;font-size:.9rem}figure.chart{margin:1rem 0}figure.chart svg{max-width:100%;\
height:auto}";

/// Seconds for people: "250 µs", "12.5 ms", "1.5 s", "90 s".
pub fn seconds(secs: f64) -> String {
    let (value, unit) = if secs < 1e-3 {
        (secs * 1e6, "µs")
    } else if secs < 1.0 {
        (secs * 1e3, "ms")
    } else {
        (secs, "s")
    };
    let text = if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::Nanos;

    fn run(name: &str, decisions: &[(u64, bool)]) -> LimiterRun {
        let mut tally = Tally::default();
        for &(ms, allowed) in decisions {
            let sample = Sample {
                allowed,
                retry_after: (!allowed).then_some(0.5),
                ..Sample::default()
            };
            tally.record(Nanos::from_millis(ms), &sample);
        }
        LimiterRun {
            name: name.into(),
            spec: "{}".into(),
            tally,
        }
    }

    #[test]
    fn the_table_lines_up_its_columns() {
        let report = Report {
            title: "t".into(),
            details: vec![],
            limiters: vec![
                run("bucket", &[(0, true), (10, false), (20, false)]),
                run("a much longer name", &[(0, true)]),
            ],
            duration: Some(1.0),
        };
        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("limiter "));
        assert!(lines[1].starts_with("bucket "));
        assert_eq!(lines[1].matches("500 ms").count(), 2, "{}", lines[1]);
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(cells[cells.len() - 2..], ["-", "-"], "{}", lines[2]);
        // Numbers are right-aligned under their headers.
        let end = lines[0].find("offered").unwrap() + "offered".len();
        assert_eq!(&lines[1][end - 2..end], " 3", "{table}");
    }

    #[test]
    fn the_page_holds_its_charts_and_escapes_names() {
        let report = Report {
            title: "<script>".into(),
            details: vec![("traffic".into(), "{\"pattern\":\"steady\"}".into())],
            limiters: vec![run("x<y", &[(0, true), (500, false)])],
            duration: None,
        };
        let page = report.html().unwrap();
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;"));
        assert_eq!(
            page.matches("<svg").count(),
            2,
            "offered/admitted and refused"
        );
        assert!(
            !page.contains("src=") && !page.contains("<link"),
            "nothing fetched"
        );
    }

    #[test]
    fn seconds_read_well() {
        assert_eq!(seconds(0.000_25), "250 µs");
        assert_eq!(seconds(0.0125), "12.5 ms");
        assert_eq!(seconds(1.5), "1.5 s");
        assert_eq!(seconds(90.0), "90 s");
        assert_eq!(seconds(2.0), "2 s");
    }
}
