//! Zipkin's B3 trace context, read from a call's headers (HTTP) or metadata (gRPC) the way
//! envoyproxy/ratelimit reads it: its propagator is OpenTelemetry Go's B3 propagator, placed
//! after W3C trace context and before baggage ([`super::propagator`]).
//!
//! # Single header
//!
//! `b3: {trace}-{span}[-{sampling}[-{parent}]]`, where `{trace}` is 32 lowercase hex digits or
//! 16 (left-padded with zeros to 32), `{span}` and `{parent}` 16, and `{sampling}` one of `1`
//! (sampled), `0` (not sampled) or `d` (debug, which means sampled). Without `{sampling}` the
//! decision is *deferred*: the context is continued, not sampled. Exactly as Go's reader:
//!
//! - the header's length decides its shape: 1 byte is a sampling state alone, which
//!   continues no trace; 16 or 32 bytes (a trace id alone) and anything else shorter than 33
//!   are invalid; `{trace}` ends where byte 16 is `-`, else where byte 32 is `-`, else the
//!   header is invalid;
//! - after `{span}` come nothing, or 2 bytes (`-` and the sampling state), or 19 (`-`, the
//!   sampling state, `-` and `{parent}`); a lone trailing `-`, or 17 bytes (a parent without a
//!   sampling state), or any other length is invalid. The bytes standing where those two
//!   `-` go are not checked, as Go does not check them;
//! - `{parent}` is checked (16 lowercase hex digits, not all zero) and otherwise unused.
//!
//! # Multiple headers
//!
//! `x-b3-traceid` (32 or 16 hex digits, padded as above), `x-b3-spanid`, `x-b3-parentspanid`,
//! `x-b3-sampled` (`1` or `true` sampled, `0` or `false` not, in any case; absent: deferred)
//! and `x-b3-flags` (`1` is debug: sampled, whatever `x-b3-sampled` says; any other value is
//! ignored). The trace and span ids come both or neither; a parent needs them; any value that
//! does not parse makes the whole set invalid, including an `x-b3-sampled` that is not one of
//! the four.
//!
//! # Which wins
//!
//! A valid single header wins over the multiple headers; an invalid one (or one that is only
//! a sampling state) falls back to them. What B3 yields, if valid, replaces the context a
//! `traceparent` gave, because B3 runs after W3C trace context in the composite; an invalid or
//! absent B3 leaves it. Ids are lowercase hex, never all zero. A value that is not visible
//! ASCII (so not text to read) counts as present and invalid, as Go, which reads the bytes,
//! finds it. Header names are matched without regard to case, as HTTP and gRPC metadata have
//! them.
//!
//! Only extraction is done: Floodgate calls no service onward, so nothing is injected, and
//! the debug and deferred marks (which matter only for sending B3 on) are not kept.

use opentelemetry::propagation::{text_map_propagator::FieldIter, Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;

/// The single header.
pub(crate) const SINGLE: &str = "b3";
/// The multiple headers: the trace id.
pub(crate) const TRACE_ID: &str = "x-b3-traceid";
/// The span id.
pub(crate) const SPAN_ID: &str = "x-b3-spanid";
/// The parent's span id.
pub(crate) const PARENT_SPAN_ID: &str = "x-b3-parentspanid";
/// The sampling state.
pub(crate) const SAMPLED: &str = "x-b3-sampled";
/// The debug flag.
pub(crate) const FLAGS: &str = "x-b3-flags";

/// Stands for a header that is present but not text: it is invalid in every place a B3
/// value can be, as the bytes it holds are.
const UNREADABLE: &str = "\u{fffd}";

/// B3's propagator, extraction only (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct B3Propagator;

impl TextMapPropagator for B3Propagator {
    /// Injects nothing: Floodgate sends no call on with a caller's context.
    fn inject_context(&self, _: &Context, _: &mut dyn opentelemetry::propagation::Injector) {}

    /// `cx` with the remote span context the B3 headers carry, when valid; else `cx`.
    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        match extract(extractor) {
            Some(context) => cx.with_remote_span_context(context),
            None => cx.clone(),
        }
    }

    /// None: it injects no header.
    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(&[])
    }
}

/// The remote span context the B3 headers of `extractor` carry, if valid: the single
/// header's, else the multiple headers'.
pub(crate) fn extract(extractor: &dyn Extractor) -> Option<SpanContext> {
    let single = value(extractor, SINGLE);
    if !single.is_empty() {
        if let Some(context) = from_single(single.as_bytes()) {
            return Some(context);
        }
    }
    from_multiple(
        value(extractor, TRACE_ID),
        value(extractor, SPAN_ID),
        value(extractor, PARENT_SPAN_ID),
        value(extractor, SAMPLED),
        value(extractor, FLAGS),
    )
}

/// Header `name`'s first value: empty when absent, [`UNREADABLE`] when present but not text.
fn value<'a>(extractor: &'a dyn Extractor, name: &str) -> &'a str {
    match extractor.get(name) {
        Some(text) => text,
        None if extractor.get_all(name).is_some() => UNREADABLE,
        None => "",
    }
}

/// The context of a single `b3` header, if it holds a valid one.
fn from_single(header: &[u8]) -> Option<SpanContext> {
    // One byte is a sampling state without ids (no context); 16 and 32 are a trace id alone.
    if header.len() < 33 {
        return None;
    }
    let (trace_id, rest) = if header[16] == b'-' {
        (trace_id(&header[..16])?, &header[17..])
    } else if header[32] == b'-' {
        (trace_id(&header[..32])?, &header[33..])
    } else {
        return None;
    };
    let span_id = span_id(rest.get(..16)?)?;
    // What follows the span id; the bytes where `-` belongs are not checked (as Go's reader).
    let sampling = match rest.len() - 16 {
        0 => None,
        2 => Some(rest[17]),
        19 => {
            span_id_checked(&rest[19..])?;
            Some(rest[17])
        }
        _ => return None,
    };
    let sampled = match sampling {
        None | Some(b'0') => false,
        Some(b'1' | b'd') => true,
        Some(_) => return None,
    };
    Some(remote(trace_id, span_id, sampled))
}

/// The context of the multiple headers' values (empty: absent), if they hold a valid one.
fn from_multiple(
    trace: &str,
    span: &str,
    parent: &str,
    sampled: &str,
    flags: &str,
) -> Option<SpanContext> {
    let mut is_sampled = match sampled.to_lowercase().as_str() {
        // Absent: deferred, which continues the trace unsampled.
        "" | "0" | "false" => false,
        "1" | "true" => true,
        _ => return None,
    };
    // Debug means sampled, whatever x-b3-sampled said.
    if flags == "1" {
        is_sampled = true;
    }
    let trace_id = match trace {
        "" => None,
        text => Some(trace_id(text.as_bytes())?),
    };
    let span_id = match span {
        "" => None,
        text => Some(span_id(text.as_bytes())?),
    };
    let (Some(trace_id), Some(span_id)) = (trace_id, span_id) else {
        // Both or neither; neither (or a parent without them) continues nothing.
        return None;
    };
    if !parent.is_empty() {
        span_id_checked(parent.as_bytes())?;
    }
    Some(remote(trace_id, span_id, is_sampled))
}

fn remote(trace_id: TraceId, span_id: SpanId, sampled: bool) -> SpanContext {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(trace_id, span_id, flags, true, TraceState::default())
}

/// A trace id of 32 hex digits, or of 16 left-padded with zeros.
fn trace_id(text: &[u8]) -> Option<TraceId> {
    let mut bytes = [0u8; 16];
    match text.len() {
        16 => bytes[8..].copy_from_slice(&hex::<8>(text)?),
        _ => bytes = hex::<16>(text)?,
    }
    (bytes != [0; 16]).then(|| TraceId::from_bytes(bytes))
}

fn span_id(text: &[u8]) -> Option<SpanId> {
    let bytes = span_id_checked(text)?;
    Some(SpanId::from_bytes(bytes))
}

/// The bytes of a span id of 16 hex digits, not all zero.
fn span_id_checked(text: &[u8]) -> Option<[u8; 8]> {
    hex::<8>(text).filter(|bytes| *bytes != [0; 8])
}

/// `N` bytes from exactly `2 * N` lowercase hex digits.
fn hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
