//! The `floodgate` binary run as a command: arguments, text on stdin, its output back.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `floodgate ARGS` with `stdin` written to its standard input and waits for it. The
/// command may stop reading early (a bad spec or line): a broken pipe is expected then.
pub fn floodgate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the floodgate binary starts");
    let _ = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes());
    child.wait_with_output().expect("the binary finishes")
}

/// The value of the first Prometheus line of `metrics` that starts with `name` (labels
/// included), if any.
pub fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
