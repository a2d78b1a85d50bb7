//! `GET /`: a small HTML page for people who open the HTTP API's address in a browser. It names
//! the service and its version, shows what the running configuration serves (the pipeline's
//! limiters and their modes, the named limits of `POST /v1/check`, the Envoy domains) and links
//! to the endpoints. The page is self-contained: no scripts, fonts, images or style sheets from
//! elsewhere. Every configured name is HTML-escaped.

use std::fmt::Write as _;

use crate::service::Overview;

/// The service's version, as the crate was built.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The endpoints the page links to: method, path and what each does.
const ENDPOINTS: [(&str, &str, &str); 7] = [
    ("POST", "/v1/check", "one decision of a named limit"),
    (
        "POST",
        "/v1/evaluate",
        "the limiter pipeline for one request",
    ),
    (
        "POST",
        "/v1/release",
        "gives back the leases of an evaluation",
    ),
    ("POST", "/json", "envoyproxy/ratelimit's JSON API"),
    ("GET", "/metrics", "Prometheus metrics"),
    ("GET", "/livez", "liveness"),
    ("GET", "/readyz", "readiness (503 while shutting down)"),
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;\
padding:0 1rem;line-height:1.5;color:#222}h1 small{font-weight:normal;color:#666}\
table{border-collapse:collapse}th,td{text-align:left;padding:.2rem 1rem .2rem 0;\
border-bottom:1px solid #ddd}code{font-size:.95em}.none{color:#666}";

/// The page for `overview`.
pub fn render(overview: &Overview) -> String {
    // Writing to a String cannot fail: the `let _ =` below drop an always-Ok result.
    let mut page = String::with_capacity(4096);
    page.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(page, "<title>Floodgate {}</title>", escape(VERSION));
    let _ = writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(
        page,
        "<h1>Floodgate <small>{}</small></h1>\n<p>Rate limiting and load shedding: this \
         service answers decisions over HTTP JSON and Envoy's rate-limit gRPC API.</p>",
        escape(VERSION)
    );

    page.push_str("<h2>Pipeline limiters</h2>\n");
    if overview.limiters.is_empty() {
        page.push_str("<p class=\"none\">None configured.</p>\n");
    } else {
        page.push_str("<table>\n<tr><th>limiter</th><th>kind</th><th>mode</th></tr>\n");
        for (name, kind, mode) in &overview.limiters {
            let _ = writeln!(
                page,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                escape(name),
                escape(kind.name()),
                escape(mode.name())
            );
        }
        page.push_str("</table>\n");
    }

    page.push_str("<h2>Named limits <small>(<code>POST /v1/check</code>)</small></h2>\n");
    if overview.limits.is_empty() {
        page.push_str("<p class=\"none\">None configured.</p>\n");
    } else {
        page.push_str("<table>\n<tr><th>name</th><th>algorithm</th></tr>\n");
        for (name, algorithm) in &overview.limits {
            let _ = writeln!(
                page,
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                escape(name),
                escape(algorithm)
            );
        }
        page.push_str("</table>\n");
    }

    page.push_str("<h2>Envoy domains</h2>\n");
    if overview.domains.is_empty() {
        page.push_str("<p class=\"none\">None configured.</p>\n");
    } else {
        page.push_str("<ul>\n");
        for domain in &overview.domains {
            let _ = writeln!(page, "<li><code>{}</code></li>", escape(domain));
        }
        page.push_str("</ul>\n");
    }

    page.push_str("<h2>Endpoints</h2>\n<ul>\n");
    for (method, path, what) in ENDPOINTS {
        // Only GETs are links: a browser following a link to a POST endpoint gets a 405.
        let _ = if method == "GET" {
            writeln!(
                page,
                "<li>{method} <a href=\"{path}\"><code>{path}</code></a>: {what}</li>"
            )
        } else {
            writeln!(page, "<li>{method} <code>{path}</code>: {what}</li>")
        };
    }
    page.push_str("</ul>\n</body>\n</html>\n");
    page
}

/// `text` with the characters that mean something in HTML (in text and in quoted attribute
/// values) written as entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use floodgate::limiter::{LimiterKind, Mode};

    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(
            escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        let page = render(&Overview {
            limiters: vec![("concurrency".into(), LimiterKind::Concurrency, Mode::Shadow)],
            limits: vec![("<script>alert(1)</script>".into(), "gcra")],
            domains: vec!["a&b".into()],
        });
        assert!(!page.contains("<script>"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(page.contains("<code>a&amp;b</code>"), "{page}");
        assert!(
            page.contains("<code>concurrency</code></td><td>concurrency</td><td>shadow"),
            "{page}"
        );
    }

    #[test]
    fn nothing_configured_says_so_and_still_links_the_endpoints() {
        let page = render(&Overview {
            limiters: Vec::new(),
            limits: Vec::new(),
            domains: Vec::new(),
        });
        assert_eq!(page.matches("None configured.").count(), 3);
        for (method, path, _) in ENDPOINTS {
            let link = format!("<a href=\"{path}\">");
            assert_eq!(page.contains(&link), method == "GET", "{method} {path}");
            assert!(page.contains(&format!("<code>{path}</code>")), "{path}");
        }
        // Self-contained: nothing is loaded from elsewhere.
        for outside in ["src=", "<link", "@import", "url("] {
            assert!(!page.contains(outside), "{outside}");
        }
    }
}
