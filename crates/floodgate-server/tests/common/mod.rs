//! Helpers shared by the server's integration tests.
pub mod browser;
pub mod rules;
pub mod serve;
