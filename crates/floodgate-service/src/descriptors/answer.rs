//! How a `ShouldRateLimit` request is answered, step by step (the module's "Deciding"): the
//! limit each descriptor is held to ([`Matched`]), where each limited descriptor is counted —
//! in the store, in upstream's layout, or refused outright by a limit of 0 ([`plan`]) — and
//! each descriptor's status settled from its outcome, the same way whichever counted it
//! ([`Answer`]).

use std::time::Duration;

use floodgate::algorithm::Algorithm as _;
use serde_json::{Map, Value};

use super::checks::{Check, PerDescriptor};
use super::keys::{push_counter_key, push_override_counter_key};
use super::stats::{DescriptorStats, Outcome};
use super::{layout, DescriptorTree, Limit, Rule, RuleMatch, RuleSet};
use crate::rls::{Code, RlsRequest, RlsResponse, RlsStatus};

/// What each descriptor of a request matched, and what it carries: per-descriptor lists, on
/// the stack for up to `INLINE` descriptors (a call on counters the store holds allocates only
/// its response: `tests/allocations.rs`).
pub(super) struct Matched<'a> {
    matches: PerDescriptor<Option<RuleMatch<'a>>>,
    rules: PerDescriptor<Option<&'a Rule>>,
    /// A descriptor's own limit, which replaces whatever it matches (envoyproxy/ratelimit's
    /// rule): its configured rule is neither checked nor replaces others. Boxed: an override
    /// is rare, and a `Limit` inline is 160 bytes a descriptor in the call's future, which is
    /// built on the stack and copied into its box for every call.
    overrides: PerDescriptor<Option<Box<Limit>>>,
    /// The names the matched rules (without an override) replace.
    replaced: PerDescriptor<&'a str>,
}

/// The limit a request descriptor is held to.
pub(super) enum Held<'m> {
    /// None: it matches no rule, or its rule is replaced by another's.
    Free,
    /// Its rule is `unlimited`: OK, with everything remaining.
    Unlimited,
    /// `limit`, in shadow mode or not, in quota mode by its rule or not, all or nothing or
    /// not; `own`: the descriptor carries it, rather than its rule.
    Limited {
        limit: &'m Limit,
        shadow_mode: bool,
        quota_mode: bool,
        all_or_nothing: bool,
        own: bool,
    },
}

impl<'a> Matched<'a> {
    /// What `request`'s descriptors match in their domain's `root`.
    pub(super) fn new(root: &'a DescriptorTree, request: &RlsRequest) -> Matched<'a> {
        let matches: PerDescriptor<Option<RuleMatch<'a>>> = request
            .descriptors
            .iter()
            .map(|d| root.lookup(&d.entries))
            .collect();
        let rules: PerDescriptor<Option<&'a Rule>> =
            matches.iter().map(|m| m.as_ref().map(|m| m.rule)).collect();
        let overrides: PerDescriptor<Option<Box<Limit>>> = request
            .descriptors
            .iter()
            .map(|d| {
                let o = d.limit?;
                // Cannot fail: a window of at least one request over a whole unit.
                Limit::per_unit(o.requests_per_unit, o.unit, None)
                    .ok()
                    .map(Box::new)
            })
            .collect();
        let replaced: PerDescriptor<&'a str> = rules
            .iter()
            .zip(&overrides)
            .filter(|(_, o)| o.is_none())
            .filter_map(|(r, _)| *r)
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();
        Matched {
            matches,
            rules,
            overrides,
            replaced,
        }
    }

    /// The limit descriptor `i` is held to.
    pub(super) fn held(&self, i: usize) -> Held<'_> {
        if let Some(limit) = self.overrides[i].as_deref() {
            return Held::Limited {
                limit,
                shadow_mode: false,
                quota_mode: false,
                all_or_nothing: false,
                own: true,
            };
        }
        let Some(rule) = self.rules[i] else {
            return Held::Free;
        };
        if rule
            .name
            .as_deref()
            .is_some_and(|name| self.replaced.contains(&name))
        {
            return Held::Free;
        }
        match &rule.limit {
            None => Held::Unlimited,
            Some(limit) => Held::Limited {
                limit,
                shadow_mode: rule.shadow_mode,
                quota_mode: rule.quota_mode,
                all_or_nothing: rule.all_or_nothing,
                own: false,
            },
        }
    }

    /// The entries of descriptor `i` whose counter `share_threshold` shares.
    fn shared(&self, i: usize) -> &[(usize, &'a str)] {
        self.matches[i].as_ref().map_or(&[][..], |m| m.shared())
    }

    /// Whether descriptor `i` matched a rule that is an Envoy window (`requests_per_unit` per
    /// `unit`) of `unit`, counted under the descriptor's values as sent (no `share_threshold`
    /// pattern): its counter is then the one an override of `unit` counts in, as upstream
    /// keys both by descriptor and window start.
    fn window_of_unit(&self, i: usize, unit: floodgate::algorithm::fixed_window::Unit) -> bool {
        self.rules[i]
            .and_then(|rule| rule.limit.as_ref())
            .is_some_and(|l| l.envoy_window && l.unit == unit)
            && self.shared(i).is_empty()
    }

    /// The rule descriptor `i` is counted under in the statistics: the one it matched, unless
    /// it carries its own limit.
    fn counted_rule(&self, i: usize) -> Option<&'a Rule> {
        self.rules[i].filter(|_| self.overrides[i].is_none())
    }

    /// The `metadata` of the rule limiting descriptor `i`: none when it is unlimited, carries
    /// its own limit, matches nothing or matched a replaced rule.
    pub(super) fn metadata_of(&self, i: usize) -> Option<&'a Map<String, Value>> {
        match self.held(i) {
            Held::Limited { own: false, .. } => self.rules[i].and_then(Rule::metadata),
            _ => None,
        }
    }
}

/// Where the limited descriptors of a request are counted.
pub(super) struct Planned<'m> {
    /// In the store: each limit, its counter's key a range of the call's key buffer.
    pub(super) checks: PerDescriptor<Check<'m>>,
    /// In upstream's layout ([`layout`]), in one call to its counters.
    pub(super) counting: Vec<layout::Counting>,
    /// The same, each with its descriptor's index, limit and shadow mode.
    pub(super) counted: Vec<(usize, &'m Limit, bool)>,
}

/// Plans where each of `request`'s limited descriptors is counted: with an Envoy window, in
/// upstream's layout when `counters` are given; else in the store, its counter's key pushed
/// on `keys`. A limit of 0 counts nothing: it refuses the descriptor in `answer` at once.
pub(super) fn plan<'m, C: layout::Counters>(
    matched: &'m Matched<'_>,
    request: &RlsRequest,
    counters: Option<&C>,
    keys: &mut String,
    answer: &mut Answer<'_>,
) -> Planned<'m> {
    let mut planned = Planned {
        checks: PerDescriptor::new(),
        counting: Vec::new(),
        counted: Vec::new(),
    };
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        let (limit, shadow_mode, all_or_nothing, own) = match matched.held(i) {
            Held::Free => continue,
            Held::Unlimited => {
                answer.unlimited(i);
                continue;
            }
            Held::Limited {
                limit,
                shadow_mode,
                quota_mode,
                all_or_nothing,
                own,
            } => {
                answer.quota_mode(i, quota_mode);
                (limit, shadow_mode, all_or_nothing, own)
            }
        };
        let shared = if own { &[][..] } else { matched.shared(i) };
        if let Some(counters) = counters.filter(|_| limit.envoy_window) {
            planned.counting.push(layout::envoy_counting(
                counters, request, descriptor, shared, limit,
            ));
            planned.counted.push((i, limit, shadow_mode));
            continue;
        }
        let start = keys.len();
        if own && !matched.window_of_unit(i, limit.unit) {
            push_override_counter_key(keys, &request.domain, descriptor, limit.unit);
        } else {
            // A rule's own counter, or the one an override shares with a window of its unit.
            push_counter_key(keys, &request.domain, descriptor, shared);
        }
        let hits = request.hits_for(descriptor);
        let refund = descriptor.negative_hits;
        // A descriptor's own hits (Envoy's usage: the tokens of a finished stream) are a
        // charge where the algorithm takes one: counted even past the limit, as upstream
        // counts every hit. Elsewhere they are checked like any hits.
        let charge = !refund
            && descriptor.hits_addend.is_some_and(|own| own > 0)
            && limit.algorithm.supports(floodgate::OpKind::Charge);
        if limit.requests_per_unit == 0 {
            // A limit of 0 counts nothing: nothing to give back either.
            let outcome = if refund {
                Outcome::refunded(hits, 0, 0, shadow_mode)
            } else {
                Outcome::blocked(hits, shadow_mode)
            };
            answer.settle(matched, i, outcome, limit, None);
        } else {
            planned.checks.push(Check {
                index: i,
                shadow_mode,
                // A refund is given back, and a charge counted, whatever the others decide:
                // never a link of a chain that would undo it.
                all_or_nothing: all_or_nothing && !refund && !charge,
                limit,
                key: start..keys.len(),
                hits,
                refund,
                charge,
            });
        }
    }
    planned
}

/// The answer being written: each descriptor's status, settled from its outcome, and logged
/// and counted in the statistics (when kept) as it is.
pub(super) struct Answer<'r> {
    rule_set: &'r RuleSet,
    request: &'r RlsRequest,
    stats: Option<&'r DescriptorStats>,
    statuses: Vec<RlsStatus>,
    /// Whether a descriptor not in quota mode is over its (enforcing) limit, which alone
    /// refuses the request.
    refused: bool,
    shadow_over_limit: u32,
}

impl<'r> Answer<'r> {
    /// Every descriptor of `request` OK until settled otherwise; in quota mode when the rule
    /// set puts every descriptor there.
    pub(super) fn new(
        rule_set: &'r RuleSet,
        request: &'r RlsRequest,
        stats: Option<&'r DescriptorStats>,
    ) -> Answer<'r> {
        let n = request.descriptors.len();
        Answer {
            rule_set,
            request,
            stats,
            statuses: vec![
                RlsStatus {
                    code: Code::Ok,
                    quota_mode: rule_set.quota_mode,
                    ..RlsStatus::default()
                };
                n
            ],
            refused: false,
            shadow_over_limit: 0,
        }
    }

    /// Whether a limit not in quota mode has already refused the request.
    pub(super) fn blocked(&self) -> bool {
        self.refused
    }

    /// Descriptor `i` is unlimited: OK, with everything remaining, and never in quota mode
    /// (upstream leaves an unlimited descriptor out of the quota count).
    pub(super) fn unlimited(&mut self, i: usize) {
        self.statuses[i].limit_remaining = u32::MAX;
        self.statuses[i].quota_mode = false;
    }

    /// Descriptor `i` is held to a limit whose rule puts it in quota mode, or not (it is
    /// anyway when every descriptor is).
    pub(super) fn quota_mode(&mut self, i: usize, by_rule: bool) {
        self.statuses[i].quota_mode |= by_rule;
    }

    /// Settles descriptor `i` of the rules `matched` from its `outcome` under `limit`, with the
    /// time until its window resets (`reset`): over its limit, it is
    /// OVER_LIMIT, and refuses the request unless it is in quota mode; in shadow mode it is OK
    /// instead, counted in `shadow_over_limit`.
    pub(super) fn settle(
        &mut self,
        matched: &Matched<'_>,
        i: usize,
        outcome: Outcome,
        limit: &Limit,
        reset: Option<Duration>,
    ) {
        self.record(matched, i, &outcome);
        let quota_mode = self.statuses[i].quota_mode;
        let code = if !outcome.over {
            Code::Ok
        } else if outcome.shadow {
            self.shadow_over_limit += 1;
            Code::Ok
        } else {
            self.refused |= !quota_mode;
            Code::OverLimit
        };
        self.statuses[i] = RlsStatus {
            code,
            current_limit: Some(limit.reported.clone()),
            limit_remaining: u32::try_from(outcome.remaining).unwrap_or(u32::MAX),
            duration_until_reset: reset,
            quota_mode,
        };
    }

    /// Logs descriptor `i`'s outcome and counts it in the statistics, when they are kept:
    /// under its rule's key, or (carrying its own limit) under the request's.
    fn record(&self, matched: &Matched<'_>, i: usize, outcome: &Outcome) {
        tracing::debug!(
            target: "floodgate::decision",
            domain = %self.request.domain,
            descriptor = %crate::rls::Entries(&self.request.descriptors[i]),
            hits = outcome.hits,
            count = outcome.after,
            limit = outcome.limit,
            outcome = if outcome.over { "over_limit" } else { "ok" },
            shadow = outcome.shadow,
            from_cache = outcome.from_cache,
            "descriptor decided"
        );
        if let Some(stats) = self.stats {
            let rule = matched.counted_rule(i);
            self.rule_set.record(stats, self.request, i, rule, outcome);
        }
    }

    /// The response, with the dynamic metadata (when enabled) of the rules `matched` (`None`
    /// for an unknown domain). The overall code is `OVER_LIMIT` when a descriptor not in quota
    /// mode is, or when every quota-mode descriptor is (there being one), as upstream decides
    /// it.
    pub(super) fn into_response(self, matched: Option<&Matched<'_>>) -> RlsResponse {
        let refused = self.refused || {
            let (mut quota, mut over) = (0usize, 0usize);
            for status in self.statuses.iter().filter(|s| s.quota_mode) {
                quota += 1;
                over += usize::from(status.code == Code::OverLimit);
            }
            quota > 0 && over == quota
        };
        let dynamic_metadata = self
            .rule_set
            .response_dynamic_metadata()
            .then(|| super::metadata::response_metadata(self.request, &self.statuses, matched));
        RlsResponse {
            overall_code: if refused { Code::OverLimit } else { Code::Ok },
            statuses: self.statuses,
            shadow_over_limit: self.shadow_over_limit,
            dynamic_metadata,
            response_headers_to_add: Vec::new(),
        }
    }
}
