//! Checking a configuration: the error type every part of the config module returns, and the
//! checks [`Config::validate`] makes beyond each part's own parameters. Every error names the
//! field by its path in the file (`plans.free.rate`,
//! `domains[0].descriptors[2].rate_limit.unit`) and says what is wrong with the value.

use std::path::{Path, PathBuf};
use std::time::Duration;

use floodgate::limiter::request_rate::Plan;
use floodgate::ConfigError;

use super::directory::DirectoryError;
use super::Config;

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{}: cannot read the file: {message}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The operating system's reason.
        message: String,
    },
    /// The text is not YAML, or does not have the expected shape: a syntax error, a wrong
    /// type, an unknown field, a duplicate key.
    #[error("{}invalid configuration: {message}", place(file, line))]
    Yaml {
        /// The file, when the text came from one.
        file: Option<PathBuf>,
        /// The line (1-based) of the entry at fault, when known.
        line: Option<usize>,
        /// What is wrong, after the path of the entry at fault (`limits.b.window: …`).
        message: String,
    },
    /// A value is not allowed.
    #[error("`{path}`: {message}")]
    Invalid {
        /// Where the value is in the file, e.g. `plans.free.rate` or
        /// `domains[0].descriptors[2].rate_limit.unit`.
        path: String,
        /// What is wrong, with the value.
        message: String,
    },
    /// A value is not allowed, at a known place: the inner error's path is inside `file`,
    /// at `line`.
    #[error("{}{error}", place(file, line))]
    InFile {
        /// The file (`None` for a configuration read from text).
        file: Option<PathBuf>,
        /// The line (1-based) of the entry at fault, when known.
        line: Option<usize>,
        /// What is wrong.
        error: Box<ConfigFileError>,
    },
    /// A configuration file holds no settings: it is empty, or holds only comments (or an
    /// empty mapping). Refused rather than read as "everything left out", which would replace
    /// a configuration with the built-in example (a truncated ConfigMap, `: > file`).
    #[error("{}holds no settings: the file is empty or only comments (an empty configuration is refused; the built-in example runs only when no configuration is given at all)", place(file, &None))]
    NoSettings {
        /// The file (`None` for a configuration read from text).
        file: Option<PathBuf>,
    },
    /// The files of a configuration directory do not fit together.
    #[error(transparent)]
    Directory(Box<DirectoryError>),
    /// A value is not allowed in a resource pushed over xDS ([`super::xds`]): the inner
    /// error's path is inside the resource.
    #[error("xDS resource \"{resource}\": {error}")]
    InResource {
        /// The resource's name.
        resource: String,
        /// What is wrong.
        error: Box<ConfigFileError>,
    },
    /// The configuration comes over xDS and none has been received yet.
    #[error("no configuration has been received over xDS from {server} yet")]
    NotReceived {
        /// The control plane's address.
        server: String,
    },
}

impl From<DirectoryError> for ConfigFileError {
    fn from(error: DirectoryError) -> Self {
        ConfigFileError::Directory(Box::new(error))
    }
}

impl From<Box<DirectoryError>> for ConfigFileError {
    fn from(error: Box<DirectoryError>) -> Self {
        ConfigFileError::Directory(error)
    }
}

/// `file:line: `, `file: `, `line N: ` or nothing: where an error is, before what it says.
fn place(file: &Option<PathBuf>, line: &Option<usize>) -> String {
    match (file, line) {
        (Some(file), Some(line)) => format!("{}:{line}: ", file.display()),
        (Some(file), None) => format!("{}: ", file.display()),
        (None, Some(line)) => format!("line {line}: "),
        (None, None) => String::new(),
    }
}

impl ConfigFileError {
    /// A [`ConfigFileError::Yaml`] from the YAML parser's error, at the line it gives. Where
    /// the text's positions are known, [`super::source::Source::serde_error`] places it better.
    pub fn yaml(file: Option<&Path>, error: &serde_norway::Error) -> ConfigFileError {
        let text = error.to_string();
        let message = match text.rfind(" at line ") {
            Some(at) => text[..at].to_string(),
            None => text,
        };
        ConfigFileError::Yaml {
            file: file.map(Path::to_path_buf),
            line: error.location().map(|l| l.line()),
            message,
        }
    }

    /// A [`ConfigError`] from building something described at `path` (empty for the top
    /// level), as an [`ConfigFileError::Invalid`] at the error's field under `path`:
    /// `("plans.free", rate)` becomes `plans.free.rate`.
    pub fn from_config_error(path: &str, error: ConfigError) -> ConfigFileError {
        let join = |field: &str| {
            if path.is_empty() {
                field.to_string()
            } else {
                format!("{path}.{field}")
            }
        };
        match error {
            ConfigError::Invalid {
                field,
                value,
                reason,
            } => ConfigFileError::invalid(join(field), format!("invalid value {value} ({reason})")),
            ConfigError::Missing { field } => ConfigFileError::invalid(join(field), "missing"),
            other => ConfigFileError::invalid(path, other.to_string()),
        }
    }

    /// Shorthand for [`ConfigFileError::Invalid`] at `path`.
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConfigFileError {
        ConfigFileError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl Config {
    /// The checks across fields that no single part's builder can make, given the built
    /// `plans` ([`Config::build`] runs them before building the rest; each part's own
    /// parameters are checked by its builder, with the same paths):
    /// the `connections` limits' ranges ([`ConnectionLimits::validate`](super::ConnectionLimits::validate));
    /// `store.max_keys` ≥ 1; `http`, `grpc` and `debug` differ (unless the port is 0); when there are
    /// plans or a request rate limiter, `default_plan` names a plan (and a request rate limiter
    /// needs at least one plan); every user's plan exists; endpoint costs are ≥ 1.
    pub fn validate(&self, plans: &[Plan]) -> Result<(), ConfigFileError> {
        self.connections.validate()?;
        self.stats.validate()?;
        self.tls.validate()?;
        self.validate_listeners()?;
        let ttl = self.reservation_ttl();
        if !(Duration::from_secs(1)..=Duration::from_secs(7 * 86_400)).contains(&ttl) {
            return Err(ConfigFileError::invalid(
                "reservation_ttl",
                format!("invalid value {ttl:?} (must be 1s to 7 days)"),
            ));
        }
        self.store.check_written()?;
        self.attributes.validate()?;
        self.rlqs.validate()?;
        if !self.pipeline.is_empty() && self.limiters != super::LimitersConfig::default() {
            return Err(ConfigFileError::invalid(
                "pipeline",
                "write the stages in `pipeline` or the four sections of `limiters`, not both",
            ));
        }
        self.validate_plans(plans)?;
        Ok(())
    }

    /// `http`, `grpc` and `debug` differ (unless the port is 0).
    fn validate_listeners(&self) -> Result<(), ConfigFileError> {
        let listeners = [
            ("http", self.http),
            ("grpc", self.grpc),
            ("debug", self.debug),
        ];
        for (i, (field, addr)) in listeners.iter().enumerate() {
            let Some(addr) = addr.filter(|a| a.port() != 0) else {
                continue;
            };
            if let Some((other, _)) = listeners[..i].iter().find(|(_, a)| *a == Some(addr)) {
                return Err(ConfigFileError::invalid(
                    *field,
                    format!("{addr} is also the {other} address"),
                ));
            }
        }
        Ok(())
    }

    /// The plans: a request rate limiter has at least one, `default_plan` names one (when
    /// there are plans), every user's plan exists; endpoint costs are ≥ 1.
    fn validate_plans(&self, plans: &[Plan]) -> Result<(), ConfigFileError> {
        let plan_names = || {
            let names: Vec<&str> = self.plans.keys().map(String::as_str).collect();
            if names.is_empty() {
                "there are no plans".to_string()
            } else {
                format!("plans are {}", names.join(", "))
            }
        };
        let on_top_level_plans = self.limiters.request_rate.as_ref().is_some_and(
            |stage| matches!(&stage.kind, super::StageKind::Limit(l) if l.uses_top_level_plans()),
        );
        if on_top_level_plans && plans.is_empty() {
            return Err(ConfigFileError::invalid(
                "plans",
                "the request_rate limiter needs at least one plan",
            ));
        }
        match &self.default_plan {
            None if !plans.is_empty() => {
                return Err(ConfigFileError::invalid(
                    "default_plan",
                    "missing: the plan of users without a known plan",
                ))
            }
            Some(name) if !self.plans.contains_key(name) => {
                return Err(ConfigFileError::invalid(
                    "default_plan",
                    format!("unknown plan `{name}`: {}", plan_names()),
                ))
            }
            _ => {}
        }
        for (user, plan) in &self.users {
            if !self.plans.contains_key(plan) {
                return Err(ConfigFileError::invalid(
                    key_path("users", user),
                    format!("unknown plan `{plan}`: {}", plan_names()),
                ));
            }
        }
        for (endpoint, cost) in &self.endpoint_costs {
            if *cost == 0 {
                return Err(ConfigFileError::invalid(
                    key_path("endpoint_costs", endpoint),
                    "invalid value 0 (a cost must be at least 1)",
                ));
            }
        }
        Ok(())
    }
}

/// `prefix.key`, or `prefix["key"]` when the key is not a plain word.
pub(crate) fn key_path(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{prefix}.{key}")
    } else {
        format!("{prefix}[{key:?}]")
    }
}
