//! Floodgate's offline tools, over the service's configuration and stores: `floodgate simulate`
//! (generated or recorded traffic through several limiters on a simulated clock), `floodgate
//! replay` (a recorded trace through one limiter, on memory or Redis), `floodgate bench` (a
//! store's decisions per second as the service drives it), and the reports they write
//! ([`report`]: summary tables and HTML pages with charts).
#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod bench;
pub mod replay;
pub mod report;
pub mod simulate;
