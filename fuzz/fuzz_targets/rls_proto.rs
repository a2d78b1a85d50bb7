//! Envoy's `RateLimitRequest` as protobuf bytes: refused as INVALID_ARGUMENT or answered;
//! nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    floodgate_fuzz::rls_call(data);
});
