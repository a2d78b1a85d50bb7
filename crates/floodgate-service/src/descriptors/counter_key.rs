//! Counter keys: where a request descriptor's count lives in the store (see the parent
//! module's "Counter keys"), written into a caller's buffer so that a call builds all of its
//! keys in one.

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
    let mut part = |s: &str, mark: char| push_part(key, s, mark);
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
    push_part(key, unit.name(), ':');
}

/// Appends one part of a counter key: `s`'s length in bytes, then `mark` (`:` after the length
/// of a string as sent, `*` for a shared wildcard's pattern), then `s`. The length is written
/// by `itoa`: `write!` went through `core::fmt`, a fifth of a call's own work.
fn push_part(key: &mut String, s: &str, mark: char) {
    key.push_str(itoa::Buffer::new().format(s.len()));
    key.push(mark);
    key.push_str(s);
}
