//! What the Envoy rule tests share: a memory store on a manual clock, descriptor entries and
//! requests from string pairs, and a decision driven through `floodgate::blocking`.

use floodgate::algorithm::spec::AnyState;
use floodgate::blocking::block_on;
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos};
use floodgate_service::descriptors::RuleSet;
use floodgate_service::rls::{RlsDescriptor, RlsRequest, RlsResponse};

/// The memory store on a manual clock.
pub type TestStore = MemoryStore<Key, AnyState, ManualClock>;

/// A store whose clock stands at `secs` seconds, and the clock.
pub fn store_at(secs: u64) -> (TestStore, ManualClock) {
    let clock = ManualClock::new(Nanos::from_secs(secs));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .build()
        .expect("valid store");
    (store, clock)
}

/// Descriptor entries from `(key, value)` pairs.
pub fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A request of `domain` with one descriptor per list of pairs, one hit each.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RlsRequest {
    RlsRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|d| RlsDescriptor {
                negative_hits: false,
                entries: entries(d),
                hits_addend: None,
                limit: None,
            })
            .collect(),
        hits_addend: 0,
    }
}

/// `set`'s decision for `req` on `store`.
pub fn decide(set: &RuleSet, store: &TestStore, req: &RlsRequest) -> RlsResponse {
    block_on(set.should_rate_limit(store, req)).expect("the memory store does not fail")
}
