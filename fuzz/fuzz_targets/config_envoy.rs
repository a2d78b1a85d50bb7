//! An envoyproxy/ratelimit domain file, read as `--config` reads one: refused with an error or
//! built into its rule tree; nothing panics.
#![no_main]

use floodgate_server::config::envoy::DomainConfig;
use floodgate_server::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    // The domain parser alone, then the same text as a whole config file (format detection,
    // the rule tree, its checks).
    let _ = DomainConfig::from_yaml_str(text);
    floodgate_fuzz::build_config(Config::from_yaml_str(text));
});
