//! Chains: the operations one request makes on several keys (a pipeline's stages, in order),
//! applied in one call — one round trip on a remote store — with the pipeline's rule that the
//! first refusal ends the request, and optionally all or nothing.
//!
//! [`Store::apply_chain`] takes [`Link`]s in order. Each link is applied atomically on its own
//! key, as by [`Store::apply`], one after the other, and:
//! - a denial of a link with [`Link::refuses`] (an enforcing stage or limit) refuses the
//!   request; with [`Link::stops`] too (a pipeline stage) it also ends the chain: the links
//!   after it are not applied ([`Linked::NotReached`]);
//! - when the request is refused, every applied link marked [`Link::all_or_nothing`] is
//!   undone at the end of the chain: its key is back to the state it had before that link, so
//!   a refused request consumes nothing from those limits. Stores that implement chains
//!   themselves (memory, Redis) do this atomically: no other operation sees the undone
//!   effects. The trait's default runs the links one call at a time and cannot undo, so it
//!   refuses chains that ask for it.
//! - a link that fails on its own ([`Linked::Failed`], e.g. a key holding another algorithm's
//!   state) neither passes nor stops the chain: its caller's failure policy decides; unless it
//!   is marked [`Link::fails_closed`], when its failure refuses the request and ends the chain
//!   as a denial would (so the all-or-nothing links are undone).
//!
//! - links marked [`Link::joins_previous`] form one group with the link before them (a
//!   hierarchical limit's levels): when any link of a group is denied, every link of the group
//!   is undone at the group's end, whether or not the request is refused, so a shadow limit's
//!   levels count together as an enforcing one's would.
//!
//! [`Store::apply_chain_refused`] runs a chain whose request is already refused after its last
//! link (a stage deciding without the store refused it): the same, and the all-or-nothing
//! links are undone at the end whatever the links decided.
//!
//! An `Err` from `apply_chain` is a failure of the whole call (the store unreachable): none or
//! some links may have been applied, each fully or not at all.

use super::{ensure_supported, KeyedOp, Store};
use crate::algorithm::Algorithm;
use crate::{Decision, StoreError};

/// One operation of a chain (see the [module documentation](self)).
#[derive(Debug)]
pub struct Link<'a, K: ?Sized, A> {
    /// The operation, its key and its algorithm.
    pub request: KeyedOp<'a, K, A>,
    /// A denial of this link refuses the request, so all-or-nothing links are undone (the
    /// stage or limit enforces; a shadow one does not).
    pub refuses: bool,
    /// A denial of this link ends the chain: later links are not applied (the pipeline's
    /// first refusal wins). Only meaningful with [`Link::refuses`].
    pub stops: bool,
    /// Undo this link if the chain ends in a denial.
    pub all_or_nothing: bool,
    /// A failure of this link on its own ([`Linked::Failed`]) refuses the request and ends the
    /// chain, as a denial of a link with [`Link::refuses`] and [`Link::stops`] does: the
    /// all-or-nothing links are undone (an enforcing stage that fails closed, whose failure
    /// answers the request with a refusal).
    pub fails_closed: bool,
    /// This link is one more level of the previous link's limit: the links so joined form a
    /// group, and a denial of any of them undoes all of them at the group's end (see the
    /// [module documentation](self)).
    pub joins_previous: bool,
}

impl<K: ?Sized, A> Clone for Link<'_, K, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: ?Sized, A> Copy for Link<'_, K, A> {}

/// What became of one link of a chain.
#[derive(Debug)]
#[non_exhaustive]
pub enum Linked {
    /// The link was applied (and, if the chain was refused and the link is all-or-nothing,
    /// undone again); its decision.
    Decided(Decision),
    /// This link alone failed; the others are unaffected.
    Failed(StoreError),
    /// An earlier link's denial ended the chain before this one.
    NotReached,
}

impl Linked {
    /// The decision, if the link was decided.
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Linked::Decided(d) => Some(d),
            _ => None,
        }
    }
}

/// Whether `outcome` is a denial.
pub(crate) fn denied(outcome: &Linked) -> bool {
    matches!(outcome, Linked::Decided(d) if !d.allowed)
}

/// Whether `link`'s `outcome` refuses the request: an enforcing denial, or the failure of a
/// link that fails closed.
pub(crate) fn refuses(link: &Link<'_, impl ?Sized, impl Sized>, outcome: &Linked) -> bool {
    (link.refuses && denied(outcome)) || fails_closed(link, outcome)
}

/// Whether `link`'s `outcome` ends the chain: a stopping denial, or the failure of a link that
/// fails closed.
pub(crate) fn ends(link: &Link<'_, impl ?Sized, impl Sized>, outcome: &Linked) -> bool {
    (link.stops && denied(outcome)) || fails_closed(link, outcome)
}

fn fails_closed(link: &Link<'_, impl ?Sized, impl Sized>, outcome: &Linked) -> bool {
    link.fails_closed && matches!(outcome, Linked::Failed(_))
}

/// Checks every link's operation before anything is applied.
pub(crate) fn ensure_chain_supported<K: ?Sized, A: Algorithm>(
    links: &[Link<'_, K, A>],
) -> Result<(), StoreError> {
    links
        .iter()
        .try_for_each(|l| ensure_supported(l.request.algorithm, l.request.op))
}

/// Refuses a chain with an all-or-nothing link, for a store that cannot undo one.
pub(crate) fn refuse_undoing<K: ?Sized, A: Algorithm>(
    links: &[Link<'_, K, A>],
) -> Result<(), StoreError> {
    match links.iter().find(|l| l.all_or_nothing || l.joins_previous) {
        Some(link) => Err(StoreError::NotOnStore {
            store: "this store",
            algorithm: link.request.algorithm.name(),
            reason: "it cannot undo links (all_or_nothing, or a limit's levels)",
        }),
        None => Ok(()),
    }
}

/// The trait's default: one [`Store::apply`] per link, in order. It cannot undo, so a chain
/// with an all-or-nothing link is refused with [`StoreError::NotOnStore`] before anything is
/// applied.
pub(crate) async fn apply_in_turn<K, A, S>(
    store: &S,
    links: &[Link<'_, K, A>],
) -> Result<Vec<Linked>, StoreError>
where
    K: ?Sized + Sync,
    A: Algorithm,
    S: Store<K, A> + ?Sized,
{
    ensure_chain_supported(links)?;
    refuse_undoing(links)?;
    let mut outcomes = Vec::with_capacity(links.len());
    let mut ended = false;
    for link in links {
        if ended {
            outcomes.push(Linked::NotReached);
            continue;
        }
        let r = link.request;
        let outcome = match store.apply(r.algorithm, r.key, r.op).await {
            Ok(d) => Linked::Decided(d),
            Err(e @ (StoreError::StateConflict { .. } | StoreError::NotOnStore { .. })) => {
                Linked::Failed(e)
            }
            Err(e) => return Err(e),
        };
        ended = ends(link, &outcome);
        outcomes.push(outcome);
    }
    Ok(outcomes)
}
