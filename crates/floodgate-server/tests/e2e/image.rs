//! The repository's Dockerfile builds an image whose entry point runs under Envoy Gateway's
//! environment. No base image can be pulled here, so the test makes the runtime stage's base
//! itself: `FROM scratch` with the C libraries `ldd` names for the binary and a `nonroot` user
//! 65532, standing in for distroless/cc. It builds the Dockerfile's final stage with Debian's
//! `buildah` (`--isolation=chroot`, storage of its own, `BINARY=prebuilt` from the binary the
//! tests built), checks the image's user, entry point and labels, then runs `/bin/ratelimit`
//! inside it (`buildah run`, on the host's network) with Envoy Gateway's variables: the
//! configuration pushed over mutual TLS by a control plane of the test's own, Redis over TLS,
//! TLS on gRPC. `/healthcheck` and a decision answer from the container.

use crate::common;
use crate::common::xds as control_plane;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::serve::{start, TempDir};
use control_plane::{envoy_gateway_env, per_user, ControlPlane, GatewayFiles, PlaneTls};
use floodgate_harness::{RedisServer, TestCa};
use serde_json::json;

/// buildah with storage of the test's own under `root`, so that nothing of the machine's
/// images is touched and everything goes with the directory.
fn buildah(root: &Path) -> Command {
    let mut command = Command::new("buildah");
    command
        .arg("--storage-driver=vfs")
        .arg("--root")
        .arg(root.join("storage"))
        .arg("--runroot")
        .arg(root.join("run"));
    command
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .expect("buildah is installed (scripts/test installs Debian's buildah)");
    let said = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{command:?}:\n{said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    said.trim().to_string()
}

/// The libraries `ldd` names for `binary`, as (path inside the image, path here).
fn libraries(binary: &Path) -> Vec<PathBuf> {
    let output = Command::new("ldd").arg(binary).output().expect("ldd runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Kills the container's processes (the `buildah run` process group) when dropped.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_under_envoy_gateways_environment() {
    let work = std::env::temp_dir().join(format!("floodgate-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let _work = TempDir(work.clone());
    let binary = Path::new(env!("CARGO_BIN_EXE_floodgate"));

    // The stand-in for distroless/cc: the C libraries and a nonroot user, nothing else.
    let base = work.join("base");
    for library in libraries(binary) {
        let inside = base.join(library.strip_prefix("/").unwrap());
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::copy(&library, &inside).unwrap();
    }
    std::fs::create_dir_all(base.join("etc")).unwrap();
    std::fs::write(
        base.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(base.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").unwrap();
    let scratch = run(buildah(&work).args(["from", "scratch"]));
    run(buildah(&work).args(["copy", &scratch]).arg(&base).arg("/"));
    run(buildah(&work).args([
        "commit",
        "--quiet",
        &scratch,
        "localhost/floodgate-test-base",
    ]));
    run(buildah(&work).args(["rm", &scratch]));

    // The Dockerfile's final stage, from the binary the tests built.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let context = work.join("context");
    std::fs::create_dir_all(context.join("target/release")).unwrap();
    for file in ["Dockerfile", ".dockerignore"] {
        std::fs::copy(repo.join(file), context.join(file)).unwrap();
    }
    std::fs::copy(binary, context.join("target/release/floodgate")).unwrap();
    run(buildah(&work)
        .args(["bud", "--isolation=chroot", "--quiet"])
        .args(["--build-arg", "BINARY=prebuilt"])
        .args(["--build-arg", "RUNTIME_IMAGE=localhost/floodgate-test-base"])
        .args(["-t", "localhost/floodgate-test"])
        .arg(&context));
    let config = run(buildah(&work).args([
        "inspect",
        "--format",
        "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}} {{index .OCIv1.Config.Labels \"org.opencontainers.image.title\"}}",
        "localhost/floodgate-test",
    ]));
    assert_eq!(config, "65532:65532 [/bin/floodgate] floodgate");

    // Envoy Gateway's certificates where its manifests mount them.
    let ca = TestCa::new();
    let certs = work.join("certs");
    let redis_certs = work.join("redis-certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::create_dir_all(&redis_certs).unwrap();
    let ratelimit = ca.issue(
        "envoy-ratelimit",
        "DNS:envoy-ratelimit,DNS:localhost,IP:127.0.0.1",
    );
    let redis_client = ca.issue("redis-client", "DNS:envoy-ratelimit");
    for (from, to) in [
        (&ratelimit.cert, certs.join("tls.crt")),
        (&ratelimit.key, certs.join("tls.key")),
        (&ca.ca_file(), certs.join("ca.crt")),
        (&redis_client.cert, redis_certs.join("tls.crt")),
        (&redis_client.key, redis_certs.join("tls.key")),
    ] {
        std::fs::copy(from, &to).unwrap();
    }
    let statsd_exporter = work.join("statsd-exporter");
    std::fs::create_dir_all(&statsd_exporter).unwrap();
    std::fs::write(
        statsd_exporter.join("conf.yaml"),
        control_plane::gateway_mapping(),
    )
    .unwrap();
    // Readable by the image's user, as a Secret's files are.
    run(Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&certs)
        .arg(&redis_certs));
    let redis = RedisServer::start_tls_with(
        &ca.issue("redis", "IP:127.0.0.1,DNS:localhost"),
        &ca.ca_file(),
        true,
    );
    let plane = ControlPlane::start(Some(PlaneTls {
        server: ca.issue("envoy-gateway", "DNS:envoy-gateway,IP:127.0.0.1"),
        client_ca: ca.ca_file(),
    }))
    .await;
    plane.push("1", vec![per_user("default/eg/rule-0", 2)]);

    let container = run(buildah(&work).args(["from", "localhost/floodgate-test"]));
    let mut command = buildah(&work);
    command
        .args(["run", "--isolation=chroot"])
        .arg("--volume")
        .arg(format!("{}:/certs:ro", certs.display()))
        .arg("--volume")
        .arg(format!("{}:/redis-certs:ro", redis_certs.display()))
        .arg("--volume")
        .arg(format!(
            "{}:/etc/statsd-exporter:ro",
            statsd_exporter.display()
        ));
    let env = envoy_gateway_env(
        plane.address,
        &format!("127.0.0.1:{}", redis.tls_port()),
        &GatewayFiles {
            cert: "/certs/tls.crt".into(),
            key: "/certs/tls.key".into(),
            ca: "/certs/ca.crt".into(),
            redis_cert: "/redis-certs/tls.crt".into(),
            redis_key: "/redis-certs/tls.key".into(),
            mapping: "/etc/statsd-exporter/conf.yaml".into(),
        },
    );
    for (name, value) in &env {
        command.arg("--env").arg(format!("{name}={value}"));
    }
    command
        .arg(&container)
        .args(["--", "/bin/ratelimit"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let node = tokio::task::spawn_blocking(move || start(command))
        .await
        .unwrap();
    let _group = Group(node.pid());

    plane.wait_for_ack("1").await;
    let client = reqwest::Client::new();
    assert_eq!(
        node.get(&client, "/healthcheck").await,
        (200, "OK".to_string())
    );
    let hit =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]});
    let answers: Vec<u16> = {
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(node.post(&client, "/json", &hit).await.0);
        }
        answers
    };
    assert_eq!(answers, [200, 200, 429]);
    drop(node);
    let _ = Command::new("buildah")
        .arg("--storage-driver=vfs")
        .arg("--root")
        .arg(work.join("storage"))
        .arg("--runroot")
        .arg(work.join("run"))
        .args(["rm", "--all"])
        .status();
}
