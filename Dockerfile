# Floodgate's image: `floodgate` and, under envoyproxy/ratelimit's entry point name,
# `/bin/ratelimit`, on a minimal runtime with no shell, no package manager and no build tools,
# running as a user that is not root. `scripts/image` builds it.
#
#   scripts/image                  # compiles in the Rust image, then the runtime stage
#   scripts/image --prebuilt       # takes target/release/floodgate (built on a glibc >= 2.34)
#
# The bases are public images: the Rust toolchain's Debian bookworm image to compile, and
# distroless/cc (glibc, libgcc, CA certificates, a `nonroot` user 65532) to run; Floodgate
# links glibc, so distroless/static, upstream's base, would not run it. Both can be replaced
# with --build-arg (the tests build the runtime stage on a base they make themselves).
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# Where the binary comes from: `build` (compiled here) or `prebuilt` (the context's
# target/release/floodgate).
ARG BINARY=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p floodgate-server --bin floodgate \
 && cp target/release/floodgate /floodgate

FROM scratch AS prebuilt
COPY target/release/floodgate /floodgate

FROM ${BINARY} AS binary

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="floodgate" \
      org.opencontainers.image.description="Rate limiting and load shedding: a Rust library, tower middleware, and a service speaking HTTP JSON and Envoy's rate limit gRPC API" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.source="https://github.com/floodgate-rs/floodgate"
COPY --from=binary /floodgate /bin/floodgate
COPY --from=binary /floodgate /bin/ratelimit
USER 65532:65532
# HTTP API and /metrics, Envoy's rate limit gRPC API, upstream's debug listener.
EXPOSE 8080 8081 6070
ENTRYPOINT ["/bin/floodgate"]
CMD ["serve"]
