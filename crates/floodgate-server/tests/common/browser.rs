//! A real headless Chromium for the browser tests: Debian's `chromium`, driven through
//! `chromedriver` (WebDriver) on a loopback port the OS chose, with a fresh profile directory;
//! the driver and every browser process it started are stopped, and the profile removed, when
//! dropped (also when a test panics before closing its session). Nothing downloads a browser: without
//! the `chromium` and `chromium-driver` packages (which `.ci/run` installs), the tests fail
//! saying so.
#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
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

/// A browser session, and the driver process behind it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width` × `height` pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: install Debian's `{package}` package (.ci/run does)"
            );
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // A process group of its own, which the browsers it starts join: on drop the whole
        // group is stopped, so a test that panics with its session open leaves no Chromium
        // behind.
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        // The driver says when it listens; its later output is drained so it never blocks.
        let stdout = driver.stdout.take().expect("stdout is piped");
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
        let profile =
            std::env::temp_dir().join(format!("floodgate-chromium-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&profile).expect("a profile directory");
        let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
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
        Browser {
            client,
            driver,
            profile,
        }
    }

    /// Runs `script` in the page until it calls its callback (the last argument) with a value,
    /// which is returned; the browser waits for the page, not the test (WebDriver's script
    /// timeout, 30 s by default, bounds it).
    pub async fn until(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute_async(script, args)
            .await
            .unwrap_or_else(|e| panic!("waiting in the page failed: {e}\n{script}"))
    }

    /// The process group of the driver and the browser processes it started.
    pub fn process_group(&self) -> u32 {
        self.driver.id()
    }

    /// Ends the session, then stops the driver (see `Drop`).
    pub async fn close(self) {
        let client = self.client.clone();
        let _ = client.close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The group's id is the driver's pid (`process_group(0)`).
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
