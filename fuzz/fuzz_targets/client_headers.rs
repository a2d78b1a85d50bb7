//! The client side's reading of a server's answer: `RateLimit-Policy`/`RateLimit`,
//! `X-RateLimit-*`, `Retry-After` and `Date`, as `name: value` lines. Any fields read into a
//! signal within its documented bounds; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    floodgate_fuzz::client_headers(data);
});
