//! IETF `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11).
//!
//! Both fields are structured-field Lists (RFC 9651). Each member names a policy (a String or
//! a Token) and carries parameters:
//! - `RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400`: the quota `q` (required)
//!   over a window of `w` seconds, in units `qu` (`"requests"` when absent), for the partition
//!   `pk` (a Byte Sequence);
//! - `RateLimit: "burst";r=50;t=30`: `r` units left (required) and `t` seconds until the quota
//!   is whole again, for the partition `pk`.
//!
//! A `RateLimit` member is matched with the `RateLimit-Policy` member of the same name and
//! partition; either may come alone. What is read, exactly:
//! - a field that does not parse as a List (on any of its lines) is ignored as a whole;
//! - a member that is an inner list, whose name is not a String or Token, whose `q` or `r` is
//!   missing, not an Integer or negative, or whose name or `pk` is longer than
//!   [`MAX_NAME_LEN`] is ignored; an invalid `w` or `t` (not an Integer,
//!   negative, or `w=0`) is ignored as if absent;
//! - policies in units other than requests (`qu="content-bytes"`, `"concurrent-requests"`)
//!   are ignored: this layer paces requests;
//! - numbers are clamped to what a duration can mean ([`MAX_HORIZON`](super::MAX_HORIZON)), and
//!   at most [`MAX_QUOTAS`] quotas are kept.

use http::HeaderMap;
use sfv::{BareItem, Item, List, ListEntry, Parameters, Parser};

use super::{joined, seconds, Quota, MAX_NAME_LEN, MAX_QUOTAS};

/// The `RateLimit-Policy` field's name.
pub const POLICY: &str = "ratelimit-policy";
/// The `RateLimit` field's name.
pub const RATELIMIT: &str = "ratelimit";

/// The quotas of a response's IETF fields; empty when it has none or only malformed ones.
pub fn read(headers: &HeaderMap) -> Vec<Quota> {
    let mut quotas: Vec<Quota> = Vec::new();
    for item in items(headers, POLICY) {
        if let Some((name, pk, params)) = member(&item) {
            let units = params.get("qu").and_then(string_or_token);
            if units.is_some_and(|u| u != "requests") {
                continue;
            }
            let Some(q) = params.get("q").and_then(count) else {
                continue;
            };
            let mut quota = Quota::new(name, pk);
            quota.limit = Some(q);
            quota.window = params
                .get("w")
                .and_then(count)
                .filter(|&w| w > 0)
                .map(|w| seconds(w as f64));
            push(&mut quotas, quota);
        }
    }
    for item in items(headers, RATELIMIT) {
        if let Some((name, pk, params)) = member(&item) {
            let Some(r) = params.get("r").and_then(count) else {
                continue;
            };
            let t = params.get("t").and_then(count).map(|t| seconds(t as f64));
            let at = quotas
                .iter()
                .position(|q| q.policy == name && q.partition == pk);
            let quota = match at {
                Some(i) => &mut quotas[i],
                None => {
                    if !push(&mut quotas, Quota::new(name, pk)) {
                        continue;
                    }
                    quotas.last_mut().expect("just pushed")
                }
            };
            quota.remaining = Some(r);
            quota.reset = t;
        }
    }
    quotas.retain(Quota::is_useful);
    quotas
}

/// Pushes `quota` unless [`MAX_QUOTAS`] are already kept; says whether it did.
fn push(quotas: &mut Vec<Quota>, quota: Quota) -> bool {
    if quotas.len() >= MAX_QUOTAS {
        return false;
    }
    quotas.push(quota);
    true
}

/// The field's List members that are items; nothing when the field is absent or malformed.
fn items(headers: &HeaderMap, name: &str) -> Vec<Item> {
    let Some(value) = joined(headers, name) else {
        return Vec::new();
    };
    let Ok(list) = Parser::new(value.as_str()).parse::<List>() else {
        return Vec::new();
    };
    list.into_iter()
        .filter_map(|entry| match entry {
            ListEntry::Item(item) => Some(item),
            ListEntry::InnerList(_) => None,
        })
        .collect()
}

/// A member's policy name, partition key and parameters, if the name and key are acceptable.
fn member(item: &Item) -> Option<(String, Option<Vec<u8>>, &Parameters)> {
    let name = string_or_token(&item.bare_item)?;
    if name.len() > MAX_NAME_LEN {
        return None;
    }
    let pk = match item.params.get("pk") {
        None => None,
        Some(BareItem::ByteSequence(bytes)) if bytes.len() <= MAX_NAME_LEN => Some(bytes.clone()),
        Some(_) => return None,
    };
    Some((name.to_string(), pk, &item.params))
}

fn string_or_token(item: &BareItem) -> Option<&str> {
    match item {
        BareItem::String(s) => Some(s.as_str()),
        BareItem::Token(t) => Some(t.as_str()),
        _ => None,
    }
}

/// A non-negative Integer parameter.
fn count(item: &BareItem) -> Option<u64> {
    let n = i64::from(item.as_integer()?);
    u64::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::Duration;

    fn read_pairs(pairs: &[(&'static str, &str)]) -> Vec<Quota> {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        read(&map)
    }

    #[test]
    fn policy_and_remaining_are_matched_by_name() {
        let q = read_pairs(&[
            (POLICY, "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400"),
            (RATELIMIT, "\"daily\";r=900;t=3600, \"burst\";r=50;t=30"),
        ]);
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].policy, "burst");
        assert_eq!(q[0].limit, Some(100));
        assert_eq!(q[0].window, Some(Duration::from_secs(60)));
        assert_eq!(q[0].remaining, Some(50));
        assert_eq!(q[0].reset, Some(Duration::from_secs(30)));
        assert_eq!(q[1].remaining, Some(900));
        assert_eq!(q[1].window, Some(Duration::from_secs(86400)));
    }

    #[test]
    fn tokens_names_and_partitions() {
        let q = read_pairs(&[
            (POLICY, "peruser;q=10;w=1;pk=:YWxpY2U=:"),
            (
                RATELIMIT,
                "peruser;r=3;t=1;pk=:YWxpY2U=:, peruser;r=9;pk=:Ym9i:",
            ),
        ]);
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].partition.as_deref(), Some(&b"alice"[..]));
        assert_eq!(q[0].remaining, Some(3));
        assert_eq!(q[1].partition.as_deref(), Some(&b"bob"[..]));
        assert_eq!(q[1].limit, None);
        assert_eq!(q[1].remaining, Some(9));
        assert_eq!(q[1].reset, None);
    }

    #[test]
    fn several_lines_are_one_list() {
        let q = read_pairs(&[(POLICY, "\"a\";q=1;w=1"), (POLICY, "\"b\";q=2;w=2")]);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn malformed_members_and_fields_are_ignored() {
        // Missing q, negative q, decimal r, inner list, zero window, other units.
        let q = read_pairs(&[
            (
                POLICY,
                "\"a\";w=1, \"b\";q=-1;w=1, (\"c\");q=1, \"d\";q=5;w=0, \"e\";q=5;qu=\"content-bytes\";w=1",
            ),
            (RATELIMIT, "\"d\";r=4, \"f\";r=1.5;t=1, \"g\";r=2;t=-3"),
        ]);
        assert_eq!(q.len(), 2, "{q:?}");
        assert_eq!(q[0].policy, "d");
        assert_eq!(q[0].window, None, "w=0 is read as absent");
        assert_eq!(q[0].remaining, Some(4));
        assert_eq!(q[1].policy, "g");
        assert_eq!(q[1].remaining, Some(2));
        assert_eq!(q[1].reset, None);
        // A field that does not parse at all is ignored whole.
        assert!(read_pairs(&[(RATELIMIT, "\"a\";r=1;t=1, !!!")]).is_empty());
        assert!(read_pairs(&[(RATELIMIT, "\"a\";r=1;t=1"), (RATELIMIT, ";;;")]).is_empty());
    }

    #[test]
    fn hostile_sizes_are_bounded() {
        let huge = "\"a\";q=999999999999999;w=999999999999999";
        let q = read_pairs(&[(POLICY, huge)]);
        assert_eq!(q[0].limit, Some(999_999_999_999_999));
        assert_eq!(q[0].window, Some(super::super::MAX_HORIZON));
        let many: Vec<String> = (0..100).map(|i| format!("\"p{i}\";q=1;w=1")).collect();
        assert_eq!(read_pairs(&[(POLICY, &many.join(", "))]).len(), MAX_QUOTAS);
        let long_name = format!("\"{}\";q=1;w=1", "x".repeat(MAX_NAME_LEN + 1));
        assert!(read_pairs(&[(POLICY, &long_name)]).is_empty());
    }

    #[test]
    fn floodgate_servers_own_fields_are_read() {
        let q = read_pairs(&[
            (POLICY, "\"requests\";q=100;w=2"),
            (RATELIMIT, "\"requests\";r=0;t=1"),
        ]);
        assert_eq!(q[0].limit, Some(100));
        assert_eq!(q[0].remaining, Some(0));
        assert_eq!(q[0].window, Some(Duration::from_secs(2)));
    }
}
