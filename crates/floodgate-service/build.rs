//! Generates the Envoy rate limit service's messages, gRPC's health checking messages, and
//! their tonic clients from the minimal .proto files in `proto/`. The server side is written by hand (`src/grpc/call.rs`).
//!
//! The .proto files are parsed by protox, a protobuf compiler written in Rust, so building needs
//! no `protoc` on the machine. The well-known messages used (`Duration`, `UInt64Value`, `Struct`)
//! have minimal copies in `proto/google/protobuf/`; prost maps them to `prost_types::Duration`,
//! `Option<u64>` and `prost_types::Struct`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/grpc/health/v1/health.proto",
    ];
    let descriptors = protox::compile(protos, ["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
