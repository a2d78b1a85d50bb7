//! The `floodgate` command's library: the service ([`floodgate_service`]) and the offline tools
//! ([`floodgate_tools`]) under one name, so that the binary's `main.rs` stays thin and the
//! integration tests reach both as `floodgate_server::…`.
#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub use floodgate_service::*;
pub use floodgate_tools::{bench, replay, report, simulate};
