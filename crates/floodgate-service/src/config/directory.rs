//! Configuration directories, as envoyproxy/ratelimit's runtime directory holds its domain
//! files, and the merging of domains defined more than once.
//!
//! # What a directory holds
//!
//! `floodgate serve --config DIR` and `floodgate check-config DIR` read every regular file (or
//! link to one) directly in `DIR` whose name ends in `.yaml` or `.yml` and does not start with
//! `.`; subdirectories and other files are ignored. Files are read in byte order of their names.
//! Each file is either:
//!
//! - an envoyproxy/ratelimit domain file (its top level has a `domain` key): one domain; or
//! - a Floodgate native file (any other file): at most **one** per directory. It gives
//!   everything but the domains of the other files (listen addresses, plans, limiters, named
//!   limits, `rls` settings) and may list domains of its own in `domains`. The sections it
//!   leaves out are the built-in ones, as for a single file, but for `domains`: a directory's
//!   domains come from its files only. Without one, the directory runs next to the built-in
//!   pipeline, plans and limits of [`Config::builtin`](super::Config::builtin) (not its
//!   `example` domain).
//!
//! A directory with no such file is refused, and so is a second native file (naming both).
//!
//! # Domains defined more than once
//!
//! With `rls.merge_domains` off (the default, as envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`),
//! a domain defined twice is refused, naming both places (file, and `domains[i]` in a native
//! file). With it on, the definitions' top-level descriptors are joined into one domain, in
//! file order (the first definition's first); a top-level descriptor with the same key and value
//! in two definitions is refused, naming both places. Nested descriptors are never joined.
//!
//! Every file is checked on its own first, so an error in a file names it, with the path of
//! the field inside it.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::envoy::{self, DomainConfig};
use super::rls::Overrides;
use super::{Config, ConfigFileError, Source};

/// Where a domain, or a top-level descriptor, is defined: a file, and the field's path in it
/// (empty for a whole envoyproxy/ratelimit file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The file (`None` for a configuration read from text).
    pub file: Option<PathBuf>,
    /// The field's path in the file: `domains[1]`, `descriptors[0]`,
    /// `domains[1].descriptors[0]`, or empty.
    pub path: String,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.path.is_empty()) {
            (Some(file), true) => write!(f, "{}", file.display()),
            (Some(file), false) => write!(f, "{} at `{}`", file.display(), self.path),
            (None, true) => f.write_str("the configuration"),
            (None, false) => write!(f, "`{}`", self.path),
        }
    }
}

/// Why the files of a configuration directory (or the domains of one configuration) do not fit
/// together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    /// The directory holds no configuration file.
    #[error("{}: no configuration file in the directory (files ending in .yaml or .yml, not starting with a dot)", dir.display())]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
    /// Two files of the directory are Floodgate native files.
    #[error("{} and {}: a directory holds at most one Floodgate native file; the others must be envoyproxy/ratelimit domain files (with a top-level `domain`)", first.display(), second.display())]
    TwoNativeFiles {
        /// The first, in name order.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
    /// A domain is defined twice and merging is off.
    #[error("duplicate domain `{domain}`: defined in {first} and in {second} (turn on rls.merge_domains, --merge-domains or FLOODGATE_MERGE_DOMAINS to merge them)")]
    DuplicateDomain {
        /// The domain.
        domain: String,
        /// The first definition.
        first: Place,
        /// The second.
        second: Place,
    },
    /// Two definitions of a merged domain have a top-level descriptor with the same key and
    /// value.
    #[error("domain `{domain}`: duplicate descriptor {what}: defined in {first} and in {second}")]
    DuplicateDescriptor {
        /// The domain.
        domain: String,
        /// The key and value, as `key `k` with value `v`` or `key `k` without a value`.
        what: String,
        /// The first descriptor.
        first: Place,
        /// The second.
        second: Place,
    },
}

/// One definition of a domain, and where it is.
#[derive(Debug)]
pub(super) struct Definition {
    pub(super) place: Place,
    pub(super) domain: DomainConfig,
}

/// A configuration whose domains are `definitions`' alone (a runtime directory's files, the
/// resources pushed over xDS): the other sections are `overrides`' base (the built-in
/// example's, or none under upstream's settings), and the domains are merged as
/// `rls.merge_domains` says.
pub(super) fn domains_only(
    definitions: Vec<Definition>,
    overrides: &Overrides,
) -> Result<Config, ConfigFileError> {
    let mut config = Config {
        domains: Vec::new(),
        ..Config::base(overrides)
    };
    overrides.apply(&mut config, &|_| false);
    config.domains = merge_domains(definitions, config.rls.merge_domains)?;
    Ok(config)
}

/// Joins `definitions`, in order, into one list of distinct domains (see the module's "Domains
/// defined more than once"). Each definition must already be valid on its own.
pub(super) fn merge_domains(
    definitions: Vec<Definition>,
    merge: bool,
) -> Result<Vec<DomainConfig>, Box<DirectoryError>> {
    struct Merged {
        first: Place,
        domain: DomainConfig,
        /// (key, value) of each top-level descriptor → where it is.
        seen: HashMap<(String, String), Place>,
    }
    let mut merged: Vec<Merged> = Vec::new();
    for Definition { place, domain } in definitions {
        let index = match merged.iter().position(|m| m.domain.domain == domain.domain) {
            Some(i) if !merge => {
                return Err(Box::new(DirectoryError::DuplicateDomain {
                    domain: domain.domain,
                    first: merged[i].first.clone(),
                    second: place,
                }))
            }
            Some(i) => i,
            None => {
                merged.push(Merged {
                    first: place.clone(),
                    domain: DomainConfig {
                        domain: domain.domain.clone(),
                        descriptors: Vec::new(),
                    },
                    seen: HashMap::new(),
                });
                merged.len() - 1
            }
        };
        let target = &mut merged[index];
        let prefix = if place.path.is_empty() {
            String::new()
        } else {
            format!("{}.", place.path)
        };
        for (j, descriptor) in domain.descriptors.into_iter().enumerate() {
            let value = descriptor.value.clone().unwrap_or_default();
            let here = Place {
                file: place.file.clone(),
                path: format!("{prefix}descriptors[{j}]"),
            };
            if let Some(first) = target.seen.get(&(descriptor.key.clone(), value.clone())) {
                let what = if value.is_empty() {
                    format!("key `{}` without a value", descriptor.key)
                } else {
                    format!("key `{}` with value `{value}`", descriptor.key)
                };
                return Err(Box::new(DirectoryError::DuplicateDescriptor {
                    domain: target.domain.domain.clone(),
                    what,
                    first: first.clone(),
                    second: here,
                }));
            }
            target.seen.insert((descriptor.key.clone(), value), here);
            target.domain.descriptors.push(descriptor);
        }
    }
    Ok(merged.into_iter().map(|m| m.domain).collect())
}

/// The definitions of a native configuration's `domains`, each placed at `domains[i]` in
/// `file`.
pub(super) fn native_definitions(config: &mut Config, file: Option<&Path>) -> Vec<Definition> {
    std::mem::take(&mut config.domains)
        .into_iter()
        .enumerate()
        .map(|(i, domain)| Definition {
            place: Place {
                file: file.map(Path::to_path_buf),
                path: format!("domains[{i}]"),
            },
            domain,
        })
        .collect()
}

/// Checks each of a native configuration's domains on its own, with errors at `domains[i]…`
/// placed in the text read as `source`.
pub(super) fn check_native_domains(
    config: &Config,
    source: &Source,
) -> Result<(), ConfigFileError> {
    for (i, domain) in config.domains.iter().enumerate() {
        envoy::compile_domains(std::slice::from_ref(domain))
            .map_err(|e| match e {
                ConfigFileError::Invalid { path, message } => ConfigFileError::Invalid {
                    path: path.replacen("domains[0]", &format!("domains[{i}]"), 1),
                    message,
                },
                other => other,
            })
            .map_err(|e| source.place(e))?;
    }
    Ok(())
}

/// The configuration files of `dir`, sorted by name (see the module's "What a directory
/// holds").
pub fn config_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigFileError> {
    let io = |e: std::io::Error| ConfigFileError::Io {
        file: dir.to_path_buf(),
        message: e.to_string(),
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        // `is_file` follows links, so a link to a file (a Kubernetes ConfigMap's) counts.
        if yaml && !name.starts_with('.') && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads a configuration directory (see the [module documentation](self)), with `overrides`
/// applied; its values are checked when it is built.
pub(super) fn load_dir(dir: &Path, overrides: &Overrides) -> Result<Config, ConfigFileError> {
    let files = config_files(dir)?;
    if files.is_empty() {
        return Err(DirectoryError::Empty {
            dir: dir.to_path_buf(),
        }
        .into());
    }
    let mut native: Option<(PathBuf, Config, Source)> = None;
    let mut definitions = Vec::new();
    for file in files {
        let text = super::read_text(&file)?;
        let source = Source::read(&text, Some(&file))?;
        let value = super::read_tree(&text, &source)?;
        if envoy::is_envoy_file(&value) {
            let domain = envoy::read_file(&text, &value, &source)?;
            definitions.push(Definition {
                place: Place {
                    file: Some(file),
                    path: String::new(),
                },
                domain,
            });
            continue;
        }
        if let Some((first, _, _)) = &native {
            return Err(DirectoryError::TwoNativeFiles {
                first: first.clone(),
                second: file,
            }
            .into());
        }
        let mut config = Config::read_native(&text, &source)?;
        // The directory's domain files give domains: the built-in one never joins them.
        config.fill_absent(&value, false, super::Config::base(overrides));
        check_native_domains(&config, &source)?;
        definitions.extend(native_definitions(&mut config, Some(&file)));
        native = Some((file, config, source));
    }
    let mut config = match native {
        Some((_, mut config, source)) => {
            config.origin = source.into_origin();
            config
        }
        None => Config {
            domains: Vec::new(),
            ..Config::base(overrides)
        },
    };
    let origin = config.origin.clone();
    overrides.apply(&mut config, &|path| origin.writes(path));
    config.domains = merge_domains(definitions, config.rls.merge_domains)?;
    Ok(config)
}
