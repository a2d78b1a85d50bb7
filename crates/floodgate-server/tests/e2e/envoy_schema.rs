//! Every Envoy configuration in `docs/` and `deploy/` reads against Envoy's own API: each
//! fenced ```yaml block of the Markdown and each YAML document is classified by its shape,
//! and an Envoy one is read strictly into its message of Envoy's protobuf schema (unknown or
//! misplaced fields fail, `typed_config`s are read as the type their `@type` names). A block
//! that is not Envoy's (Floodgate's configuration, a Kubernetes resource with no Envoy type in
//! it, an envoyproxy/ratelimit domain file, Prometheus rules) is skipped by name, and must
//! carry no Envoy mark; a block of no known shape fails.
//!
//! The schema is Envoy's data-plane-api, as the envoy-types package ships its .proto files,
//! compiled here by protox (about 4 s).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, Kind, MessageDescriptor};
use serde_json::{json, Value};

const BOOTSTRAP: &str = "envoy.config.bootstrap.v3.Bootstrap";
const STATIC: &str = "envoy.config.bootstrap.v3.Bootstrap.StaticResources";
const HCM: &str = "envoy.extensions.filters.network.http_connection_manager.v3.\
                   HttpConnectionManager";
const HTTP_FILTER: &str = "envoy.extensions.filters.network.http_connection_manager.v3.\
                           HttpFilter";
const RLQS_FILTER: &str = "envoy.extensions.filters.http.rate_limit_quota.v3.\
                           RateLimitQuotaFilterConfig";
const RLQS_BUCKET: &str = "envoy.extensions.filters.http.rate_limit_quota.v3.\
                           RateLimitQuotaBucketSettings";
const RATE_LIMIT: &str = "envoy.extensions.filters.http.ratelimit.v3.RateLimit";

/// An Envoy block's shape: a key it has, and the message it then is (the first that fits).
const SHAPES: [(&str, &str); 10] = [
    ("static_resources", BOOTSTRAP),
    ("dynamic_resources", BOOTSTRAP),
    ("admin", BOOTSTRAP),
    ("layered_runtime", BOOTSTRAP),
    ("@type", "google.protobuf.Any"),
    ("rlqs_server", RLQS_FILTER),
    ("bucket_matchers", RLQS_FILTER),
    ("bucket_id_builder", RLQS_BUCKET),
    ("no_assignment_behavior", RLQS_BUCKET),
    ("rate_limit_service", RATE_LIMIT),
];

/// Keys of an Envoy fragment that is one field of a larger message: that message.
const FRAGMENTS: [(&str, &str); 4] = [
    ("http_filters", HCM),
    ("route_config", HCM),
    ("clusters", STATIC),
    ("listeners", STATIC),
];

/// A block that is not Envoy's: a key it has, and what it is.
const NOT_ENVOY: [(&str, &str); 4] = [
    ("descriptors", "an envoyproxy/ratelimit domain file"),
    ("containers", "a fragment of a Kubernetes pod spec"),
    ("groups", "Prometheus alerting rules"),
    ("rule_files", "Prometheus rule tests"),
];

/// Floodgate's own configuration file: its top-level keys.
const FLOODGATE_KEYS: &str = "http grpc debug store connections stats tls plans default_plan \
    endpoint_costs users limiters pipeline attributes limits reservation_ttl \
    response_dynamic_metadata domains rls rlqs xds";

/// Keys and string prefixes only Envoy's configuration has.
const ENVOY_KEYS: &str = "@type typed_config http_filters static_resources envoy_grpc \
    grpc_service rlqs_server bucket_matchers filter_chains load_assignment";
const ENVOY_PREFIXES: [&str; 3] = [
    "type.googleapis.com/envoy.",
    "envoy.filters.",
    "envoy.config.",
];

/// What a block is.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Envoy's, read as this message.
    Envoy(String, Value),
    /// Not Envoy's, and why.
    Skip(&'static str),
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced ```yaml blocks of a Markdown text, each with the number of its first line.
fn markdown_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) if matches!(info.trim(), "yaml" | "yml") => {
                open = Some((n + 2, indent, String::new()));
            }
            (Some(_), Some("")) => {
                let (start, _, body) = open.take().expect("a block is open");
                blocks.push((start, body));
            }
            (Some((_, indent, body)), _) => {
                body.push_str(line.get(*indent..).unwrap_or(line.trim_start()));
                body.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// The documents of a YAML file, each with the number of its first line.
fn yaml_documents(text: &str) -> Vec<(usize, String)> {
    let mut documents = vec![(1, String::new())];
    for (n, line) in text.lines().enumerate() {
        if line.trim_end() == "---" {
            documents.push((n + 2, String::new()));
        } else {
            let body = &mut documents.last_mut().expect("one document").1;
            body.push_str(line);
            body.push('\n');
        }
    }
    documents.retain(|(_, body)| {
        body.lines()
            .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
    });
    documents
}

/// The files under a folder, at any depth, in order.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let (mut files, mut folders) = (Vec::new(), vec![dir.to_path_buf()]);
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(folder).expect("a readable folder") {
            let path = entry.expect("an entry").path();
            match path.is_dir() {
                true => folders.push(path),
                false => files.push(path),
            }
        }
    }
    files.sort();
    files
}

/// Every YAML block under `docs/` and `deploy/`, named `path:line`.
fn all_blocks() -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    for path in [
        files_under(&root().join("docs")),
        files_under(&root().join("deploy")),
    ]
    .concat()
    {
        let split: fn(&str) -> Vec<(usize, String)> = match path.extension() {
            Some(e) if e == "md" => markdown_blocks,
            Some(e) if e == "yaml" || e == "yml" => yaml_documents,
            _ => continue,
        };
        let text = std::fs::read_to_string(&path).expect("a readable file");
        let name = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        blocks.extend(
            split(&text)
                .into_iter()
                .map(|(n, body)| (format!("{name}:{n}"), body)),
        );
    }
    blocks
}

/// Calls `visit` with every key of a value and what it holds, at any depth.
fn each_field(value: &Value, visit: &mut impl FnMut(&str, &Value)) {
    match value {
        Value::Object(map) => map.iter().for_each(|(key, v)| {
            visit(key, v);
            each_field(v, visit);
        }),
        Value::Array(items) => items.iter().for_each(|v| each_field(v, visit)),
        _ => {}
    }
}

/// The Envoy marks of a value: its Envoy-only keys and strings.
fn envoy_marks(value: &Value) -> Vec<String> {
    let mut marks = Vec::new();
    each_field(&json!({"": value}), &mut |key, v| {
        if ENVOY_KEYS.split_whitespace().any(|k| k == key) {
            marks.push(key.to_string());
        }
        let strings = v.as_array().map_or(vec![v], |items| items.iter().collect());
        for s in strings.into_iter().filter_map(Value::as_str) {
            if ENVOY_PREFIXES.iter().any(|p| s.starts_with(p)) {
                marks.push(s.to_string());
            }
        }
    });
    marks
}

/// What a block is, from its shape; an error for a block of no known shape.
fn classify(value: &Value) -> Result<Vec<Verdict>, String> {
    let one = |verdict| Ok(vec![verdict]);
    let has = |key: &str| value.get(key).is_some();
    let keys: Vec<&str> = value
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| &k[..])
        .collect();
    let fragment = |key: &str| FRAGMENTS.iter().find(|(f, _)| *f == key).map(|(_, m)| *m);
    if has("apiVersion") && has("kind") {
        return kubernetes(value);
    }
    if let Some((_, message)) = SHAPES.iter().find(|(key, _)| has(key)) {
        return one(Verdict::Envoy(message.to_string(), value.clone()));
    }
    if !keys.is_empty() && keys.iter().all(|k| fragment(k).is_some()) {
        let read = |k: &&str| Verdict::Envoy(fragment(k).unwrap().into(), json!({*k: value[*k]}));
        return Ok(keys.iter().map(read).collect());
    }
    if has("name") && has("typed_config") {
        let http = value["typed_config"]["@type"].as_str().unwrap_or_default();
        let message = match http.contains(".filters.http.") {
            true => HTTP_FILTER,
            false => "envoy.config.core.v3.TypedExtensionConfig",
        };
        return one(Verdict::Envoy(message.into(), value.clone()));
    }
    if let Some((_, why)) = NOT_ENVOY.iter().find(|(key, _)| has(key)) {
        return one(Verdict::Skip(why));
    }
    if !keys.is_empty()
        && keys
            .iter()
            .all(|k| FLOODGATE_KEYS.split_whitespace().any(|f| f == *k))
    {
        return one(Verdict::Skip("Floodgate's configuration"));
    }
    let stages = value
        .as_array()
        .is_some_and(|a| a.iter().all(|s| s.get("kind").is_some()));
    match stages {
        true => one(Verdict::Skip("a fragment of Floodgate's pipeline")),
        false => Err(format!("a block of no known shape (keys {keys:?})")),
    }
}

/// A Kubernetes resource: the Envoy types Envoy Gateway's resources embed, and the YAML
/// files a ConfigMap holds, classified in turn.
fn kubernetes(value: &Value) -> Result<Vec<Verdict>, String> {
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let yaml = |name: &str, text: &Value| -> Result<Value, String> {
        serde_norway::from_str(text.as_str().unwrap_or_default())
            .map_err(|e| format!("{name}: {e}"))
    };
    let spec = &value["spec"];
    let mut verdicts = Vec::new();
    match value["kind"].as_str().unwrap_or_default() {
        "EnvoyProxy" if spec.get("bootstrap").is_some() => {
            let bootstrap = &spec["bootstrap"];
            if bootstrap.get("value").is_some() {
                let value = yaml("bootstrap", &bootstrap["value"])?;
                verdicts.push(Verdict::Envoy(BOOTSTRAP.into(), value));
            }
            for patch in list(&bootstrap["jsonPatches"]) {
                verdicts.push(json_patch(BOOTSTRAP, &patch)?);
            }
        }
        "EnvoyPatchPolicy" => {
            for patch in list(&spec["jsonPatches"]) {
                let url = patch["type"].as_str().unwrap_or_default();
                let message = url.strip_prefix("type.googleapis.com/").unwrap_or(url);
                verdicts.push(json_patch(message, &patch["operation"])?);
            }
        }
        "ConfigMap" => {
            verdicts.push(Verdict::Skip("a Kubernetes ConfigMap"));
            for (name, text) in value["data"].as_object().into_iter().flatten() {
                if name.ends_with(".yaml") || name.ends_with(".yml") {
                    verdicts
                        .extend(classify(&yaml(name, text)?).map_err(|e| format!("{name}: {e}"))?);
                }
            }
        }
        _ => verdicts.push(Verdict::Skip(
            "a Kubernetes resource with no Envoy type in it",
        )),
    }
    Ok(verdicts)
}

/// A JSON patch operation on an Envoy resource, `message`: its value, read as the message
/// whose field its path ends at (a list's element as a list of one).
fn json_patch(message: &str, operation: &Value) -> Result<Verdict, String> {
    let Some(value) = operation.get("value") else {
        return Ok(Verdict::Skip("a JSON patch operation with no value"));
    };
    let path = operation["path"]
        .as_str()
        .ok_or("a JSON patch without a path")?;
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (mut host, mut i) = (message_named(message)?, 0);
    while i < segments.len() {
        let name = segments[i];
        let field = host
            .get_field_by_name(name)
            .or_else(|| host.get_field_by_json_name(name));
        let field = field.ok_or(format!("{path}: {} has no field {name}", host.full_name()))?;
        let repeated = field.is_list() || field.is_map();
        let rest = segments.len() - i - 1;
        if rest == 0 || (repeated && rest == 1) {
            let value = if repeated && rest == 1 {
                json!([value])
            } else {
                value.clone()
            };
            return Ok(Verdict::Envoy(
                host.full_name().into(),
                json!({field.name(): value}),
            ));
        }
        host = match field.kind() {
            Kind::Message(m) if m.full_name() != "google.protobuf.Any" => m,
            _ => return Err(format!("{path}: cannot follow the path past {name}")),
        };
        i += if repeated { 2 } else { 1 };
    }
    Ok(Verdict::Envoy(host.full_name().into(), value.clone()))
}

/// The filters of `http_filters` and `filters` lists with no `typed_config`: Envoy finds an
/// extension by its type URL, and refuses a filter without one.
fn filters_without_typed_config(value: &Value) -> Vec<String> {
    let mut names = Vec::new();
    each_field(value, &mut |key, v| {
        let untyped =
            |f: &&Value| f.get("typed_config").is_none() && f.get("config_discovery").is_none();
        if let ("http_filters" | "filters", Some(filters)) = (key, v.as_array()) {
            let own = filters.iter().filter(untyped);
            names.extend(own.map(|f| f["name"].as_str().unwrap_or("a filter").to_string()));
        }
    });
    names
}

/// The directory of Envoy's .proto files in the envoy-types package, found through cargo
/// (for this machine's platform only, whose packages are all here).
fn proto_dir() -> PathBuf {
    let run = |program: String, args: &[&str]| {
        let out = Command::new(&program)
            .args(args)
            .current_dir(root())
            .output();
        let out = out.unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = String::from_utf8(run(rustc, &["-vV"])).expect("rustc's version");
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc's host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").into());
    let args = [
        "metadata",
        "--format-version=1",
        "--offline",
        "--filter-platform",
        host,
    ];
    let metadata: Value = serde_json::from_slice(&run(cargo, &args)).expect("cargo's metadata");
    let packages = metadata["packages"].as_array().expect("the packages");
    let envoy_types = packages.iter().find(|p| p["name"] == "envoy-types");
    let manifest = envoy_types
        .and_then(|p| p["manifest_path"].as_str())
        .expect("envoy-types");
    Path::new(manifest).with_file_name("proto")
}

/// Envoy's API: every .proto file of the data-plane-api, compiled once.
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let dir = proto_dir();
        let includes = "data-plane-api xds protoc-gen-validate googleapis cel-spec/proto \
                        opentelemetry-proto client_model";
        let includes: Vec<PathBuf> = includes.split_whitespace().map(|i| dir.join(i)).collect();
        let compiler = || {
            let mut compiler = protox::Compiler::new(&includes).expect("the include folders");
            compiler.include_imports(true);
            compiler
        };
        // protox resolves a relative name against every package it has seen, where protoc
        // looks only at the file's imports: a file another file's package shadows is
        // compiled alone, with its imports only, and its resolved descriptors joined. The
        // few that fail even so are left out (and named): a block using them fails.
        let (mut all, mut alone) = (compiler(), Vec::new());
        let api = dir.join("data-plane-api");
        let files = files_under(&api)
            .into_iter()
            .filter(|f| f.extension() == Some("proto".as_ref()));
        for file in files.map(|f| f.strip_prefix(&api).expect("in the API").to_path_buf()) {
            if all.open_file(&file).is_err() {
                let mut own = compiler();
                match own.open_file(&file) {
                    Ok(_) => alone.extend(own.file_descriptor_set().file),
                    Err(e) => eprintln!("left out of Envoy's API: {}: {e}", file.display()),
                }
            }
        }
        let mut set = all.file_descriptor_set();
        for file in alone {
            if !set.file.iter().any(|f| f.name == file.name) {
                set.file.push(file);
            }
        }
        eprintln!("{} files of Envoy's API compiled", set.file.len());
        DescriptorPool::from_file_descriptor_set(set).expect("Envoy's descriptors")
    })
}

fn message_named(name: &str) -> Result<MessageDescriptor, String> {
    pool()
        .get_message_by_name(name)
        .ok_or(format!("no message {name} in Envoy's API"))
}

/// Reads a value strictly as an Envoy message: an unknown field, a field in the wrong
/// message, or an `@type` not in Envoy's API fails.
fn check(message: &str, value: &Value) -> Result<(), String> {
    let descriptor = message_named(message)?;
    DynamicMessage::deserialize_with_options(descriptor, value.clone(), &DeserializeOptions::new())
        .map_err(|e| format!("as {message}: {e}"))?;
    match filters_without_typed_config(value).as_slice() {
        [] => Ok(()),
        names => Err(format!(
            "filters without typed_config (Envoy refuses them): {names:?}"
        )),
    }
}

/// What the blocks were found to be: the messages checked, the skipped kinds, the `@type`s
/// resolved, and the failures.
#[derive(Default)]
struct Tally {
    checked: BTreeMap<String, usize>,
    skipped: BTreeMap<&'static str, usize>,
    types: Vec<String>,
    failures: Vec<String>,
}

impl Tally {
    fn block(&mut self, place: &str, text: &str) {
        let verdicts = serde_norway::from_str::<Value>(text)
            .map_err(|e| format!("not YAML: {e}"))
            .and_then(|value| Ok((classify(&value)?, value)));
        let (verdicts, value) = match verdicts {
            Ok(found) => found,
            Err(e) => return self.failures.push(format!("{place}: {e}")),
        };
        for verdict in verdicts {
            match verdict {
                Verdict::Envoy(message, value) => match check(&message, &value) {
                    Ok(()) => {
                        each_field(&value, &mut |key, v| {
                            if let ("@type", Some(url)) = (key, v.as_str()) {
                                self.types.push(url.to_string());
                            }
                        });
                        *self.checked.entry(message).or_default() += 1;
                    }
                    Err(e) => self.failures.push(format!("{place}: {e}")),
                },
                Verdict::Skip(why) => match envoy_marks(&value).as_slice() {
                    [] => *self.skipped.entry(why).or_default() += 1,
                    marks => self
                        .failures
                        .push(format!("{place}: skipped as {why}, yet has {marks:?}")),
                },
            }
        }
    }
}

#[test]
fn every_envoy_block_of_docs_and_deploy_reads_against_envoys_api() {
    let mut tally = Tally::default();
    let blocks = all_blocks();
    for (place, text) in &blocks {
        tally.block(place, text);
    }
    tally.types.sort();
    tally.types.dedup();
    let Tally {
        checked,
        skipped,
        types,
        failures,
    } = tally;
    eprintln!(
        "{} blocks; checked against Envoy's API: {checked:#?}",
        blocks.len()
    );
    eprintln!("@types resolved: {types:#?}\nskipped: {skipped:#?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let envoy_blocks: usize = checked.values().sum();
    assert!(
        envoy_blocks >= 3,
        "only {envoy_blocks} Envoy messages were checked"
    );
    for url in [RLQS_FILTER, RLQS_BUCKET, RATE_LIMIT] {
        let url = format!("type.googleapis.com/{url}");
        assert!(
            types.contains(&url),
            "no block of the docs was read as {url}"
        );
    }
}

/// The RLQS bucket settings as docs/rlqs.md had them, with `expired_assignment_behavior_timeout`
/// among the settings, or, `inside`, in `expired_assignment_behavior` where Envoy has it.
fn rlqs_filter(inside: bool) -> Value {
    let mut expired = json!({"fallback_rate_limit": {"blanket_rule": "DENY_ALL"}});
    let mut settings = json!({
        "@type": format!("type.googleapis.com/{RLQS_BUCKET}"),
        "reporting_interval": "5s",
        "no_assignment_behavior": {"fallback_rate_limit": {"blanket_rule": "ALLOW_ALL"}},
    });
    let host = if inside { &mut expired } else { &mut settings };
    host["expired_assignment_behavior_timeout"] = json!("60s");
    settings["expired_assignment_behavior"] = expired;
    let text = format!(
        "http_filters:\n  - name: envoy.filters.http.rate_limit_quota\n    typed_config:\n      \
         \"@type\": type.googleapis.com/{RLQS_FILTER}\n      rlqs_server: {{envoy_grpc: {{cluster_name: floodgate}}}}\n      \
         domain: quota\n      bucket_matchers:\n        on_no_match:\n          action:\n            \
         name: rate_limit_quota\n            typed_config: {settings}\n"
    );
    serde_norway::from_str(&text).expect("the snippet is YAML")
}

#[test]
fn the_timeout_beside_the_expired_assignment_behavior_is_refused() {
    let verdicts = classify(&rlqs_filter(false)).expect("an Envoy block");
    let [Verdict::Envoy(message, value)] = verdicts.as_slice() else {
        panic!("{verdicts:?}")
    };
    assert_eq!(message, HCM);
    let error = check(message, value).expect_err("the misplaced timeout is refused");
    assert!(
        error.contains("expired_assignment_behavior_timeout"),
        "{error}"
    );
    let mut tally = Tally::default();
    tally.block(
        "inside",
        &serde_norway::to_string(&rlqs_filter(true)).expect("YAML"),
    );
    assert!(tally.failures.is_empty(), "{:?}", tally.failures);
    assert_eq!(tally.checked.get(HCM), Some(&1));
}

#[test]
fn unknown_types_and_filters_without_typed_config_are_refused() {
    let unknown = json!({"http_filters": [{"name": "x", "typed_config": {"@type": "type.googleapis.com/envoy.Nothing"}}]});
    let error = check(HCM, &unknown).expect_err("an @type not in Envoy's API");
    assert!(error.contains("envoy.Nothing"), "{error}");
    let router = json!({"http_filters": [{"name": "envoy.filters.http.router"}]});
    let error = check(HCM, &router).expect_err("a filter without typed_config");
    assert!(error.contains("envoy.filters.http.router"), "{error}");
    let misplaced = json!({"clusters": [{"name": "a", "http_filters": []}]});
    assert!(check(STATIC, &misplaced).is_err());
}

#[test]
fn blocks_of_no_known_shape_or_with_envoy_marks_where_skipped_fail() {
    let mut tally = Tally::default();
    tally.block("unknown", "a: 1\n");
    tally.block("marked", "stats:\n  typed_config: {}\n");
    tally.block("floodgate", "store: {url: memory}\n");
    tally.block("broken", "- a\nb: c\n");
    assert_eq!(tally.failures.len(), 3, "{:?}", tally.failures);
    assert!(
        tally.failures[1].contains("typed_config"),
        "{:?}",
        tally.failures
    );
    assert_eq!(tally.skipped.get("Floodgate's configuration"), Some(&1));
}

#[test]
fn yaml_blocks_are_found_with_their_first_lines() {
    let text = "# T\n\n```yaml\na: 1\n```\n\n```sh\nls\n```\n  ```yaml\n  b: 2\n  ```\n";
    let blocks = markdown_blocks(text);
    assert_eq!(
        blocks,
        [(4, "a: 1\n".to_string()), (11, "b: 2\n".to_string())]
    );
    let documents = yaml_documents("# only a comment\n---\na: 1\n---\nb: 2\n");
    assert_eq!(
        documents,
        [(3, "a: 1\n".to_string()), (5, "b: 2\n".to_string())]
    );
}

#[test]
fn envoy_gateway_resources_are_read_as_the_envoy_types_they_embed() {
    let policy = json!({
        "apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyPatchPolicy",
        "spec": {"jsonPatches": [{
            "type": "type.googleapis.com/envoy.config.listener.v3.Listener", "name": "l",
            "operation": {"op": "add", "path": "/filter_chains/0/filters/0",
                          "value": {"name": "f", "typed_config": {"@type": format!("type.googleapis.com/{HCM}"), "stat_prefix": "s"}}},
        }]},
    });
    let verdicts = classify(&policy).expect("an Envoy Gateway resource");
    let [Verdict::Envoy(message, value)] = verdicts.as_slice() else {
        panic!("{verdicts:?}")
    };
    assert_eq!(message, "envoy.config.listener.v3.FilterChain");
    check(message, value).expect("a filter of a filter chain");
    let proxy = json!({
        "apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
        "spec": {"bootstrap": {"type": "Merge", "value": "admin:\n  address_typo: {}\n"}},
    });
    let verdicts = classify(&proxy).expect("an Envoy Gateway resource");
    let [Verdict::Envoy(message, value)] = verdicts.as_slice() else {
        panic!("{verdicts:?}")
    };
    assert!(check(message, value)
        .expect_err("a typo")
        .contains("address_typo"));
}
