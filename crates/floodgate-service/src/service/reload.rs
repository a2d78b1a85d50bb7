//! Reloading the configuration, and saying what a reload did.
//!
//! Every reload, whatever set it off ([`Trigger`]: `SIGHUP`, `POST /admin/reload`, the file
//! watcher, a set of resources pushed over xDS), goes through [`Server::reload`] (or
//! [`Server::reload_pushed`]), which logs exactly one line for it, under this module's
//! target:
//!
//! - a reload that loads: INFO `configuration reloaded`, with the trigger and what changed
//!   from the configuration loaded before ([`ReloadReport`]: plans, stages, named limits and
//!   Envoy domains added, changed or removed, and the other sections changed), or `nothing
//!   changed`;
//! - a reload that does not: ERROR `reload refused; keeping the running config`, with the
//!   trigger and the error.
//!
//! Settings read only at start-up (the `store`, the listen addresses `http`, `grpc` and
//! `debug`, `connections`, `stats` and the listeners' `tls`) are kept when the file changes
//! them: each such setting is named in a WARN line (`restart to apply`) and in the admin
//! answer, and again at every reload until a restart applies it. They are compared with the
//! file as it was read at start-up, before the command line and the environment filled it in,
//! so that only what the file itself changed is named.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::switches::Configured;
use super::{build_served, has_plan, Server};
use crate::config::xds::Pushed;
use crate::config::{Config, ConfigFileError, ConfigSource};

/// What set a reload off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `SIGHUP`.
    Signal,
    /// `POST /admin/reload`.
    Admin,
    /// The configuration's files changed (`--watch`).
    Watcher,
    /// A control plane pushed a new set of resources over xDS.
    Xds,
}

impl Trigger {
    /// Its name in the log and the admin answer: `SIGHUP`, `admin`, `watcher`.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::Admin => "admin",
            Trigger::Watcher => "watcher",
            Trigger::Xds => "xds",
        }
    }
}

/// How one named entry of a section changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// It is new.
    Added,
    /// It is there before and after, with other settings.
    Changed,
    /// It is gone.
    Removed,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Changed => "changed",
            Change::Removed => "removed",
        }
    }
}

/// What a reload changed, and which changed settings wait for a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReloadReport {
    /// By section (`plans`, `stages`, `limits`, `domains`): each entry added, changed or
    /// removed, by name, in name order.
    pub changes: BTreeMap<&'static str, Vec<(String, Change)>>,
    /// The other sections whose settings changed (`users`, `default_plan`,
    /// `endpoint_costs`, `attributes`, `rls`, `rlqs`, `response_dynamic_metadata`).
    pub sections: Vec<&'static str>,
    /// The settings read only at start-up that the file now sets otherwise (`store.url`,
    /// `http`, `connections.max_connections`, …): kept until a restart.
    pub restart_to_apply: Vec<String>,
}

impl ReloadReport {
    /// What changed from `old` to `new` (the file as loaded before and now), and which
    /// start-up settings differ from `started` (the file as loaded at start-up).
    pub fn between(old: &Config, new: &Config, started: &Config) -> ReloadReport {
        let mut changes = BTreeMap::new();
        changes.insert("plans", named(&old.plans, &new.plans));
        let stages = |c: &Config| -> BTreeMap<String, crate::config::StageConfig> {
            c.stage_configs()
                .into_iter()
                .map(|(_, stage)| (stage.name.clone(), stage))
                .collect()
        };
        changes.insert("stages", named(&stages(old), &stages(new)));
        changes.insert("limits", named(&old.limits, &new.limits));
        let domains = |c: &Config| -> BTreeMap<String, crate::config::envoy::DomainConfig> {
            c.domains
                .iter()
                .map(|d| (d.domain.clone(), d.clone()))
                .collect()
        };
        changes.insert("domains", named(&domains(old), &domains(new)));
        changes.retain(|_, entries| !entries.is_empty());
        let mut sections = Vec::new();
        macro_rules! sections {
            ($($field:ident),*) => {
                $( if old.$field != new.$field { sections.push(stringify!($field)); } )*
            };
        }
        sections!(
            default_plan,
            users,
            endpoint_costs,
            attributes,
            rls,
            rlqs,
            response_dynamic_metadata
        );
        ReloadReport {
            changes,
            sections,
            restart_to_apply: startup_settings_changed(started, new),
        }
    }

    /// Whether the reload changed nothing that is served.
    pub fn nothing_changed(&self) -> bool {
        self.changes.is_empty() && self.sections.is_empty()
    }

    /// The admin answer's body: `{"reloaded": true, "trigger", "summary", "changes",
    /// "restart_to_apply"}`, `changes` as `{section: {name: "added"|"changed"|"removed"}}`.
    pub fn to_json(&self, trigger: Trigger) -> serde_json::Value {
        let changes: serde_json::Map<String, serde_json::Value> = self
            .changes
            .iter()
            .map(|(section, entries)| {
                let entries: serde_json::Map<String, serde_json::Value> = entries
                    .iter()
                    .map(|(name, change)| (name.clone(), change.name().into()))
                    .collect();
                (section.to_string(), entries.into())
            })
            .collect();
        serde_json::json!({
            "reloaded": true,
            "trigger": trigger.name(),
            "summary": self.to_string(),
            "changes": changes,
            "sections_changed": self.sections,
            "restart_to_apply": self.restart_to_apply,
        })
    }
}

impl fmt::Display for ReloadReport {
    /// `plans changed: free; stages added: orders; settings changed: users`, or `nothing
    /// changed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nothing_changed() {
            return f.write_str("nothing changed");
        }
        let mut parts = Vec::new();
        for (section, entries) in &self.changes {
            for change in [Change::Added, Change::Changed, Change::Removed] {
                let names: Vec<&str> = entries
                    .iter()
                    .filter(|(_, c)| *c == change)
                    .map(|(n, _)| n.as_str())
                    .collect();
                if !names.is_empty() {
                    parts.push(format!("{section} {}: {}", change.name(), names.join(", ")));
                }
            }
        }
        if !self.sections.is_empty() {
            parts.push(format!("settings changed: {}", self.sections.join(", ")));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Each name of `old` and `new` whose entry was added, changed or removed, in name order.
fn named<T: PartialEq>(
    old: &BTreeMap<String, T>,
    new: &BTreeMap<String, T>,
) -> Vec<(String, Change)> {
    let mut changes: Vec<(String, Change)> = new
        .iter()
        .filter_map(|(name, entry)| match old.get(name) {
            None => Some((name.clone(), Change::Added)),
            Some(before) if before != entry => Some((name.clone(), Change::Changed)),
            Some(_) => None,
        })
        .collect();
    changes.extend(
        old.keys()
            .filter(|name| !new.contains_key(*name))
            .map(|name| (name.clone(), Change::Removed)),
    );
    changes.sort();
    changes
}

/// The settings read only at start-up that `new` sets otherwise than `started` (each as
/// `section.field`, or the section's name when a field not listed here changed).
fn startup_settings_changed(started: &Config, new: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    for (name, before, after) in [
        ("http", started.http, new.http),
        ("grpc", started.grpc, new.grpc),
        ("debug", started.debug, new.debug),
    ] {
        if before != after {
            changed.push(name.to_string());
        }
    }
    macro_rules! fields {
        ($section:ident: $($field:ident),*) => {{
            let (before, after) = (&started.$section, &new.$section);
            let at = changed.len();
            $(
                if before.$field != after.$field {
                    changed.push(concat!(stringify!($section), ".", stringify!($field)).to_string());
                }
            )*
            if changed.len() == at && before != after {
                changed.push(stringify!($section).to_string());
            }
        }};
    }
    changed.extend(started.store.changed_in(&new.store));
    fields!(connections: max_connections, header_read_timeout, max_header_bytes,
        max_body_bytes, max_streams, max_in_flight, grpc_max_age, grpc_max_age_grace);
    fields!(stats: near_limit_ratio, max_series, statsd, prometheus);
    fields!(tls: http, grpc);
    changed
}

impl Server {
    /// Re-reads the config file or directory (every file in it again, so files added, changed
    /// and removed since are taken into account), or the built-in config, with the overrides
    /// applied, and swaps it in, keeping the operator's switches whose settings it leaves
    /// alone; on any error the running config stays and the error is returned (and counted).
    /// Logs one line either way (see the [module documentation](self)).
    pub fn reload(&self, trigger: Trigger) -> Result<ReloadReport, ConfigFileError> {
        self.reload_from(
            trigger,
            |overrides| self.control.config_source.load(overrides),
            || {},
        )
    }

    /// Runs the resources a control plane pushed (`pushed`) as a reload does
    /// ([`Server::reload`], trigger [`Trigger::Xds`]): checked and built as any configuration,
    /// swapped in keeping counters and switches, and kept in the service's [`crate::config::XdsSource`] as
    /// the set it runs (what a later `SIGHUP` or `/admin/reload` reloads). A set that is
    /// refused leaves the running configuration and the source as they were; so does a
    /// service whose configuration does not come over xDS.
    pub fn reload_pushed(&self, pushed: Pushed) -> Result<ReloadReport, ConfigFileError> {
        let ConfigSource::Xds(source) = &self.control.config_source else {
            return Err(ConfigFileError::invalid(
                "xds",
                format!(
                    "the configuration comes from {}, not over xDS",
                    self.control.config_source
                ),
            ));
        };
        self.reload_from(
            Trigger::Xds,
            |overrides| source.candidate(&pushed, overrides),
            || source.accept(pushed.clone()),
        )
    }

    /// A reload of what `load` reads; `accepted` runs once the new configuration is swapped
    /// in, before another reload can start.
    fn reload_from(
        &self,
        trigger: Trigger,
        load: impl FnOnce(&crate::config::Overrides) -> Result<Config, ConfigFileError>,
        accepted: impl FnOnce(),
    ) -> Result<ReloadReport, ConfigFileError> {
        let mut switches = self.switches();
        let previous = self.decisions.served.load_full();
        let result = load(&self.control.overrides).and_then(|config| {
            let served = build_served(&config, &self.decisions.store, Some(&previous))?;
            Ok((config, served))
        });
        let (config, served) = match result {
            Ok(loaded) => loaded,
            Err(error) => {
                self.observed.metrics.reload(false);
                tracing::error!(
                    trigger = trigger.name(),
                    source = %self.control.config_source,
                    %error,
                    "reload refused; keeping the running config"
                );
                return Err(error);
            }
        };
        let has = |plan: &str| has_plan(&served, plan);
        let (kept, dropped) = switches.after_reload(&Configured {
            modes: &served.configured_modes,
            users: &served.users,
            has_plan: &has,
        });
        for (stage, switch) in &kept.modes {
            served.pipeline.set_mode(stage, switch.mode);
        }
        for d in &dropped {
            tracing::warn!(switch = %d.what, why = %d.why, "reload dropped a runtime switch: the configuration wins");
        }
        let upstream_surface = self.serves_upstream_surface();
        self.decisions.served.store(Arc::new(served));
        accepted();
        announce_surface(upstream_surface, self.serves_upstream_surface());
        self.observed
            .readiness
            .config_missing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.decisions
            .plan_overrides
            .store(Arc::new(kept.plans_by_user()));
        *switches = kept;
        self.observed.metrics.reload(true);
        let report = self.loaded_now(config);
        for setting in &report.restart_to_apply {
            tracing::warn!(
                trigger = trigger.name(),
                setting = %setting,
                "the configuration changes a setting read only at start-up: the running value stays (restart to apply)"
            );
        }
        tracing::info!(
            trigger = trigger.name(),
            source = %self.control.config_source,
            changed = %report,
            "configuration reloaded"
        );
        Ok(report)
    }

    /// What changed from the last configuration loaded to `config`, which becomes the last.
    fn loaded_now(&self, config: Config) -> ReloadReport {
        let mut loaded = self
            .control
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let report = ReloadReport::between(&loaded.last, &config, &loaded.started);
        loaded.last = Arc::new(config);
        report
    }
}

/// Says when a reload changes what the drop-in's HTTP listener serves (`before` and `after`:
/// whether it serves upstream's endpoints alone).
fn announce_surface(before: bool, after: bool) {
    match (before, after) {
        (true, false) => tracing::info!(
            "the configuration now has stages or named limits: the HTTP listener serves Floodgate's endpoints beside upstream's"
        ),
        (false, true) => tracing::info!(
            "the configuration has no stage or named limit any more: the HTTP listener serves only upstream's endpoints (with health, metrics and the admin API)"
        ),
        _ => {}
    }
}

/// The configurations a reload compares with: the file as read at start-up (for the settings
/// only start-up reads) and as read by the last load (for what a reload changes).
#[derive(Debug)]
pub(super) struct Loaded {
    pub(super) started: Arc<Config>,
    pub(super) last: Arc<Config>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::from_yaml_str(yaml).unwrap()
    }

    #[test]
    fn a_report_names_each_entry_added_changed_or_removed_and_the_settings_to_restart() {
        let old = config(
            "plans: {free: {algorithm: token_bucket, rate: 1, capacity: 1}, gone: {algorithm: token_bucket, rate: 1, capacity: 1}}\n\
             default_plan: free\n\
             limits: {a: {algorithm: fixed_window, limit: 1, window: 1m}}\n\
             domains: [{domain: d, descriptors: []}]\n",
        );
        let new = config(
            "store: {url: 'redis://127.0.0.1:1'}\n\
             http: 127.0.0.1:9\n\
             connections: {max_connections: 7}\n\
             plans: {free: {algorithm: token_bucket, rate: 2, capacity: 1}, pro: {algorithm: token_bucket, rate: 1, capacity: 1}}\n\
             default_plan: free\n\
             users: {alice: pro}\n\
             limits: {a: {algorithm: fixed_window, limit: 1, window: 1m}}\n\
             domains: []\n",
        );
        let report = ReloadReport::between(&old, &new, &old);
        assert_eq!(
            report.to_string(),
            "domains removed: d; plans added: pro; plans changed: free; plans removed: gone; settings changed: users"
        );
        assert_eq!(
            report.restart_to_apply,
            ["http", "store.url", "connections.max_connections"]
        );
        let json = report.to_json(Trigger::Admin);
        assert_eq!(json["changes"]["plans"]["free"], "changed");
        assert_eq!(json["trigger"], "admin");
        let same = ReloadReport::between(&new, &new, &new);
        assert!(same.nothing_changed());
        assert_eq!(same.to_string(), "nothing changed");
        assert!(same.restart_to_apply.is_empty());
    }
}
