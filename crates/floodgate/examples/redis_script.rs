//! Prints the Lua source of one of the Redis store's scripts, exactly as the store loads it,
//! for `redis-cli SCRIPT LOAD` and `redis-benchmark` (see BENCHMARKS.md):
//!
//! ```text
//! cargo run -p floodgate-core --features redis --example redis_script -- token_bucket
//! ```
use std::process::ExitCode;

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    match floodgate::store::redis::script_source(&name) {
        Some(source) => {
            print!("{source}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "usage: redis_script NAME (token_bucket, gcra, fixed_window, leases, chain, …)"
            );
            ExitCode::FAILURE
        }
    }
}
