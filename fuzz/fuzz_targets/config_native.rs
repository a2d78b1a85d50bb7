//! Floodgate's own YAML config (and whatever else `--config FILE` reads): any text is either
//! refused with an error or builds, over the embedded store, into the limiters it describes;
//! nothing panics.
#![no_main]

use floodgate_server::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    floodgate_fuzz::build_config(Config::from_yaml_str(text));
});
