//! The `floodgate` command's library: everything but argument parsing lives here, so that the
//! binary's `main.rs` stays thin and integration tests can start a real server in-process.
#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod config;
pub mod connections;
pub mod dashboard;
pub mod descriptors;
pub mod grpc;
pub mod http;
pub mod lease_token;
pub mod metrics;
pub mod replay;
pub mod report;
pub mod rls;
pub mod runtime;
pub mod service;
pub mod simulate;
pub mod store;
