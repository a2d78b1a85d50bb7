//! `floodgate check-config` reads a configuration directory as `serve` does: every domain file,
//! duplicates refused unless merging is on (`--merge-domains`, `FLOODGATE_MERGE_DOMAINS`). The
//! loading itself is tested in process, in floodgate-service's `tests/service/config_dir.rs`,
//! whose fixtures these are.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::serve::{temp_dir, TempDir};

/// A fresh directory holding copies of `fixtures` (floodgate-service's
/// `tests/fixtures/runtime/`).
fn dir_with(fixtures: &[&str]) -> TempDir {
    let dir = temp_dir();
    let from: PathBuf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../floodgate-service/tests/fixtures/runtime");
    for fixture in fixtures {
        std::fs::copy(from.join(fixture), dir.0.join(fixture)).expect("copies the fixture");
    }
    dir
}

#[test]
fn check_config_reads_a_directory_through_the_binary() {
    let check = |dir: &TempDir, args: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_floodgate"));
        command
            .arg("check-config")
            .arg(&dir.0)
            .args(args)
            .env_remove("FLOODGATE_MERGE_DOMAINS");
        if let Some(value) = env {
            command.env("FLOODGATE_MERGE_DOMAINS", value);
        }
        let out = command.output().expect("runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let good = dir_with(&["floodgate.yaml", "checkout.yaml", "search.yml"]);
    let (ok, stdout, stderr) = check(&good, &[], None);
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout.lines().next(),
        Some(format!("{}: ok", good.0.display()).as_str())
    );

    let twice = dir_with(&["checkout.yaml", "checkout_extra.yaml"]);
    let (ok, _, stderr) = check(&twice, &[], None);
    assert!(!ok);
    assert!(stderr.contains("duplicate domain `checkout`"), "{stderr}");
    assert!(stderr.contains("checkout_extra.yaml"), "{stderr}");
    assert!(check(&twice, &["--merge-domains"], None).0);
    assert!(check(&twice, &[], Some("true")).0);
    assert!(!check(&twice, &[], Some("false")).0);
}
