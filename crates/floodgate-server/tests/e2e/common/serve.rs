//! Real `floodgate serve` processes for the multi-process tests: a config file of the test's
//! own, the binary started on ports the OS chooses, its listening line read from stderr (and
//! stderr drained after it, so the process never blocks on a full pipe), killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use floodgate_server::runtime::{GrpcAddress, Listening};
use serde_json::Value;

/// A temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory of its own under the system's temporary directory, removed when dropped.
pub fn temp_dir() -> TempDir {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-serve-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    TempDir(dir)
}

/// Writes `text` to a `floodgate.yaml` of its own.
pub fn config_file(text: &str) -> (TempDir, PathBuf) {
    let dir = temp_dir();
    let path = dir.0.join("floodgate.yaml");
    std::fs::write(&path, text).expect("config written");
    (dir, path)
}

/// A running `floodgate serve`, killed when dropped.
pub struct Service {
    child: Child,
    /// `http://ADDR` of its HTTP API.
    pub http: String,
    /// `http://ADDR` of its gRPC API.
    pub grpc: String,
    /// `http://ADDR` of its debug listener, when it has one.
    pub debug: Option<String>,
    /// `http://ADDR` of its Prometheus listener (`stats.prometheus`), when it has one.
    pub metrics: Option<String>,
    /// Its gRPC API's unix socket, when it listens on one (then `grpc` is empty).
    pub grpc_socket: Option<PathBuf>,
    /// What it wrote to stderr before its listening line (its start-up log).
    pub started: String,
    /// What it wrote to stderr after its listening line, line by line, as it comes (the
    /// last [`LOG_LINES`] lines).
    log: Arc<Mutex<Vec<String>>>,
}

/// The bound on each store call of a test's service unless its file says otherwise.
pub const GENEROUS_STORE_TIMEOUT: &str = "2s";

/// How many lines of a service's log after its listening line a test can read.
pub const LOG_LINES: usize = 10_000;

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `floodgate serve --config path --store store` with `env` set, on ports the OS
/// chooses, and waits (at most 30 s) for its listening line.
pub fn serve(path: &PathBuf, store: &str, env: &[(&str, &str)]) -> Service {
    start(serve_command(path, store, env))
}

/// Starts `command` (a `floodgate serve`, however invoked, with stderr piped) and waits (at
/// most 30 s) for its listening line.
pub fn start(mut command: Command) -> Service {
    let mut child = command.spawn().expect("the floodgate binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let log = Arc::new(Mutex::new(Vec::new()));
    match listening(stderr, log.clone()).recv_timeout(Duration::from_secs(30)) {
        Ok(Ok((l, started))) => {
            let (grpc, grpc_socket) = match &l.grpc {
                GrpcAddress::Tcp(addr) => (format!("http://{addr}"), None),
                GrpcAddress::Unix(path) => (String::new(), Some(path.clone())),
            };
            Service {
                child,
                http: format!("http://{}", l.http),
                grpc,
                debug: l.debug.map(|d| format!("http://{d}")),
                metrics: l.metrics.map(|m| format!("http://{m}")),
                grpc_socket,
                started,
                log,
            }
        }
        Ok(Err(stderr)) => panic!("floodgate serve exited before listening:\n{stderr}"),
        Err(e) => panic!("no listening line from floodgate serve: {e}"),
    }
}

/// A command running the floodgate binary with none of the variables `serve` reads set but
/// `env`'s, its stderr piped (for [`start`]).
pub fn bare_command(program: &std::path::Path, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Runs `floodgate serve` as [`serve`] does, expecting it to refuse to start: its exit code
/// and stderr. Panics if it listens instead, or has not exited within 30 s.
pub fn serve_refused(path: &PathBuf, store: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = serve_command(path, store, env)
        .spawn()
        .expect("the floodgate binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    match listening(stderr, Arc::default()).recv_timeout(Duration::from_secs(30)) {
        Ok(Err(stderr)) => {
            let status = child.wait().expect("the child's status");
            (status.code(), stderr)
        }
        Ok(Ok((l, _))) => {
            let _ = child.kill();
            panic!(
                "floodgate serve started (listening on {}), it should have refused",
                l.http
            )
        }
        Err(e) => {
            let _ = child.kill();
            panic!("floodgate serve neither listened nor exited: {e}")
        }
    }
}

fn serve_command(path: &PathBuf, store: &str, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_floodgate"));
    command
        .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--debug", "127.0.0.1:0"])
        .arg("--config")
        .arg(path)
        .args(["--store", store, "--threads", "1"])
        .env_remove("FLOODGATE_STORE")
        .env_remove("FLOODGATE_LEASE_SECRET")
        // These tests are not about a slow store: a busy machine must not make a call time out
        // (a test about timeouts writes `store.timeout` in its file, which comes first, and
        // makes the slowness itself).
        .env("FLOODGATE_STORE_TIMEOUT", GENEROUS_STORE_TIMEOUT)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Reads `stderr` until the listening line (sent as `Ok`, with the lines before it) or its end
/// (the lines before it, sent as `Err`), then goes on reading it in the background, keeping the
/// last [`LOG_LINES`] lines in `log`.
fn listening(
    stderr: std::process::ChildStderr,
    log: Arc<Mutex<Vec<String>>>,
) -> mpsc::Receiver<Result<(Listening, String), String>> {
    let (found, listening) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines();
        let mut before = Vec::new();
        let result = loop {
            match lines.next() {
                Some(Ok(line)) => match Listening::parse(&line) {
                    Some(l) => break Ok((l, before.join("\n"))),
                    None => before.push(line),
                },
                Some(Err(_)) | None => break Err(before.join("\n")),
            }
        };
        let _ = found.send(result);
        for line in lines.map_while(Result::ok) {
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if log.len() == LOG_LINES {
                log.remove(0);
            }
            log.push(line);
        }
    });
    listening
}

impl Service {
    /// `http://ADDR` of its debug listener (panics without one).
    pub fn debug(&self) -> &str {
        self.debug
            .as_deref()
            .expect("the service has a debug listener")
    }

    /// What it has written to stderr since its listening line, one line each.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits (at most 20 s) until a line of its log after the listening line contains
    /// `wanted`; that line.
    pub async fn logged(&self, wanted: &str) -> String {
        let mut found = String::new();
        eventually(&format!("a log line with `{wanted}`"), || {
            let line = self.log().into_iter().find(|l| l.contains(wanted));
            let seen = line.is_some();
            found = line.unwrap_or_default();
            async move { seen }
        })
        .await;
        found
    }

    /// Sends the process `signal` (`HUP`, `TERM`, …).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal}");
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's exit status, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("the child's status")
    }

    /// `POST path` with a JSON body: the status and the JSON answer.
    pub async fn post(&self, client: &reqwest::Client, path: &str, body: &Value) -> (u16, Value) {
        let response = client
            .post(format!("{}{path}", self.http))
            .json(body)
            .send()
            .await
            .expect("the service answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON answer"))
    }

    /// The debug listener's `/rlconfig` (panics without a debug listener).
    pub async fn rlconfig(&self, client: &reqwest::Client) -> String {
        client
            .get(format!("{}/rlconfig", self.debug()))
            .send()
            .await
            .expect("the debug listener answers")
            .text()
            .await
            .expect("a body")
    }

    /// Waits (at most 20 s) until `/rlconfig` lists `wanted`: a reload has taken effect.
    pub async fn until_listed(&self, client: &reqwest::Client, wanted: &str) {
        eventually(&format!("`{wanted}` listed on /rlconfig"), || async {
            self.rlconfig(client).await.contains(wanted)
        })
        .await;
    }

    /// `GET path`: the status and the body.
    pub async fn get(&self, client: &reqwest::Client, path: &str) -> (u16, String) {
        let response = client
            .get(format!("{}{path}", self.http))
            .send()
            .await
            .expect("the service answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    }
}

/// Polls `check` every 100 ms for at most 20 s; panics naming `what` after.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 20 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
