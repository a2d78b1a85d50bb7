//! Helpers shared by the server's integration tests.
pub mod browser;
pub mod cli;
pub mod rlqs;
pub mod rules;
pub mod serve;
pub mod statsd;
pub mod tls;
pub mod upstream;
