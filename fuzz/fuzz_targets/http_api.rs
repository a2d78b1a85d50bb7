//! Every HTTP JSON endpoint's body (and the dashboard's query): the answer is a decision or a
//! 4xx, never a panic or a 5xx other than a shedder's 503.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    floodgate_fuzz::http_call(data);
});
