//! The docs' commands and sample outputs hold for the current build: the curl calls of the
//! README and docs/http-api.md answer as their comments say on the built-in config, the README's `replay` example runs,
//! and the sample summary in docs/seeing-limiters.md is what its command prints today.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::serve::{config_file, serve};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(root().join(doc)).expect("the doc is readable")
}

/// The shell commands of a doc's indented blocks, continuation lines (`\`) joined.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let Some(code) = line.strip_prefix("    ") else {
            continue;
        };
        let code = code.trim();
        match code.strip_suffix('\\') {
            Some(start) => {
                current.push_str(start);
                current.push(' ');
            }
            None => {
                current.push_str(code);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// The words of a shell command: single-quoted strings kept whole, a `#` comment dropped.
fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = None;
    for c in command.chars() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quoted = Some(c),
            (None, '#') if word.is_empty() => break,
            (None, ' ') => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[tokio::test]
async fn the_readme_curl_calls_answer_on_the_builtin_config() {
    // A file holding only the store: the built-in config, on the memory store.
    let (_dir, path) = config_file("store: {url: memory}\n");
    let node = serve(
        &path,
        "memory",
        &[("FLOODGATE_ADMIN_TOKEN", "t0ken-long-enough")],
    );
    let client = reqwest::Client::new();
    let mut called = 0;
    let mut last_lease = String::new();
    let mut pages = Vec::new();
    for page in ["README.md", "docs/http-api.md"] {
        for command in commands(&read(page)) {
            pages.push((page, command));
        }
    }
    let mut from_readme = 0;
    for (page, command) in pages {
        let words = words(&command);
        if words.first().map(String::as_str) != Some("curl") {
            continue;
        }
        let Some(url) = words.iter().find(|w| w.starts_with("localhost:8080")) else {
            continue;
        };
        let url = url.replacen("localhost:8080", &node.http, 1);
        // The README's placeholder for the token an evaluation handed out: the last one.
        let body = words
            .iter()
            .position(|w| w == "-d")
            .and_then(|i| words.get(i + 1))
            .map(|body| body.replace("\"v1.…\"", &format!("{:?}", last_lease)));
        let method = match words.iter().position(|w| w == "-X") {
            Some(i) => words[i + 1].parse().expect("a method"),
            None if body.is_some() => reqwest::Method::POST,
            None => reqwest::Method::GET,
        };
        let mut request = client.request(method, &url);
        if let Some(body) = body {
            request = request.body(body);
        }
        if command.contains("authorization: Bearer") {
            request = request.bearer_auth("t0ken-long-enough");
        }
        let response = request.send().await.expect("the service answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        assert_eq!(status, 200, "{command}\n{text}");
        if let Some(lease) = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|answer| answer["lease"].as_str().map(str::to_string))
        {
            last_lease = lease;
        }
        called += 1;
        from_readme += usize::from(page == "README.md");
    }
    assert!(
        from_readme >= 3,
        "only {from_readme} curl calls found in the README"
    );
    assert!(
        called >= 10,
        "only {called} curl calls found in the README and docs/http-api.md"
    );
}

#[test]
fn the_readme_replay_example_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["replay", "--limiter", "examples/token_bucket.yaml"])
        .current_dir(root())
        .stdin(std::fs::File::open(root().join("examples/burst.jsonl")).unwrap())
        .output()
        .expect("the floodgate binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decisions = String::from_utf8_lossy(&out.stdout);
    assert!(decisions.lines().count() > 10, "{decisions}");
    assert!(read("README.md")
        .contains("-- replay --limiter examples/token_bucket.yaml < examples/burst.jsonl"));
}

/// Runs a documented `floodgate …` command, its `option`'s value replaced by `to` (a file or
/// directory of the test's own); what it printed on stdout.
fn run_documented(command: &str, option: &str, to: &Path) -> String {
    let mut args = words(command);
    assert_eq!(args.remove(0), "floodgate");
    let at = args.iter().position(|w| w == option).expect(option);
    args[at + 1] = to.display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(&args)
        .output()
        .expect("the floodgate binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The indented sample after the line of `doc` starting with `marker` (and the line after it:
/// a blank line or a fence), line by line.
fn sample_after<'a>(doc: &'a str, marker: &str) -> Vec<&'a str> {
    doc.lines()
        .skip_while(|l| !l.trim_start().starts_with(marker))
        .skip(2)
        .take_while(|l| l.starts_with("    "))
        .map(|l| l.trim_start_matches("    ").trim_end())
        .collect()
}

#[test]
fn the_simulate_sample_is_what_it_prints_today() {
    let doc = read("docs/seeing-limiters.md");
    let command = commands(&doc)
        .into_iter()
        .find(|c| c.starts_with("floodgate simulate") && c.contains("--out report.html"))
        .expect("the documented simulate command");
    let report = std::env::temp_dir().join(format!("floodgate-doc-{}.html", std::process::id()));
    let printed = run_documented(&command, "--out", &report);
    let _ = std::fs::remove_file(&report);
    let printed: Vec<&str> = printed.lines().map(str::trim_end).collect();
    assert_eq!(
        sample_after(&doc, "It prints the summary"),
        printed,
        "docs/seeing-limiters.md's sample is out of date"
    );
}

/// docs/envoyproxy-ratelimit.md has one row for each of upstream's variables, saying what the
/// code does with it.
#[test]
fn every_upstream_variable_has_its_row() {
    use floodgate_server::environment::upstream::{Support, VARIABLES};
    let page = read("docs/envoyproxy-ratelimit.md");
    for variable in VARIABLES {
        let start = format!("| `{}` |", variable.name);
        let rows: Vec<&str> = page.lines().filter(|l| l.starts_with(&start)).collect();
        assert_eq!(rows.len(), 1, "one row for {}", variable.name);
        let status = rows[0].rsplit('|').nth(1).unwrap_or_default().trim();
        let expected = match variable.support {
            Support::Honoured => "supported",
            Support::Differs => "**differs**",
            Support::Unsupported => "**not supported**",
            Support::NoEffect => "**no effect**",
        };
        assert!(status.starts_with(expected), "{}: {status}", variable.name);
        if variable.support != Support::Honoured {
            assert!(
                status.contains(variable.note),
                "{}: {status}",
                variable.name
            );
        }
    }
}

/// docs/usage-based-limits.md's `simulate --usage` run prints the table the guide shows and
/// draws the charts the guide embeds, byte for byte.
#[test]
fn the_usage_charts_are_what_simulate_draws_today() {
    let doc = read("docs/usage-based-limits.md");
    let command = commands(&doc)
        .into_iter()
        .find(|c| c.starts_with("floodgate simulate") && c.contains("--usage"))
        .expect("the documented simulate --usage command");
    let committed = root().join("docs/usage-based-limits");
    assert!(
        command.contains("--charts docs/usage-based-limits "),
        "{command}"
    );
    let drawn = std::env::temp_dir().join(format!("floodgate-usage-{}", std::process::id()));
    let printed = run_documented(&command, "--charts", &drawn);
    let printed: Vec<&str> = printed.lines().map(str::trim_end).collect();
    assert_eq!(
        sample_after(&doc, "It prints:"),
        printed,
        "the guide's table is out of date"
    );
    for chart in ["usage-counted.svg", "usage-refused.svg"] {
        let now = std::fs::read(drawn.join(chart)).expect("the chart is drawn");
        let then = std::fs::read(committed.join(chart)).expect("the chart is committed");
        assert!(
            now == then,
            "{chart} is out of date: run the guide's command"
        );
        assert!(
            doc.contains(&format!("(usage-based-limits/{chart})")),
            "{chart}"
        );
    }
    let _ = std::fs::remove_dir_all(&drawn);
}
