//! One vocabulary across the command line: `--store` is described the same way in every
//! command, no help text names an internal module, 0 is refused wherever it makes no sense
//! (naming the argument), durations read the same everywhere (`1h30m`, `200ms`, plain
//! seconds), and a listen address may be a host name.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use floodgate_server::runtime::Listening;

fn floodgate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .env_remove("FLOODGATE_STORE")
        .output()
        .expect("the floodgate binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const COMMANDS: [&str; 5] = ["serve", "bench", "replay", "simulate", "check-config"];

#[test]
fn store_is_described_alike_and_no_help_names_a_module() {
    let mut store_help = Vec::new();
    for command in COMMANDS {
        let (code, help, _) = floodgate(&[command, "--help"]);
        assert_eq!(code, Some(0), "{command}");
        assert!(
            !help.contains("::"),
            "{command} --help names a module:\n{help}"
        );
        if let Some(at) = help.find("--store <URL>") {
            let block: String = help[at..]
                .lines()
                .take_while(|l| !l.trim_start().starts_with('-') || l.contains("--store"))
                .collect::<Vec<_>>()
                .join(" ");
            store_help.push((
                command,
                block.split_whitespace().collect::<Vec<_>>().join(" "),
            ));
        }
    }
    assert_eq!(store_help.len(), 4, "{store_help:?}");
    for (command, text) in &store_help {
        assert_eq!(text, &store_help[0].1, "{command}'s --store differs");
    }
}

#[test]
fn zero_is_refused_where_it_makes_no_sense() {
    let spec = r#"{"algorithm":"token_bucket","rate":10,"capacity":10}"#;
    let traffic = r#"{"pattern":"steady","rate":1}"#;
    for (args, argument) in [
        (vec!["serve", "--threads", "0"], "--threads"),
        (
            vec!["bench", "--limiter", spec, "--threads", "0"],
            "--threads",
        ),
        (
            vec!["bench", "--limiter", spec, "--concurrency", "0"],
            "--concurrency",
        ),
        (vec!["bench", "--limiter", spec, "--keys", "0"], "--keys"),
        (
            vec!["bench", "--limiter", spec, "--max-keys", "0"],
            "--max-keys",
        ),
        (
            vec!["bench", "--limiter", spec, "--duration", "0s"],
            "--duration",
        ),
        (
            vec!["replay", "--limiter", spec, "--max-keys", "0"],
            "--max-keys",
        ),
        (
            vec![
                "simulate",
                "--limiter",
                spec,
                "--traffic",
                traffic,
                "--duration",
                "10s",
                "--workers",
                "0",
            ],
            "--workers",
        ),
        (
            vec![
                "simulate",
                "--limiter",
                spec,
                "--traffic",
                traffic,
                "--duration",
                "0",
            ],
            "--duration",
        ),
    ] {
        let (code, _, stderr) = floodgate(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(argument), "{args:?}: {stderr}");
    }
}

#[test]
fn durations_read_the_same_everywhere() {
    let spec = r#"{"algorithm":"token_bucket","rate":10,"capacity":10}"#;
    let traffic = r#"{"pattern":"steady","rate":1}"#;
    for duration in ["1h30m", "90s", "1.5", "2m30s"] {
        let (code, stdout, stderr) = floodgate(&[
            "simulate",
            "--limiter",
            spec,
            "--traffic",
            traffic,
            "--duration",
            duration,
        ]);
        assert_eq!(code, Some(0), "{duration}: {stderr}");
        assert!(stdout.contains("offered"), "{duration}: {stdout}");
    }
    for duration in ["200ms", "0.2"] {
        let (code, _, stderr) = floodgate(&[
            "bench",
            "--limiter",
            spec,
            "--duration",
            duration,
            "--keys",
            "10",
        ]);
        assert_eq!(code, Some(0), "{duration}: {stderr}");
    }
    let (code, _, stderr) = floodgate(&["bench", "--limiter", spec, "--duration", "soon"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("--duration") && stderr.contains("soon"),
        "{stderr}"
    );
}

#[test]
fn a_listen_address_may_be_a_host_name() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args([
            "serve",
            "--http",
            "localhost:0",
            "--grpc",
            "localhost:0",
            "--threads",
            "1",
        ])
        .env_remove("FLOODGATE_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the floodgate binary starts");
    let stderr = child.stderr.take().expect("piped");
    let line = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| Listening::parse(&l));
    let _ = child.kill();
    let _ = child.wait();
    let listening = line.expect("a listening line");
    assert!(
        listening.http.ip().is_loopback() && listening.http.port() != 0,
        "{listening}"
    );
    let (code, _, stderr) = floodgate(&["serve", "--http", "localhost"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("host:port"), "{stderr}");
}
