//! The memcached store's claims, fault, TLS and upstream-compatibility tests, beside the decision
//! tests of `memcached_store.rs` (one test binary).

mod claims;
mod discovery;
mod faults;
mod tls;
mod upstream;
