//! Following the configuration's files: `serve --watch` (on by default for a directory and for
//! envoyproxy/ratelimit's runtime directory) reloads the configuration when its files change,
//! without a signal.
//!
//! What is watched (inotify, through `notify`), and which events count (`relevant`):
//!
//! - a file: its entry in the directory holding it (an editor replaces a file by renaming a
//!   new one over it), and the `..`-named entries beside it (a Kubernetes ConfigMap swaps its
//!   `..data` link); other entries of that directory (a log file written there) count for
//!   nothing;
//! - a directory: it and everything under it;
//! - a runtime directory: the `RUNTIME_ROOT` entry in the directory holding it, so that
//!   swapping the `current` link to a new tree is seen, and the tree read, so that files
//!   written in place, and a ConfigMap's `..data` swap, are seen too
//!   ([`RuntimeDir::watched`]); nothing else beside `RUNTIME_ROOT` counts.
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
            || files.iter().flat_map(|file| file_watches(file)).collect(),
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
    watched: impl Fn() -> Vec<Watch>,
    fingerprint: impl Fn() -> Option<u64>,
    loaded: Option<u64>,
    mut reload: impl FnMut(),
) {
    let (changed, mut changes) = mpsc::channel::<Vec<PathBuf>>(1);
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
                    Ok(Some(_)) => continue,
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

/// One path a watcher follows, and which of the events under it count.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Watch {
    /// The directory watched.
    dir: PathBuf,
    /// Every event in the directory's tree counts (it is watched recursively); else only
    /// events on the entries named in `names`, directly in it.
    tree: bool,
    /// The names of the entries that count, with `tree` false. Names starting with `..` always
    /// count: a Kubernetes ConfigMap or Secret is swapped through its `..data` link and
    /// `..2024_…` directories.
    names: Vec<std::ffi::OsString>,
}

impl Watch {
    /// `dir` and everything under it.
    fn tree(dir: PathBuf) -> Watch {
        Watch {
            dir,
            tree: true,
            names: Vec::new(),
        }
    }

    /// The entries `names` of `dir` only (a file, a link that is swapped).
    fn entries(dir: PathBuf, names: Vec<std::ffi::OsString>) -> Watch {
        Watch {
            dir,
            tree: false,
            names,
        }
    }

    /// Whether an event on `path` (as the watcher reports it: under `dir` as given) is one
    /// this watch follows.
    fn covers(&self, path: &Path) -> bool {
        if self.tree {
            return path.starts_with(&self.dir);
        }
        if path.parent() != Some(self.dir.as_path()) {
            return false;
        }
        path.file_name().is_some_and(|name| {
            self.names.iter().any(|n| n == name) || name.to_string_lossy().starts_with("..")
        })
    }
}

/// Whether `event` may change what `watches` follow: an event of theirs that is not a read
/// (reading the files, as a reload does, must not look like a change), or one with no path
/// (the queue overflowed: a change may have been lost). Events on other entries of a watched
/// directory (a log file written beside the configuration) do not count.
fn relevant(watches: &[Watch], event: &notify::Event) -> bool {
    let read = matches!(
        event.kind,
        EventKind::Access(_)
            | EventKind::Modify(notify::event::ModifyKind::Metadata(
                notify::event::MetadataKind::AccessTime
            ))
    );
    !read
        && (event.paths.is_empty()
            || event
                .paths
                .iter()
                .any(|path| watches.iter().any(|w| w.covers(path))))
}

/// A watcher on `watches`, sending each relevant event's paths on `changed` ([`relevant`]).
fn arm(
    watches: &[Watch],
    changed: mpsc::Sender<Vec<PathBuf>>,
) -> notify::Result<notify::RecommendedWatcher> {
    let following = watches.to_vec();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let paths = match event {
            Ok(event) if relevant(&following, &event) => event.paths,
            Ok(_) => return,
            // An overflowed queue may have lost a change: look.
            Err(_) => Vec::new(),
        };
        // A full channel already says "changed".
        let _ = changed.try_send(paths);
    })?;
    for watch in watches {
        let mode = if watch.tree {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        watcher.watch(&watch.dir, mode)?;
    }
    Ok(watcher)
}

/// What to watch for a file: its entry in the directory holding it, and, when it is a link to
/// a file elsewhere, that file in its own directory.
fn file_watches(path: &Path) -> Vec<Watch> {
    let parent = parent_of(path);
    let name = path
        .file_name()
        .map(|n| vec![n.to_owned()])
        .unwrap_or_default();
    let mut watches = vec![Watch::entries(parent.clone(), name)];
    if let Ok(real) = path.canonicalize() {
        let real_parent = parent_of(&real);
        if real_parent != parent {
            let name = real
                .file_name()
                .map(|n| vec![n.to_owned()])
                .unwrap_or_default();
            watches.push(Watch::entries(real_parent, name));
        }
    }
    watches
}

/// What to watch for `source`.
fn watched(source: &ConfigSource) -> Vec<Watch> {
    match source {
        // Pushed, not read: only a Floodgate file naming the control plane is on disk.
        ConfigSource::Xds(xds) => xds.file.as_deref().map(file_watches).unwrap_or_default(),
        ConfigSource::Builtin => Vec::new(),
        ConfigSource::Path(path) if path.is_dir() => vec![Watch::tree(path.clone())],
        ConfigSource::Path(path) => file_watches(path),
        ConfigSource::Runtime(dir) => runtime_watches(dir),
    }
}

/// A runtime directory: with `watch_root`, the `RUNTIME_ROOT` entry (the `current` link that
/// a deployment swaps) in the directory holding it, and the tree read.
fn runtime_watches(dir: &RuntimeDir) -> Vec<Watch> {
    let mut watches = Vec::new();
    if dir.watch_root {
        let root = dir
            .root
            .file_name()
            .map(|n| vec![n.to_owned()])
            .unwrap_or_default();
        watches.extend(
            dir.watched()
                .into_iter()
                .map(|parent| Watch::entries(parent, root.clone())),
        );
    }
    if let Some(target) = dir.target().filter(|t| t.is_dir()) {
        watches.push(Watch::tree(target));
    }
    watches
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
        ConfigSource::Xds(xds) => xds.file.iter().cloned().collect(),
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

    fn event(kind: EventKind, paths: &[&str]) -> notify::Event {
        notify::Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        }
    }

    #[test]
    fn only_the_followed_entries_and_trees_count() {
        use notify::event::{CreateKind, DataChange, ModifyKind};
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        let watches = vec![
            Watch::entries("/srv/runtime_data".into(), vec!["current".into()]),
            Watch::tree("/srv/runtime_data/current/ratelimit".into()),
            Watch::entries("/etc/floodgate".into(), vec!["floodgate.yaml".into()]),
        ];
        for path in [
            "/srv/runtime_data/current",
            "/srv/runtime_data/current/ratelimit/config/rl.yaml",
            "/srv/runtime_data/current/ratelimit/deep/er/x.yaml",
            "/etc/floodgate/floodgate.yaml",
            // A ConfigMap's swap.
            "/etc/floodgate/..data",
            "/etc/floodgate/..2026_11_27_10_00_00.123",
        ] {
            assert!(relevant(&watches, &event(write, &[path])), "{path}");
        }
        for path in [
            // A log file beside RUNTIME_ROOT, an editor's swap file, a sibling config.
            "/srv/runtime_data/floodgate.log",
            "/etc/floodgate/.floodgate.yaml.swp",
            "/etc/floodgate/other.yaml",
            "/srv/runtime_data/current/other/x.yaml",
        ] {
            assert!(!relevant(&watches, &event(write, &[path])), "{path}");
        }
        // A rename onto the file counts through its destination.
        let rename = event(
            EventKind::Create(CreateKind::File),
            &[
                "/etc/floodgate/floodgate.yaml.tmp",
                "/etc/floodgate/floodgate.yaml",
            ],
        );
        assert!(relevant(&watches, &rename));
        // Reads never count; an event without a path always does.
        let read = event(
            EventKind::Access(notify::event::AccessKind::Any),
            &["/etc/floodgate/floodgate.yaml"],
        );
        assert!(!relevant(&watches, &read));
        assert!(relevant(&watches, &event(write, &[])));
    }

    /// Through the OS's own watcher: a hundred writes to a file beside the followed one send
    /// nothing; the followed file's change does. Events arrive in order, so by the time the
    /// followed file's event is received, every earlier write's has been seen.
    #[tokio::test]
    async fn writes_beside_the_followed_file_send_nothing() {
        let dir =
            std::env::temp_dir().join(format!("floodgate-watch-beside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("floodgate.yaml");
        let log = dir.join("floodgate.log");
        std::fs::write(&file, "first").unwrap();
        let (changed, mut changes) = mpsc::channel::<Vec<PathBuf>>(1024);
        let watcher = arm(&file_watches(&file), changed).unwrap();
        for i in 0..100 {
            std::fs::write(&log, format!("line {i}\n")).unwrap();
        }
        std::fs::write(&file, "second").unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(20), async {
            let mut before = Vec::new();
            while let Some(paths) = changes.recv().await {
                if paths.iter().any(|p| p.ends_with("floodgate.yaml")) {
                    return before;
                }
                before.push(paths);
            }
            before
        })
        .await;
        drop(watcher);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            seen,
            Ok(Vec::new()),
            "events sent before the followed file's"
        );
    }

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
            || file_watches(&file),
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
