//! [`Claims`] as text, for a store that keeps them as one value and changes them by
//! compare-and-swap (the memcached store): [`encode`] and [`decode`] are exact inverses.
//!
//! The text is `claims 1`, then one line per claim,
//! `c CLAIMANT REPORTED_AT HELD UNTIL GROUPS` (instants in nanoseconds; `GROUPS` is
//! `count,demand,margin` per group joined by `;`, or `-` for none), then one per node that left
//! while it still holds, `r CLAIMANT HELD UNTIL`. A claimant is written with `%`, space, and
//! control bytes as `%XX`, so that any name survives. Anything else is refused by [`decode`]
//! (`None`), never half read.

use super::{Claim, Claims, Retiring};
use crate::quota::share::Group;
use crate::Nanos;

const HEADER: &str = "claims 1";

/// The claims as text.
pub(crate) fn encode(claims: &Claims) -> String {
    let mut text = String::from(HEADER);
    for c in &claims.claims {
        let groups: Vec<String> = c
            .groups
            .iter()
            .map(|g| format!("{},{},{}", g.count, g.demand, g.margin))
            .collect();
        let groups = if groups.is_empty() {
            "-".to_owned()
        } else {
            groups.join(";")
        };
        text.push_str(&format!(
            "\nc {} {} {} {} {groups}",
            escape(&c.claimant),
            c.reported_at.0,
            c.held,
            c.until.0
        ));
    }
    for r in &claims.retiring {
        text.push_str(&format!(
            "\nr {} {} {}",
            escape(&r.claimant),
            r.held,
            r.until.0
        ));
    }
    text
}

/// The claims [`encode`] wrote, or `None` for any other text.
pub(crate) fn decode(text: &str) -> Option<Claims> {
    let mut lines = text.split('\n');
    if lines.next()? != HEADER {
        return None;
    }
    let mut claims = Claims::new();
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["c", claimant, reported_at, held, until, groups] => claims.claims.push(Claim {
                claimant: unescape(claimant)?,
                groups: decode_groups(groups)?,
                reported_at: Nanos(reported_at.parse().ok()?),
                held: held.parse().ok()?,
                until: Nanos(until.parse().ok()?),
            }),
            ["r", claimant, held, until] => claims.retiring.push(Retiring {
                claimant: unescape(claimant)?,
                held: held.parse().ok()?,
                until: Nanos(until.parse().ok()?),
            }),
            _ => return None,
        }
    }
    // The claims must be in claimant order, as `Claims` keeps them.
    let sorted = claims
        .claims
        .windows(2)
        .all(|w| w[0].claimant < w[1].claimant);
    sorted.then_some(claims)
}

/// The latest instant at which anything in `claims` still matters with `idle`: a claimant's
/// report until it goes idle, and every grant in force until its end.
pub(crate) fn matters_until(claims: &Claims, idle: std::time::Duration) -> Nanos {
    let claimed = claims
        .claims
        .iter()
        .map(|c| c.reported_at.saturating_add(idle).max(c.until));
    let retiring = claims.retiring.iter().map(|r| r.until);
    claimed.chain(retiring).max().unwrap_or(Nanos(0))
}

fn decode_groups(text: &str) -> Option<Vec<Group>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(';')
        .map(|g| {
            let mut parts = g.split(',').map(str::parse::<u64>);
            let group = Group {
                count: parts.next()?.ok()?,
                demand: parts.next()?.ok()?,
                margin: parts.next()?.ok()?,
            };
            parts.next().is_none().then_some(group)
        })
        .collect()
}

fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for ch in name.chars() {
        if ch == '%' || ch == ' ' || ch.is_control() && ch.is_ascii() || ch == ';' {
            out.push_str(&format!("%{:02X}", ch as u32));
        } else {
            out.push(ch);
        }
    }
    if out.is_empty() {
        out.push('%');
    }
    out
}

fn unescape(text: &str) -> Option<String> {
    if text == "%" {
        return Some(String::new());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{ClaimStep, ClaimTerms};
    use std::time::Duration;

    #[test]
    fn claims_survive_the_text() {
        let terms = ClaimTerms {
            capacity: 100,
            ttl: Duration::from_secs(3),
            idle: Duration::from_secs(10),
        };
        let mut claims = Claims::new();
        let groups = [Group::one(30, 5), Group::one(10, 2)];
        for (i, name) in ["node b", "node%a", "", "n\nc", "ünï"].iter().enumerate() {
            let step = ClaimStep::Report {
                claimant: name,
                groups: &groups[..i % 3],
                held: i as u64,
                wanted: 0,
            };
            claims.apply(step, &terms, Nanos::from_secs(1 + i as u64));
        }
        claims.apply(
            ClaimStep::Leave { claimant: "ünï" },
            &terms,
            Nanos::from_secs(6),
        );
        assert!(!claims.retiring.is_empty());
        let text = encode(&claims);
        assert_eq!(decode(&text), Some(claims.clone()));
        assert_eq!(decode(&encode(&Claims::new())), Some(Claims::new()));
        for bad in ["", "claims 2", "claims 1\nx", "claims 1\nc a 1 2 3 1,2"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        assert_eq!(matters_until(&claims, terms.idle), Nanos::from_secs(4 + 10));
    }
}
