//! The pipeline middleware: [`FloodgateLayer`](layer::FloodgateLayer) runs a Floodgate
//! [`Pipeline`](floodgate::Pipeline) in front of a service ([`Floodgate`](service::Floodgate)).
//!
//! - [`layer`]: the layer and the one state every service it makes shares, behind one `Arc`;
//! - [`service`]: the service, and the `tower::Layer` that makes it;
//! - [`future`]: the response future, which awaits the verdict when the store is remote;
//! - [`body`]: the response body, which holds the request's leases and busy worker until it
//!   ends;
//! - [`per_key`]: the two-line start (per address, per API key, per header).
//!
//! The modules depend one way: `service` on `layer`, `future` and `body`; `layer` on none of
//! them.

pub mod body;
pub mod future;
pub mod layer;
pub mod per_key;
pub mod service;
