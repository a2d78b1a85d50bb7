//! What a `ShouldRateLimit` call allocates in Floodgate's own code, for counters the store
//! already holds: counted by a global allocator that tallies this thread's allocations (the
//! HTTP/2 stack and the protobuf decoding around the call are not part of it).

use floodgate_harness::allocations::{allocations, CountingAllocator};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use floodgate_service::config::Config;
use floodgate_service::metrics::Endpoint;
use floodgate_service::rls::{Code, RlsDescriptor, RlsRequest};
use floodgate_service::service::Server;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// The output of a future that is ready at its first poll (the memory store answers at once).
fn now<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory store answers at once"),
    }
}

const CONFIG: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 1000000}
      - key: tenant
        descriptors:
          - key: plan
            rate_limit: {unit: hour, requests_per_unit: 1000000}
"#;

fn request(descriptors: &[&[(&str, &str)]]) -> RlsRequest {
    RlsRequest {
        domain: "edge".into(),
        descriptors: descriptors
            .iter()
            .map(|entries| RlsDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..RlsDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Allocations per call, averaged over 1,000 calls after a first one that created the counters.
fn allocations_per_call(server: &Server, request: &RlsRequest) -> f64 {
    let first = now(server.should_rate_limit(request, Endpoint::Grpc)).expect("decided");
    assert_eq!(first.overall_code, Code::Ok);
    let counted = allocations(|| {
        for _ in 0..1_000 {
            let response = now(server.should_rate_limit(request, Endpoint::Grpc)).expect("decided");
            assert_eq!(response.overall_code, Code::Ok);
        }
    });
    counted as f64 / 1_000.0
}

/// Runs `test` on a server of `CONFIG`, made inside a Tokio runtime as the service makes it.
fn with_server(test: impl FnOnce(&Server)) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _context = runtime.enter();
    test(&Server::new(Config::from_yaml_str(CONFIG).unwrap(), None, None).unwrap());
}

#[test]
fn a_call_on_held_counters_allocates_only_its_answer() {
    with_server(|server| {
        let one = request(&[&[("user", "alice")]]);
        let two = request(&[&[("user", "alice")], &[("tenant", "acme"), ("plan", "pro")]]);
        let per_one = allocations_per_call(server, &one);
        let per_two = allocations_per_call(server, &two);
        // One descriptor: the response's list of statuses, nothing else (it was 8 before the
        // working lists moved to the stack and the keys to a reused buffer).
        assert_eq!(per_one, 1.0);
        // Two: the statuses, and the `Vec` of decisions `Store::apply_many` answers with.
        assert_eq!(per_two, 2.0);
    });
}

#[test]
fn a_call_future_stays_small() {
    // Every gRPC call's future is built on the stack and moved into its box; per-descriptor
    // lists kept inline across the store's await made it 2.5 KB (2,480 bytes in a debug build,
    // before overrides were boxed and `decide` stopped holding its list across the await).
    with_server(|server| {
        let one = request(&[&[("user", "alice")]]);
        let call = server.should_rate_limit(&one, Endpoint::Grpc);
        let bytes = std::mem::size_of_val(&call);
        assert!(
            bytes <= 1_600,
            "a ShouldRateLimit call's future is {bytes} bytes"
        );
    });
}
