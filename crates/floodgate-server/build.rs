//! Generates the Envoy rate limit service's gRPC code from the minimal .proto files in `proto/`.
//!
//! Needs `protoc` (Debian's `protobuf-compiler`) on the PATH, or its path in `PROTOC`. The two
//! well-known messages used (`Duration`, `UInt64Value`) have minimal copies in
//! `proto/google/protobuf/`, so the well-known .proto files need not be installed; prost maps them
//! to `prost_types::Duration` and `Option<u64>`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Decode failures become INVALID_ARGUMENT, not tonic's INTERNAL (see src/grpc.rs).
        .codec_path("crate::grpc::RlsCodec")
        .compile_protos(&["proto/envoy/service/ratelimit/v3/rls.proto"], &["proto"])?;
    Ok(())
}
