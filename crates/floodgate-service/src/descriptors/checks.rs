//! The store's side of a `ShouldRateLimit` call: the limits its descriptors are checked
//! against ([`Check`]), decided in one store call ([`decide`]), on per-descriptor lists that
//! stay on the stack and one key buffer a thread keeps between calls.

use std::cell::Cell;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{KeyedOp, Link, Linked, Store};
use floodgate::{Decision, Op, StoreError};
use smallvec::SmallVec;

use super::Limit;

/// One limit a request's descriptor is checked against.
pub(super) struct Check<'r> {
    /// The request descriptor's index.
    pub(super) index: usize,
    pub(super) shadow_mode: bool,
    pub(super) all_or_nothing: bool,
    pub(super) limit: &'r Limit,
    /// Its counter's key in the store: a range of the call's key buffer.
    pub(super) key: std::ops::Range<usize>,
    pub(super) hits: u64,
    /// The hits are given back ([`Op::Refund`]), not taken.
    pub(super) refund: bool,
    /// The hits are a usage charge ([`Op::Charge`]): counted even past the limit.
    pub(super) charge: bool,
}

/// Descriptors a request holds in the common case: per-descriptor lists up to this long stay on
/// the stack.
pub(super) const INLINE: usize = 4;

/// A per-descriptor list of a call.
pub(super) type PerDescriptor<T> = SmallVec<[T; INLINE]>;

/// The largest key buffer a thread keeps between calls, in bytes.
pub(super) const MAX_KEPT_KEY_BYTES: usize = 4096;

thread_local! {
    /// The buffer the last call on this thread built its counter keys in, kept so that the
    /// next one does not allocate its own. A call takes it and puts it back; a call dropped
    /// in between, or resumed on another thread, just leaves a thread without one for a while.
    pub(super) static KEYS: Cell<String> = const { Cell::new(String::new()) };
}

/// Decides `checks` in one store call: [`Store::apply`] for one, [`Store::apply_many`] for
/// several, and [`Store::apply_chain`] when one is all or nothing (every enforcing limit
/// refuses the request when over; nothing ends the chain early). When the request is already
/// `blocked`, all-or-nothing limits are probed: a check of cost 0, whose `remaining` says
/// whether the hits would have fit.
pub(super) async fn decide<S: Store<str, AnyAlgorithm>>(
    store: &S,
    checks: &[Check<'_>],
    keys: &str,
    blocked: bool,
) -> Result<PerDescriptor<Decision>, StoreError> {
    fn op(c: &Check<'_>, blocked: bool) -> Op {
        if c.refund {
            return Op::Refund { cost: c.hits };
        }
        if c.charge {
            return Op::Charge { cost: c.hits };
        }
        let cost = if blocked && c.all_or_nothing {
            0
        } else {
            c.hits
        };
        Op::Check { cost }
    }
    fn request<'a>(
        c: &'a Check<'_>,
        keys: &'a str,
        blocked: bool,
    ) -> KeyedOp<'a, str, AnyAlgorithm> {
        KeyedOp {
            algorithm: &c.limit.algorithm,
            key: &keys[c.key.clone()],
            op: op(c, blocked),
        }
    }
    let mut decisions: PerDescriptor<Decision> = match checks {
        [] => SmallVec::new(),
        [c] if !c.all_or_nothing => {
            let key = &keys[c.key.clone()];
            // Awaited before the list is made: `smallvec!` makes its list first, which would
            // keep 300 bytes of it in this future across the await.
            let decision = store.apply(&c.limit.algorithm, key, op(c, blocked)).await?;
            smallvec::smallvec![decision]
        }
        many if blocked || many.iter().all(|c| !c.all_or_nothing) => {
            let requests: PerDescriptor<_> =
                many.iter().map(|c| request(c, keys, blocked)).collect();
            // The store's answer is a `Vec` (the one allocation of a call on several counters).
            SmallVec::from_vec(store.apply_many(&requests).await?)
        }
        many => {
            let links: PerDescriptor<_> = many
                .iter()
                .map(|c| Link {
                    request: request(c, keys, blocked),
                    refuses: !c.shadow_mode,
                    stops: false,
                    all_or_nothing: c.all_or_nothing,
                    // A failed counter fails the whole call (`Err`), and FAIL_OPEN decides.
                    fails_closed: false,
                    joins_previous: false,
                })
                .collect();
            let outcomes = store.apply_chain(&links).await?;
            let mut decisions = SmallVec::with_capacity(outcomes.len());
            for outcome in outcomes {
                match outcome {
                    Linked::Decided(d) => decisions.push(d),
                    Linked::Failed(e) => return Err(e),
                    _ => return Err(StoreError::Unavailable("a chain ended early".into())),
                }
            }
            decisions
        }
    };
    if blocked {
        for (c, d) in checks.iter().zip(&mut decisions) {
            if c.all_or_nothing && d.remaining < c.hits {
                d.allowed = false;
            }
        }
    }
    Ok(decisions)
}
