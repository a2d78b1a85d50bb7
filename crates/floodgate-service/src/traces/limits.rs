//! What the SDK's variables change in the spans sent (see
//! [`crate::environment::traces::sdk`]): the resource, and the span limits. The SDK keeps the
//! count limits itself; a string value longer than the length limit is cut by [`Truncating`],
//! around the batch processor, as upstream's SDK cuts it (to that many characters).

use opentelemetry::{KeyValue, StringValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanProcessor, TracerProviderBuilder};
use opentelemetry_sdk::Resource;

use crate::environment::traces::{SpanLimits, Traces};

/// The resource's attributes: `OTEL_RESOURCE_ATTRIBUTES`' (and `OTEL_SERVICE_NAME`'s), then
/// `service.name`, `service.instance.id` and `service.namespace` from `TRACING_SERVICE_*`,
/// which win, as upstream's SDK merges them. An empty `TRACING_SERVICE_NAMESPACE` leaves no
/// `service.namespace` (upstream sends it empty, over anything the environment named).
pub(super) fn resource(traces: &Traces) -> Resource {
    const OURS: [&str; 3] = ["service.name", "service.instance.id", "service.namespace"];
    let mut attributes: Vec<KeyValue> = traces
        .sdk
        .resource
        .iter()
        .filter(|(key, _)| !OURS.contains(&key.as_str()))
        .map(|(key, value)| KeyValue::new(key.clone(), value.clone()))
        .collect();
    attributes.push(KeyValue::new("service.name", traces.service_name.clone()));
    attributes.push(KeyValue::new(
        "service.instance.id",
        traces.service_instance_id.clone(),
    ));
    if !traces.service_namespace.is_empty() {
        attributes.push(KeyValue::new(
            "service.namespace",
            traces.service_namespace.clone(),
        ));
    }
    Resource::builder_empty()
        .with_attributes(attributes)
        .build()
}

/// `builder` with the count limits of `limits` (no limit: `u32::MAX`).
pub(super) fn with_counts(
    builder: TracerProviderBuilder,
    limits: &SpanLimits,
) -> TracerProviderBuilder {
    let at_most = |limit: Option<u32>| limit.unwrap_or(u32::MAX);
    builder
        .with_max_attributes_per_span(at_most(limits.attributes))
        .with_max_events_per_span(at_most(limits.events))
        .with_max_attributes_per_event(at_most(limits.event_attributes))
        .with_max_links_per_span(at_most(limits.links))
        .with_max_attributes_per_link(at_most(limits.link_attributes))
}

/// A span processor that cuts every string value of a finished span's attributes (its own,
/// its events' and its links') to at most `max_chars` characters, then hands the span on.
#[derive(Debug)]
pub(super) struct Truncating<P> {
    inner: P,
    max_chars: usize,
}

impl<P: SpanProcessor> Truncating<P> {
    /// `inner`, its spans' string values cut to `max_chars` characters.
    pub(super) fn new(inner: P, max_chars: usize) -> Truncating<P> {
        Truncating { inner, max_chars }
    }

    fn cut(&self, attributes: &mut [KeyValue]) {
        for attribute in attributes {
            match &mut attribute.value {
                Value::String(s) => {
                    if let Some(short) = truncated(s.as_str(), self.max_chars) {
                        *s = StringValue::from(short);
                    }
                }
                Value::Array(opentelemetry::Array::String(items)) => {
                    for s in items {
                        if let Some(short) = truncated(s.as_str(), self.max_chars) {
                            *s = StringValue::from(short);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// `s`'s first `max_chars` characters, when it has more.
fn truncated(s: &str, max_chars: usize) -> Option<String> {
    s.char_indices()
        .nth(max_chars)
        .map(|(end, _)| s[..end].to_string())
}

impl<P: SpanProcessor> SpanProcessor for Truncating<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        self.cut(&mut span.attributes);
        for event in span.events.events.iter_mut() {
            self.cut(&mut event.attributes);
        }
        for link in span.links.links.iter_mut() {
            self.cut(&mut link.attributes);
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_to_characters_not_bytes() {
        assert_eq!(truncated("abcdef", 4).as_deref(), Some("abcd"));
        assert_eq!(truncated("abcd", 4), None);
        assert_eq!(truncated("€€€", 2).as_deref(), Some("€€"));
        assert_eq!(truncated("x", 0).as_deref(), Some(""));
    }
}
