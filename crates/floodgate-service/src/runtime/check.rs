//! `floodgate check-config`: a configuration read and built as `serve` would read and build
//! it, over a store of the kind `serve` would use (a Redis store is not connected to), without
//! serving; then what it holds, for people.
//!
//! With `--upstream` the configuration is envoyproxy/ratelimit's runtime directory, read from
//! its `RUNTIME_*` variables (the path given, if any, as `RUNTIME_ROOT`) exactly as the drop-in
//! reads it: every file a domain file, the sections left out empty (no built-in example).
//!
//! Exit status: 0 when it would serve, 1 when the configuration is refused, 2 when a setting of
//! the command line or the environment cannot be used.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, ConfigFileError, ConfigSource, StoreMode};
use crate::environment::Environment;
use crate::store::{ServiceStore, StoreUrl};

use super::settings::{ConfigFlags, SettingsError, Startup};

/// Arguments of `floodgate check-config`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The file or directory to check, as `serve --config` reads it (with `--upstream`: the
    /// runtime directory's root, instead of RUNTIME_ROOT).
    #[arg(value_name = "FILE|DIR", required_unless_present = "upstream")]
    pub path: Option<PathBuf>,
    /// Read envoyproxy/ratelimit's runtime directory as the drop-in does: RUNTIME_ROOT (or the
    /// path given), RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY, RUNTIME_IGNOREDOTFILES and
    /// RUNTIME_WATCH_ROOT from the environment, and upstream's other settings with them.
    #[arg(long)]
    pub upstream: bool,
    /// Merge domains defined more than once, as `serve --merge-domains` (FLOODGATE_MERGE_DOMAINS
    /// and MERGE_DOMAIN_CONFIG as for serve).
    #[arg(long)]
    pub merge_domains: bool,
    /// Checked against this store, as `serve` would run it (nothing is sent to it): a
    /// configuration using an algorithm the store cannot run is refused.
    #[command(flatten)]
    pub store: crate::cli::ConfigStoreArg,
}

/// Why `check-config` refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The configuration does not load or build.
    #[error(transparent)]
    Config(#[from] ConfigFileError),
    /// A setting of the environment cannot be used.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The runtime the store is created in could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A listener's TLS files cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::connections::tls::TlsError),
}

impl CheckError {
    /// 2 for a setting of the environment, 1 for the configuration.
    pub fn exit_code(&self) -> u8 {
        match self {
            CheckError::Settings(_) => 2,
            _ => 1,
        }
    }
}

/// What a configuration that checks holds (see [`check`]), written as a few lines.
#[derive(Debug)]
pub struct Checked {
    /// What was read.
    pub source: String,
    /// The store, as `serve` would use it (password hidden), and its mode.
    pub store: String,
    /// The pipeline's stages, in order: name and kind.
    pub stages: Vec<(String, &'static str)>,
    /// The plans, and the default one.
    pub plans: Vec<String>,
    /// The default plan.
    pub default_plan: Option<String>,
    /// The named limits of `/v1/check`.
    pub limits: Vec<String>,
    /// The Envoy domains, each with its count of descriptors (nested ones included).
    pub domains: Vec<(String, usize)>,
    /// The Envoy descriptors whose limit cannot give back on this store (a refund,
    /// `is_negative_hits`, to them is refused): each as `full key (algorithm)`.
    pub no_refunds: Vec<String>,
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(items: &[String]) -> String {
            if items.is_empty() {
                "none".to_string()
            } else {
                items.join(", ")
            }
        }
        writeln!(f, "{}: ok", self.source)?;
        writeln!(f, "  store: {}", self.store)?;
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|(name, kind)| format!("{name} ({kind})"))
            .collect();
        writeln!(f, "  pipeline: {}", list(&stages))?;
        let default = self
            .default_plan
            .as_ref()
            .map_or(String::new(), |p| format!(" (default {p})"));
        writeln!(f, "  plans: {}{default}", list(&self.plans))?;
        writeln!(f, "  named limits: {}", list(&self.limits))?;
        let domains: Vec<String> = self
            .domains
            .iter()
            .map(|(name, n)| {
                let s = if *n == 1 { "" } else { "s" };
                format!("{name} ({n} descriptor{s})")
            })
            .collect();
        writeln!(f, "  domains: {}", list(&domains))?;
        if !self.no_refunds.is_empty() {
            writeln!(
                f,
                "  refunds (is_negative_hits) refused by: {}",
                list(&self.no_refunds)
            )?;
        }
        Ok(())
    }
}

/// Reads and builds the configuration `args` and `env` name, as `serve` would.
pub fn check(args: &CheckArgs, env: Environment) -> Result<Checked, CheckError> {
    let env = match (&args.path, args.upstream) {
        (Some(root), true) => env.with("RUNTIME_ROOT", &root.display().to_string()),
        _ => env,
    };
    let flags = ConfigFlags {
        config: if args.upstream {
            None
        } else {
            args.path.clone()
        },
        merge_domains: args.merge_domains,
        ..ConfigFlags::default()
    };
    let startup = Startup::read_flags(&flags, env, args.upstream)?;
    let loaded: Config = startup.source.load(&startup.overrides)?;
    let config = startup.complete(args.store.url.as_deref(), loaded);
    // A Redis store needs a runtime to be created in; it sends nothing until used.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(CheckError::Runtime)?;
    let _context = runtime.enter();
    let store = ServiceStore::for_check(&config.store)?;
    let clock = Arc::new(floodgate::CoarseClock::shared());
    let served = config.build(store.clone(), clock)?;
    store.check(&served).map_err(|e| config.place(e))?;
    // The listeners' TLS files, read as `serve` reads them.
    crate::service::ListenersTls::load(&config.tls)?;
    let url = config.store.store_url()?;
    let mode = if store.settings().is_cached() {
        StoreMode::Cached.name()
    } else {
        StoreMode::Exact.name()
    };
    Ok(Checked {
        source: match &startup.source {
            ConfigSource::Path(path) => path.display().to_string(),
            other => other.to_string(),
        },
        store: match url {
            StoreUrl::Memory => format!("memory ({mode})"),
            _ => format!("{} ({}, {mode})", url.shown(), url.kind()),
        },
        stages: served
            .pipeline
            .stages()
            .map(|s| (s.name().as_str().to_string(), s.limiter().kind().name()))
            .collect(),
        plans: config.plans.keys().cloned().collect(),
        default_plan: config.default_plan.clone(),
        limits: config.limits.keys().cloned().collect(),
        domains: config
            .domains
            .iter()
            .map(|d| (d.domain.clone(), count(&d.descriptors)))
            .collect(),
        no_refunds: served
            .rules
            .rules()
            .into_iter()
            .filter_map(|(_, rule)| {
                use floodgate::algorithm::Algorithm as _;
                let algorithm = rule.algorithm()?;
                (!store.takes_refunds(algorithm))
                    .then(|| format!("{} ({})", rule.full_key(), algorithm.name()))
            })
            .collect(),
    })
}

/// Descriptors, nested ones included.
fn count(descriptors: &[crate::config::envoy::DescriptorConfig]) -> usize {
    descriptors.iter().map(|d| 1 + count(&d.descriptors)).sum()
}
