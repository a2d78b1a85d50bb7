//! Per-descriptor statistics under envoyproxy/ratelimit's names: what upstream's users alert
//! on.
//!
//! # Names
//!
//! A decided descriptor counts under its **statistics key**, as upstream names it:
//!
//! - by default, the key of the descriptor it matched in the configuration
//!   ([`super::Rule::full_key`]: `domain.key_value.key`), so that every value a key-only or
//!   wildcard descriptor matches rolls up into one series;
//! - with `value_to_metric: true` on a matched level, that level's request value instead
//!   (`domain.key_value`), for a key-only match or a wildcard's (not one with
//!   `share_threshold`, which keeps its pattern);
//! - with `detailed_metric: true` on the matched descriptor, every entry's key and request
//!   value (`domain.k1_v1.k2_v2`; a `share_threshold` wildcard's pattern for its entries);
//! - a request's own `limit` (in a known domain): `domain.k1_v1.k2` from the request.
//!
//! An unknown domain counts `domain_not_found` under the domain's name, once per descriptor.
//!
//! # Counts
//!
//! For each decided descriptor, with `hits` its hits, `limit` its `requests_per_unit`,
//! `before` and `after` its count before and after the hits (upstream's layout: what Redis
//! answered; Floodgate's: what the decision's remaining implies, `after = before + hits` for a
//! refused one, as upstream would have counted it) and `near` = ⌊limit × `near_limit_ratio`⌋
//! (the product in 32-bit floating point, as upstream computes it):
//!
//! | stat | adds |
//! |---|---|
//! | `total_hits` | `hits` |
//! | `over_limit` | over the limit: `hits` when `before ≥ limit`, else `after − limit` |
//! | `near_limit` | over the limit from below: `limit − max(near, before)`; within it, past `near`: `hits` when `before ≥ near`, else `after − near` |
//! | `within_limit` | within the limit: `hits` |
//! | `shadow_mode` | a shadow-mode rule over its limit: `hits` when `before ≥ limit` (or from the over-limit cache), else `after − limit` |
//! | `over_limit_with_local_cache` | answered by the over-limit cache: `hits` (and `over_limit` too) |
//! | `refunded_hits` | given back (`is_negative_hits`): `hits`, and nothing else (not `total_hits`); Floodgate's own, shown once it is not 0 |
//!
//! The counts live in a [`DescriptorStats`] the service keeps across reloads; `/metrics` shows
//! them as labelled series and statsd receives them under upstream's names. At most
//! `max_series` keys are kept; hits of keys beyond are counted under [`OVERFLOW`], so that a
//! `detailed_metric` descriptor with unbounded values cannot grow memory or the series without
//! bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::keys::push_stat_part;
use super::{DescriptorTree, Node, RuleSet};
use crate::prometheus::{Exposition, Kind};
use crate::rls::{RlsDescriptor, RlsRequest};

/// The key that counts the hits of keys beyond `max_series`.
pub const OVERFLOW: &str = "__overflow__";

/// The seven counts of one statistics key, in [`STATS`]'s order.
#[derive(Debug, Default)]
pub struct Counts([AtomicU64; 7]);

/// The stats' names, in [`Counts`]' order.
pub const STATS: [&str; 7] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
    "over_limit_with_local_cache",
    REFUNDED,
];

/// The stat of the hits given back (`is_negative_hits`), which upstream does not have: shown
/// only once something counted in it, so that a service without refunds shows upstream's
/// series and no more.
pub const REFUNDED: &str = "refunded_hits";

/// Whether a key's count `n` of `stat` is shown (on `/metrics`, to statsd): every stat of
/// upstream's always, [`REFUNDED`] once not 0.
pub fn shown(stat: &str, n: u64) -> bool {
    stat != REFUNDED || n != 0
}

impl Counts {
    /// The counts now, in [`STATS`]' order.
    pub fn read(&self) -> [u64; 7] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }

    fn add(&self, stat: usize, n: u64) {
        if n > 0 {
            self.0[stat].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// One decided descriptor, as the statistics see it (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Its hits.
    pub hits: u64,
    /// Its limit's `requests_per_unit`.
    pub limit: u64,
    /// The count before the hits.
    pub before: u64,
    /// The count after them.
    pub after: u64,
    /// Whether it was over the limit.
    pub over: bool,
    /// Whether its rule is in shadow mode.
    pub shadow: bool,
    /// Whether the over-limit cache answered.
    pub from_cache: bool,
    /// Whether the hits were given back (`is_negative_hits`): they count in
    /// [`REFUNDED`] alone.
    pub refunded: bool,
    /// What the descriptor's status reports as `limit_remaining`: 0 over the limit.
    pub remaining: u64,
}

impl Outcome {
    /// A descriptor blocked by a limit of 0 (`hits` all over it).
    pub fn blocked(hits: u64, shadow: bool) -> Outcome {
        Outcome {
            hits,
            limit: 0,
            before: 0,
            after: hits,
            over: true,
            shadow,
            from_cache: false,
            refunded: false,
            remaining: 0,
        }
    }

    /// A descriptor whose `hits` were given back under a limit of `limit`, its count `after`
    /// them: never over.
    pub fn refunded(hits: u64, limit: u64, after: u64, shadow: bool) -> Outcome {
        Outcome {
            hits,
            limit,
            before: after.saturating_add(hits),
            after,
            over: false,
            shadow,
            from_cache: false,
            refunded: true,
            remaining: limit.saturating_sub(after),
        }
    }

    /// A descriptor whose `hits` a store gave back under a limit of `limit`, its count after
    /// them read from what `decision` left.
    pub fn refunded_from(
        decision: &floodgate::Decision,
        limit: u32,
        hits: u64,
        shadow: bool,
    ) -> Outcome {
        let cap = u64::from(limit);
        let after = cap.saturating_sub(decision.remaining);
        Outcome {
            remaining: decision.remaining,
            ..Outcome::refunded(hits, cap, after, shadow)
        }
    }

    /// A descriptor counted in upstream's layout: `count` as Redis (or the over-limit cache)
    /// answered it, for the request's `hits` on a limit of `limit`.
    pub fn counted(count: &super::layout::Counted, limit: u32, hits: u64, shadow: bool) -> Outcome {
        Outcome {
            // The over-limit cache and the uncharged descriptors added nothing, but their
            // hits are the request's.
            hits,
            limit: u64::from(limit),
            before: count.before,
            after: count.after,
            over: count.over,
            shadow,
            from_cache: count.from_cache,
            refunded: false,
            remaining: if count.over {
                0
            } else {
                u64::from(limit).saturating_sub(count.after)
            },
        }
    }

    /// A descriptor a store decided: `hits` on a limit of `limit`, the counts before and after
    /// read from what `decision` left (a refused one as upstream would have counted it).
    pub fn decided(decision: &floodgate::Decision, limit: u32, hits: u64, shadow: bool) -> Outcome {
        let cap = u64::from(limit);
        let (before, after) = if decision.allowed {
            let after = cap.saturating_sub(decision.remaining);
            (after.saturating_sub(hits), after)
        } else {
            let before = cap.saturating_sub(decision.remaining);
            (before, before.saturating_add(hits))
        };
        Outcome {
            hits,
            limit: cap,
            before,
            after,
            over: !decision.allowed,
            shadow,
            from_cache: false,
            refunded: false,
            remaining: decision.remaining,
        }
    }
}

/// The per-descriptor statistics (see the [module documentation](self)). Shared by the
/// service's calls; an update is a read lock and a few relaxed additions (a write lock the
/// first time a key is seen).
#[derive(Debug)]
pub struct DescriptorStats {
    keys: RwLock<HashMap<Arc<str>, Arc<Counts>, foldhash::fast::RandomState>>,
    domains_not_found: RwLock<HashMap<Arc<str>, Arc<AtomicU64>, foldhash::fast::RandomState>>,
    max_series: usize,
    near_ratio: f32,
}

impl DescriptorStats {
    /// Statistics of at most `max_series` keys (and as many unknown domains), `near_limit`
    /// from `near_ratio` of each limit.
    pub fn new(max_series: usize, near_ratio: f32) -> DescriptorStats {
        DescriptorStats {
            keys: RwLock::default(),
            domains_not_found: RwLock::default(),
            max_series,
            near_ratio,
        }
    }

    /// Counts `outcome` under `key`.
    pub fn record(&self, key: &str, outcome: &Outcome) {
        let counts = self.counts(key);
        let Outcome {
            hits,
            limit,
            before,
            after,
            over,
            shadow,
            from_cache,
            refunded,
            remaining: _,
        } = *outcome;
        if refunded {
            counts.add(6, hits);
            return;
        }
        let near = (limit as f32 * self.near_ratio).floor() as u64;
        counts.add(0, hits);
        if from_cache {
            counts.add(1, hits);
            counts.add(5, hits);
        } else if over {
            if before >= limit {
                counts.add(1, hits);
            } else {
                counts.add(1, after.saturating_sub(limit));
                counts.add(2, limit.saturating_sub(near.max(before)));
            }
        } else {
            counts.add(3, hits);
            if after > near {
                counts.add(2, if before >= near { hits } else { after - near });
            }
        }
        if shadow && over {
            let n = if from_cache || before >= limit {
                hits
            } else {
                after.saturating_sub(limit)
            };
            counts.add(4, n);
        }
    }

    /// Counts a descriptor of the unknown `domain`.
    pub fn domain_not_found(&self, domain: &str) {
        let found = self
            .domains_not_found
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(domain)
            .cloned();
        let counter = found.unwrap_or_else(|| {
            let mut map = self
                .domains_not_found
                .write()
                .unwrap_or_else(|e| e.into_inner());
            let key: Arc<str> = if map.len() < self.max_series || map.contains_key(domain) {
                Arc::from(domain)
            } else {
                Arc::from(OVERFLOW)
            };
            map.entry(key).or_default().clone()
        });
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Every key's counts now, sorted by key.
    pub fn snapshot(&self) -> Vec<(Arc<str>, [u64; 7])> {
        let map = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = map.iter().map(|(k, c)| (k.clone(), c.read())).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Every unknown domain's `domain_not_found` count, sorted by domain.
    pub fn domains_not_found_snapshot(&self) -> Vec<(Arc<str>, u64)> {
        let map = self
            .domains_not_found
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = map
            .iter()
            .map(|(k, c)| (k.clone(), c.load(Ordering::Relaxed)))
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Appends the counts to `out` as Prometheus text: one series a key and stat,
    /// `floodgate_rls_descriptor_hits_total{domain, key, stat}` (`key` the statistics key,
    /// `domain` its first part), and `floodgate_rls_domain_not_found_total{domain}`.
    pub fn render(&self, out: &mut String) {
        let mut text = Exposition::on(out);
        let mut hits = text.family(
            "floodgate_rls_descriptor_hits_total",
            Kind::Counter,
            "Hits of the Envoy rules' descriptors by statistics key (envoyproxy/ratelimit's names) and stat.",
        );
        for (key, counts) in self.snapshot() {
            let domain = key.split('.').next().unwrap_or_default();
            for (stat, n) in STATS.iter().zip(counts) {
                if !shown(stat, n) {
                    continue;
                }
                hits.sample(&[("domain", domain), ("key", &key), ("stat", stat)], n);
            }
        }
        let mut not_found = text.family(
            "floodgate_rls_domain_not_found_total",
            Kind::Counter,
            "Descriptors of Envoy calls naming a domain the configuration does not have.",
        );
        for (domain, n) in self.domains_not_found_snapshot() {
            not_found.sample(&[("domain", &domain)], n);
        }
    }

    fn counts(&self, key: &str) -> Arc<Counts> {
        if let Some(counts) = self.keys.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return counts.clone();
        }
        let mut map = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if let Some(counts) = map.get(key) {
            return counts.clone();
        }
        let key: Arc<str> = if map.len() < self.max_series {
            Arc::from(key)
        } else {
            Arc::from(OVERFLOW)
        };
        map.entry(key).or_default().clone()
    }
}

impl RuleSet {
    /// Counts descriptor `i` of `request`'s `outcome` in `stats`, under its statistics key:
    /// `rule`'s key (`None`: the descriptor carries its own limit), or the one worked out from
    /// the request when names depend on values (see the [module documentation](self)).
    pub(super) fn record(
        &self,
        stats: &DescriptorStats,
        request: &RlsRequest,
        i: usize,
        rule: Option<&super::Rule>,
        outcome: &Outcome,
    ) {
        match rule {
            Some(rule) if !self.named_by_values => stats.record(&rule.full_key, outcome),
            _ => {
                let descriptor = &request.descriptors[i];
                if let Some(key) = self.stat_key(&request.domain, descriptor, rule.is_none()) {
                    stats.record(&key, outcome);
                }
            }
        }
    }

    /// The statistics key of a request descriptor in `domain` (see the [module
    /// documentation](self)); `overridden`: it carries its own limit. `None` when the domain
    /// is unknown or the descriptor matches nothing.
    pub fn stat_key(
        &self,
        domain: &str,
        descriptor: &RlsDescriptor,
        overridden: bool,
    ) -> Option<String> {
        let root = self.domains.get(domain)?;
        let mut key = String::from(domain);
        if overridden {
            for (k, v) in &descriptor.entries {
                push_stat_part(&mut key, k, v);
            }
            return Some(key);
        }
        let walked = walk(root, &descriptor.entries)?;
        let leaf = walked.last()?.node;
        let detailed = leaf.rule.as_ref().is_some_and(|r| r.detailed_metric);
        let shares = walked.iter().any(|s| s.shared.is_some());
        for ((k, v), step) in descriptor.entries.iter().zip(&walked) {
            let shown: &str = if detailed {
                match step.shared {
                    Some(pattern) => pattern,
                    None if shares => v,
                    // Upstream writes `key_` for an empty value here.
                    None => {
                        key.push('.');
                        key.push_str(k);
                        key.push('_');
                        key.push_str(v);
                        continue;
                    }
                }
            } else {
                match (step.pattern, step.shared) {
                    (_, Some(pattern)) => pattern,
                    (Some(_), None) if step.node.value_to_metric => v,
                    (Some(pattern), None) => pattern,
                    (None, None) if step.any => {
                        if step.node.value_to_metric {
                            v
                        } else {
                            ""
                        }
                    }
                    (None, None) => v,
                }
            };
            push_stat_part(&mut key, k, shown);
        }
        Some(key)
    }
}

/// Whether some descriptor of `tree` has `value_to_metric`, or a rule `detailed_metric`.
pub(super) fn names_by_values(tree: &DescriptorTree) -> bool {
    tree.keys.values().any(|m| {
        m.exact
            .values()
            .chain(m.wildcards.iter().map(|(_, n)| n))
            .chain(m.any.as_deref())
            .any(|n| {
                n.value_to_metric
                    || n.rule.as_ref().is_some_and(|r| r.detailed_metric)
                    || names_by_values(&n.children)
            })
    })
}

/// One level of a walk down the tree: the node matched, the wildcard pattern that matched (if
/// any), the pattern shared by `share_threshold` (if any), and whether it matched by key only.
struct Step<'a> {
    node: &'a Node,
    pattern: Option<&'a str>,
    shared: Option<&'a str>,
    any: bool,
}

/// The nodes each entry matches, level by level, as [`DescriptorTree::lookup`] walks; `None`
/// when an entry matches nothing.
fn walk<'a>(root: &'a DescriptorTree, entries: &[(String, String)]) -> Option<Vec<Step<'a>>> {
    let mut level = root;
    let mut steps = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let m = level.keys.get(key.as_str())?;
        let step = if let Some(node) = m.exact.get(value.as_str()) {
            Step {
                node,
                pattern: None,
                shared: None,
                any: false,
            }
        } else if let Some((wildcard, node)) = m.wildcards.iter().find(|(w, _)| w.matches(value)) {
            Step {
                node,
                pattern: Some(wildcard.pattern()),
                shared: node.share_threshold.then(|| wildcard.pattern()),
                any: false,
            }
        } else {
            Step {
                node: m.any.as_deref()?,
                pattern: None,
                shared: None,
                any: true,
            }
        };
        level = &step.node.children;
        steps.push(step);
    }
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::envoy::compile_file;

    fn descriptor(entries: &[(&str, &str)]) -> RlsDescriptor {
        RlsDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..RlsDescriptor::default()
        }
    }

    #[test]
    fn keys_are_named_as_upstream_names_them() {
        let rules = compile_file(
            "domain: rl\ndescriptors:\n\
             \x20 - key: to_number\n    rate_limit: {unit: minute, requests_per_unit: 2}\n\
             \x20 - key: files\n    value: 'docs/*'\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n\
             \x20 - key: path\n    value: 'api/*'\n    rate_limit: {unit: minute, requests_per_unit: 2}\n\
             \x20 - key: unspec\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n\
             \x20 - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n\
             \x20 - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit: {unit: day, requests_per_unit: 5}\n",
        )
        .unwrap();
        let key = |entries: &[(&str, &str)]| rules.stat_key("rl", &descriptor(entries), false);
        assert_eq!(key(&[("to_number", "555")]).unwrap(), "rl.to_number");
        assert_eq!(key(&[("files", "docs/a")]).unwrap(), "rl.files_docs/*");
        assert_eq!(key(&[("path", "api/v1")]).unwrap(), "rl.path_api/*");
        assert_eq!(
            key(&[("unspec", "unspecified_value")]).unwrap(),
            "rl.unspec_unspecified_value"
        );
        assert_eq!(key(&[("user", "alice")]).unwrap(), "rl.user_alice");
        assert_eq!(key(&[("user", "")]).unwrap(), "rl.user_");
        assert_eq!(
            key(&[("message_type", "marketing"), ("to_number", "555")]).unwrap(),
            "rl.message_type_marketing.to_number"
        );
        assert_eq!(key(&[("nothing", "x")]), None);
        assert_eq!(
            rules.stat_key("other", &descriptor(&[("k", "v")]), false),
            None
        );
        assert_eq!(
            rules
                .stat_key("rl", &descriptor(&[("to_number", "555"), ("x", "")]), true)
                .unwrap(),
            "rl.to_number_555.x"
        );
    }

    #[test]
    fn counts_follow_upstreams_arithmetic() {
        let stats = DescriptorStats::new(2, 0.8);
        let outcome = |before: u64, hits: u64, over: bool| Outcome {
            hits,
            limit: 10,
            before,
            after: before + hits,
            over,
            shadow: false,
            from_cache: false,
            refunded: false,
            remaining: 10u64.saturating_sub(before + hits),
        };
        // 8 → 9 within, past near (8): near 1, within 1.
        stats.record("a", &outcome(8, 1, false));
        // 9 → 12 over from below: over 2, near 10 − max(8, 9) = 1.
        stats.record("a", &outcome(9, 3, true));
        // Already over: over by all its hits.
        stats.record("a", &outcome(12, 2, true));
        let [total, over, near, within, shadow, cache, refunded] = stats.snapshot()[0].1;
        assert_eq!(
            (total, over, near, within, shadow, cache, refunded),
            (6, 4, 2, 1, 0, 0, 0)
        );
        stats.record(
            "b",
            &Outcome {
                shadow: true,
                from_cache: true,
                ..outcome(10, 1, true)
            },
        );
        assert_eq!(stats.snapshot()[1].1, [1, 1, 0, 0, 1, 1, 0]);
        // A refund counts in refunded_hits alone.
        stats.record("b", &Outcome::refunded(4, 10, 6, false));
        assert_eq!(stats.snapshot()[1].1, [1, 1, 0, 0, 1, 1, 4]);
        // Beyond two keys: the overflow's.
        stats.record("c", &outcome(0, 1, false));
        let keys: Vec<String> = stats
            .snapshot()
            .iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(keys, [OVERFLOW, "a", "b"]);
    }

    proptest::proptest! {
        /// Whatever is recorded: at most `max_series` keys and the overflow's, every hit in
        /// `total_hits`, and no stat counting more than the hits.
        #[test]
        fn series_are_bounded_and_stats_never_exceed_the_hits(
            max in 1usize..6,
            calls in proptest::collection::vec((0u8..12, 0u64..40, 1u64..5, 1u64..20, proptest::bool::ANY), 1..80),
        ) {
            let stats = DescriptorStats::new(max, 0.8);
            let mut hits = 0;
            for (key, before, n, limit, shadow) in calls {
                let after = before + n;
                stats.record(&format!("k{key}"), &Outcome {
                    hits: n,
                    limit,
                    before,
                    after,
                    over: after > limit,
                    shadow,
                    from_cache: false,
                    refunded: false,
                    remaining: limit.saturating_sub(after),
                });
                hits += n;
            }
            let snapshot = stats.snapshot();
            proptest::prop_assert!(snapshot.len() <= max + 1);
            let total: u64 = snapshot.iter().map(|(_, c)| c[0]).sum();
            proptest::prop_assert_eq!(total, hits);
            for (key, [total, over, near, within, shadow, _, _]) in snapshot {
                proptest::prop_assert!(over + within <= total, "{}", key);
                proptest::prop_assert!(near <= total && shadow <= total, "{}", key);
            }
        }
    }
}
