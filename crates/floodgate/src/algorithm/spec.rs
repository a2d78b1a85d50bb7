//! Choosing an algorithm at run time: [`AlgorithmSpec`] is what a user writes (in a replay
//! `--limiter` spec or a config file), [`AnyAlgorithm`] the validated algorithm it builds.
//!
//! A spec is an object tagged by `algorithm` (`{"algorithm": "token_bucket", "rate": 100,
//! "capacity": 500}`); the other fields are the parameters of that algorithm's spec, declared
//! in its own module ([`TokenBucketSpec`], …, one per variant of [`AlgorithmSpec`]), and an
//! unknown field is refused. Rates are per second; counts are whole numbers; durations are
//! [`SpecDuration`](crate::duration::SpecDuration)s: seconds (a JSON number) or a string with
//! a unit, `"500ms"`, `"1h30m"` ([`crate::duration`]).
//!
//! Every algorithm is declared once, in the list at the end of this file: [`AlgorithmSpec`],
//! [`AnyAlgorithm`], its state, every dispatch over them and the Redis store's table of twins
//! are generated from it.

use std::time::Duration;

use serde::Deserialize;

use super::concurrency::{Concurrency, Fleet};
use super::fixed_window::{FixedWindow, FixedWindowSpec};
use super::gcra::{Gcra, GcraSpec};
use super::leaky_bucket::{LeakyBucket, LeakyBucketSpec};
use super::leaky_queue::{LeakyQueue, LeakyQueueSpec};
use super::sliding_log::{SlidingLog, SlidingLogSpec};
use super::sliding_window::{SlidingWindow, SlidingWindowSpec};
use super::smooth::{SmoothBursty, SmoothBurstySpec, SmoothWarmingUp, SmoothWarmingUpSpec};
use super::token_bucket::{TokenBucket, TokenBucketSpec};
#[cfg(feature = "redis")]
use super::twin::{Absorb, CachedParameters, CachedTwin, Lua, LuaTwin};
use super::{param, Algorithm, Parameters};
use crate::{ConfigError, Decision, Nanos, Op, OpKind};

/// Builds [`AnyAlgorithm`], its state and every dispatch over it from the one list of
/// algorithms below: a variant missing from a match is a compile error, never a run-time one.
macro_rules! any_algorithm {
    (
        written { $($w:ident($wty:ty, $spec:ty) = $wname:literal, $wnumber:literal;)* }
        built { $($b:ident($bty:ty) = $bname:literal, $bnumber:literal;)* }
    ) => {
        /// An algorithm and its parameters, as written by a user; [`AlgorithmSpec::build`]
        /// validates it. Each variant holds the spec its algorithm's module declares.
        #[derive(Clone, Debug, PartialEq, Deserialize)]
        #[serde(tag = "algorithm")]
        pub enum AlgorithmSpec {
            $(
                #[doc = concat!("`\"algorithm\": \"", $wname, "\"`: [`", stringify!($spec), "`]")]
                #[serde(rename = $wname)]
                $w($spec),
            )*
        }

        impl AlgorithmSpec {
            /// Validates the parameters and builds the algorithm (each spec's own `build`).
            /// Errors name the field and its value.
            pub fn build(&self) -> Result<AnyAlgorithm, ConfigError> {
                Ok(match self {
                    $(AlgorithmSpec::$w(spec) => spec.build()?.into(),)*
                })
            }
        }

        any_algorithm! {
            @all $($w($wty) = $wname, $wnumber;)* $($b($bty) = $bname, $bnumber;)*
        }
    };
    (@all $($variant:ident($ty:ty) = $name:literal, $number:literal;)*) => {
        /// Any of Floodgate's algorithms, chosen at run time (for example from a spec).
        #[derive(Clone, Debug)]
        pub enum AnyAlgorithm {
            $(
                #[doc = concat!("[`", stringify!($ty), "`]")]
                $variant($ty),
            )*
        }

        /// The state of an [`AnyAlgorithm`] key: the state of the algorithm that wrote it,
        /// tagged with a fingerprint of the parameters that last wrote it (see
        /// [`AnyAlgorithm::is_fresh`](Algorithm::is_fresh)).
        #[derive(Clone, Debug)]
        pub struct AnyState {
            pub(crate) params: u64,
            pub(crate) kind: StateKind,
        }

        #[derive(Clone, Debug)]
        pub(crate) enum StateKind {
            $($variant(<$ty as Algorithm>::State),)*
        }

        impl AnyAlgorithm {
            /// Every algorithm's name, in the order of its number (`"token_bucket"` first).
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// The algorithm's number: fixed for ever, since it is part of the fingerprint a
            /// durable store keeps with each state (1 for `token_bucket`, …; [`Self::NAMES`]
            /// lists them in this order, from 1).
            pub const fn number(&self) -> u64 {
                match self {
                    $(AnyAlgorithm::$variant(_) => $number,)*
                }
            }

            /// A fingerprint of the algorithm and all its parameters: equal for equal
            /// parameters, different (but for a 2⁻⁶⁴ chance) otherwise
            /// ([`Parameters::fingerprint`], mixed with the algorithm's number). A few
            /// multiplications, no allocation.
            pub(crate) fn params(&self) -> u64 {
                let [first, second] = match self {
                    $(AnyAlgorithm::$variant(a) => a.fingerprint(),)*
                };
                [self.number(), first, second].into_iter().fold(0, param::mix)
            }

            /// What the algorithm allows, as `(units, window)`: `rate` per second for the
            /// buckets, the leaky queue and the smooth limiters, `limit` per `window` for the
            /// windows, `count` per `period` for GCRA; `None` for the in-flight limits
            /// (concurrency, fleet), which have no window. For messages ("50 requests per
            /// second") and `RateLimit-Policy`.
            pub fn quota(&self) -> Option<(f64, Duration)> {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.quota(),)*
                }
            }

            /// The same algorithm at one node's share of its limit when `nodes` nodes share
            /// it (what one node admits on its own when the store they share is out of
            /// reach): rates divided by `nodes`; counts (limits, capacities, bursts, queues)
            /// divided and rounded down, but at least 1 (a queue of 0 stays 0); windows,
            /// periods, warm-up and lease times unchanged. With `nodes` at most 1, the
            /// algorithm itself.
            ///
            /// The shares of all nodes together admit at most the whole limit, except where a
            /// count is smaller than `nodes` (each node keeps at least one).
            pub fn share(&self, nodes: u32) -> Result<AnyAlgorithm, ConfigError> {
                if nodes <= 1 {
                    return Ok(self.clone());
                }
                Ok(match self {
                    $(AnyAlgorithm::$variant(a) => a.share(nodes)?.into(),)*
                })
            }
        }

        /// Every algorithm's Lua twin, for a Redis store ([`super::twin`]): what it runs and
        /// how an operation becomes its arguments.
        #[cfg(feature = "redis")]
        impl AnyAlgorithm {
            /// Every algorithm's twin, in the order of its number (two algorithms may share
            /// one script).
            pub(crate) const TWINS: &'static [&'static Lua] = &[$(<$ty as LuaTwin>::LUA),*];

            /// The twin's arguments for `op` ([`LuaTwin::arguments`]).
            pub(crate) fn twin_arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.arguments(op),)*
                }
            }

            /// [`LuaTwin::reply_limit`].
            pub(crate) fn twin_reply_limit(&self) -> Option<u64> {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.reply_limit(),)*
                }
            }

            /// [`LuaTwin::horizon_us`].
            pub(crate) fn twin_horizon_us(&self) -> u64 {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.horizon_us(),)*
                }
            }

            /// Whether the twin takes refunds ([`LuaTwin::REFUNDS`]).
            pub(crate) fn twin_takes_refunds(&self) -> bool {
                match self {
                    $(AnyAlgorithm::$variant(_) => <$ty as LuaTwin>::REFUNDS,)*
                }
            }

            /// Whether the twin counts charges past the limit ([`LuaTwin::CHARGES`]).
            pub(crate) fn twin_takes_charges(&self) -> bool {
                match self {
                    $(AnyAlgorithm::$variant(_) => <$ty as LuaTwin>::CHARGES,)*
                }
            }

            /// The name of the algorithm whose twin writes states starting with `tag`
            /// ([`LuaTwin::TAGS`]), if any does.
            pub(crate) fn of_twin_tag(tag: &[u8]) -> Option<&'static str> {
                $(
                    if <$ty as LuaTwin>::TAGS.iter().any(|t| t.as_bytes() == tag) {
                        return Some($name);
                    }
                )*
                None
            }
        }

        /// Every algorithm's side of the cached store ([`CachedTwin`]): whether a node decides
        /// it on its own view, and how a sync adds to and reads back its state.
        #[cfg(feature = "redis")]
        impl AnyAlgorithm {
            /// Every algorithm's part of `cached.lua`, in the order of its number (`None`: no
            /// cached form).
            pub(crate) const ABSORBS: &'static [Option<&'static Absorb>] =
                &[$(<$ty as CachedTwin>::ABSORB),*];

            /// The tag of the states `cached.lua` keeps for this algorithm ([`Absorb::tag`]);
            /// `None`: no cached form.
            pub(crate) fn cached_tag(&self) -> Option<&'static str> {
                let absorb = match self {
                    $(AnyAlgorithm::$variant(_) => <$ty as CachedTwin>::ABSORB,)*
                };
                absorb.map(|absorb| absorb.tag)
            }

            /// What `cached.lua` takes for this algorithm ([`CachedTwin`]); `None` when the
            /// cached store does not decide it locally.
            pub(crate) fn cached_parameters(&self) -> Option<CachedParameters> {
                let tag = self.cached_tag()?;
                let [first, second] = match self {
                    $(AnyAlgorithm::$variant(a) => a.cached_parameters(),)*
                }?;
                Some(CachedParameters { tag, first, second })
            }

            /// [`CachedTwin::cached_cost`].
            pub(crate) fn cached_cost(&self, cost: u64) -> u64 {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.cached_cost(cost),)*
                }
            }

            /// The state `cached.lua` returned, from the fields after its tag, fingerprinted
            /// with these parameters ([`CachedTwin::cached_state`]).
            pub(crate) fn cached_state<'a>(
                &self,
                fields: &mut impl Iterator<Item = &'a str>,
            ) -> Option<AnyState> {
                let kind = match self {
                    $(AnyAlgorithm::$variant(a) => StateKind::$variant(a.cached_state(fields)?),)*
                };
                Some(AnyState { params: self.params(), kind })
            }

            /// [`CachedTwin::absorb`]; a state of another algorithm is left as it is.
            pub(crate) fn absorb(&self, state: &mut AnyState, at: Nanos, cost: u64) {
                match (self, &mut state.kind) {
                    $((AnyAlgorithm::$variant(a), StateKind::$variant(s)) => {
                        CachedTwin::absorb(a, s, at, cost)
                    })*
                    _ => {}
                }
            }

            /// [`CachedTwin::overshoot`]; 0 for a state of another algorithm.
            pub(crate) fn overshoot(&self, state: &AnyState, now: Nanos) -> u64 {
                match (self, &state.kind) {
                    $((AnyAlgorithm::$variant(a), StateKind::$variant(s)) => a.overshoot(s, now),)*
                    _ => 0,
                }
            }
        }

        $(
            impl From<$ty> for AnyAlgorithm {
                fn from(algorithm: $ty) -> AnyAlgorithm {
                    AnyAlgorithm::$variant(algorithm)
                }
            }
        )*

        impl AnyState {
            /// The name of the algorithm this state belongs to (`"token_bucket"`, …).
            pub fn algorithm(&self) -> &'static str {
                match self.kind {
                    $(StateKind::$variant(_) => $name,)*
                }
            }
        }

        impl Algorithm for AnyAlgorithm {
            type State = AnyState;

            fn name(&self) -> &'static str {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.name(),)*
                }
            }

            fn fresh(&self, now: Nanos) -> AnyState {
                let kind = match self {
                    $(AnyAlgorithm::$variant(a) => StateKind::$variant(a.fresh(now)),)*
                };
                AnyState { params: self.params(), kind }
            }

            /// A state written by another algorithm is left as it is and the operation is
            /// denied (`retry_after: None`); stores never get here, since they check
            /// [`Algorithm::owns`] first and answer [`crate::StoreError::StateConflict`].
            fn apply(&self, state: &mut AnyState, now: Nanos, op: Op) -> Decision {
                let decision = match (self, &mut state.kind) {
                    $((AnyAlgorithm::$variant(a), StateKind::$variant(s)) => a.apply(s, now, op),)*
                    _ => return Decision::deny(0, 0, std::time::Duration::ZERO, None),
                };
                state.params = self.params();
                decision
            }

            /// Whether the state is fresh for these parameters. A state last written under
            /// other parameters (another plan of the same kind, another limit in a shared
            /// store), or by another algorithm, is never fresh for this one: whether it is
            /// fresh depends on its own rate, capacity or window, which only its writer
            /// knows, so keeping it is the lossless choice.
            fn is_fresh(&self, state: &AnyState, now: Nanos) -> bool {
                if state.params != self.params() {
                    return false;
                }
                match (self, &state.kind) {
                    $((AnyAlgorithm::$variant(a), StateKind::$variant(s)) => a.is_fresh(s, now),)*
                    _ => false,
                }
            }

            fn owns(&self, state: &AnyState) -> bool {
                matches!(
                    (self, &state.kind),
                    $((AnyAlgorithm::$variant(_), StateKind::$variant(_)))|*
                )
            }

            fn state_name(&self, state: &AnyState) -> &'static str {
                state.algorithm()
            }

            fn supports(&self, op: OpKind) -> bool {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.supports(op),)*
                }
            }
        }
    };
}

// Every algorithm, once: its variant, its type, its name and its number (never reused).
// Users write the first group in specs (with the spec type its module declares); the
// limiters build the second from their own configuration.
any_algorithm! {
    written {
        TokenBucket(TokenBucket, TokenBucketSpec) = "token_bucket", 1;
        LeakyBucket(LeakyBucket, LeakyBucketSpec) = "leaky_bucket", 2;
        LeakyQueue(LeakyQueue, LeakyQueueSpec) = "leaky_queue", 3;
        FixedWindow(FixedWindow, FixedWindowSpec) = "fixed_window", 4;
        SlidingLog(SlidingLog, SlidingLogSpec) = "sliding_log", 5;
        SlidingWindow(SlidingWindow, SlidingWindowSpec) = "sliding_window", 6;
        Gcra(Gcra, GcraSpec) = "gcra", 7;
        SmoothBursty(SmoothBursty, SmoothBurstySpec) = "smooth_bursty", 8;
        SmoothWarmingUp(SmoothWarmingUp, SmoothWarmingUpSpec) = "smooth_warming_up", 9;
    }
    built {
        Concurrency(Concurrency) = "concurrency", 10;
        Fleet(Fleet) = "fleet", 11;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::smooth::BurstyStart;

    fn spec(json: &str) -> Result<AlgorithmSpec, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn every_algorithm_builds_from_its_spec() {
        let specs = [
            r#"{"algorithm":"token_bucket","rate":100,"capacity":500}"#,
            r#"{"algorithm":"leaky_bucket","rate":2.5,"capacity":10}"#,
            r#"{"algorithm":"leaky_queue","rate":10,"queue":5}"#,
            r#"{"algorithm":"fixed_window","limit":10,"window":"1m"}"#,
            r#"{"algorithm":"sliding_log","limit":10,"window":60}"#,
            r#"{"algorithm":"sliding_window","limit":10,"window":"1m"}"#,
            r#"{"algorithm":"sliding_window","limit":10,"window":"1m","buckets":6}"#,
            r#"{"algorithm":"gcra","max_burst":15,"count":30,"period":60}"#,
            r#"{"algorithm":"smooth_bursty","rate":5}"#,
            r#"{"algorithm":"smooth_warming_up","rate":2,"warmup":"4s"}"#,
        ];
        for json in specs {
            let alg = spec(json).unwrap().build().unwrap();
            let expected = json.split('"').nth(3).unwrap();
            assert_eq!(alg.name(), expected);
        }
    }

    #[test]
    fn a_bursty_spec_starts_full_unless_told_empty() {
        let start = |json: &str| match spec(json).unwrap().build().unwrap() {
            AnyAlgorithm::SmoothBursty(b) => b.start(),
            other => panic!("{other:?}"),
        };
        let full = r#"{"algorithm":"smooth_bursty","rate":5}"#;
        let empty = r#"{"algorithm":"smooth_bursty","rate":5,"starts":"empty"}"#;
        assert_eq!(start(full), BurstyStart::Full);
        assert_eq!(
            start(r#"{"algorithm":"smooth_bursty","rate":5,"starts":"full"}"#),
            BurstyStart::Full
        );
        assert_eq!(start(empty), BurstyStart::Empty);
        let params = |json: &str| spec(json).unwrap().build().unwrap().params();
        assert_ne!(params(full), params(empty));
        let bad = spec(r#"{"algorithm":"smooth_bursty","rate":5,"starts":"half"}"#).unwrap_err();
        assert!(bad.contains("half") && bad.contains("empty"), "{bad}");
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert!(spec(r#"{"algorithm":"magic","rate":1}"#)
            .unwrap_err()
            .contains("magic"));
        assert!(spec(r#"{"algorithm":"token_bucket","rate":1}"#)
            .unwrap_err()
            .contains("capacity"));
        assert!(
            spec(r#"{"algorithm":"token_bucket","rate":1,"capacity":2,"burst":3}"#)
                .unwrap_err()
                .contains("burst")
        );
        let zero = spec(r#"{"algorithm":"token_bucket","rate":0,"capacity":2}"#)
            .unwrap()
            .build()
            .unwrap_err();
        assert!(zero.to_string().contains("`rate`"), "{zero}");
        let neg = spec(r#"{"algorithm":"gcra","max_burst":1,"count":-3,"period":1}"#).unwrap_err();
        assert!(neg.contains("-3"), "{neg}");
    }

    #[test]
    fn a_state_from_another_algorithm_is_not_owned_and_left_alone() {
        let fw = spec(r#"{"algorithm":"fixed_window","limit":1,"window":1}"#)
            .unwrap()
            .build()
            .unwrap();
        let tb = spec(r#"{"algorithm":"token_bucket","rate":1,"capacity":3}"#)
            .unwrap()
            .build()
            .unwrap();
        let mut state = fw.fresh(Nanos(0));
        assert!(fw.owns(&state));
        assert!(!tb.owns(&state));
        assert_eq!(tb.state_name(&state), "fixed_window");
        assert!(
            !tb.is_fresh(&state, Nanos(0)),
            "only its own algorithm may drop it"
        );
        let d = tb.apply(&mut state, Nanos(0), Op::Check { cost: 1 });
        assert!(!d.allowed);
        assert_eq!(state.algorithm(), "fixed_window");
    }

    /// Two token buckets in one store: a state that looks full to the small bucket is not
    /// full for the big one that wrote it, so the small one must not call it fresh (an idle
    /// sweep would drop it and hand its user a whole new burst).
    #[test]
    fn a_state_is_judged_fresh_only_by_the_parameters_that_wrote_it() {
        let bucket = |json: &str| spec(json).unwrap().build().unwrap();
        let big = bucket(r#"{"algorithm":"token_bucket","rate":1,"capacity":100}"#);
        let small = bucket(r#"{"algorithm":"token_bucket","rate":1,"capacity":10}"#);
        let mut state = big.fresh(Nanos(0));
        let d = big.apply(&mut state, Nanos(0), Op::Check { cost: 50 });
        assert_eq!(d.remaining, 50);
        assert!(!big.is_fresh(&state, Nanos(0)));
        assert!(
            big.owns(&state) && small.owns(&state),
            "same kind: plans may change"
        );
        assert!(
            !small.is_fresh(&state, Nanos(0)),
            "50 tokens would look full to it"
        );
        // Fifty seconds later the big bucket is full again: fresh for its writer, and for the
        // same parameters built again.
        assert!(big.is_fresh(&state, Nanos::from_secs(50)));
        let again = bucket(r#"{"algorithm":"token_bucket","rate":1,"capacity":100}"#);
        assert!(again.is_fresh(&state, Nanos::from_secs(50)));
        // A plan change on the key: the new writer's parameters judge it from then on.
        let _ = small.apply(&mut state, Nanos::from_secs(50), Op::Check { cost: 0 });
        assert!(small.is_fresh(&state, Nanos::from_secs(50)));
        assert!(!big.is_fresh(&state, Nanos::from_secs(50)));
    }

    #[test]
    fn shares_divide_rates_and_counts() {
        let tb: AnyAlgorithm = TokenBucket::new(30.0, 100).unwrap().into();
        let AnyAlgorithm::TokenBucket(t) = tb.share(3).unwrap() else {
            panic!("same algorithm")
        };
        assert_eq!((t.rate(), t.capacity()), (10.0, 33));
        let fw: AnyAlgorithm = FixedWindow::new(2, Duration::from_secs(60)).unwrap().into();
        let AnyAlgorithm::FixedWindow(f) = fw.share(5).unwrap() else {
            panic!("same algorithm")
        };
        assert_eq!((f.limit(), f.window()), (1, Duration::from_secs(60)));
        let g: AnyAlgorithm = Gcra::new(9, 100, Duration::from_secs(1)).unwrap().into();
        let AnyAlgorithm::Gcra(g) = g.share(4).unwrap() else {
            panic!("same algorithm")
        };
        assert_eq!((g.limit(), g.count()), (2, 25));
        let fleet: AnyAlgorithm = Fleet::new(1000, 0.2, Duration::from_secs(60))
            .unwrap()
            .into();
        assert_eq!(fleet.share(4).unwrap().name(), "fleet");
        assert_eq!(fleet.share(1).unwrap().name(), "fleet");
    }

    #[test]
    fn numbers_follow_the_names_from_one() {
        let every = every_algorithm();
        assert_eq!(every.len(), AnyAlgorithm::NAMES.len());
        for (i, algorithm) in every.iter().enumerate() {
            assert_eq!(algorithm.number(), i as u64 + 1);
            assert_eq!(AnyAlgorithm::NAMES[i], algorithm.name());
        }
    }

    fn every_algorithm() -> Vec<AnyAlgorithm> {
        let specs = [
            r#"{"algorithm":"token_bucket","rate":100,"capacity":500}"#,
            r#"{"algorithm":"leaky_bucket","rate":2.5,"capacity":10}"#,
            r#"{"algorithm":"leaky_queue","rate":10,"queue":5}"#,
            r#"{"algorithm":"fixed_window","limit":10,"window":"1m"}"#,
            r#"{"algorithm":"sliding_log","limit":10,"window":60}"#,
            r#"{"algorithm":"sliding_window","limit":10,"window":"1m","buckets":6}"#,
            r#"{"algorithm":"gcra","max_burst":15,"count":30,"period":60}"#,
            r#"{"algorithm":"smooth_bursty","rate":5}"#,
            r#"{"algorithm":"smooth_warming_up","rate":2,"warmup":"4s"}"#,
        ];
        let mut every: Vec<AnyAlgorithm> = specs
            .iter()
            .map(|s| spec(s).unwrap().build().unwrap())
            .collect();
        let minute = Duration::from_secs(60);
        every.push(Concurrency::new(10, minute).unwrap().into());
        every.push(Fleet::new(1000, 0.2, minute).unwrap().into());
        every
    }

    /// A durable store keeps each state's fingerprint on disk: the same parameters must give
    /// the same fingerprint in every version (these values were written by an earlier one).
    #[test]
    fn fingerprints_stay_what_they_were() {
        let expected: &[u64] = &[
            0x156f92f35cc92fc0,
            0xbc007bc109429f30,
            0x324059260133deb7,
            0x0d1d2e48b5e0a7af,
            0x58879cb2d0fa05bd,
            0x14626f36b3e72dbe,
            0x7b9dd411de576f20,
            0x6b37c624c05f6032,
            0xa64e68446dca7ae3,
            0x0e631cf28a0c4509,
            0xe2c01f760cea61a3,
        ];
        let every = every_algorithm();
        assert_eq!(
            every.len(),
            expected.len(),
            "pin the new algorithm's fingerprint"
        );
        for (algorithm, &want) in every.iter().zip(expected) {
            assert_eq!(algorithm.params(), want, "{}", algorithm.name());
        }
    }
}
