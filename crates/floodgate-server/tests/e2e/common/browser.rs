//! A real headless Chromium for the browser tests: Debian's `chromium`, driven through
//! `chromedriver` (WebDriver) on a loopback port the OS chose, with a fresh profile directory;
//! the driver and every browser process using that profile are stopped, and the profile
//! removed, when dropped (also when a test panics before closing its session, or while
//! starting). They stay in the test's process group, so Ctrl-C stops them with the tests.
//! Nothing downloads a browser: without the `chromium` and `chromium-driver` packages (which
//! `scripts/test`, the README's test command, installs), the tests fail saying so.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

/// Where Debian installs the browser and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The flags a headless Chromium needs on a machine without a network or a display.
const FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
];

/// A browser session, and the processes behind it.
pub struct Browser {
    pub client: Client,
    processes: Processes,
}

/// The driver and its profile directory; dropping it stops the driver and every browser
/// process using the profile (the driver's children outlive it if only it is killed; the
/// crash handlers, which run detached, exit by themselves once the browser is gone).
struct Processes {
    driver: Child,
    profile: PathBuf,
}

impl Processes {
    /// The argument every process of this browser carries (the zygotes, renderers and
    /// utilities inherit it from the browser process).
    fn marker(&self) -> String {
        format!("--user-data-dir={}", self.profile.display())
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", "--", &self.marker()])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width` × `height` pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: install Debian's `{package}` package (scripts/test does)"
            );
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let stdout = driver.stdout.take().expect("stdout is piped");
        let profile =
            std::env::temp_dir().join(format!("floodgate-chromium-{}-{port}", std::process::id()));
        // From here on, a panic stops what was started.
        let processes = Processes { driver, profile };
        // The driver says when it listens; its later output is drained so it never blocks.
        let (ready, started) = mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("started successfully") {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
            }
        });
        started
            .recv_timeout(Duration::from_secs(30))
            .expect("chromedriver started within 30 s");
        std::fs::create_dir_all(&processes.profile).expect("a profile directory");
        let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(processes.marker());
        args.push(format!("--window-size={width},{height}"));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        // A page waited for (`until`) may take longer than WebDriver's default 30 s when the
        // machine is busy (the dashboard samples once a second, rendered by a contended
        // Chromium): the bound is for a page that never gets there, not a slow one.
        client
            .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                Some(Duration::from_secs(120)),
                None,
                None,
            ))
            .await
            .expect("the session's timeouts");
        Browser { client, processes }
    }

    /// Runs `script` in the page until it calls its callback (the last argument) with a value,
    /// which is returned; the browser waits for the page, not the test (WebDriver's script
    /// timeout, set to 120 s, bounds it).
    pub async fn until(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute_async(script, args)
            .await
            .unwrap_or_else(|e| panic!("waiting in the page failed: {e}\n{script}"))
    }

    /// The command-line argument that marks this browser's processes (see [`processes_marked`]).
    pub fn marker(&self) -> String {
        self.processes.marker()
    }

    /// Ends the session; dropping the browser then stops its processes.
    pub async fn close(self) {
        let client = self.client.clone();
        let _ = client.close().await;
    }
}

/// The live processes whose command line holds `marker` (pid and command line each).
pub fn processes_marked(marker: &str) -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-a", "-f", "--", marker])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
