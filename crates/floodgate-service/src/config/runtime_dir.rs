//! envoyproxy/ratelimit's runtime directory, read as upstream reads it (its `RUNTIME_*`
//! settings), and where a change to it shows.
//!
//! # What is read
//!
//! The **target** directory is walked recursively, in byte order of the names, and **every**
//! regular file in it is read as an envoyproxy/ratelimit domain file, whatever its name (a file
//! that is not one fails the whole load, naming it, as upstream):
//!
//! - `watch_root` (`RUNTIME_WATCH_ROOT=true`, upstream's default): the target is
//!   `root/subdirectory`, and only the files under its `appdirectory/` are kept (upstream keeps
//!   the files whose dotted key starts with `appdirectory.`: so also a file directly in the
//!   subdirectory named like `config.yaml`, or under a `config.d/` directory). An empty
//!   `subdirectory` reads nothing, as upstream.
//! - otherwise: the target is `root/subdirectory/appdirectory`, every file in it. An empty
//!   `appdirectory` reads nothing.
//!
//! A link to a file is read through; a link to a directory is not followed (upstream fails to
//! read it and goes on: so does Floodgate, with a warning). With `ignore_dotfiles`
//! (`RUNTIME_IGNOREDOTFILES`), files and directories whose name starts with `.` are skipped:
//! set it for a Kubernetes ConfigMap mount, whose `..data` directory holds every file a second
//! time.
//!
//! Domains defined in several files are refused, or merged with `rls.merge_domains`
//! (`MERGE_DOMAIN_CONFIG`), as for a configuration directory ([`super::directory`]). The rest of
//! the configuration (pipeline, plans, named limits) is the built-in one, as for a directory
//! without a Floodgate file.
//!
//! # What shows a change ([`RuntimeDir::watched`])
//!
//! - `watch_root`: the directory holding `root`: `root` is a link (`current`) swapped to a new
//!   tree, the deployment's atomic update.
//! - otherwise: the target directory and every directory under it (Kubernetes swaps a
//!   ConfigMap's `..data` link inside the mounted directory).

use std::path::{Path, PathBuf};

use super::directory::{domains_only, Definition, Place};
use super::{envoy, Config, ConfigFileError, Overrides, Source};

/// A runtime directory and how it is read (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeDir {
    /// `RUNTIME_ROOT`.
    pub root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY`.
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY`.
    pub appdirectory: String,
    /// `RUNTIME_IGNOREDOTFILES`.
    pub ignore_dotfiles: bool,
    /// `RUNTIME_WATCH_ROOT`.
    pub watch_root: bool,
}

impl RuntimeDir {
    /// The directory walked, or `None` when the settings read nothing (an empty subdirectory
    /// with `watch_root`, an empty appdirectory without).
    pub fn target(&self) -> Option<PathBuf> {
        if self.watch_root {
            (!self.subdirectory.is_empty()).then(|| self.root.join(&self.subdirectory))
        } else {
            (!self.appdirectory.is_empty())
                .then(|| self.root.join(&self.subdirectory).join(&self.appdirectory))
        }
    }

    /// The files read, in order (see the module's "What is read").
    pub fn files(&self) -> Result<Vec<PathBuf>, ConfigFileError> {
        let Some(target) = self.target() else {
            return Ok(Vec::new());
        };
        let mut files = Vec::new();
        walk(&target, self.ignore_dotfiles, &mut files)?;
        if self.watch_root {
            let prefix = format!("{}.", self.appdirectory);
            files.retain(|file| {
                let key = file
                    .strip_prefix(&target)
                    .unwrap_or(file)
                    .to_string_lossy()
                    .replace('/', ".");
                key.starts_with(&prefix)
            });
        }
        Ok(files)
    }

    /// The directories whose changes may change what is read: see the module's "What shows a
    /// change".
    pub fn watched(&self) -> Vec<PathBuf> {
        if self.watch_root {
            let parent = self
                .root
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            return vec![parent];
        }
        let Some(target) = self.target() else {
            return Vec::new();
        };
        let mut dirs = vec![target.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(entries) = std::fs::read_dir(&dirs[i]) {
                let mut found: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect();
                found.sort();
                dirs.extend(found);
            }
            i += 1;
        }
        dirs
    }

    /// Reads the configuration: the domains of [`RuntimeDir::files`] beside the built-in
    /// pipeline, with `overrides` applied.
    pub fn load(&self, overrides: &Overrides) -> Result<Config, ConfigFileError> {
        let files = self.files()?;
        if files.is_empty() {
            tracing::warn!(
                root = %self.root.display(),
                subdirectory = %self.subdirectory,
                appdirectory = %self.appdirectory,
                "the runtime directory holds no configuration file: no domain is configured"
            );
        }
        let mut definitions = Vec::new();
        for file in files {
            let text = super::read_text(&file)?;
            let source = Source::read(&text, Some(&file))?;
            let value = super::read_tree(&text, &source)?;
            if !envoy::is_envoy_file(&value) {
                return Err(ConfigFileError::InFile {
                    file: Some(file.clone()),
                    line: None,
                    error: Box::new(ConfigFileError::invalid(
                        "domain",
                        "every file of a runtime directory is an envoyproxy/ratelimit domain file, with a top-level `domain`",
                    )),
                });
            }
            let domain = envoy::read_file(&text, &value, &source)?;
            definitions.push(Definition {
                place: Place {
                    file: Some(file),
                    path: String::new(),
                },
                domain,
            });
        }
        domains_only(definitions, overrides)
    }
}

/// Appends the regular files under `dir` (recursively, in name order) to `files`.
fn walk(
    dir: &Path,
    ignore_dotfiles: bool,
    files: &mut Vec<PathBuf>,
) -> Result<(), ConfigFileError> {
    let io = |e: std::io::Error| ConfigFileError::Io {
        file: dir.to_path_buf(),
        message: e.to_string(),
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for path in entries {
        let dot = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if ignore_dotfiles && dot {
            continue;
        }
        let kind = std::fs::symlink_metadata(&path).map_err(io)?.file_type();
        if kind.is_dir() {
            walk(&path, ignore_dotfiles, files)?;
        } else if kind.is_symlink() {
            // Read through a link to a file; a link to a directory is not followed.
            if path.is_dir() {
                tracing::warn!(path = %path.display(), "a link to a directory in the runtime directory is not followed");
            } else if path.is_file() {
                files.push(path);
            }
        } else if kind.is_file() {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "floodgate-runtime-dir-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn domain(name: &str) -> String {
        format!("domain: {name}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n")
    }

    #[test]
    fn files_are_walked_as_upstream_walks_them() {
        let base = temp("walk");
        let root = base.join("current");
        let config = root.join("ratelimit/config");
        std::fs::create_dir_all(config.join("nested")).unwrap();
        std::fs::create_dir_all(root.join("ratelimit/config.d")).unwrap();
        std::fs::create_dir_all(root.join("ratelimit/other")).unwrap();
        std::fs::write(config.join("b.yaml"), domain("b")).unwrap();
        std::fs::write(config.join("a.conf"), domain("a")).unwrap();
        std::fs::write(config.join("nested/c"), domain("c")).unwrap();
        std::fs::write(config.join(".hidden.yaml"), domain("h")).unwrap();
        std::fs::write(root.join("ratelimit/config.yaml"), domain("top")).unwrap();
        std::fs::write(root.join("ratelimit/config.d/d.yaml"), domain("d")).unwrap();
        std::fs::write(root.join("ratelimit/other/x.yaml"), domain("x")).unwrap();
        let dir = RuntimeDir {
            root: root.clone(),
            subdirectory: "ratelimit".into(),
            appdirectory: "config".into(),
            ignore_dotfiles: false,
            watch_root: true,
        };
        let names: Vec<String> = dir
            .files()
            .unwrap()
            .iter()
            .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "ratelimit/config/.hidden.yaml",
                "ratelimit/config/a.conf",
                "ratelimit/config/b.yaml",
                "ratelimit/config/nested/c",
                "ratelimit/config.d/d.yaml",
                "ratelimit/config.yaml",
            ]
        );
        assert_eq!(dir.watched(), vec![base.clone()]);
        let ignoring = RuntimeDir {
            ignore_dotfiles: true,
            watch_root: false,
            ..dir.clone()
        };
        let names: Vec<String> = ignoring
            .files()
            .unwrap()
            .iter()
            .map(|f| f.strip_prefix(&config).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.conf", "b.yaml", "nested/c"]);
        assert_eq!(
            ignoring.watched(),
            vec![config.clone(), config.join("nested")]
        );
        let loaded = ignoring.load(&Overrides::default()).unwrap();
        let domains: Vec<&str> = loaded.domains.iter().map(|d| d.domain.as_str()).collect();
        assert_eq!(domains, ["a", "b", "c"]);
        // Nothing to read: no domains, no error.
        let nothing = RuntimeDir {
            subdirectory: String::new(),
            ..dir.clone()
        };
        assert!(nothing
            .load(&Overrides::default())
            .unwrap()
            .domains
            .is_empty());
        // A file that is not a domain file fails the load, naming it.
        std::fs::write(config.join("README"), "just words\n").unwrap();
        let e = ignoring
            .load(&Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("README"), "{e}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
