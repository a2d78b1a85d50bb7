//! B3 extraction over the B3 specification's examples and the edges of Go's reader.

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_http::HeaderExtractor;

use super::*;

// The examples of the B3 specification (openzipkin/b3-propagation).
const TRACE: &str = "80f198ee56343ba864fe8b2a57d3eff7";
const SPAN: &str = "e457b5a2e4d86bd1";
const PARENT: &str = "05e3ac9a4f6e3b90";
const TRACE_64: &str = "a3ce929d0e0e4736";

fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// `(trace id, span id, sampled)` of what `pairs` carry, or `None`.
fn read(pairs: &[(&str, &str)]) -> Option<(String, String, bool)> {
    let map = headers(pairs);
    extract(&HeaderExtractor(&map)).map(|c| {
        assert!(c.is_remote() && c.is_valid());
        (
            c.trace_id().to_string(),
            c.span_id().to_string(),
            c.is_sampled(),
        )
    })
}

fn context(trace: &str, span: &str, sampled: bool) -> Option<(String, String, bool)> {
    Some((trace.to_string(), span.to_string(), sampled))
}

#[test]
fn the_single_header_in_each_of_its_forms() {
    let single = |value: &str| read(&[(SINGLE, value)]);
    let full = format!("{TRACE}-{SPAN}-1-{PARENT}");
    assert_eq!(single(&full), context(TRACE, SPAN, true));
    assert_eq!(
        single(&format!("{TRACE}-{SPAN}-1")),
        context(TRACE, SPAN, true)
    );
    assert_eq!(
        single(&format!("{TRACE}-{SPAN}-0")),
        context(TRACE, SPAN, false)
    );
    assert_eq!(
        single(&format!("{TRACE}-{SPAN}-d")),
        context(TRACE, SPAN, true),
        "debug is sampled"
    );
    assert_eq!(
        single(&format!("{TRACE}-{SPAN}")),
        context(TRACE, SPAN, false),
        "deferred: continued, not sampled"
    );
    assert_eq!(
        single(&format!("{TRACE_64}-{SPAN}-1")),
        context(&format!("0000000000000000{TRACE_64}"), SPAN, true),
        "a 64-bit trace id is left-padded"
    );
    assert_eq!(
        single(&format!("{TRACE}-{SPAN}-0-{PARENT}")),
        context(TRACE, SPAN, false)
    );
}

#[test]
fn single_headers_go_rejects() {
    for value in [
        // A sampling state alone, or a trace id alone.
        "1".to_string(),
        "0".to_string(),
        "d".to_string(),
        TRACE.to_string(),
        TRACE_64.to_string(),
        // Lengths and separators.
        format!("{TRACE}{SPAN}"),
        format!("{TRACE}-{}", &SPAN[..15]),
        format!("{TRACE}-{SPAN}-"),
        format!("{TRACE}-{SPAN}-{PARENT}"),
        format!("{TRACE}-{SPAN}-1-{}", &PARENT[..15]),
        format!("{TRACE}-{SPAN}-10"),
        format!("{TRACE}-{SPAN}-1-{PARENT}0"),
        // Bad values.
        format!("{TRACE}-{SPAN}-x"),
        format!("{TRACE}-{SPAN}-true"),
        format!("{}-{SPAN}-1", TRACE.to_uppercase()),
        format!("{TRACE}-{}-1", SPAN.to_uppercase()),
        format!("{TRACE}-{SPAN}-1-{}", PARENT.to_uppercase()),
        format!("{}-{SPAN}-1", "0".repeat(32)),
        format!("{}-{SPAN}-1", "0".repeat(16)),
        format!("{TRACE}-{}-1", "0".repeat(16)),
        format!("{TRACE}-{SPAN}-1-{}", "0".repeat(16)),
        format!("{}-{SPAN}-1", "g".repeat(32)),
    ] {
        assert_eq!(read(&[(SINGLE, &value)]), None, "{value}");
    }
}

#[test]
fn where_go_does_not_look_for_dashes_neither_does_this() {
    // The byte after the span id and the one after the sampling state are skipped unread.
    assert_eq!(
        read(&[(SINGLE, &format!("{TRACE}-{SPAN}x1"))]),
        context(TRACE, SPAN, true)
    );
    assert_eq!(
        read(&[(SINGLE, &format!("{TRACE}-{SPAN}-1+{PARENT}"))]),
        context(TRACE, SPAN, true)
    );
}

#[test]
fn the_multiple_headers() {
    let multi = |extra: &[(&str, &str)]| {
        let mut pairs = vec![(TRACE_ID, TRACE), (SPAN_ID, SPAN)];
        pairs.extend_from_slice(extra);
        read(&pairs)
    };
    assert_eq!(
        multi(&[(PARENT_SPAN_ID, PARENT), (SAMPLED, "1")]),
        context(TRACE, SPAN, true)
    );
    assert_eq!(multi(&[]), context(TRACE, SPAN, false), "deferred");
    assert_eq!(multi(&[(SAMPLED, "0")]), context(TRACE, SPAN, false));
    assert_eq!(multi(&[(SAMPLED, "true")]), context(TRACE, SPAN, true));
    assert_eq!(multi(&[(SAMPLED, "FALSE")]), context(TRACE, SPAN, false));
    assert_eq!(multi(&[(FLAGS, "1")]), context(TRACE, SPAN, true), "debug");
    assert_eq!(
        multi(&[(SAMPLED, "0"), (FLAGS, "1")]),
        context(TRACE, SPAN, true),
        "debug wins over not sampled"
    );
    assert_eq!(
        multi(&[(SAMPLED, "1"), (FLAGS, "2")]),
        context(TRACE, SPAN, true),
        "flags other than 1 are ignored"
    );
    assert_eq!(
        read(&[(TRACE_ID, TRACE_64), (SPAN_ID, SPAN), (SAMPLED, "1")]),
        context(&format!("0000000000000000{TRACE_64}"), SPAN, true)
    );
    // Header names in any case, as HTTP and gRPC metadata carry them.
    assert_eq!(
        read(&[("X-B3-TraceId", TRACE), ("X-B3-SpanId", SPAN)]),
        context(TRACE, SPAN, false)
    );
}

#[test]
fn multiple_headers_go_rejects() {
    for pairs in [
        vec![(SAMPLED, "1")],
        vec![(TRACE_ID, TRACE), (SAMPLED, "1")],
        vec![(SPAN_ID, SPAN), (SAMPLED, "1")],
        vec![(PARENT_SPAN_ID, PARENT), (SAMPLED, "1")],
        vec![(TRACE_ID, TRACE), (SPAN_ID, SPAN), (SAMPLED, "yes")],
        vec![
            (TRACE_ID, TRACE),
            (SPAN_ID, SPAN),
            (SAMPLED, "yes"),
            (FLAGS, "1"),
        ],
        vec![(TRACE_ID, TRACE), (SPAN_ID, SPAN), (PARENT_SPAN_ID, "x")],
        vec![(TRACE_ID, &TRACE[..30]), (SPAN_ID, SPAN)],
        vec![
            (TRACE_ID, "ab00000000000000000000000000000000"),
            (SPAN_ID, SPAN),
        ],
        vec![(TRACE_ID, "a3ce929d0e0e47"), (SPAN_ID, SPAN)],
        vec![(TRACE_ID, TRACE), (SPAN_ID, "e457b5a2e4d86bd")],
        vec![
            (TRACE_ID, "4BF92F3577B34DA6A3CE929D0E0E4736"),
            (SPAN_ID, SPAN),
        ],
        vec![(TRACE_ID, TRACE), (SPAN_ID, "E457B5A2E4D86BD1")],
        vec![
            (TRACE_ID, "00000000000000000000000000000000"),
            (SPAN_ID, SPAN),
        ],
        vec![(TRACE_ID, TRACE), (SPAN_ID, "0000000000000000")],
    ] {
        assert_eq!(read(&pairs), None, "{pairs:?}");
    }
}

#[test]
fn the_single_header_wins_and_a_bad_one_falls_back() {
    let other = "4bf92f3577b34da6a3ce929d0e0e4736";
    let multiple = [(TRACE_ID, other), (SPAN_ID, "00f067aa0ba902b7")];
    let with = |single: &str| {
        let mut pairs = vec![(SINGLE, single)];
        pairs.extend_from_slice(&multiple);
        read(&pairs)
    };
    assert_eq!(
        with(&format!("{TRACE}-{SPAN}-1")),
        context(TRACE, SPAN, true)
    );
    assert_eq!(
        with(&format!("{TRACE}-{SPAN}-q")),
        context(other, "00f067aa0ba902b7", false)
    );
    assert_eq!(with("1"), context(other, "00f067aa0ba902b7", false));
    // A valid single header is used whatever the multiple headers hold.
    assert_eq!(
        read(&[
            (SINGLE, &format!("{TRACE}-{SPAN}-1")),
            (TRACE_ID, TRACE),
            (SPAN_ID, SPAN),
            (SAMPLED, "invalid"),
        ]),
        context(TRACE, SPAN, true)
    );
}

#[test]
fn a_value_that_is_not_text_is_present_and_invalid() {
    let mut map = headers(&[(TRACE_ID, TRACE), (SPAN_ID, SPAN)]);
    assert_eq!(
        extract(&HeaderExtractor(&map)).map(|c| c.is_sampled()),
        Some(false)
    );
    // Go reads the bytes, finds no sampling state it knows, and drops the whole set.
    map.insert(
        SAMPLED,
        http::HeaderValue::from_bytes(b"\xe2\x9c\x93").unwrap(),
    );
    assert_eq!(extract(&HeaderExtractor(&map)), None);
}

#[test]
fn after_w3c_trace_context_a_valid_b3_context_replaces_the_traceparent() {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let parent = |pairs: &[(&str, &str)]| {
        let map = headers(pairs);
        let cx = crate::traces::propagator()
            .extract_with_context(&Context::new(), &HeaderExtractor(&map));
        let span = cx.span();
        let c = span.span_context();
        (c.trace_id().to_string(), c.span_id().to_string())
    };
    let w3c = (
        "4bf92f3577b34da6a3ce929d0e0e4736".to_string(),
        "00f067aa0ba902b7".to_string(),
    );
    let b3 = (TRACE.to_string(), SPAN.to_string());
    assert_eq!(parent(&[("traceparent", traceparent)]), w3c);
    assert_eq!(parent(&[(SINGLE, &format!("{TRACE}-{SPAN}-1"))]), b3);
    assert_eq!(
        parent(&[
            ("traceparent", traceparent),
            (SINGLE, &format!("{TRACE}-{SPAN}-1"))
        ]),
        b3
    );
    assert_eq!(
        parent(&[
            ("traceparent", traceparent),
            (TRACE_ID, TRACE),
            (SPAN_ID, SPAN)
        ]),
        b3
    );
    assert_eq!(
        parent(&[("traceparent", traceparent), (SINGLE, "1")]),
        w3c,
        "no B3 context: the traceparent stays"
    );
}

#[test]
fn nothing_is_injected() {
    let mut out = std::collections::HashMap::<String, String>::new();
    let cx = Context::new().with_remote_span_context(remote(
        TraceId::from_bytes([1; 16]),
        SpanId::from_bytes([2; 8]),
        true,
    ));
    B3Propagator.inject_context(&cx, &mut out);
    assert!(out.is_empty());
    assert_eq!(B3Propagator.fields().count(), 0);
}
