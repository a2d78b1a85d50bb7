//! Following the configuration's files: `serve --watch` (on by default for a directory and for
//! envoyproxy/ratelimit's runtime directory) reloads the configuration when its files change,
//! without a signal.
//!
//! What is watched (inotify, through `notify`):
//!
//! - a file: the directory holding it (an editor replaces a file by renaming a new one over
//!   it; a Kubernetes ConfigMap swaps the `..data` link beside it);
//! - a directory: it and everything under it;
//! - a runtime directory: the directory holding `RUNTIME_ROOT`, so that swapping the
//!   `current` link to a new tree is seen, and the tree read, so that files written in place,
//!   and a ConfigMap's `..data` swap, are seen too ([`RuntimeDir::watched`]).
//!
//! Changes are **debounced**: after the first event, the reload waits until no event has come
//! for [`QUIET`] (at most [`MOST_WAIT`] in all), so that a burst of writes (a deployment tool
//! writing several files, a half-written file and its end) is one reload. Watches are set
//! again before each reload, since a swapped link leaves the old tree's watches behind. A
//! reload happens only when the files read differ from the last ones read (their names and
//! contents), so that events that change nothing (a chmod, a file rewritten with the same
//! text) reload nothing. A new configuration that fails to load keeps the running one; the
//! failure is logged and counted (`floodgate_reloads_total{result="failed"}`), and the
//! next change is tried again.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::{directory, ConfigSource, RuntimeDir};
use crate::service::Server;

/// How long the files must stay quiet before a reload.
pub const QUIET: Duration = Duration::from_millis(250);

/// The longest a reload waits for the files to go quiet, counted from the first event.
pub const MOST_WAIT: Duration = Duration::from_secs(2);

/// How long to wait before trying again to watch files that could not be watched (a directory
/// not there yet).
const REARM: Duration = Duration::from_secs(5);

/// Reloads `server`'s configuration whenever the files of `source` change (see the [module
/// documentation](self)). The files are fingerprinted when this is called, before the future
/// runs: call it right after loading them, so that a change made before the watch is set is
/// still seen. Runs for as long as the process serves.
pub fn follow(server: Arc<Server>, source: ConfigSource) -> impl std::future::Future<Output = ()> {
    let loaded = fingerprint(&source);
    async move {
        let label = source.to_string();
        follow_files(
            &label,
            || watched(&source),
            || fingerprint(&source),
            loaded,
            || {
                // The reload logs and counts what it did, or why it was refused (the running
                // configuration then stays).
                let _ = server.reload(crate::service::Trigger::Watcher);
            },
        )
        .await;
    }
}

/// Reloads a listener's TLS files whenever they change (the same watching and debouncing as
/// the configuration's; a Kubernetes secret's `..data` swap is seen in the directory holding
/// the files). A new certificate that does not load keeps the running one, logged and
/// counted. As [`follow`], the files are fingerprinted when this is called. Runs for as long
/// as the process serves.
pub fn follow_tls(
    tls: Arc<crate::connections::tls::TlsTerminator>,
) -> impl std::future::Future<Output = ()> {
    let files = tls.files();
    let loaded = Some(hash_files(&files));
    async move {
        let label = format!("the {} listener's TLS files", tls.listener());
        follow_files(
            &label,
            || {
                let mut paths: Vec<(PathBuf, RecursiveMode)> = Vec::new();
                for file in &files {
                    for dir in watched_dirs(file) {
                        if !paths.iter().any(|(p, _)| *p == dir) {
                            paths.push((dir, RecursiveMode::NonRecursive));
                        }
                    }
                }
                paths
            },
            || Some(hash_files(&files)),
            loaded,
            || match tls.reload() {
                Ok(()) => tracing::info!(listener = tls.listener(), "TLS certificate reloaded: its files changed"),
                Err(error) => tracing::error!(listener = tls.listener(), %error, "the changed TLS files do not load; the running certificate stays"),
            },
        )
        .await;
    }
}

/// Watches the paths `watched` names, and calls `reload` after each debounced change that
/// changes `fingerprint` from the last one reloaded (at first `loaded`, the files' fingerprint
/// when they were loaded); `what` names them in logs.
async fn follow_files(
    what: &str,
    watched: impl Fn() -> Vec<(PathBuf, RecursiveMode)>,
    fingerprint: impl Fn() -> Option<u64>,
    loaded: Option<u64>,
    mut reload: impl FnMut(),
) {
    let (changed, mut changes) = mpsc::channel::<()>(1);
    let mut seen = loaded;
    let mut watcher = None;
    loop {
        match arm(&watched(), changed.clone()) {
            Ok(new) => watcher = Some(new),
            Err(error) => {
                tracing::warn!(%error, what, "cannot watch the files; trying again in 5 s");
                tokio::time::sleep(REARM).await;
            }
        }
        if watcher.is_none() {
            continue;
        }
        // A change made while no watch was set (before the first one was) sent no event:
        // the fingerprint shows it, and it is reloaded at once.
        if fingerprint() == seen {
            if changes.recv().await.is_none() {
                return;
            }
            let started = tokio::time::Instant::now();
            while started.elapsed() < MOST_WAIT {
                match tokio::time::timeout(QUIET, changes.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
        }
        let now = fingerprint();
        if now == seen {
            tracing::debug!(what, "the files changed nothing");
            continue;
        }
        seen = now;
        // Watches first (the next change is seen even while reloading), then the reload.
        if let Ok(new) = arm(&watched(), changed.clone()) {
            watcher = Some(new);
        }
        reload();
    }
}

/// A watcher on `paths`, sending `()` on `changed` for each event that may change what they
/// hold.
fn arm(
    paths: &[(PathBuf, RecursiveMode)],
    changed: mpsc::Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match event {
            // Reading the files (the reload itself) must not look like a change.
            Ok(event) => !matches!(
                event.kind,
                EventKind::Access(_)
                    | EventKind::Modify(notify::event::ModifyKind::Metadata(
                        notify::event::MetadataKind::AccessTime
                    ))
            ),
            // An overflowed queue may have lost a change: look.
            Err(_) => true,
        };
        if relevant {
            // A full channel already says "changed".
            let _ = changed.try_send(());
        }
    })?;
    for (path, mode) in paths {
        watcher.watch(path, *mode)?;
    }
    Ok(watcher)
}

/// The directories to watch for a file: the one holding it, and, when it is a link to a file
/// elsewhere, that file's too.
fn watched_dirs(path: &Path) -> Vec<PathBuf> {
    let parent = parent_of(path);
    let mut dirs = vec![parent.clone()];
    if let Ok(real) = path.canonicalize() {
        let real_parent = parent_of(&real);
        if real_parent != parent {
            dirs.push(real_parent);
        }
    }
    dirs
}

/// The paths to watch for `source`.
fn watched(source: &ConfigSource) -> Vec<(PathBuf, RecursiveMode)> {
    match source {
        ConfigSource::Builtin => Vec::new(),
        ConfigSource::Path(path) if path.is_dir() => vec![(path.clone(), RecursiveMode::Recursive)],
        ConfigSource::Path(path) => watched_dirs(path)
            .into_iter()
            .map(|dir| (dir, RecursiveMode::NonRecursive))
            .collect(),
        ConfigSource::Runtime(dir) => runtime_watches(dir),
    }
}

fn runtime_watches(dir: &RuntimeDir) -> Vec<(PathBuf, RecursiveMode)> {
    let mut paths = Vec::new();
    if dir.watch_root {
        paths.extend(
            dir.watched()
                .into_iter()
                .map(|p| (p, RecursiveMode::NonRecursive)),
        );
    }
    if let Some(target) = dir.target().filter(|t| t.is_dir()) {
        paths.push((target, RecursiveMode::Recursive));
    }
    paths
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// A hash of the names and contents of the files `source` reads now (`None` when they cannot
/// be listed).
fn fingerprint(source: &ConfigSource) -> Option<u64> {
    let files = match source {
        ConfigSource::Builtin => return Some(0),
        ConfigSource::Path(path) if path.is_dir() => directory::config_files(path).ok()?,
        ConfigSource::Path(path) => vec![path.clone()],
        ConfigSource::Runtime(dir) => dir.files().ok()?,
    };
    Some(hash_files(&files))
}

/// A hash of `files`' names and contents (a file that cannot be read counts as empty).
fn hash_files(files: &[PathBuf]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in files {
        file.hash(&mut hasher);
        std::fs::read(file).ok().hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files changed after they were loaded but before the watch was set (a slow start under
    /// load) sent no event the watch could see: they are reloaded all the same.
    #[tokio::test]
    async fn a_change_before_the_watch_is_set_is_reloaded() {
        let dir = std::env::temp_dir().join(format!("floodgate-watch-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tls.crt");
        std::fs::write(&file, "first").unwrap();
        let files = vec![file.clone()];
        let loaded = Some(hash_files(&files));
        std::fs::write(&file, "second").unwrap();
        let (reloaded, mut done) = mpsc::channel::<()>(1);
        let follow = follow_files(
            "the test's file",
            || vec![(dir.clone(), RecursiveMode::NonRecursive)],
            || Some(hash_files(&files)),
            loaded,
            move || {
                let _ = reloaded.try_send(());
            },
        );
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::select! {
                _ = follow => false,
                got = done.recv() => got.is_some(),
            }
        })
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(waited, Ok(true), "reloaded without an event");
    }
}
