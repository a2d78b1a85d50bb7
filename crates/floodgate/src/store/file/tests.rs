//! The file store's unit tests: every state's encoding round-trips, the framing tells a torn
//! tail from corruption, and (a property) after any decisions, syncs and a crash, the store
//! opens with exactly the states of its last durable point; after a graceful close, the last.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::record::{self, Next, HEADER_LEN};
use super::{codec, FileStore};
use crate::algorithm::concurrency::{Concurrency, Fleet};
use crate::algorithm::smooth::BurstyStart;
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::algorithm::Algorithm;
use crate::store::chain::Link;
use crate::store::{KeyedOp, Store};
use crate::{
    FixedWindow, Gcra, LeakyBucket, LeakyQueue, LeaseId, ManualClock, Nanos, Op, OpKind,
    SlidingLog, SlidingWindow, SmoothBursty, SmoothWarmingUp, TokenBucket,
};

/// Where each algorithm stands in [`one_of_each`]. Exhaustive: a new algorithm does not
/// compile here until it has a place, and then [`every_algorithm_is_covered`] fails until it
/// has a sample.
fn place(a: &AnyAlgorithm) -> usize {
    match a {
        AnyAlgorithm::TokenBucket(_) => 0,
        AnyAlgorithm::LeakyBucket(_) => 1,
        AnyAlgorithm::LeakyQueue(_) => 2,
        AnyAlgorithm::FixedWindow(_) => 3,
        AnyAlgorithm::SlidingLog(_) => 4,
        AnyAlgorithm::SlidingWindow(_) => 5,
        AnyAlgorithm::Gcra(_) => 6,
        AnyAlgorithm::SmoothBursty(_) => 7,
        AnyAlgorithm::SmoothWarmingUp(_) => 8,
        AnyAlgorithm::Concurrency(_) => 9,
        AnyAlgorithm::Fleet(_) => 10,
    }
}

const ALGORITHMS: usize = 11;

/// One of each algorithm (both sliding window forms), small enough that a few operations
/// reach their limits.
fn one_of_each() -> Vec<AnyAlgorithm> {
    let s = Duration::from_secs;
    vec![
        TokenBucket::new(2.0, 5).unwrap().into(),
        LeakyBucket::new(2.0, 5).unwrap().into(),
        LeakyQueue::new(2.0, 3).unwrap().into(),
        FixedWindow::new(5, s(10)).unwrap().into(),
        SlidingLog::new(5, s(10)).unwrap().into(),
        SlidingWindow::new(5, s(10), None).unwrap().into(),
        SlidingWindow::new(5, s(10), Some(4)).unwrap().into(),
        Gcra::new(3, 2, s(1)).unwrap().into(),
        SmoothBursty::starting(2.0, 2.0, BurstyStart::Empty)
            .unwrap()
            .into(),
        SmoothWarmingUp::new(2.0, s(4), 3.0).unwrap().into(),
        Concurrency::new(3, s(10)).unwrap().into(),
        Fleet::new(3, 0.34, s(10)).unwrap().into(),
    ]
}

/// The `i`-th operation of a test sequence on `a`: leases taken and given back where the
/// algorithm has leases, checks of small costs elsewhere.
fn op_for(a: &AnyAlgorithm, i: u64) -> Op {
    if a.supports(OpKind::Acquire) {
        let lease = LeaseId(u128::from(i % 5));
        if i % 3 == 2 {
            Op::Release { lease }
        } else {
            Op::Acquire {
                lease,
                critical: i.is_multiple_of(2),
            }
        }
    } else {
        Op::Check { cost: i % 3 }
    }
}

fn encoded(state: Option<&AnyState>) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode(state, &mut out);
    out
}

#[test]
fn every_algorithm_is_covered() {
    let mut seen = [false; ALGORITHMS];
    for a in one_of_each() {
        seen[place(&a)] = true;
    }
    assert!(seen.iter().all(|&s| s), "one_of_each lacks an algorithm");
}

#[test]
fn every_state_round_trips_and_decides_the_same() {
    for a in one_of_each() {
        let mut now = Nanos::from_secs(1_000);
        let mut state = a.fresh(now);
        for i in 0..12 {
            now = Nanos(now.0 + 150_000_000);
            let _ = a.apply(&mut state, now, op_for(&a, i));
            let bytes = encoded(Some(&state));
            let mut back = codec::decode(&bytes)
                .unwrap()
                .expect("a state, not a removal");
            assert_eq!(encoded(Some(&back)), bytes, "{} step {i}", a.name());
            let next = op_for(&a, i + 1);
            let mut original = state.clone();
            assert_eq!(
                a.apply(&mut original, now, next),
                a.apply(&mut back, now, next),
                "{} step {i}",
                a.name()
            );
        }
    }
    assert_eq!(codec::decode(&encoded(None)).unwrap().map(|_| ()), None);
}

#[test]
fn states_that_do_not_decode_are_refused_with_a_reason() {
    let a: AnyAlgorithm = SlidingLog::new(5, Duration::from_secs(1)).unwrap().into();
    let mut state = a.fresh(Nanos(1));
    let _ = a.apply(&mut state, Nanos(2), Op::Check { cost: 2 });
    let bytes = encoded(Some(&state));
    assert!(codec::decode(&bytes[..bytes.len() - 1]).is_err());
    assert_eq!(codec::decode(&bytes[..5]).unwrap_err(), "state cut short");
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(codec::decode(&longer).is_err());
    let mut tag = bytes.clone();
    tag[0] = 200;
    assert_eq!(codec::decode(&tag).unwrap_err(), "unknown algorithm tag");
    let mut version = bytes.clone();
    version[1] = 9;
    assert_eq!(
        codec::decode(&version).unwrap_err(),
        "unknown state encoding version"
    );
    // A count far beyond the record allocates nothing and is refused.
    let mut count = bytes;
    count[10..18].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(codec::decode(&count).is_err());
}

/// Two records, "a" then "b", after a journal header.
fn two_records() -> (Vec<u8>, usize) {
    let a: AnyAlgorithm = Gcra::new(3, 2, Duration::from_secs(1)).unwrap().into();
    let mut state = a.fresh(Nanos(1));
    let _ = a.apply(&mut state, Nanos(2), Op::Check { cost: 1 });
    let mut bytes = record::header(record::FileKind::Journal, 1, 0).to_vec();
    record::push(&mut bytes, "a", Some(&state));
    let second = bytes.len();
    record::push(&mut bytes, "b", None);
    (bytes, second)
}

/// The keys read, and where a torn tail began; or where and why the bytes are corrupt.
type Read = Result<(Vec<String>, Option<usize>), (usize, &'static str)>;

fn keys(bytes: &[u8]) -> Read {
    let mut at = HEADER_LEN;
    let mut out = Vec::new();
    loop {
        match record::next(bytes, at).map_err(|r| (at, r))? {
            Next::Record { key, end, .. } => {
                out.push(key.to_string());
                at = end;
            }
            Next::End => return Ok((out, None)),
            Next::Torn(_) => return Ok((out, Some(at))),
        }
    }
}

#[test]
fn a_cut_anywhere_in_the_last_record_is_a_torn_tail() {
    let (bytes, second) = two_records();
    assert_eq!(keys(&bytes), Ok((vec!["a".into(), "b".into()], None)));
    for cut in second + 1..bytes.len() {
        assert_eq!(
            keys(&bytes[..cut]),
            Ok((vec!["a".into()], Some(second))),
            "cut at {cut}"
        );
    }
    assert_eq!(keys(&bytes[..second]), Ok((vec!["a".into()], None)));
    // A last record garbled, or zeros after the records: torn too.
    let mut garbled = bytes.clone();
    *garbled.last_mut().unwrap() ^= 0xff;
    assert_eq!(keys(&garbled), Ok((vec!["a".into()], Some(second))));
    let mut zeros = bytes.clone();
    zeros.extend_from_slice(&[0; 100]);
    assert_eq!(keys(&zeros).unwrap().1, Some(bytes.len()));
}

#[test]
fn a_bad_record_before_the_last_is_corruption_at_its_offset() {
    let (bytes, _) = two_records();
    let mut flipped = bytes.clone();
    flipped[HEADER_LEN + 9] ^= 0x01;
    assert_eq!(keys(&flipped), Err((HEADER_LEN, "record checksum fails")));
    let mut huge = bytes;
    huge[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        keys(&huge),
        Err((HEADER_LEN, "record length beyond the largest record"))
    );
}

/// Every key's state, encoded, in key order.
fn contents(store: &FileStore) -> BTreeMap<String, Vec<u8>> {
    let memory = store.memory();
    let mut out = BTreeMap::new();
    for shard in 0..memory.shard_count() {
        memory.for_each_entry(shard, |k, s| {
            out.insert(k.to_string(), encoded(Some(s)));
        });
    }
    out
}

fn open(dir: &std::path::Path, clock: &ManualClock) -> FileStore {
    FileStore::builder(dir)
        .clock(clock.clone())
        // The background commits never come during a test: durable points are the syncs.
        .sync_interval(Duration::from_secs(86_400))
        .shards(4)
        .build()
        .unwrap()
}

/// One step of a property run.
#[derive(Debug, Clone)]
enum Step {
    /// Operation number `i` on key `key` of algorithm `alg`.
    Apply {
        alg: usize,
        key: u8,
        i: u64,
    },
    /// A chain of two links, the first all-or-nothing.
    Chain {
        alg: usize,
        keys: (u8, u8),
        i: u64,
    },
    Advance(u64),
    Sync,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..12usize, 0..6u8, 0..100u64).prop_map(|(alg, key, i)| Step::Apply { alg, key, i }),
        1 => (0..12usize, (0..6u8, 0..6u8), 0..100u64)
            .prop_map(|(alg, keys, i)| Step::Chain { alg, keys, i }),
        2 => (0..3_000_000_000u64).prop_map(Step::Advance),
        1 => Just(Step::Sync),
    ]
}

fn run(store: &FileStore, clock: &ManualClock, steps: &[Step]) -> BTreeMap<String, Vec<u8>> {
    let algorithms = one_of_each();
    // Each key belongs to one algorithm, so that no operation meets another's state.
    let key = |alg: usize, k: u8| format!("{alg}:{k}");
    let mut durable = BTreeMap::new();
    for s in steps {
        match *s {
            Step::Apply { alg, key: k, i } => {
                let a = &algorithms[alg];
                let _ = poll_ready(store.apply(a, &key(alg, k), op_for(a, i)));
            }
            Step::Chain { alg, keys, i } => {
                let a = &algorithms[alg];
                let (k1, k2) = (key(alg, keys.0), key(alg, keys.1));
                let link = |key, op, all_or_nothing| Link {
                    request: KeyedOp {
                        algorithm: a,
                        key,
                        op,
                    },
                    refuses: true,
                    stops: true,
                    all_or_nothing,
                    fails_closed: false,
                    joins_previous: false,
                };
                let links = [
                    link(k1.as_str(), op_for(a, i), true),
                    link(k2.as_str(), op_for(a, i + 1), false),
                ];
                let _ = poll_ready(store.apply_chain(&links));
            }
            Step::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
            Step::Sync => {
                store.sync().unwrap();
                durable = contents(store);
            }
        }
    }
    durable
}

fn poll_ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("the file store's future was not ready"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_crash_keeps_the_last_durable_point_and_a_close_keeps_everything(
        steps in proptest::collection::vec(step(), 0..60),
        graceful: bool,
    ) {
        let dir = tempdir();
        let clock = ManualClock::new(Nanos::from_secs(1_000_000));
        let store = open(dir.path(), &clock);
        let durable = run(&store, &clock, &steps);
        let last = contents(&store);
        if graceful {
            store.close();
        } else {
            store.crash();
        }
        drop(store);
        let back = open(dir.path(), &clock);
        prop_assert_eq!(contents(&back), if graceful { last } else { durable });
    }
}

#[test]
fn a_journal_past_its_limit_is_replaced_by_a_snapshot_and_nothing_is_lost() {
    let dir = tempdir();
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let store = FileStore::builder(dir.path())
        .clock(clock.clone())
        .sync_interval(Duration::from_secs(86_400))
        .journal_limit(200)
        .build()
        .unwrap();
    let a: AnyAlgorithm = FixedWindow::new(1_000, Duration::from_secs(3_600))
        .unwrap()
        .into();
    for i in 0..40 {
        let _ = poll_ready(store.apply(&a, &format!("k{}", i % 7), Op::Check { cost: 1 })).unwrap();
        store.sync().unwrap();
    }
    let stats = store.journal_stats();
    assert!(stats.snapshots > 2, "{stats:?}");
    assert!(stats.bytes <= 200 + 100, "{stats:?}");
    let before = contents(&store);
    store.crash();
    drop(store);
    assert_eq!(contents(&open(dir.path(), &clock)), before);
}

#[test]
fn a_journal_older_than_its_snapshot_is_ignored_and_a_newer_one_refused() {
    let dir = tempdir();
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let a: AnyAlgorithm = Gcra::new(10, 1, Duration::from_secs(60)).unwrap().into();
    let store = open(dir.path(), &clock);
    let _ = poll_ready(store.apply(&a, "k", Op::Check { cost: 1 })).unwrap();
    store.sync().unwrap();
    let old_journal = std::fs::read(dir.path().join("journal")).unwrap();
    let _ = poll_ready(store.apply(&a, "k", Op::Check { cost: 3 })).unwrap();
    let last = contents(&store);
    store.close();
    drop(store);
    // A crash after the last snapshot was renamed in but before the journal was emptied.
    std::fs::write(dir.path().join("journal"), &old_journal).unwrap();
    let store = open(dir.path(), &clock);
    assert_eq!(contents(&store), last);
    store.close();
    drop(store);
    let mut newer = old_journal;
    newer[8..16].copy_from_slice(&99u64.to_le_bytes());
    std::fs::write(dir.path().join("journal"), &newer).unwrap();
    let e = FileStore::builder(dir.path()).build().unwrap_err();
    assert!(
        matches!(e, super::FileStoreError::Corrupt { offset: 8, .. }),
        "{e}"
    );
}

#[test]
fn a_failed_commit_is_reported_and_written_again_by_the_next() {
    let dir = tempdir();
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let a: AnyAlgorithm = FixedWindow::new(100, Duration::from_secs(3_600))
        .unwrap()
        .into();
    let store = open(dir.path(), &clock);
    let _ = poll_ready(store.apply(&a, "k", Op::Check { cost: 1 })).unwrap();
    store.sync().unwrap();
    let read_only = std::fs::File::open(dir.path().join("journal")).unwrap();
    let writable = store.with_journal(|j| j.swap_file(read_only));
    let _ = poll_ready(store.apply(&a, "k", Op::Check { cost: 2 })).unwrap();
    let _ = poll_ready(store.apply(&a, "j", Op::Check { cost: 5 })).unwrap();
    let e = store.sync().unwrap_err();
    assert!(e.to_string().contains("journal"), "{e}");
    assert!(poll_ready(store.probe()).is_err());
    let stats = store.journal_stats();
    assert_eq!((stats.failures, stats.pending_records), (1, 2), "{stats:?}");
    assert!(stats.last_error.unwrap().contains("journal"));
    // Decisions go on in memory meanwhile.
    assert!(
        poll_ready(store.apply(&a, "k", Op::Check { cost: 1 }))
            .unwrap()
            .allowed
    );
    store.with_journal(|j| j.swap_file(writable));
    store.sync().unwrap();
    poll_ready(store.probe()).unwrap();
    assert_eq!(store.journal_stats().last_error, None);
    let last = contents(&store);
    store.crash();
    drop(store);
    assert_eq!(contents(&open(dir.path(), &clock)), last);
}

/// A fresh directory, removed at the end of the test.
fn tempdir() -> TempDir {
    TempDir::new()
}

/// A directory under the system's temporary one, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "floodgate-file-unit-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
