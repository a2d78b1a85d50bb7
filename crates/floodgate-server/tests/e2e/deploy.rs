//! What `deploy/` ships is what the service does: the Kubernetes manifests' ports, probe
//! paths, security context and variable names; the ConfigMap's configuration loads; the
//! Prometheus alerts pass `promtool check rules` and their own `promtool test rules`; and
//! every series the alerts and the Grafana dashboard read is one a running `floodgate serve`
//! exports (scraped from real processes, with a Redis and an xDS control plane of the test's
//! own).

use crate::common;
use crate::common::xds as control_plane;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::serve::{config_file, serve};
use common::upstream::{loopback_env, serve_with};
use control_plane::{per_user, ControlPlane};
use floodgate_harness::RedisServer;
use floodgate_server::environment::upstream::{Support, VARIABLES};
use floodgate_server::environment::FLOODGATE_VARIABLES;
use serde_json::json;
use serde_norway::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn manifest(name: &str) -> Value {
    let path = repo().join("deploy/kubernetes").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn get<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(value, |v, key| match key.parse::<usize>() {
            Ok(i) => &v[i],
            Err(_) => &v[key],
        })
}

fn text<'a>(value: &'a Value, path: &str) -> &'a str {
    get(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string: {:?}", get(value, path)))
}

#[test]
fn the_manifests_use_the_real_ports_probes_and_variables() {
    let deployment = manifest("deployment.yaml");
    assert_eq!(text(&deployment, "kind"), "Deployment");
    let pod = get(&deployment, "spec.template.spec");
    let container = get(pod, "containers.0");

    // Ports: what `serve` listens on with FLOODGATE_HTTP and FLOODGATE_GRPC.
    let ports: Vec<(String, u64)> = get(container, "ports")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                text(p, "name").to_string(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [("http".into(), 8080), ("grpc".into(), 8081)]);
    let env: Vec<(&str, Option<&str>)> = get(container, "env")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| (text(e, "name"), e["value"].as_str()))
        .collect();
    assert!(env.contains(&("FLOODGATE_HTTP", Some("0.0.0.0:8080"))));
    assert!(env.contains(&("FLOODGATE_GRPC", Some("0.0.0.0:8081"))));
    // Every variable is one the service reads.
    for (name, _) in &env {
        let upstream = VARIABLES
            .iter()
            .any(|v| v.name == *name && v.support != Support::Unsupported);
        assert!(
            FLOODGATE_VARIABLES.contains(name) || upstream,
            "{name} is not a variable the service reads"
        );
    }

    // Probes on the real endpoints, on the HTTP port.
    assert_eq!(text(container, "readinessProbe.httpGet.path"), "/readyz");
    assert_eq!(text(container, "livenessProbe.httpGet.path"), "/livez");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(text(container, &format!("{probe}.httpGet.port")), "http");
    }

    // Non-root, read-only, nothing more than it needs.
    assert_eq!(
        get(pod, "securityContext.runAsNonRoot").as_bool(),
        Some(true)
    );
    assert_ne!(get(pod, "securityContext.runAsUser").as_u64(), Some(0));
    let security = get(container, "securityContext");
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(text(security, "capabilities.drop.0"), "ALL");
    for bound in [
        "resources.requests.cpu",
        "resources.requests.memory",
        "resources.limits.memory",
    ] {
        assert!(get(container, bound).as_str().is_some(), "{bound} is set");
    }

    // The ConfigMap is mounted where FLOODGATE_CONFIG points, and its file loads.
    assert_eq!(
        text(container, "volumeMounts.0.mountPath"),
        "/etc/floodgate"
    );
    assert!(env.contains(&("FLOODGATE_CONFIG", Some("/etc/floodgate/floodgate.yaml"))));
    let config_map = manifest("configmap.yaml");
    assert_eq!(
        text(pod, "volumes.0.configMap.name"),
        text(&config_map, "metadata.name")
    );
    let yaml = config_map["data"]["floodgate.yaml"]
        .as_str()
        .expect("the ConfigMap holds floodgate.yaml");
    let (_dir, path) = config_file(yaml);
    // As each manifest runs it: on the store its FLOODGATE_STORE names, which must take every
    // store setting the shared file writes.
    let mut said = String::new();
    for (manifest_name, container) in [
        ("deployment.yaml", container.clone()),
        (
            "statefulset-file-store.yaml",
            get(
                &manifest("statefulset-file-store.yaml"),
                "spec.template.spec.containers.0",
            )
            .clone(),
        ),
    ] {
        let store = get(&container, "env")
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| text(e, "name") == "FLOODGATE_STORE")
            .map(|e| text(e, "value").to_string())
            .expect("FLOODGATE_STORE is set");
        let output = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check-config")
            .arg(&path)
            .env("FLOODGATE_STORE", &store)
            .output()
            .unwrap();
        said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{manifest_name} ({store}): {said}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(
        said.contains("pipeline: none"),
        "only Envoy's domains: {said}"
    );

    // The Service, the budget and the ServiceMonitor select the pods and name real ports.
    let labels = get(&deployment, "spec.template.metadata.labels");
    let service = manifest("service.yaml");
    assert_eq!(&service["spec"]["selector"], labels);
    let service_ports: Vec<&str> = get(&service, "spec.ports")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| text(p, "targetPort"))
        .collect();
    assert_eq!(service_ports, ["http", "grpc"]);
    let budget = manifest("poddisruptionbudget.yaml");
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], labels);
    let monitor = manifest("servicemonitor.yaml");
    assert_eq!(text(&monitor, "spec.endpoints.0.port"), "http");
    assert_eq!(text(&monitor, "spec.endpoints.0.path"), "/metrics");
    assert_eq!(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    );
}

#[test]
fn every_floodgate_variable_the_service_reads_is_listed() {
    let mut found = BTreeSet::new();
    let mut dirs = vec![repo().join("crates/floodgate-service/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let source = std::fs::read_to_string(&path).unwrap();
                for piece in source.split("\"FLOODGATE_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                        .collect();
                    if piece[name.len()..].starts_with('"') {
                        found.insert(format!("FLOODGATE_{name}"));
                    }
                }
            }
        }
    }
    let listed: BTreeSet<String> = FLOODGATE_VARIABLES.iter().map(|s| s.to_string()).collect();
    assert_eq!(found, listed);
}

/// `promtool`, which `scripts/test` installs (Debian's `prometheus` package).
fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(repo().join("deploy/prometheus"))
        .output()
        .expect("promtool is installed (scripts/test installs Debian's prometheus package)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{said}");
    said
}

#[test]
fn the_alerts_are_valid_and_fire_as_their_tests_say() {
    let checked = promtool(&["check", "rules", "alerts.yaml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts_test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The metric names `text` (PromQL) reads: `floodgate_…` words, histogram suffixes removed.
fn series_read(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for piece in text.split("floodgate_").skip(1) {
        let rest: String = piece
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let name = format!("floodgate_{rest}");
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).map(str::to_string))
            .unwrap_or(name);
        names.insert(name);
    }
    names
}

/// The families a scrape declares (`# TYPE name kind`).
fn families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_alerts_and_the_dashboard_read_is_exported() {
    let client = reqwest::Client::new();
    let redis = RedisServer::start();

    // The built-in pipeline on Redis, with traffic.
    let (_dir, path) = config_file("stats: {near_limit_ratio: 0.8}\n");
    let url = redis.url();
    let node = tokio::task::spawn_blocking(move || serve(&path, &url, &[]))
        .await
        .unwrap();
    for _ in 0..5 {
        node.post(
            &client,
            "/v1/evaluate",
            &json!({"user": "alice", "plan": "free"}),
        )
        .await;
    }
    let mut exported = families(&node.get(&client, "/metrics").await.1);

    // Envoy's domains pushed over xDS, with traffic.
    let plane = ControlPlane::start(None).await;
    plane.push("v1", vec![per_user("limits", 1)]);
    let mut env = loopback_env(Path::new("/data"), &format!("127.0.0.1:{}", redis.port()));
    env.extend([
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
        ("CONFIG_GRPC_XDS_SERVER_URL", plane.address.to_string()),
    ]);
    let pushed = tokio::task::spawn_blocking(move || serve_with(&env))
        .await
        .unwrap();
    let hit =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}]});
    for _ in 0..2 {
        pushed.post(&client, "/json", &hit).await;
    }
    exported.extend(families(&pushed.get(&client, "/metrics").await.1));

    let alerts = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yaml")).unwrap();
    let dashboard = std::fs::read_to_string(repo().join("deploy/grafana/floodgate.json")).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let queries: Vec<String> = parsed["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(queries.len() >= 10, "the dashboard has its queries");
    for (what, read) in [
        ("alerts.yaml", series_read(&alerts)),
        ("the dashboard", series_read(&queries.join("\n"))),
    ] {
        assert!(!read.is_empty());
        for name in &read {
            assert!(
                exported.contains(name),
                "{what} reads {name}, which floodgate serve does not export; it exports {exported:?}"
            );
        }
    }
}

#[test]
fn the_durable_single_node_manifest_mounts_the_file_stores_directory() {
    let set = manifest("statefulset-file-store.yaml");
    assert_eq!(text(&set, "kind"), "StatefulSet");
    assert_eq!(get(&set, "spec.replicas").as_u64(), Some(1));
    let container = get(&set, "spec.template.spec.containers.0");
    let store = get(container, "env")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| text(e, "name") == "FLOODGATE_STORE")
        .map(|e| text(e, "value"))
        .expect("FLOODGATE_STORE is set");
    let dir = store.strip_prefix("file://").expect("a file store");
    assert!(matches!(
        floodgate::store::StoreUrl::parse(store),
        Ok(floodgate::store::StoreUrl::File { .. })
    ));
    // The directory is a mounted volume claimed for the pod, writable.
    let mount = get(container, "volumeMounts")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| text(m, "mountPath") == dir)
        .expect("the store's directory is mounted");
    assert_ne!(mount["readOnly"].as_bool(), Some(true));
    let claim = text(mount, "name");
    assert_eq!(
        text(&set, "spec.volumeClaimTemplates.0.metadata.name"),
        claim
    );
}
