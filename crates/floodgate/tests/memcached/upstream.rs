//! envoyproxy/ratelimit's memcache cases (`test/memcached/cache_impl_test.go` at f2fb157),
//! ported at the counter level against a real memcached: each case's keys (as upstream names
//! them), the count upstream's mock held before (`GetMulti`), the hits, the limit, and the
//! answer (`OK` with `LimitRemaining`, or `OVER_LIMIT` with 0). Upstream decides from the count
//! it read *before* incrementing; here the count comes from the `incr` itself, the same number
//! when nothing else writes in between (and the exact one when something does). The
//! service-level parts (stats, the local over-limit cache, the tracer, SRV settings, failing
//! open when `GetMulti` errs) are the service's to port.

use floodgate::store::{CounterIncrement, MemcachedStore};
use floodgate_harness::MemcachedServer;

use crate::{clock_at_now, runtime};

/// Upstream's answer for a count after the hits: over the limit, and what remains.
fn answer(count: u64, limit: u64) -> (bool, u64) {
    (count > limit, limit.saturating_sub(count))
}

/// One case: `prior` already counted under `key`, then `hits` added, with `ttl` seconds.
struct Case {
    key: &'static str,
    prior: u64,
    hits: u64,
    limit: u64,
    ttl: u64,
    /// The count after the hits.
    count: u64,
    over: bool,
    remaining: u64,
}

const fn case(
    key: &'static str,
    prior: u64,
    hits: u64,
    limit: u64,
    ttl: u64,
    over: bool,
    remaining: u64,
) -> Case {
    Case {
        key,
        prior,
        hits,
        limit,
        ttl,
        count: prior + hits,
        over,
        remaining,
    }
}

/// Brings `key`'s count up to `prior` (a case's `GetMulti` answer).
async fn seed(store: &MemcachedStore, key: &str, prior: u64, ttl: u64) {
    let now = store.read_counters(&[key]).await.unwrap()[0];
    assert!(now <= prior, "{key}: {now} > {prior}");
    if prior > now {
        let add = CounterIncrement {
            key,
            by: prior - now,
            refund: false,
            ttl_seconds: ttl,
        };
        store.increment_counters(&[add]).await.unwrap();
    }
}

/// Runs `cases` in order, the cases of one slice in one call (one request's descriptors).
async fn run(store: &MemcachedStore, calls: &[&[Case]]) {
    for call in calls {
        for c in *call {
            seed(store, c.key, c.prior, c.ttl).await;
        }
        let increments: Vec<CounterIncrement<'_>> = call
            .iter()
            .map(|c| CounterIncrement {
                key: c.key,
                by: c.hits,
                refund: false,
                ttl_seconds: c.ttl,
            })
            .collect();
        let counts = store.increment_counters(&increments).await.unwrap();
        for (c, count) in call.iter().zip(counts) {
            assert_eq!(count, c.count, "{}", c.key);
            assert_eq!(answer(count, c.limit), (c.over, c.remaining), "{}", c.key);
        }
    }
}

fn store_on(server: &MemcachedServer, rt: &tokio::runtime::Runtime) -> MemcachedStore {
    let _guard = rt.enter();
    MemcachedStore::builder(vec![server.address()])
        .timeout(std::time::Duration::from_secs(2))
        .clock(clock_at_now())
        .build()
        .unwrap()
}

/// `TestMemcached`: one descriptor within its limit; one at it; two over (hits 1 and 2). The
/// last one's mock answers 13 to `Increment` after a `GetMulti` of 12 and hits of 2: the
/// exact count is 14, over the limit of 10 either way.
#[test]
fn test_memcached() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let store = store_on(&server, &rt);
    rt.block_on(run(
        &store,
        &[
            &[case("domain_key_value_1234", 4, 1, 10, 1, false, 5)],
            &[case(
                "domain_key2_value2_subkey2_subvalue2_1200",
                10,
                1,
                10,
                60,
                true,
                0,
            )],
            &[
                case("domain_key3_value3_997200", 10, 1, 10, 3_600, true, 0),
                case(
                    "domain_key3_value3_subkey3_subvalue3_950400",
                    12,
                    2,
                    10,
                    86_400,
                    true,
                    0,
                ),
            ],
        ],
    ));
}

/// `TestNearLimit` (its counts; near-limit stats are the service's), and the counts of
/// `TestOverLimitWithLocalCache` (the same first three steps on `domain_key4_value4_997200`;
/// its fourth, answered from the local cache without memcached, is the service's).
#[test]
fn test_near_limit_and_over_limit_with_local_cache() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let store = store_on(&server, &rt);
    rt.block_on(run(
        &store,
        &[
            &[case(
                "domain_key4_value4_997200",
                10,
                1,
                15,
                3_600,
                false,
                4,
            )],
            &[case(
                "domain_key4_value4_997200",
                12,
                1,
                15,
                3_600,
                false,
                2,
            )],
            &[case("domain_key4_value4_997200", 15, 1, 15, 3_600, true, 0)],
            &[case("domain_key5_value5_1234", 2, 3, 20, 1, false, 15)],
            &[case("domain_key6_value6_1234", 5, 2, 8, 1, false, 1)],
            &[case("domain_key7_value7_1234", 16, 3, 20, 1, false, 1)],
            &[case("domain_key8_value8_1234", 19, 3, 20, 1, true, 0)],
            &[case("domain_key9_value9_1234", 15, 7, 20, 1, true, 0)],
            &[case("domain_key10_value10_1234", 27, 3, 10, 1, true, 0)],
        ],
    ));
}

/// `TestMemcacheWithJitter`: an absent key is created by `add` with the unit's seconds plus
/// the jitter (1 + 100; the service draws the jitter and passes the sum as `ttl_seconds`).
#[test]
fn test_memcache_with_jitter() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let store = store_on(&server, &rt);
    rt.block_on(run(
        &store,
        &[&[case("domain_key_value_1234", 0, 1, 10, 101, false, 9)]],
    ));
    let ttl = server.ttl("domain_key_value_1234").unwrap();
    assert!((99..=101).contains(&ttl), "{ttl}");
}

/// `TestMemcacheAdd`: an absent key is added with the unit's seconds (1 for a second, 60 for
/// a minute); and the race upstream's mock plays (`Increment` misses, `Add` is `NOT_STORED`
/// because another writer added first, `Increment` again) played for real: two nodes adding
/// to one absent key at once both count, 1 and 2.
#[test]
fn test_memcache_add() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let (one, two) = (store_on(&server, &rt), store_on(&server, &rt));
    rt.block_on(run(
        &one,
        &[&[case("domain_key2_value2_1200", 0, 1, 10, 60, false, 9)]],
    ));
    let ttl = server.ttl("domain_key2_value2_1200").unwrap();
    assert!((58..=60).contains(&ttl), "{ttl}");
    rt.block_on(async {
        for round in 0..50 {
            let key = format!("domain_key_value_{round}");
            let inc = [CounterIncrement {
                key: &key,
                by: 1,
                refund: false,
                ttl_seconds: 1,
            }];
            let (a, b) = tokio::join!(one.increment_counters(&inc), two.increment_counters(&inc));
            let mut counts = [a.unwrap()[0], b.unwrap()[0]];
            counts.sort_unstable();
            assert_eq!(counts, [1, 2], "{key}");
        }
    });
}

/// A refund (Envoy's negative hits) lowers the count, never below 0, and leaves an absent key
/// absent.
#[test]
fn refunds_lower_the_count() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let store = store_on(&server, &rt);
    rt.block_on(async {
        let add = CounterIncrement {
            key: "domain_k_v_60",
            by: 5,
            refund: false,
            ttl_seconds: 60,
        };
        assert_eq!(store.increment_counters(&[add]).await.unwrap(), vec![5]);
        let back = CounterIncrement {
            refund: true,
            by: 2,
            ..add
        };
        assert_eq!(store.increment_counters(&[back]).await.unwrap(), vec![3]);
        let past = CounterIncrement {
            refund: true,
            by: 9,
            ..add
        };
        assert_eq!(store.increment_counters(&[past]).await.unwrap(), vec![0]);
        let absent = CounterIncrement {
            key: "domain_none_60",
            ..past
        };
        assert_eq!(store.increment_counters(&[absent]).await.unwrap(), vec![0]);
        let read = CounterIncrement { by: 0, ..add };
        assert_eq!(store.increment_counters(&[read]).await.unwrap(), vec![0]);
    });
    assert_eq!(server.get("domain_none_60"), None);
}
