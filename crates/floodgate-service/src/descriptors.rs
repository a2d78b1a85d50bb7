//! envoyproxy/ratelimit's decision rule on Floodgate's stores: the descriptor match tree of
//! each domain, the limits on its descriptors, and the decision for a whole `ShouldRateLimit`
//! request.
//!
//! A [`RuleSet`] is built from the `domains` of a configuration (envoyproxy/ratelimit's file
//! format, read and checked by the config module); this module only knows the compiled rules.
//!
//! # Matching
//!
//! A request descriptor is a list of key/value entries. Its first entry is looked up among the
//! domain's top-level descriptors, the second among the children of the one found, and so on.
//! At each level the exact key and value is tried first, then the wildcard values of that key
//! (values holding `*`, see [`Wildcard`]; in file order, the first that matches wins), then the
//! key without a value. There is no backtracking: the first match at a level is the only one
//! followed. The limit is the one
//! on the descriptor reached by the **last** entry; if an entry matches nothing, or the
//! descriptor reached has no `rate_limit`, no limit applies (as in envoyproxy/ratelimit, a
//! request with more or fewer entries than the configured depth matches nothing).
//!
//! # Deciding ([`RuleSet::should_rate_limit`])
//!
//! - Every distinct request descriptor (its domain and all its key/value pairs, as sent, so a
//!   wildcard or key-only rule counts each value apart) has its own counter in the store, except
//!   for `share_threshold`: an entry matched by a wildcard descriptor with `share_threshold`
//!   counts under the wildcard's pattern instead of its value, so all values matching that
//!   wildcard (at that place, with the same other entries) share one counter. An entry matched
//!   exactly, or by a key-only descriptor, keeps its own value.
//! - A descriptor adds its hits ([`RlsRequest::hits_for`]: its own `hits_addend`, else the
//!   request's, else 1; 0 reads the limit without counting, and is over only when a charge
//!   has put the count past the limit).
//! - A descriptor's own `hits_addend` of 1 or more is a usage charge (Envoy's stream-done call
//!   carrying a response's tokens): under a limit whose algorithm takes charges (the fixed
//!   window, the buckets, GCRA) it is counted in full even past the limit, OVER_LIMIT when it
//!   lands there, and the limit refuses every request until the excess has drained or the
//!   window ended. So check-then-charge overshoots a budget by at most the costs in flight.
//!   Under the other algorithms it is checked like any hits. A charge is never a link of an
//!   all-or-nothing chain.
//! - `replaces`: a matched limit whose `name` is listed in the `replaces` of any limit matched by
//!   the same request (the replacing limit may be `unlimited`) is not checked or counted; its
//!   status is OK with no limit.
//! - `unlimited`: OK, not counted, `limit_remaining` = `u32::MAX`, no limit (as envoyproxy).
//! - no match, or an unknown domain: OK with no limit, nothing counted.
//! - a limit: the store decides; the status carries the limit, what remains (rounded down;
//!   when over the limit, what a smaller request could still take) and the time until the
//!   limit resets. An over-limit request (not a charge) consumes nothing (unlike envoyproxy/ratelimit's
//!   `INCRBY`, which keeps counting refused hits in the window; with one hit per request the
//!   answers are the same).
//! - `requests_per_unit: 0` blocks the descriptor outright: every request is over the limit and
//!   nothing is counted.
//! - `shadow_mode`: decided and counted like any limit, but when it is over, its status says
//!   `OK` with `limit_remaining` 0, as envoyproxy/ratelimit answers; the response counts it in
//!   [`RlsResponse::shadow_over_limit`] (the service's `floodgate_rls_shadow_over_limit_total`).
//! - A descriptor's own `limit` ([`RlsDescriptor::limit`], in a known domain) replaces the
//!   rule it matches, or applies where none does: a fixed window of its `requests_per_unit`
//!   per `unit`, never in shadow mode nor (but under the global `QUOTA_MODE`) in quota mode,
//!   with no name and no metadata; the matched rule's `replaces` do not apply.
//!   `requests_per_unit: 0` blocks, as above. Where it is counted: see "Counter keys".
//! - `all_or_nothing` (a Floodgate extension on a descriptor): when the request is over the
//!   limit (its overall code is `OVER_LIMIT`), this descriptor's limit counts nothing for it,
//!   atomically with the others (envoyproxy/ratelimit counts every descriptor's hits even when
//!   another one refuses the request). Its status is still reported as decided. The limited
//!   descriptors of such a request are decided in one [`Store::apply_chain`] call; when a
//!   `requests_per_unit: 0` descriptor already blocks the request, its all-or-nothing
//!   descriptors are only probed (nothing taken), their status saying whether the hits would
//!   have fit.
//! - The overall code is `OVER_LIMIT` iff a status not in quota mode is, or every status in
//!   quota mode is (there being one); else `OK` (see "Quota mode").
//! - Dynamic metadata, only when the rule set has it enabled
//!   ([`RuleSet::set_response_dynamic_metadata`]; off by default, as envoyproxy/ratelimit's
//!   `RESPONSE_DYNAMIC_METADATA`): [`RlsResponse::dynamic_metadata`] holds `domain`,
//!   `descriptors` (each one's entries, own `limit` and own `hitsAddend`), `hitsAddend` when
//!   the request's is not 0, and `metadata`, merged from every descriptor that passed, as
//!   upstream builds it (`metadata.rs` has the exact rules). When disabled it is `None`.
//!
//! # Quota mode
//!
//! A descriptor is in quota mode when its rule says `quota_mode: true`, or when every
//! descriptor is ([`RuleSet::set_quota_mode`], upstream's `QUOTA_MODE`): then also those that
//! match nothing, whose rule is replaced, or that carry their own `limit`, but never an
//! `unlimited` one. Such a descriptor is decided, counted and reported like any other — over
//! its limit, its status says `OVER_LIMIT` — but it does not refuse the request on its own:
//! the request is `OVER_LIMIT` when a descriptor *not* in quota mode is, or when *every*
//! quota-mode descriptor of the request is ([`crate::rls::RlsStatus::quota_mode`] marks them). So a
//! request checked against several quotas (an AI gateway's per-model buckets) goes through
//! while any one of them has room. A quota-mode descriptor in shadow mode that is over its
//! limit is `OK`, so it never counts as over; the global `SHADOW_MODE` answers `OK` whatever
//! the quota rule decided. Counting is unchanged (in upstream's layout, a refused hit is
//! counted as upstream counts it), and so are the statistics. A domain holding a quota-mode
//! descriptor takes no `all_or_nothing` one (the config refuses it): which descriptors keep
//! their hits would depend on answers the store has not all seen when it decides.
//! Floodgate's pipeline and `/v1/check` have no quota mode and need none: a pipeline stage
//! that should not refuse runs in `shadow` mode, and several budgets a request may draw from
//! are one limit each that the caller picks between.
//!
//! # Counter keys
//!
//! Counters live in the store's [`RLS_NAMESPACE`] namespace (`rls:`), under the domain and each
//! key and value, each as its byte length, `:` and its bytes; a value shared by `share_threshold`
//! is written as its pattern's length, `*` and the pattern, so it never collides with a value
//! sent as is (unambiguous whatever the strings hold). A limit override counts as upstream
//! counts it, in the descriptor's window of its unit: when the descriptor matches a rule that
//! is a window of the same unit (`requests_per_unit` per `unit`) counted under the values as
//! sent, in that rule's counter, so that the override and the configured limit share one
//! count, as upstream's keys (descriptor and window start) make them share it. Otherwise —
//! no rule, a rule of another unit, one of Floodgate's algorithms (whose state a fixed window
//! cannot share), or a rule whose `share_threshold` counts under a pattern — under the same
//! parts plus one, its unit's name: a counter per descriptor and unit of its own. Overrides of
//! one descriptor and unit share one count, whatever their `requests_per_unit`, as in
//! envoyproxy/ratelimit.
//!
//! With `store.layout: envoyproxy`, the Envoy windows (not Floodgate's algorithms) count in
//! envoyproxy/ratelimit's keys instead, with its commands and answers ([`layout`]), through
//! [`MatchedRequest::decide`] on a [`DescriptorStore`].

mod answer;
mod checks;
pub(crate) mod keys;
pub mod layout;
mod listing;
mod metadata;
pub mod stats;
mod wildcard;

pub use self::wildcard::Wildcard;

use floodgate::algorithm::fixed_window::Unit;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::Store;
use floodgate::{ConfigError, StoreError};
use serde_json::{Map, Value};

use self::answer::{Answer, Matched};
use self::checks::{decide, KEYS, MAX_KEPT_KEY_BYTES};
use self::keys::counter_key;
pub use self::keys::RLS_NAMESPACE;

use crate::rls::{RlsDescriptor, RlsLimit, RlsRequest, RlsResponse};

/// A compiled limit: what applies to request descriptors that end on its descriptor.
#[derive(Clone, Debug)]
pub struct Rule {
    full_key: String,
    name: Option<String>,
    replaces: Vec<String>,
    shadow_mode: bool,
    quota_mode: bool,
    all_or_nothing: bool,
    limit: Option<Limit>,
    metadata: Option<Arc<Map<String, Value>>>,
    /// `detailed_metric`: statistics name it by every entry's request value ([`stats`]).
    detailed_metric: bool,
}

/// What a [`Rule`] that is not `unlimited` checks: an algorithm, and the limit in envoy's terms
/// that statuses report.
#[derive(Clone, Debug)]
pub struct Limit {
    algorithm: AnyAlgorithm,
    requests_per_unit: u32,
    unit: Unit,
    /// What statuses report.
    reported: RlsLimit,
    /// Whether it is an Envoy window (`requests_per_unit` per `unit`), which the `envoyproxy`
    /// layout counts in upstream's keys ([`layout`]).
    envoy_window: bool,
}

impl Limit {
    /// envoy's limit: `requests_per_unit` per `unit`, a fixed window aligned to the clock's
    /// epoch. `requests_per_unit` 0 blocks outright (the window only stands in for it: nothing
    /// is counted). `name` is the limit's name as statuses report it.
    pub fn per_unit(
        requests_per_unit: u32,
        unit: Unit,
        name: Option<String>,
    ) -> Result<Limit, ConfigError> {
        let algorithm = FixedWindow::new(u64::from(requests_per_unit.max(1)), unit.duration())?;
        let mut limit = Limit::new(
            AnyAlgorithm::FixedWindow(algorithm),
            requests_per_unit,
            unit,
            name,
        );
        limit.envoy_window = true;
        Ok(limit)
    }

    /// A limit decided by one of Floodgate's algorithms; statuses report its quota in envoy's
    /// terms (see [`Rule::quota`]).
    pub fn with_algorithm(algorithm: AnyAlgorithm, name: Option<String>) -> Limit {
        let (requests_per_unit, unit) = envoy_quota(&algorithm);
        Limit::new(algorithm, requests_per_unit, unit, name)
    }

    fn new(
        algorithm: AnyAlgorithm,
        requests_per_unit: u32,
        unit: Unit,
        name: Option<String>,
    ) -> Limit {
        let reported = RlsLimit {
            name,
            requests_per_unit,
            unit,
        };
        Limit {
            algorithm,
            requests_per_unit,
            unit,
            reported,
            envoy_window: false,
        }
    }
}

impl Rule {
    /// A rule: `full_key` is its statistics name (see [`Rule::full_key`]), `name` the name
    /// other rules' `replaces` refer to, `replaces` the names of the rules it replaces, and
    /// `limit` what it checks (`None`: unlimited).
    pub fn new(
        full_key: String,
        name: Option<String>,
        replaces: Vec<String>,
        shadow_mode: bool,
        limit: Option<Limit>,
    ) -> Rule {
        Rule {
            full_key,
            name,
            replaces,
            shadow_mode,
            quota_mode: false,
            all_or_nothing: false,
            limit,
            metadata: None,
            detailed_metric: false,
        }
    }

    /// The same rule, counting nothing for requests that are over the limit (see the module's
    /// "Deciding").
    pub fn with_all_or_nothing(mut self, all_or_nothing: bool) -> Rule {
        self.all_or_nothing = all_or_nothing;
        self
    }

    /// Whether the rule counts nothing for requests that are over the limit.
    pub fn all_or_nothing(&self) -> bool {
        self.all_or_nothing
    }

    /// The same rule in quota mode, or not: over its limit, its status says `OVER_LIMIT`,
    /// but it refuses the request only when every quota-mode descriptor of the request is
    /// over (see the module's "Quota mode").
    pub fn with_quota_mode(mut self, quota_mode: bool) -> Rule {
        self.quota_mode = quota_mode;
        self
    }

    /// Whether the descriptor is in quota mode (`quota_mode: true`).
    pub fn quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// The same rule carrying the descriptor's `metadata`, which responses with dynamic
    /// metadata enabled return (see the module's "Deciding"). An empty map is the same as none.
    pub fn with_metadata(mut self, metadata: Option<Map<String, Value>>) -> Rule {
        self.metadata = metadata.filter(|m| !m.is_empty()).map(Arc::new);
        self
    }

    /// The same rule with `detailed_metric` ([`stats`]).
    pub fn with_detailed_metric(mut self, detailed_metric: bool) -> Rule {
        self.detailed_metric = detailed_metric;
        self
    }

    /// The descriptor's `metadata`, if it has any.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.metadata.as_deref()
    }

    /// Whether statistics name requests by their entries' values (`detailed_metric`).
    pub fn detailed_metric(&self) -> bool {
        self.detailed_metric
    }

    /// envoyproxy/ratelimit's name for the rule in statistics: the domain and each descriptor's
    /// `key` or `key_value`, joined by dots (`messaging.message_type_marketing.to_number`).
    pub fn full_key(&self) -> &str {
        &self.full_key
    }

    /// The limit's `name`, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The names of the limits this one replaces.
    pub fn replaces(&self) -> &[String] {
        &self.replaces
    }

    /// Whether the descriptor is in shadow mode.
    pub fn shadow_mode(&self) -> bool {
        self.shadow_mode
    }

    /// Whether the rule is `unlimited` (never counted, always OK).
    pub fn is_unlimited(&self) -> bool {
        self.limit.is_none()
    }

    /// The algorithm deciding this rule; `None` when unlimited.
    pub fn algorithm(&self) -> Option<&AnyAlgorithm> {
        self.limit.as_ref().map(|l| &l.algorithm)
    }

    /// The limit in envoy's terms, `(requests_per_unit, unit)`; `None` when unlimited. For a
    /// Floodgate algorithm: its quota in the shortest unit in which it is at least one request,
    /// rounded down (a token bucket of rate 10 is 10 per second; a sliding log of 5 per minute
    /// is 5 per minute).
    pub fn quota(&self) -> Option<(u32, Unit)> {
        self.limit.as_ref().map(|l| (l.requests_per_unit, l.unit))
    }

    /// The limit as [`RlsStatus::current_limit`](crate::rls::RlsStatus::current_limit)
    /// reports it; `None` when unlimited.
    pub fn rls_limit(&self) -> Option<&RlsLimit> {
        self.limit.as_ref().map(|l| &l.reported)
    }
}

/// One level of a domain's match tree: the descriptors at one depth under one parent (the
/// domain's top-level descriptors, or one descriptor's children).
#[derive(Debug, Default)]
pub struct DescriptorTree {
    keys: Names<KeyMatch>,
}

/// The rule set's maps from a configured name to what it leads to. foldhash rather than std's
/// SipHash: every call looks up its domain and each entry's key and value here (SipHash was
/// ~170 instructions a lookup), and no request can add a key to these maps, so there is no
/// flooding of them to defend against.
type Names<V> = HashMap<String, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct KeyMatch {
    exact: Names<Node>,
    /// Values holding `*`, in file order.
    wildcards: Vec<(Wildcard, Node)>,
    any: Option<Box<Node>>,
}

#[derive(Debug)]
struct Node {
    rule: Option<Rule>,
    /// `share_threshold`: entries this wildcard matches count under its pattern.
    share_threshold: bool,
    /// `value_to_metric`: statistics name this level by the request's value ([`stats`]).
    value_to_metric: bool,
    children: DescriptorTree,
}

/// What a request descriptor matched: the rule it ends on, and the entries whose counter is
/// shared by `share_threshold` (see [`RuleSet::lookup_match`]).
#[derive(Clone, Debug)]
pub struct RuleMatch<'a> {
    rule: &'a Rule,
    /// `(entry index, wildcard pattern)` for each entry matched by a `share_threshold`
    /// wildcard, in entry order.
    shared: Vec<(usize, &'a str)>,
}

impl<'a> RuleMatch<'a> {
    /// The rule the descriptor ends on.
    pub fn rule(&self) -> &'a Rule {
        self.rule
    }

    /// `(entry index, wildcard pattern)` for each entry counted under a `share_threshold`
    /// wildcard's pattern instead of its value, in entry order; empty when nothing is shared.
    pub fn shared(&self) -> &[(usize, &'a str)] {
        &self.shared
    }

    /// The store key of this match's counter for `descriptor` (the one matched) in `domain`:
    /// see the module's "Counter keys".
    pub fn counter_key(&self, domain: &str, descriptor: &RlsDescriptor) -> String {
        counter_key(domain, descriptor, &self.shared)
    }
}

impl DescriptorTree {
    /// Adds a descriptor at this level: entries with `key` whose value matches `value` (exact;
    /// a [`Wildcard`] when it holds `*`; any value when empty) end on `rule` (`None`: no limit)
    /// or go on into `children`. Wildcards are tried in the order they are added.
    /// `share_threshold` makes the values a wildcard matches share one counter; it only has an
    /// effect on a wildcard (the config refuses it elsewhere). A descriptor with the same key
    /// and value as one already added replaces it (the config refuses such duplicates before
    /// they get here).
    pub fn insert(
        &mut self,
        key: &str,
        value: &str,
        share_threshold: bool,
        rule: Option<Rule>,
        children: DescriptorTree,
    ) {
        self.insert_named(key, value, share_threshold, false, rule, children);
    }

    /// [`DescriptorTree::insert`], with `value_to_metric`: the statistics name this level by the
    /// request's value ([`stats`]).
    pub fn insert_named(
        &mut self,
        key: &str,
        value: &str,
        share_threshold: bool,
        value_to_metric: bool,
        rule: Option<Rule>,
        children: DescriptorTree,
    ) {
        let node = Node {
            rule,
            share_threshold,
            value_to_metric,
            children,
        };
        let entry = self.keys.entry(key.to_string()).or_default();
        if value.is_empty() {
            entry.any = Some(Box::new(node));
        } else if let Some(wildcard) = Wildcard::parse(value) {
            entry.wildcards.retain(|(w, _)| w.pattern() != value);
            entry.wildcards.push((wildcard, node));
        } else {
            entry.exact.insert(value.to_string(), node);
        }
    }

    /// The node an entry matches at this level, and the wildcard that matched it if it is
    /// shared.
    fn find(&self, key: &str, value: &str) -> Option<(&Node, Option<&str>)> {
        let m = self.keys.get(key)?;
        if let Some(node) = m.exact.get(value) {
            return Some((node, None));
        }
        if let Some((wildcard, node)) = m.wildcards.iter().find(|(w, _)| w.matches(value)) {
            let shared = node.share_threshold.then(|| wildcard.pattern());
            return Some((node, shared));
        }
        m.any.as_deref().map(|node| (node, None))
    }

    fn lookup(&self, entries: &[(String, String)]) -> Option<RuleMatch<'_>> {
        let last = entries.len().checked_sub(1)?;
        let mut level = self;
        let mut shared = Vec::new();
        for (i, (key, value)) in entries.iter().enumerate() {
            let (node, pattern) = level.find(key, value)?;
            if let Some(pattern) = pattern {
                shared.push((i, pattern));
            }
            if i == last {
                return node.rule.as_ref().map(|rule| RuleMatch { rule, shared });
            }
            level = &node.children;
        }
        None
    }
}

/// Every domain's compiled descriptors: which limit applies to a request descriptor, and the
/// decision for a whole `ShouldRateLimit` request. See the [module documentation](self) for
/// the exact rules. Immutable once built; share it behind an `Arc` and swap it on reload.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: Names<DescriptorTree>,
    response_dynamic_metadata: bool,
    /// Every descriptor in quota mode (upstream's `QUOTA_MODE`), whatever its rule says.
    quota_mode: bool,
    /// Whether some descriptor has `value_to_metric` or `detailed_metric`: then statistics
    /// keys are worked out per request, else they are the rules' keys ([`stats`]).
    named_by_values: bool,
}

impl RuleSet {
    /// Adds (or replaces) `domain` with its top-level descriptors.
    pub fn insert_domain(&mut self, domain: String, descriptors: DescriptorTree) {
        self.named_by_values |= stats::names_by_values(&descriptors);
        self.domains.insert(domain, descriptors);
    }

    /// Every rule with an algorithm, as `(domain, rule)`, in no particular order.
    pub fn rules(&self) -> Vec<(&str, &Rule)> {
        fn walk<'a>(domain: &'a str, tree: &'a DescriptorTree, out: &mut Vec<(&'a str, &'a Rule)>) {
            for m in tree.keys.values() {
                let nodes = m
                    .exact
                    .values()
                    .chain(m.wildcards.iter().map(|(_, n)| n))
                    .chain(m.any.as_deref());
                for node in nodes {
                    if let Some(rule) = &node.rule {
                        out.push((domain, rule));
                    }
                    walk(domain, &node.children, out);
                }
            }
        }
        let mut out = Vec::new();
        for (domain, tree) in &self.domains {
            walk(domain, tree, &mut out);
        }
        out
    }

    /// Whether `domain` is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The configured domains, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The rule a request descriptor of `entries` in `domain` ends on (see the module's
    /// "Matching"): `None` if the domain is unknown, `entries` is empty, an entry matches
    /// nothing, or the descriptor reached has no `rate_limit`.
    pub fn lookup(&self, domain: &str, entries: &[(String, String)]) -> Option<&Rule> {
        self.lookup_match(domain, entries).map(|m| m.rule)
    }

    /// Like [`RuleSet::lookup`], with the entries whose counter `share_threshold` shares.
    pub fn lookup_match(
        &self,
        domain: &str,
        entries: &[(String, String)],
    ) -> Option<RuleMatch<'_>> {
        self.domains.get(domain)?.lookup(entries)
    }

    /// Whether responses carry dynamic metadata (see the module's "Deciding"); off by default.
    pub fn set_response_dynamic_metadata(&mut self, enabled: bool) {
        self.response_dynamic_metadata = enabled;
    }

    /// Whether responses carry dynamic metadata.
    pub fn response_dynamic_metadata(&self) -> bool {
        self.response_dynamic_metadata
    }

    /// Puts every descriptor in quota mode (envoyproxy/ratelimit's `QUOTA_MODE`), or only
    /// those whose rule says `quota_mode: true` (the default); see the module's "Quota mode".
    pub fn set_quota_mode(&mut self, every_descriptor: bool) {
        self.quota_mode = every_descriptor;
    }

    /// Whether every descriptor is in quota mode.
    pub fn quota_mode(&self) -> bool {
        self.quota_mode
    }

    /// `request` matched against the rules, once: what each of its descriptors is held to,
    /// from which the call is checked ([`MatchedRequest::refund_refused`]) and decided
    /// ([`MatchedRequest::decide`]).
    pub fn matched<'r>(&'r self, request: &'r RlsRequest) -> MatchedRequest<'r> {
        MatchedRequest {
            rules: self,
            request,
            matched: self
                .domains
                .get(&request.domain)
                .map(|root| Matched::new(root, request)),
        }
    }

    /// Decides a `ShouldRateLimit` request in Floodgate's layout of `store`, without
    /// statistics: [`RuleSet::matched`], then [`MatchedRequest::decide`].
    pub async fn should_rate_limit<S: Store<str, AnyAlgorithm>>(
        &self,
        store: &S,
        request: &RlsRequest,
    ) -> Result<RlsResponse, StoreError> {
        self.matched(request)
            .decide_in(store, None::<&layout::EnvoyCounters>, None)
            .await
    }
}

/// The store a `ShouldRateLimit` call counts in: Floodgate's algorithms ([`Store`]) and, when
/// it keeps upstream's layout (`store.layout: envoyproxy`), the Envoy windows there
/// ([`layout`]).
pub trait DescriptorStore: Store<str, AnyAlgorithm> {
    /// Where the Envoy windows count in upstream's layout, borrowed from the store.
    type Layout<'a>: layout::Counters
    where
        Self: 'a;

    /// The Envoy windows' counters in upstream's layout; `None`: they are fixed windows in
    /// this store, under Floodgate's counter keys.
    fn upstream_layout(&self) -> Option<Self::Layout<'_>>;
}

/// The memory store keeps no upstream layout: its Envoy windows are its own fixed windows.
impl<C: floodgate::Clock> DescriptorStore
    for floodgate::store::MemoryStore<
        floodgate::store::Key,
        floodgate::algorithm::spec::AnyState,
        C,
    >
{
    type Layout<'a>
        = layout::EnvoyCounters
    where
        C: 'a;

    fn upstream_layout(&self) -> Option<layout::EnvoyCounters> {
        None
    }
}

/// A `ShouldRateLimit` request matched once against a [`RuleSet`] ([`RuleSet::matched`]):
/// each descriptor's rule, its own limit, the rules it replaces. Checking and deciding the
/// call both read this; neither walks the rules again.
pub struct MatchedRequest<'r> {
    rules: &'r RuleSet,
    request: &'r RlsRequest,
    /// `None`: the request's domain is not configured.
    matched: Option<Matched<'r>>,
}

impl std::fmt::Debug for MatchedRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatchedRequest")
            .field("domain", &self.request.domain)
            .field("domain_known", &self.matched.is_some())
            .finish_non_exhaustive()
    }
}

impl MatchedRequest<'_> {
    /// Why the request cannot be answered as it asks, if it cannot: a descriptor that gives
    /// its hits back (`is_negative_hits`) is held to a limit under whose algorithm the store
    /// cannot give back (`takes_refunds` says no: the sliding log, the smooth limiters). Named
    /// by its index, entries and the algorithm. Checked before anything is counted, so that
    /// such a call changes nothing. (A descriptor's own `limit`, and upstream's layout, are
    /// fixed windows, which every store gives back under.)
    pub fn refund_refused(&self, takes_refunds: impl Fn(&AnyAlgorithm) -> bool) -> Option<String> {
        use floodgate::algorithm::Algorithm as _;
        let matched = self.matched.as_ref()?;
        let request = self.request;
        request
            .descriptors
            .iter()
            .enumerate()
            .filter(|(_, d)| d.negative_hits)
            .find_map(|(i, d)| {
                let answer::Held::Limited { limit, .. } = matched.held(i) else {
                    return None;
                };
                (!takes_refunds(&limit.algorithm)).then(|| {
                    format!(
                        "descriptors[{i}] ({}) gives its hits back (is_negative_hits), and its \
                         limit's algorithm {} cannot give back on this store: nothing was \
                         counted",
                        crate::rls::Entries(d),
                        limit.algorithm.name()
                    )
                })
            })
    }

    /// Decides the request: one status per request descriptor, in order, and the overall
    /// code (see the module's "Deciding"). The descriptors limited by Floodgate's algorithms
    /// are decided in one [`Store::apply`] (one of them) or one [`Store::apply_many`] call; the
    /// Envoy windows, when `store` keeps upstream's layout, in one call to it ([`layout`]).
    /// Every decided descriptor is counted in `stats` when given ([`stats`]). A store failure
    /// is returned as is and the caller chooses to fail open or closed.
    pub async fn decide<S: DescriptorStore>(
        &self,
        store: &S,
        stats: Option<&stats::DescriptorStats>,
    ) -> Result<RlsResponse, StoreError> {
        self.decide_in(store, store.upstream_layout().as_ref(), stats)
            .await
    }

    /// [`MatchedRequest::decide`], the Envoy windows counted in `counters` when given.
    async fn decide_in<S: Store<str, AnyAlgorithm>, C: layout::Counters>(
        &self,
        store: &S,
        counters: Option<&C>,
        stats: Option<&stats::DescriptorStats>,
    ) -> Result<RlsResponse, StoreError> {
        let request = self.request;
        let mut answer = Answer::new(self.rules, request, stats);
        let Some(matched) = &self.matched else {
            if let Some(stats) = stats {
                for _ in &request.descriptors {
                    stats.domain_not_found(&request.domain);
                }
            }
            return Ok(answer.into_response(None));
        };
        // The counter keys go in one buffer for them all, this thread's from the last call
        // (see `KEYS`).
        let mut keys = KEYS.try_with(Cell::take).unwrap_or_default();
        keys.clear();
        let planned = answer::plan(matched, request, counters, &mut keys, &mut answer);
        let decided = decide(store, &planned.checks, &keys, answer.blocked()).await;
        // A buffer grown by an unusually large request is not kept.
        if keys.capacity() <= MAX_KEPT_KEY_BYTES {
            // Not during the thread's teardown, when its thread-locals are going.
            let _ = KEYS.try_with(|kept| kept.set(keys));
        }
        let decisions = decided?;
        let counts = match counters {
            // Boxed: the counting's future is large, and would make every call's future as
            // large, upstream's layout or not (`tests/allocations.rs`).
            Some(counters) if !planned.counting.is_empty() => {
                Box::pin(counters.count(&planned.counting)).await?
            }
            _ => Vec::new(),
        };
        for (&(i, limit, shadow_mode), count) in planned.counted.iter().zip(&counts) {
            let hits = request.hits_for(&request.descriptors[i]);
            let outcome = if request.descriptors[i].negative_hits {
                let limit = u64::from(limit.requests_per_unit);
                stats::Outcome::refunded(hits, limit, count.after, shadow_mode)
            } else {
                stats::Outcome::counted(count, limit.requests_per_unit, hits, shadow_mode)
            };
            answer.settle(matched, i, outcome, limit, Some(count.reset));
        }
        for (check, decision) in planned.checks.iter().zip(decisions) {
            let limit = check.limit;
            let outcome = if check.refund {
                stats::Outcome::refunded_from(
                    &decision,
                    limit.requests_per_unit,
                    check.hits,
                    check.shadow_mode,
                )
            } else {
                stats::Outcome::decided(
                    &decision,
                    limit.requests_per_unit,
                    check.hits,
                    check.shadow_mode,
                )
            };
            answer.settle(
                matched,
                check.index,
                outcome,
                limit,
                Some(decision.reset_after),
            );
        }
        Ok(answer.into_response(Some(matched)))
    }
}

/// A Floodgate algorithm's quota in envoy's terms: the shortest unit in which it allows at
/// least one request, the count rounded down (see [`Rule::quota`]).
fn envoy_quota(algorithm: &AnyAlgorithm) -> (u32, Unit) {
    let Some((units, window)) = algorithm.quota() else {
        return (0, Unit::Second);
    };
    let per_second = units / window.as_secs_f64().max(f64::MIN_POSITIVE);
    let mut best = (0, Unit::Year);
    for unit in Unit::ALL {
        let count = (per_second * unit.duration().as_secs_f64()).floor();
        if count >= 1.0 {
            // `as` saturates at u32::MAX.
            best = (count as u32, unit);
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests;
