//! One vocabulary across the command line: `--store` is described the same way in every
//! command of its kind (those that read a configuration, those that do not), no help text
//! names an internal module or a crate, 0 is refused wherever it makes no sense
//! (naming the argument), durations read the same everywhere (`1h30m`, `200ms`, plain
//! seconds), and a listen address may be a host name.

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
    let help = |command: &str| {
        store_help
            .iter()
            .find(|(c, _)| *c == command)
            .map(|(_, text)| text.clone())
            .unwrap_or_default()
    };
    // The commands that read a configuration say what --store overrides in it; the others
    // read none and say so by not mentioning one.
    assert_eq!(help("serve"), help("check-config"));
    assert_eq!(help("bench"), help("replay"));
    assert!(
        help("serve").contains("configuration's `store.url`"),
        "{}",
        help("serve")
    );
    assert!(!help("bench").contains("config"), "{}", help("bench"));
    for (command, text) in &store_help {
        assert!(text.contains("redis-sentinel://"), "{command}: {text}");
        assert!(!text.ends_with('…'), "{command}: {text}");
    }
    // The tool, not its crates.
    let (_, top, _) = floodgate(&["--help"]);
    assert!(
        top.starts_with("Floodgate: rate limiting and load shedding.")
            && !top.contains("floodgate-"),
        "{top}"
    );
}

#[test]
fn every_unusable_environment_setting_exits_with_the_same_status() {
    let run = |args: &[&str], env: (&str, &str)| {
        let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(args)
            .env_remove("FLOODGATE_STORE")
            .env(env.0, env.1)
            .stdin(Stdio::null())
            .output()
            .expect("the floodgate binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let serve = ["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"];
    let spec = r#"{"algorithm":"token_bucket","rate":10,"capacity":10}"#;
    let config =
        std::env::temp_dir().join(format!("floodgate-cli-env-{}.yaml", std::process::id()));
    std::fs::write(
        &config,
        "limits: {a: {algorithm: fixed_window, limit: 1, window: 1s}}\n",
    )
    .unwrap();
    let config = config.display().to_string();
    for (args, env, named) in [
        (&serve[..], ("LOG_LEVEL", "loud"), "LOG_LEVEL"),
        (
            &serve[..],
            ("FLOODGATE_STORE", "bogus://x"),
            "FLOODGATE_STORE",
        ),
        (
            &serve[..],
            ("REDIS_SOCKET_TYPE", "bogus"),
            "REDIS_SOCKET_TYPE",
        ),
        (&serve[..], ("FLOODGATE_WATCH", "maybe"), "FLOODGATE_WATCH"),
        (
            &serve[..],
            ("FLOODGATE_ADMIN_TOKEN", "short"),
            "FLOODGATE_ADMIN_TOKEN",
        ),
        (
            &serve[..],
            ("FLOODGATE_LEASE_SECRET", "short"),
            "FLOODGATE_LEASE_SECRET",
        ),
        (
            &["check-config", config.as_str()][..],
            ("FLOODGATE_MERGE_DOMAINS", "maybe"),
            "FLOODGATE_MERGE_DOMAINS",
        ),
        (
            &["check-config", config.as_str()][..],
            ("FLOODGATE_STORE", "bogus://x"),
            "FLOODGATE_STORE",
        ),
        (
            &["bench", "--limiter", spec, "--duration", "1s"][..],
            ("FLOODGATE_STORE", "bogus://x"),
            "FLOODGATE_STORE",
        ),
        (
            &["replay", "--limiter", spec][..],
            ("FLOODGATE_STORE", "bogus://x"),
            "FLOODGATE_STORE",
        ),
    ] {
        let (code, stderr) = run(args, env);
        assert_eq!(code, Some(2), "{args:?} with {env:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?} with {env:?}: {stderr}");
    }
}

#[test]
fn check_config_says_what_it_loaded_and_reads_a_runtime_tree_as_the_drop_in() {
    let root = std::env::temp_dir().join(format!("floodgate-cli-runtime-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("ratelimit/config")).unwrap();
    std::fs::write(
        root.join("ratelimit/config/rl.yaml"),
        "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n    descriptors:\n      - key: path\n        rate_limit: {unit: hour, requests_per_unit: 1}\n",
    )
    .unwrap();
    let root_arg = root.display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", "--upstream", root_arg.as_str()])
        .env_remove("FLOODGATE_STORE")
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", "127.0.0.1:6380")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "the runtime directory",
        "  store: redis://127.0.0.1:6380 (redis, exact)",
        "  pipeline: none",
        "  named limits: none",
        "  domains: rl (2 descriptors)",
    ] {
        assert!(stdout.contains(line), "{line}:\n{stdout}");
    }
    // A file of the tree that is not a domain file is refused, as the drop-in refuses it.
    std::fs::write(root.join("ratelimit/config/notes.yaml"), "hello: world\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", "--upstream", root_arg.as_str()])
        .env_remove("FLOODGATE_STORE")
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("notes.yaml"));
    let _ = std::fs::remove_dir_all(&root);

    // A Floodgate file: its stages, plans, limits and domains.
    let (code, stdout, stderr) =
        floodgate(&["check-config", "../../examples/config/floodgate.yaml"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("  pipeline: request_rate (request_rate), concurrency (concurrency), fleet (fleet), utilization (utilization)")
            && stdout.contains("  plans: free, pro, standard (default free)")
            && stdout.contains("  named limits: login")
            && stdout.contains("  store: memory (exact)"),
        "{stdout}"
    );
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
