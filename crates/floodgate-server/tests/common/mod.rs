//! Helpers shared by the server's integration tests.
pub mod rules;
pub mod serve;
