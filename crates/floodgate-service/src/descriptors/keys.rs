//! Every key a request descriptor is known by, written here and nowhere else:
//!
//! - its **counter key**, where its count lives in Floodgate's layout (see the parent module's
//!   "Counter keys"), its parts length-prefixed so that no two descriptors share one;
//! - its key in **upstream's layout** ([`super::layout`]), written as envoyproxy/ratelimit
//!   writes it, unescaped, so that both count in the same Redis keys;
//! - its **statistics key** (`domain.key_value.key`, [`super::stats`]), as upstream names its
//!   series;
//! - its **dashboard key** (`domain D: k=v, k2=v2`), which the heavy-key sketch counts.
//!
//! Each writer appends to a caller's buffer, so that a call builds all of its keys in one.

use crate::rls::RlsDescriptor;
use floodgate::algorithm::fixed_window::Unit;

/// The namespace of the Envoy rules' counters in the store: no pipeline stage or named limit
/// may take it.
pub const RLS_NAMESPACE: &str = "rls";

/// The store key of one request descriptor's counter (see the module's "Counter keys");
/// `shared` lists the entries counted under a wildcard's pattern, in entry order.
pub(super) fn counter_key(
    domain: &str,
    descriptor: &RlsDescriptor,
    shared: &[(usize, &str)],
) -> String {
    let mut key = String::new();
    push_counter_key(&mut key, domain, descriptor, shared);
    key
}

/// Appends [`counter_key`] to `key`.
pub(super) fn push_counter_key(
    key: &mut String,
    domain: &str,
    descriptor: &RlsDescriptor,
    shared: &[(usize, &str)],
) {
    let len: usize = domain.len()
        + descriptor
            .entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum::<usize>();
    key.reserve(len + 12);
    key.push_str(RLS_NAMESPACE);
    key.push(':');
    let mut part = |s: &str, mark: char| push_counted_part(key, s, mark);
    part(domain, ':');
    let mut shared = shared.iter().peekable();
    for (i, (k, v)) in descriptor.entries.iter().enumerate() {
        part(k, ':');
        match shared.next_if(|(at, _)| *at == i) {
            Some((_, pattern)) => part(pattern, '*'),
            None => part(v, ':'),
        }
    }
}

/// Appends the store key of one request descriptor's limit override in `unit` to `key`: its
/// [`counter_key`] and one more part, the unit's name (see the module's "Counter keys").
pub(super) fn push_override_counter_key(
    key: &mut String,
    domain: &str,
    descriptor: &RlsDescriptor,
    unit: Unit,
) {
    push_counter_key(key, domain, descriptor, &[]);
    push_counted_part(key, unit.name(), ':');
}

/// Appends one part of a counter key: `s`'s length in bytes, then `mark` (`:` after the length
/// of a string as sent, `*` for a shared wildcard's pattern), then `s`. The length is written
/// by `itoa`: `write!` went through `core::fmt`, a fifth of a call's own work.
fn push_counted_part(key: &mut String, s: &str, mark: char) {
    key.push_str(itoa::Buffer::new().format(s.len()));
    key.push(mark);
    key.push_str(s);
}

/// Appends upstream's key of `descriptor` in `domain`, without the window start, to `key`:
/// `prefix`, the domain, `_`, then `key_value_` for each entry (the pattern of `shared`
/// entries instead of their values).
pub(super) fn push_envoy_key(
    key: &mut String,
    prefix: &str,
    domain: &str,
    descriptor: &RlsDescriptor,
    shared: &[(usize, &str)],
) {
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    for (i, (k, v)) in descriptor.entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        match shared.iter().find(|(at, _)| *at == i) {
            Some((_, pattern)) => key.push_str(pattern),
            None => key.push_str(v),
        }
        key.push('_');
    }
}

/// The statistics key of a configured descriptor of `key` and `value` (empty: none) below
/// `parent`'s (the domain, at the top level): `parent.key` or `parent.key_value`, as
/// envoyproxy/ratelimit writes it ([`super::Rule::full_key`]).
pub(crate) fn stat_key(parent: &str, key: &str, value: &str) -> String {
    let mut out = String::with_capacity(parent.len() + key.len() + value.len() + 2);
    out.push_str(parent);
    push_stat_part(&mut out, key, value);
    out
}

/// Appends one level of a statistics key: `.key`, then `_value` when the value is not empty.
pub(super) fn push_stat_part(key: &mut String, k: &str, v: &str) {
    key.push('.');
    key.push_str(k);
    if !v.is_empty() {
        key.push('_');
        key.push_str(v);
    }
}

/// Appends the dashboard's key of `descriptor` in `domain` to `key`: `domain D: k=v, k2=v2`,
/// stopping at the first entry that would start past `max_bytes` (the heavy-key sketch keeps
/// no more of a key).
pub(crate) fn push_dashboard_key(
    key: &mut String,
    domain: &str,
    descriptor: &RlsDescriptor,
    max_bytes: usize,
) {
    key.push_str("domain ");
    key.push_str(domain);
    for (i, (k, v)) in descriptor.entries.iter().enumerate() {
        if key.len() > max_bytes {
            break;
        }
        key.push_str(if i == 0 { ": " } else { ", " });
        key.push_str(k);
        key.push('=');
        key.push_str(v);
    }
}
