//! The README's first two commands are what a newcomer runs on a fresh machine: they must stay
//! true. The test command installs what the tests need (the browser tests' Chromium among it)
//! before it runs them, and CI runs exactly that command.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first indented line after the line that starts with `intro`: the command it gives.
fn command_after(readme: &str, intro: &str) -> String {
    let mut lines = readme.lines().skip_while(|l| !l.starts_with(intro));
    lines
        .find(|l| l.starts_with("    "))
        .unwrap_or_else(|| panic!("no command after `{intro}`"))
        .trim()
        .to_string()
}

#[test]
fn the_readme_gives_the_run_and_test_commands_first() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let head: String = readme.lines().take(20).collect::<Vec<_>>().join("\n");
    assert_eq!(
        command_after(&head, "Run it"),
        "cargo run --release -p floodgate-server -- serve"
    );
    assert_eq!(command_after(&head, "Run all the tests"), "scripts/test");
}

#[test]
fn the_test_command_installs_what_the_tests_need_and_ci_runs_it() {
    let script = root().join("scripts/test");
    let needs = Command::new(&script)
        .arg("--needs")
        .output()
        .expect("scripts/test runs");
    assert!(needs.status.success());
    let needs = String::from_utf8_lossy(&needs.stdout);
    let needed: Vec<(&str, &str)> = needs.lines().filter_map(|l| l.split_once(' ')).collect();
    for (what, package) in [
        (common::browser::CHROMIUM, "chromium"),
        (common::browser::CHROMEDRIVER, "chromium-driver"),
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
        ("openssl", "openssl"),
        ("promtool", "prometheus"),
        ("buildah", "buildah"),
    ] {
        assert!(
            needed.contains(&(what, package)),
            "scripts/test does not install {package} for {what}: {needs}"
        );
    }
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "scripts/test"),
        ".ci/run does not run the README's test command"
    );
    assert!(
        !ci.lines()
            .any(|l| l.trim().starts_with("cargo test --workspace")),
        ".ci/run runs the tests another way than the README's command"
    );
}
