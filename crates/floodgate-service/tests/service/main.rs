//! The service library's tests, in process, one module per face of it: configuration
//! directories (`config_dir`), the Envoy rule engine
//! (`descriptors`, `envoy_compat`, upstream's own cases in `upstream_service`), the gRPC API
//! over a real listener (`grpc`), envoyproxy/ratelimit's request features end to end
//! (`rls_api`), the HTTP listener's connection handling (`connections`) and lease tokens
//! (`leases`). One binary, so that they link once; the binary's own tests, which start
//! `floodgate serve`, are floodgate-server's. The allocation counts are a binary of their own
//! (`tests/allocations.rs`): its global allocator would count every test here.

mod config_dir;
mod connections;
mod descriptors;
mod envoy_compat;
mod grpc;
mod leases;
mod rls_api;
mod rules;
mod upstream_service;
