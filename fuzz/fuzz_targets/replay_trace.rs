//! `floodgate replay`'s inputs: the first line is the limiter spec, the rest the trace. Either
//! is refused with an error naming what is wrong, or every event gets its decision line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    floodgate_fuzz::replay(text);
});
