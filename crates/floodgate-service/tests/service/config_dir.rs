//! Configuration directories, as envoyproxy/ratelimit's runtime directory: every domain file
//! loads, a native file adds the settings, duplicate domains are refused or merged, and a reload
//! picks up added, changed and removed files, in process. Each test copies the fixtures it
//! needs (`tests/fixtures/runtime/`) into a directory of its own. `check-config` reading a
//! directory through the binary is floodgate-server's (`tests/e2e/config_dir.rs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate_service::config::{Config, ConfigFileError, DirectoryError, Overrides};
use floodgate_service::metrics::Endpoint;
use floodgate_service::rls::{Code, RlsDescriptor, RlsRequest, RlsResponse};
use floodgate_service::service::Server;

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TempDir {
    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).expect("writes");
    }

    fn remove(&self, name: &str) {
        std::fs::remove_file(self.0.join(name)).expect("removes");
    }

    fn copy(&self, fixture: &str) {
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/runtime")
            .join(fixture);
        std::fs::copy(from, self.0.join(fixture)).expect("copies the fixture");
    }
}

/// A fresh directory holding copies of `fixtures`.
fn dir_with(fixtures: &[&str]) -> TempDir {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = TempDir(std::env::temp_dir().join(format!(
        "floodgate-config-dir-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )));
    std::fs::create_dir_all(dir.path()).expect("a temp dir");
    for fixture in fixtures {
        dir.copy(fixture);
    }
    dir
}

fn merging() -> Overrides {
    Overrides {
        merge_domains: true,
        ..Overrides::default()
    }
}

fn server(dir: &TempDir, overrides: Overrides) -> Server {
    let config = Config::load_with(dir.path(), &overrides).expect("loads");
    Server::new(config, Some(dir.path().to_path_buf()), None)
        .expect("builds")
        .with_overrides(overrides)
}

async fn call(server: &Server, domain: &str, key: &str, value: &str) -> RlsResponse {
    let request = RlsRequest {
        domain: domain.into(),
        descriptors: vec![RlsDescriptor {
            entries: vec![(key.into(), value.into())],
            ..RlsDescriptor::default()
        }],
        hits_addend: 1,
    };
    server
        .should_rate_limit(&request, Endpoint::Grpc)
        .await
        .expect("the memory store decides")
}

/// The limit applied to a one-entry descriptor: `(requests_per_unit, unit)`, or `None`.
async fn limit_of(server: &Server, domain: &str, key: &str) -> Option<(u32, String)> {
    let response = call(server, domain, key, "v").await;
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit.name().to_string()))
}

fn load_error(dir: &TempDir, overrides: Overrides) -> String {
    match Config::load_with(dir.path(), &overrides) {
        Ok(_) => panic!("{} must be refused", dir.path().display()),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_directory_loads_every_domain_file_and_ignores_the_rest() {
    let dir = dir_with(&["checkout.yaml", "search.yml"]);
    dir.write("README.txt", "not a config");
    dir.write(".hidden.yaml", "broken: [");
    std::fs::create_dir(dir.path().join("nested.yaml")).unwrap();
    std::fs::write(dir.path().join("nested.yaml/inner.yaml"), "broken: [").unwrap();
    let s = server(&dir, Overrides::default());
    assert_eq!(s.overview().domains, ["checkout", "search"]);
    // No native file: the built-in pipeline and named limits, without the built-in domain.
    assert_eq!(s.overview().limits, [("login".to_string(), "sliding_log")]);
    for expected in [Code::Ok, Code::Ok, Code::OverLimit] {
        let r = call(&s, "checkout", "customer", "c1").await;
        assert_eq!(r.overall_code, expected);
    }
    assert_eq!(
        limit_of(&s, "search", "query_kind").await,
        Some((20, "second".into()))
    );
    assert_eq!(limit_of(&s, "example", "remote_address").await, None);
}

#[tokio::test]
async fn a_native_file_in_the_directory_gives_the_settings_and_its_own_domains() {
    let dir = dir_with(&["floodgate.yaml", "checkout.yaml"]);
    let s = server(&dir, Overrides::default());
    assert_eq!(s.overview().domains, ["admin", "checkout"]);
    assert_eq!(s.overview().limits, [("login".to_string(), "fixed_window")]);
    assert_eq!(
        limit_of(&s, "admin", "user").await,
        Some((1, "minute".into()))
    );
    // Its `rls` settings apply: the rate limit headers, under its names.
    let response = call(&s, "checkout", "cart", "c").await;
    let names: Vec<&str> = response
        .response_headers_to_add
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names, ["X-Limit", "X-Remaining", "X-Reset"]);
}

#[tokio::test]
async fn a_domain_in_two_files_is_refused_naming_both_unless_merging_is_on() {
    let dir = dir_with(&["checkout.yaml", "checkout_extra.yaml"]);
    let err = Config::load(dir.path()).unwrap_err();
    let ConfigFileError::Directory(directory) = &err else {
        panic!("unexpected {err:?}");
    };
    match &**directory {
        DirectoryError::DuplicateDomain {
            domain,
            first,
            second,
        } => {
            assert_eq!(domain, "checkout");
            assert_eq!(first.file, Some(dir.path().join("checkout.yaml")));
            assert_eq!(second.file, Some(dir.path().join("checkout_extra.yaml")));
        }
        other => panic!("unexpected {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("checkout.yaml and in"), "{message}");
    assert!(message.contains("checkout_extra.yaml"), "{message}");
    assert!(message.contains("--merge-domains"), "{message}");

    // Merged by the command line's option: both files' descriptors apply in one domain.
    let s = server(&dir, merging());
    assert_eq!(s.overview().domains, ["checkout"]);
    assert_eq!(
        limit_of(&s, "checkout", "customer").await,
        Some((2, "minute".into()))
    );
    assert_eq!(
        limit_of(&s, "checkout", "coupon").await,
        Some((1, "day".into()))
    );

    // Or by a native file's `rls.merge_domains`.
    dir.write("floodgate.yaml", "rls: {merge_domains: true}\n");
    let config = Config::load(dir.path()).expect("merged");
    assert_eq!(config.domains.len(), 1);
    assert_eq!(config.domains[0].descriptors.len(), 3);
}

#[test]
fn a_descriptor_defined_twice_after_merging_names_both_places() {
    let dir = dir_with(&["checkout.yaml", "checkout_clash.yaml"]);
    let message = load_error(&dir, merging());
    let first = format!(
        "{} at `descriptors[0]`",
        dir.path().join("checkout.yaml").display()
    );
    let second = format!(
        "{} at `descriptors[0]`",
        dir.path().join("checkout_clash.yaml").display()
    );
    assert!(message.contains(&first), "{message}");
    assert!(message.contains(&second), "{message}");
    assert!(
        message.contains("key `customer` without a value"),
        "{message}"
    );

    // A native file's domain clashing with a domain file names its `domains[i]` path.
    let dir = dir_with(&["checkout.yaml"]);
    dir.write(
        "floodgate.yaml",
        "rls: {merge_domains: true}\ndomains:\n  - domain: other\n  - domain: checkout\n    descriptors:\n      - key: cart\n        rate_limit: {unit: hour, requests_per_unit: 1}\n",
    );
    let message = load_error(&dir, Overrides::default());
    assert!(
        message.contains("floodgate.yaml at `domains[1].descriptors[0]`"),
        "{message}"
    );
    assert!(
        message.contains("checkout.yaml at `descriptors[1]`"),
        "{message}"
    );
}

#[test]
fn directories_that_do_not_fit_are_refused_with_the_files_named() {
    let empty = dir_with(&[]);
    empty.write("notes.txt", "nothing");
    let message = load_error(&empty, Overrides::default());
    assert!(message.contains("no configuration file"), "{message}");

    let two = dir_with(&["floodgate.yaml"]);
    two.write("other.yml", "limits: {}\n");
    let message = load_error(&two, Overrides::default());
    assert!(message.contains("floodgate.yaml and"), "{message}");
    assert!(message.contains("other.yml"), "{message}");

    // An error inside one file names the file and the field in it.
    let bad = dir_with(&["checkout.yaml"]);
    bad.write(
        "broken.yaml",
        "domain: broken\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    );
    let message = load_error(&bad, Overrides::default());
    assert!(message.contains("broken.yaml"), "{message}");
    assert!(
        message.contains("descriptors[0].rate_limit.unit"),
        "{message}"
    );
    assert!(message.contains("fortnight"), "{message}");
    let yaml = dir_with(&["checkout.yaml"]);
    yaml.write("syntax.yaml", "domain: [unclosed");
    let message = load_error(&yaml, Overrides::default());
    assert!(message.contains("syntax.yaml"), "{message}");
}

#[tokio::test]
async fn reload_picks_up_added_changed_and_removed_files() {
    let dir = dir_with(&["checkout.yaml"]);
    let s = server(&dir, Overrides::default());
    assert_eq!(s.overview().domains, ["checkout"]);

    // Added.
    dir.copy("search.yml");
    s.reload(floodgate_service::service::Trigger::Admin)
        .expect("reloads");
    assert_eq!(s.overview().domains, ["checkout", "search"]);

    // Changed: the customer limit goes from 2 to 7 per minute.
    let raised = std::fs::read_to_string(dir.path().join("checkout.yaml"))
        .unwrap()
        .replace("requests_per_unit: 2", "requests_per_unit: 7");
    dir.write("checkout.yaml", &raised);
    s.reload(floodgate_service::service::Trigger::Admin)
        .expect("reloads");
    assert_eq!(
        limit_of(&s, "checkout", "customer").await,
        Some((7, "minute".into()))
    );

    // Removed.
    dir.remove("search.yml");
    s.reload(floodgate_service::service::Trigger::Admin)
        .expect("reloads");
    assert_eq!(s.overview().domains, ["checkout"]);
    assert_eq!(limit_of(&s, "search", "query_kind").await, None);

    // A broken file, or a duplicate domain, is refused and the running config stays.
    dir.write("broken.yaml", "domain: broken\ndescriptors: {");
    assert!(matches!(
        s.reload(floodgate_service::service::Trigger::Admin),
        Err(ConfigFileError::Yaml { .. })
    ));
    dir.remove("broken.yaml");
    dir.copy("checkout_extra.yaml");
    match s.reload(floodgate_service::service::Trigger::Admin) {
        Err(ConfigFileError::Directory(e)) => {
            assert!(matches!(*e, DirectoryError::DuplicateDomain { .. }))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(s.overview().domains, ["checkout"]);
    assert_eq!(
        limit_of(&s, "checkout", "customer").await,
        Some((7, "minute".into()))
    );
    assert_eq!(limit_of(&s, "checkout", "coupon").await, None);

    // The server's overrides apply on reload too.
    let merged = server(&dir, merging());
    dir.copy("search.yml");
    merged
        .reload(floodgate_service::service::Trigger::Admin)
        .expect("merges again");
    assert_eq!(merged.overview().domains, ["checkout", "search"]);
    assert_eq!(
        limit_of(&merged, "checkout", "coupon").await,
        Some((1, "day".into()))
    );
}
