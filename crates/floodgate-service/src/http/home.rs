//! `GET /`: the live dashboard. The page is rendered with what the running configuration
//! serves (the pipeline's limiters and their modes, the named limits of `POST /v1/check`, the
//! Envoy domains, the endpoints), then its script (`dashboard.js`, inlined) polls
//! `GET /v1/dashboard` once a second and fills in the rates, charts, heaviest keys and store
//! health (`crate::dashboard`). The page is self-contained: no fonts, images, scripts or style
//! sheets from elsewhere. Every configured name is HTML-escaped here, and the script writes
//! every value as text.

use std::fmt::Write as _;

use crate::dashboard::Overview;

use crate::VERSION;

/// The endpoints the page links to: method, path and what each does.
const ENDPOINTS: [(&str, &str, &str); 10] = [
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
    (
        "POST",
        "/v1/reserve",
        "holds a usage estimate (a named limit's, or the pipeline's)",
    ),
    (
        "POST",
        "/v1/settle",
        "settles a reservation at its actual cost, once",
    ),
    ("POST", "/json", "envoyproxy/ratelimit's JSON API"),
    ("GET", "/metrics", "Prometheus metrics"),
    (
        "GET",
        "/v1/dashboard",
        "this page's data, as JSON (?since=SEQ: only newer points)",
    ),
    ("GET", "/livez", "liveness"),
    ("GET", "/readyz", "readiness (503 while shutting down)"),
];

const STYLE: &str = include_str!("dashboard.css");

/// The dashboard's script.
const SCRIPT: &str = include_str!("dashboard.js");

/// The page for `overview`.
pub fn render(overview: &Overview) -> String {
    let mut page = String::with_capacity(32 * 1024);
    write_head(&mut page);
    write_limiters(&mut page, overview);
    write_live_sections(&mut page);
    write_named_limits(&mut page, overview);
    write_domains(&mut page, overview);
    write_endpoints(&mut page);
    let _ = writeln!(page, "<script>{SCRIPT}</script>\n</body>\n</html>");
    page
}

// Writing to a String cannot fail: the `let _ =` below drop an always-Ok result.

/// The document's head, the page's header and what shows without JavaScript.
fn write_head(page: &mut String) {
    page.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(page, "<title>Floodgate {}</title>", escape(VERSION));
    let _ = writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(
        page,
        "<header><h1>Floodgate <small>{}</small></h1>\n<p>Rate limiting and load shedding: \
         this service answers decisions over HTTP JSON and Envoy's rate-limit gRPC API.</p>\n\
         <p class=\"bar\"><span id=\"status\">connecting…</span> · store \
         <span id=\"store-kind\">–</span> <span id=\"store-health\" class=\"badge\">–</span>\
         </p></header>",
        escape(VERSION)
    );
    page.push_str(
        "<noscript><p>The live figures need JavaScript; the same numbers are at \
         <a href=\"/metrics\">/metrics</a> and <a href=\"/v1/dashboard\">/v1/dashboard</a>.\
         </p></noscript>\n",
    );
}

/// The pipeline's limiters, a row each, which the script fills with live figures; and the
/// admin form that switches their modes.
fn write_limiters(page: &mut String, overview: &Overview) {
    page.push_str("<section id=\"limiters\"><h2>Pipeline limiters</h2>\n");
    let _ = writeln!(
        page,
        "<p class=\"none\" id=\"no-stages\"{}>None configured.</p>",
        if overview.limiters.is_empty() {
            ""
        } else {
            " hidden"
        }
    );
    page.push_str(
        "<table id=\"stage-table\">\n<thead><tr><th>limiter</th><th>kind</th><th>mode</th>\
         <th class=\"num\">decisions/s</th><th class=\"num\">refusals/s</th>\
         <th class=\"num\">shadow would-refuse/s</th><th class=\"num\">fail-opens/s (total)</th>\
         <th>last 5 min</th></tr></thead>\n<tbody>\n",
    );
    for (name, kind, mode) in &overview.limiters {
        let switched = match overview.switched.get(name) {
            Some(configured) => format!(
                " <small class=\"switched\">switched at run time (configured: {})</small>",
                escape(configured.name())
            ),
            None => String::new(),
        };
        let scope = match overview.scopes.get(name) {
            Some(scope) => format!("<br><small class=\"scope\">{}</small>", escape(scope)),
            None => String::new(),
        };
        let _ = writeln!(
            page,
            "<tr data-stage=\"{name}\"><td class=\"name\"><code>{name}</code>{scope}</td>\
             <td class=\"kind\">{}</td><td class=\"mode\">{}{switched}</td>\
             <td class=\"num decisions\">–</td><td class=\"num refusals\">–</td>\
             <td class=\"num shadow\">–</td><td class=\"num fail-open\">–</td>\
             <td class=\"spark\"></td></tr>",
            escape(kind.name()),
            escape(mode.name()),
            name = escape(name),
        );
    }
    page.push_str(
        "</tbody></table>\n<p class=\"legend-note\"><span class=\"key\" style=\"--c:#0072b2\">\
         decisions/s</span> <span class=\"key\" style=\"--c:#d55e00\">refusals/s</span></p>\n\
         <form id=\"admin\" hidden><label>Admin token <input id=\"token\" type=\"password\" \
         autocomplete=\"off\"></label> <button type=\"submit\">Use token</button> \
         <span id=\"admin-message\"></span><br><small>With the token, each limiter's mode can be \
         switched here (enforce, shadow: dark launch, off: kill switch) and the heaviest keys are \
         shown in full. The token stays in this page's memory.</small></form>\n</section>\n",
    );
}

/// The sections only the script fills (hidden until it has something to show).
fn write_live_sections(page: &mut String) {
    page.push_str(
        "<section id=\"fleet\" hidden><h2>Fleet</h2></section>\n\
         <section id=\"utilization\" hidden><h2>Utilization</h2></section>\n\
         <section id=\"adaptive\" hidden><h2>Adaptive concurrency</h2></section>\n\
         <section id=\"rlqs\" hidden><h2>Rate Limit Quota Service</h2>\n<dl class=\"details\">\
         <dt>streams</dt><dd id=\"rlqs-streams\">–</dd><dt>buckets</dt>\
         <dd id=\"rlqs-buckets\">–</dd><dt>shares</dt><dd id=\"rlqs-shared\">–</dd>\
         <dt>assignments sent</dt><dd id=\"rlqs-sent\">–</dd><dt>store failures</dt>\
         <dd id=\"rlqs-failures\">–</dd></dl>\n<table id=\"rlqs-table\"><thead><tr>\
         <th>domain</th><th>bucket</th><th class=\"num\">demand</th>\
         <th class=\"num\">granted</th><th class=\"num\">limit</th><th>granted of limit</th>\
         <th class=\"num\">streams</th></tr></thead><tbody></tbody></table>\n\
         <p class=\"note\">Requests per unit of each bucket's limit; the busiest buckets by \
         demand, values shown as hashes unless the rule has <code>detailed_metric</code>.</p>\
         <div id=\"rlqs-charts\"></div></section>\n\
         <section id=\"plans\" hidden><h2>Plan overrides</h2>\n<table id=\"plan-table\"><thead>\
         <tr><th>user</th><th>plan set at run time</th><th>configured plan</th></tr></thead>\
         <tbody></tbody></table>\n<p class=\"note\" id=\"plan-note\"></p></section>\n\
         <section id=\"keys\"><h2>Heaviest keys</h2>\n<table id=\"key-table\"><thead><tr>\
         <th>key</th><th class=\"num\">requests</th><th class=\"num\">over-count</th></tr>\
         </thead><tbody></tbody></table>\n<p class=\"note\" id=\"key-note\"></p></section>\n\
         <section id=\"store\"><h2>Store</h2>\n<dl class=\"details\"><dt>URL</dt>\
         <dd><code id=\"store-url\">–</code></dd><dt>circuit breaker</dt>\
         <dd id=\"store-breaker\">–</dd><dt>failed calls</dt><dd id=\"store-errors\">–</dd>\
         </dl><div id=\"store-charts\"></div></section>\n",
    );
}

/// The named limits `POST /v1/check` decides.
fn write_named_limits(page: &mut String, overview: &Overview) {
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
}

/// The Envoy domains configured.
fn write_domains(page: &mut String, overview: &Overview) {
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
}

/// What the service answers, and where.
fn write_endpoints(page: &mut String) {
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
    page.push_str("</ul>\n");
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
    use std::collections::BTreeMap;

    use floodgate::limiter::LimiterKind;
    use floodgate::pipeline::Mode;

    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(
            escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        let page = render(&Overview {
            limiters: vec![("concurrency".into(), LimiterKind::Concurrency, Mode::Shadow)],
            switched: BTreeMap::from([("concurrency".into(), Mode::Enforce)]),
            limits: vec![("<script>alert(1)</script>".into(), "gcra")],
            domains: vec!["a&b".into()],
            scopes: BTreeMap::from([(
                "concurrency".into(),
                "by {attributes.ip}; when endpoint is /orders<*>".into(),
            )]),
        });
        assert!(
            page.contains("<small class=\"scope\">by {attributes.ip}; when endpoint is /orders&lt;*&gt;</small>"),
            "{page}"
        );
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(page.contains("<code>a&amp;b</code>"), "{page}");
        assert!(
            page.contains(
                "</small></td><td class=\"kind\">concurrency</td>\
                 <td class=\"mode\">shadow <small class=\"switched\">switched at run time \
                 (configured: enforce)</small>"
            ),
            "{page}"
        );
    }

    #[test]
    fn nothing_configured_says_so_and_still_links_the_endpoints() {
        let page = render(&Overview {
            limiters: Vec::new(),
            switched: BTreeMap::new(),
            limits: Vec::new(),
            domains: Vec::new(),
            scopes: BTreeMap::new(),
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
