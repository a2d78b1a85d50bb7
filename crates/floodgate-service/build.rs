//! Generates the Envoy rate limit service's messages, the Rate Limit Quota Service's, gRPC's
//! health checking messages, the xDS transport's messages with envoyproxy/ratelimit's
//! configuration resource, and their tonic
//! clients and servers, from the minimal .proto files in `proto/`. The service's own gRPC
//! server is written by hand (`src/grpc/call.rs`); the generated servers are for tests.
//!
//! The .proto files are parsed by protox, a protobuf compiler written in Rust, so building needs
//! no `protoc` on the machine. The well-known messages used (`Duration`, `UInt64Value`,
//! `UInt32Value`, `Struct`, `Any`) have minimal copies in `proto/google/protobuf/`; prost maps
//! them to `prost_types::Duration`, `Option<u64>`, `Option<u32>`, `prost_types::Struct` and
//! `prost_types::Any`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/grpc/health/v1/health.proto",
        "proto/envoy/service/discovery/v3/discovery.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
    ];
    let descriptors = protox::compile(protos, ["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        // The servers are what tests stand in for a control plane with (xDS); the service's
        // own gRPC server is written by hand.
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
