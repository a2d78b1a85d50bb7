//! RLQS usage reports as protobuf bytes, several on one stream: each decoded one is answered
//! or ends the stream with a reason, ticks and the stream's end follow; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    floodgate_fuzz::rlqs_stream(data);
});
