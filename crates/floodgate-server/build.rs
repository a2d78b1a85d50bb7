//! Generates the Envoy rate limit service's gRPC code from the minimal .proto files in `proto/`.
//!
//! The .proto files are parsed by protox, a protobuf compiler written in Rust, so building needs
//! no `protoc` on the machine. The two well-known messages used (`Duration`, `UInt64Value`) have
//! minimal copies in `proto/google/protobuf/`; prost maps them to `prost_types::Duration` and
//! `Option<u64>`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/envoy/service/ratelimit/v3/rls.proto"];
    let descriptors = protox::compile(protos, ["proto"])?;
    for proto in std::fs::read_dir("proto")?.flatten() {
        println!("cargo:rerun-if-changed={}", proto.path().display());
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Decode failures become INVALID_ARGUMENT, not tonic's INTERNAL (see src/grpc.rs).
        .codec_path("crate::grpc::RlsCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
