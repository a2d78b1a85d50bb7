//! The file store's promise, through its public surface: a graceful stop loses nothing, a
//! `kill -9` (a real child process, killed) loses at most the last `sync_interval`, a lease of
//! the dead process holds its place until its TTL, bad directories and files are refused with
//! their path (and offset), a torn tail is recovered.
#![cfg(feature = "file")]

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use floodgate::algorithm::concurrency::Concurrency;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{FileStore, FileStoreError, KeyedOp, Link, Linked, Store};
use floodgate::{FixedWindow, Gcra, LeaseId, ManualClock, Nanos, Op, TokenBucket};

// The suite every store runs lives with the Redis tests' helpers, which need the `redis` feature.
#[cfg(feature = "redis")]
mod conformance;
#[cfg(feature = "redis")]
mod redis_common;

const T0: Nanos = Nanos(1_700_000_000_000_000_000);
const LIMIT: u64 = 1_000_000;
const CHILD_DIR: &str = "FLOODGATE_FILE_STORE_CHILD_DIR";

/// Polls a future that must be ready at once (the file store's decisions are).
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("the file store's future was not ready"),
    }
}

fn window() -> AnyAlgorithm {
    FixedWindow::new(LIMIT, Duration::from_secs(3_600))
        .unwrap()
        .into()
}

/// What `key` has counted in the window, read with a probe (a check of cost 0).
fn counted(store: &FileStore, key: &str) -> u64 {
    LIMIT
        - now(store.apply(&window(), key, Op::Check { cost: 0 }))
            .unwrap()
            .remaining
}

fn open(dir: &Path, clock: &ManualClock) -> FileStore {
    FileStore::builder(dir)
        .clock(clock.clone())
        .sync_interval(Duration::from_secs(86_400))
        .build()
        .unwrap()
}

#[test]
fn a_graceful_close_then_open_loses_nothing() {
    let dir = TempDir::new("close");
    let clock = ManualClock::new(T0);
    let gcra: AnyAlgorithm = Gcra::new(4, 1, Duration::from_secs(60)).unwrap().into();
    let bucket: AnyAlgorithm = TokenBucket::new(1.0, 3).unwrap().into();
    let store = open(dir.path(), &clock);
    for _ in 0..7 {
        let _ = now(store.apply(&window(), "w", Op::Check { cost: 2 })).unwrap();
    }
    let chain = [link(&gcra, "g", true), link(&bucket, "b", false)];
    for _ in 0..3 {
        now(store.apply_chain(&chain)).unwrap();
    }
    let expect_g = now(store.apply(&gcra, "g", Op::Check { cost: 0 })).unwrap();
    let expect_b = now(store.apply(&bucket, "b", Op::Check { cost: 0 })).unwrap();
    store.close();
    assert!(now(store.probe()).is_err(), "a closed store is not durable");
    drop(store);
    let store = open(dir.path(), &clock);
    assert_eq!(counted(&store, "w"), 14);
    assert_eq!(
        now(store.apply(&gcra, "g", Op::Check { cost: 0 })).unwrap(),
        expect_g
    );
    assert_eq!(
        now(store.apply(&bucket, "b", Op::Check { cost: 0 })).unwrap(),
        expect_b
    );
    assert_eq!(store.stats().keys, 3);
    now(store.probe()).unwrap();
}

/// Dropping the last clone is a graceful close too (what the service does on SIGTERM).
#[test]
fn dropping_the_last_clone_closes_gracefully() {
    let dir = TempDir::new("drop");
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    let clone = store.clone();
    let _ = now(store.apply(&window(), "k", Op::Check { cost: 5 })).unwrap();
    drop(store);
    let _ = now(clone.apply(&window(), "k", Op::Check { cost: 1 })).unwrap();
    drop(clone);
    assert_eq!(counted(&open(dir.path(), &clock), "k"), 6);
}

fn link<'a>(
    a: &'a AnyAlgorithm,
    key: &'a str,
    all_or_nothing: bool,
) -> Link<'a, str, AnyAlgorithm> {
    Link {
        request: KeyedOp {
            algorithm: a,
            key,
            op: Op::Check { cost: 1 },
        },
        refuses: true,
        stops: true,
        all_or_nothing,
        fails_closed: false,
        joins_previous: false,
    }
}

/// The child process of [`kill_9_loses_at_most_the_decisions_after_the_last_commit`]: does
/// nothing unless started by it.
#[test]
fn child_decides_until_killed() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let store = FileStore::builder(PathBuf::from(dir))
        .clock(ManualClock::new(T0))
        .sync_interval(Duration::from_millis(20))
        .build()
        .unwrap();
    let decide = |n| {
        for _ in 0..n {
            assert!(
                now(store.apply(&window(), "k", Op::Check { cost: 1 }))
                    .unwrap()
                    .allowed
            );
        }
    };
    decide(100);
    store.sync().unwrap();
    println!("FG-SYNCED");
    decide(50);
    // Waiting for the background thread's next commit, as one waits for a server to come up.
    let syncs = store.journal_stats().syncs;
    for _ in 0..10_000 {
        if store.journal_stats().syncs > syncs {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        store.journal_stats().syncs > syncs,
        "no background commit in 20 s"
    );
    println!("FG-COMMITTED");
    decide(25);
    println!("FG-DECIDED");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn kill_9_loses_at_most_the_decisions_after_the_last_commit() {
    let dir = TempDir::new("kill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_decides_until_killed", "--exact", "--nocapture"])
        .env(CHILD_DIR, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut marks = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        if line.starts_with("FG-") {
            marks.push(line.clone());
        }
        if line == "FG-DECIDED" {
            break;
        }
    }
    // SIGKILL: no destructor, no final snapshot.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(marks, ["FG-SYNCED", "FG-COMMITTED", "FG-DECIDED"]);
    let store = open(dir.path(), &ManualClock::new(T0));
    let n = counted(&store, "k");
    // The explicit sync's 100 and the background commit's 50 survive; of the last 25, those
    // the next commit took before the kill.
    assert!((150..=175).contains(&n), "{n} decisions survived");
}

#[test]
fn a_lease_of_the_stopped_process_holds_its_place_until_its_ttl() {
    let dir = TempDir::new("lease");
    let clock = ManualClock::new(T0);
    let limit: AnyAlgorithm = Concurrency::new(1, Duration::from_secs(10)).unwrap().into();
    let acquire = |store: &FileStore, id| {
        now(store.apply(
            &limit,
            "c",
            Op::Acquire {
                lease: LeaseId(id),
                critical: false,
            },
        ))
        .unwrap()
        .allowed
    };
    let store = open(dir.path(), &clock);
    assert!(acquire(&store, 1));
    store.close();
    drop(store);
    clock.advance(Duration::from_secs(1));
    let store = open(dir.path(), &clock);
    assert!(
        !acquire(&store, 2),
        "the lease taken before the stop still counts"
    );
    clock.advance(Duration::from_secs(9));
    assert!(acquire(&store, 2), "and frees at its expiry");
}

#[test]
fn settings_and_directories_that_cannot_work_are_refused_naming_them() {
    let e = FileStore::builder("/tmp/x")
        .sync_interval(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(e.config_error().is_some());
    assert!(
        e.to_string().contains("sync_interval") && e.to_string().contains("0s"),
        "{e}"
    );
    let e = FileStore::builder("").build().unwrap_err();
    assert!(e.to_string().contains("`path`"), "{e}");

    let dir = TempDir::new("refused");
    std::fs::create_dir_all(dir.path()).unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let under_a_file = file.join("store");
    let e = FileStore::builder(&under_a_file).build().unwrap_err();
    assert!(matches!(e, FileStoreError::Io { .. }), "{e}");
    assert!(
        e.to_string().contains(&under_a_file.display().to_string()),
        "{e}"
    );
}

#[test]
fn a_directory_another_store_holds_is_refused() {
    let dir = TempDir::new("locked");
    let clock = ManualClock::new(T0);
    let first = open(dir.path(), &clock);
    let e = FileStore::builder(dir.path()).build().unwrap_err();
    assert!(matches!(e, FileStoreError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("lock"), "{e}");
    first.close();
    drop(open(dir.path(), &clock));
}

/// A copy of `from`'s files, as a crash at this instant would leave them, in a new directory.
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for name in ["snapshot", "journal"] {
        std::fs::copy(from.join(name), to.join(name)).unwrap();
    }
}

#[test]
fn a_torn_tail_is_recovered_and_a_corrupt_record_refused_at_its_offset() {
    let dir = TempDir::new("torn");
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    for key in ["a", "b", "c"] {
        let _ = now(store.apply(&window(), key, Op::Check { cost: 3 })).unwrap();
    }
    store.sync().unwrap();
    let journal = std::fs::read(dir.path().join("journal")).unwrap();
    assert_eq!(store.journal_stats().records, 3);

    // The last record cut short: the first two are kept.
    let torn = TempDir::new("torn-copy");
    copy_files(dir.path(), torn.path());
    std::fs::write(torn.path().join("journal"), &journal[..journal.len() - 3]).unwrap();
    let back = open(torn.path(), &clock);
    assert_eq!(back.len(), 2);
    back.close();

    // A byte flipped in the first record: refused, naming the journal and the record's offset.
    let corrupt = TempDir::new("corrupt-copy");
    copy_files(dir.path(), corrupt.path());
    let mut flipped = journal.clone();
    flipped[24 + 12] ^= 0x40;
    std::fs::write(corrupt.path().join("journal"), &flipped).unwrap();
    let e = FileStore::builder(corrupt.path()).build().unwrap_err();
    match &e {
        FileStoreError::Corrupt { path, offset, .. } => {
            assert_eq!(path, &corrupt.path().join("journal"));
            assert_eq!(*offset, 24);
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string().contains("journal") && e.to_string().contains("byte 24"),
        "{e}"
    );

    // A snapshot that is not one: refused at byte 0.
    let bad = TempDir::new("magic-copy");
    copy_files(dir.path(), bad.path());
    std::fs::write(
        bad.path().join("snapshot"),
        b"NOPE and more bytes than a header",
    )
    .unwrap();
    let e = FileStore::builder(bad.path()).build().unwrap_err();
    assert!(
        matches!(e, FileStoreError::Corrupt { offset: 0, .. }),
        "{e}"
    );
}

#[test]
fn journal_stats_and_probe_follow_the_commits() {
    let dir = TempDir::new("stats");
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    now(store.probe()).unwrap();
    let before = store.journal_stats();
    assert_eq!(before.snapshots, 1, "the open writes a snapshot");
    let outcomes = now(store.apply_chain(&[link(&window(), "x", false)])).unwrap();
    assert!(matches!(outcomes[0], Linked::Decided(_)));
    clock.advance(Duration::from_secs(2));
    store.sync().unwrap();
    let after = store.journal_stats();
    assert_eq!(after.syncs, before.syncs + 1);
    assert_eq!(after.records, 1);
    assert_eq!(after.last_durable, Some(Nanos(T0.0 + 2_000_000_000)));
    assert!(after.bytes > before.bytes);
    assert_eq!(after.last_error, None);
    // Nothing changed: a commit writes nothing.
    store.sync().unwrap();
    assert_eq!(store.journal_stats().syncs, after.syncs);
}

/// The suite every store runs (`conformance::store_agrees_with_the_memory_store`): the file
/// store decides as the memory store does, for every algorithm family.
#[cfg(feature = "redis")]
#[test]
fn the_store_conformance_suite_passes() {
    use floodgate::store::Capabilities;
    let dir = TempDir::new("conformance");
    let clock = ManualClock::new(Nanos(redis_common::START));
    let store = open(dir.path(), &clock);
    assert_eq!(store.kind(), "file");
    assert!(!store.is_shared() && store.chains_atomically());
    conformance::store_agrees_with_the_memory_store(&redis_common::runtime(), &clock, &store);
}

/// A directory under the system's temporary one, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "floodgate-file-store-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
