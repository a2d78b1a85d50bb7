//! Concurrency limiter and fleet usage load shedder: leases in flight, not requests per second.
//!
//! Both algorithms keep the same state, a [`LeaseSet`] of the leases in flight (in Redis it would
//! be a sorted set of lease ids scored by expiry), and share one transition; they differ only in
//! who counts against what.
//!
//! # Rule
//!
//! A caller takes a place with [`Op::Acquire`]`{ lease, critical }` when its request starts and
//! gives it back with [`Op::Release`]`{ lease }` when it ends. A lease acquired (or renewed) at
//! instant `t` **expires at `t + lease_ttl`**: it is live at `now` iff `now < t + lease_ttl`, and
//! expired from `t + lease_ttl` included. Expired leases hold no place; a caller that crashed
//! without releasing cannot leak capacity for longer than `lease_ttl`. Instants are nanoseconds.
//!
//! - [`Concurrency::new`]`(capacity, lease_ttl)` (`"concurrency"`): an acquire of a lease not
//!   held passes iff `live leases < capacity`. The `critical` flag is recorded (the accessors
//!   report it) but does not change anything: every lease counts.
//! - [`Fleet::new`]`(capacity, reserved_for_critical, lease_ttl)` (`"fleet"`): with the
//!   **non-critical allowance** `A = floor((1 − reserved_for_critical) × capacity)`, a critical
//!   acquire always passes, and a non-critical acquire passes iff `live non-critical leases < A`.
//!   Only non-critical leases count against `A`: critical leases in flight, even beyond
//!   `capacity − A`, do not reduce the non-critical allowance (the shedder protects critical
//!   traffic from the rest, not the other way round). `reserved_for_critical` is in `[0, 1]`;
//!   a product `(1 − r) × capacity` within `1e-9` (relative) of a whole number counts as that
//!   number, so that `r = 0.9` of `10` leaves `1`, as meant, not the `0` that binary floating
//!   point would give.
//!
//! Operations (every mutating one first drops the leases expired at `now`):
//! - `Acquire { lease, critical }` of a lease already held and live **renews** it: it now expires
//!   at `now + lease_ttl`; always allowed; counts unchanged; the lease keeps the class it was
//!   first acquired with (a renewal's `critical` flag is ignored). Otherwise the rule above.
//! - `Release { lease }`: gives the place back. `allowed` tells whether the lease was held and
//!   live; releasing an unknown, already released or expired lease is a no-op reporting `false`
//!   (as Redis `ZREM` reports 0).
//! - `Check { cost }`: read-only probe, changes nothing: allowed iff `cost` more non-critical
//!   leases would pass now (`cost` more leases for [`Concurrency`]).
//! - Other operations are not supported ([`Algorithm::supports`] says so); `apply` answers them
//!   as a `Check` of [`Op::cost`].
//!
//! # Decision
//!
//! The *class* of an operation is the lease's class for a renewal or a release of a held lease,
//! the `critical` flag for a new acquire, and non-critical for everything else (probes, releases
//! of unknown leases). For [`Concurrency`], `limit = capacity` and the counted leases are all
//! live leases. For [`Fleet`], a non-critical operation has `limit = A` and counts live
//! non-critical leases; a critical one has `limit = capacity` and counts all live leases.
//! - `remaining = limit − counted` after the decision, saturating at 0 (critical leases can
//!   exceed the fleet's capacity).
//! - `reset_after`: time until the last live lease expires, when the state is back to fresh.
//! - `retry_after`, for a refused acquire: time until the earliest live lease that holds a place
//!   of the refused class expires (for the fleet, the earliest non-critical one), when a place is
//!   free at the latest; `None` when the fleet's allowance is 0 (a non-critical acquire can never
//!   pass). For `Release` and `Check`, `retry_after` is always `None` (a probe does not predict).
//! - `wait` is always zero.
//!
//! Durations are measured from the given `now`.
//!
//! # Bound
//!
//! At every instant, the live leases counted against the limit are at most the limit:
//! `live leases ≤ capacity` ([`Concurrency`]), `live non-critical leases ≤ A` ([`Fleet`]; critical
//! leases are unbounded by design). This bounds leases *in flight*, not admissions per interval:
//! a place given back can be taken again at once, so any number of acquires can pass in an
//! interval of any length T.
//!
//! # State and memory
//!
//! [`LeaseSet`] holds each lease once (`size_of::<LeaseSet>() == 120` bytes, plus about 90 bytes
//! on the heap per lease: a 48-byte slot in a dense vector and a 32-byte entry in a hash index
//! from the 128-bit lease id to slot), so memory is O(leases held): at most `capacity` plus critical leases,
//! plus the leases that expired since the last acquire or release (they are dropped then). The
//! slots of each class are linked in expiry order (renewal moves a lease to the back), so
//! dropping expired leases, finding the earliest and the last expiry, acquiring, renewing and
//! releasing are all O(1) (amortised: each lease is dropped once); a refused acquire under
//! overload costs O(1), never a scan. Removal fills the hole with the last slot, so the vector
//! stays dense; once the vector and index have grown to the peak number of leases, operations
//! allocate nothing. A `Check` is read-only, so it walks the leases expired since the last
//! mutating operation.
//!
//! # Time
//!
//! The state keeps the latest instant a mutating operation saw. An earlier `now` (a clock going
//! backwards) counts as that instant: no time passed, leases do not come back to life, and a
//! lease is never given an expiry earlier than one already held (which keeps each class in
//! expiry order). `reset_after` also covers the time until the clock is back past that instant.
//!
//! # Edge cases
//!
//! - First request, or after `lease_ttl` of idleness: nothing is live; every acquire passes up to
//!   the limit.
//! - `Check { cost: 0 }` always passes and changes nothing. A `Check` with a cost above the limit
//!   is denied (and `retry_after` is `None`, as for every `Check`).
//! - Lease ids are the caller's ([`LeaseId`], 128 bits, random so that two callers never share
//!   one); any value is valid.
//! - Huge values: `lease_ttl` up to `u64::MAX` ns and instants near `u64::MAX` saturate (a lease
//!   whose expiry would overflow expires at `u64::MAX`); counts never overflow.

use std::time::Duration;

use hashbrown::HashMap;

use crate::algorithm::{param, Algorithm};
use crate::{ConfigError, Decision, LeaseId, Nanos, Op, OpKind};

/// No slot: the end of a list.
const NIL: usize = usize::MAX;

/// The concurrent requests limiter: at most `capacity` leases in flight per key. See the
/// [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct Concurrency {
    rule: Rule,
}

/// The fleet usage load shedder: critical leases always pass; non-critical ones pass while fewer
/// than `floor((1 − reserved_for_critical) × capacity)` non-critical leases are in flight. Meant
/// for one global key. See the [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct Fleet {
    rule: Rule,
    reserved_for_critical: f64,
}

/// The transition both algorithms share.
#[derive(Debug, Clone)]
struct Rule {
    capacity: u64,
    /// The most live non-critical leases (`capacity` for [`Concurrency`]).
    allowance: u64,
    /// Fleet: critical leases always pass and only non-critical ones count against `allowance`.
    /// Concurrency: every lease counts against `capacity` (= `allowance`).
    shed: bool,
    lease_ttl: Duration,
    ttl_ns: u64,
}

/// One key's leases in flight: for each, its id, expiry instant and class. Built by
/// [`Concurrency`] and [`Fleet`]; see the [module documentation](self) for its size.
#[derive(Debug, Clone)]
pub struct LeaseSet {
    /// Dense: one slot per lease held (live, or expired and not yet dropped).
    slots: Vec<Slot>,
    /// Lease id → index in `slots`.
    index: HashMap<LeaseId, usize, foldhash::fast::RandomState>,
    /// Per class (`[non-critical, critical]`), the slots linked in expiry order, earliest first.
    queues: [Queue; 2],
    /// The latest instant a mutating operation saw.
    seen: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    lease: LeaseId,
    expires_at: u64,
    prev: usize,
    next: usize,
    critical: bool,
}

#[derive(Debug, Clone, Copy)]
struct Queue {
    head: usize,
    tail: usize,
    len: u64,
}

const EMPTY: Queue = Queue {
    head: NIL,
    tail: NIL,
    len: 0,
};

/// The live leases of one class at some instant, computed without changing the state.
#[derive(Debug, Clone, Copy)]
struct ClassView {
    live: u64,
    /// Expiry of the earliest live lease.
    first: Option<u64>,
    /// Expiry of the last live lease.
    last: Option<u64>,
}

impl LeaseSet {
    fn new() -> LeaseSet {
        LeaseSet {
            slots: Vec::new(),
            index: HashMap::with_hasher(foldhash::fast::RandomState::default()),
            queues: [EMPTY; 2],
            seen: 0,
        }
    }

    /// Leases live at `now` (all classes). An instant earlier than one a mutating operation
    /// already saw counts as that one, as in decisions. Read-only.
    pub fn in_flight(&self, now: Nanos) -> u64 {
        let at = self.at(now.0);
        self.view(0, at).live + self.view(1, at).live
    }

    /// Critical leases live at `now` (see [`LeaseSet::in_flight`]).
    pub fn in_flight_critical(&self, now: Nanos) -> u64 {
        self.view(1, self.at(now.0)).live
    }

    /// Non-critical leases live at `now` (see [`LeaseSet::in_flight`]).
    pub fn in_flight_non_critical(&self, now: Nanos) -> u64 {
        self.view(0, self.at(now.0)).live
    }

    /// Leases held in memory, including expired ones not yet dropped (they are dropped at the
    /// next acquire or release).
    pub fn held(&self) -> usize {
        self.slots.len()
    }

    /// The effective instant: `now`, or the latest one seen if the clock went backwards.
    fn at(&self, now: u64) -> u64 {
        now.max(self.seen)
    }

    fn view(&self, class: usize, at: u64) -> ClassView {
        let q = self.queues[class];
        let mut i = q.head;
        let mut expired = 0;
        while i != NIL && self.slots[i].expires_at <= at {
            expired += 1;
            i = self.slots[i].next;
        }
        if i == NIL {
            return ClassView {
                live: 0,
                first: None,
                last: None,
            };
        }
        ClassView {
            live: q.len - expired,
            first: Some(self.slots[i].expires_at),
            last: Some(self.slots[q.tail].expires_at),
        }
    }

    /// Drops every lease expired at `at`: O(1) per dropped lease, O(1) when none.
    fn purge(&mut self, at: u64) {
        for class in 0..2 {
            loop {
                let head = self.queues[class].head;
                if head == NIL || self.slots[head].expires_at > at {
                    break;
                }
                self.remove(head);
            }
        }
    }

    /// Links slot `i` at the back of its class's queue.
    fn push_back(&mut self, i: usize) {
        let q = &mut self.queues[usize::from(self.slots[i].critical)];
        self.slots[i].prev = q.tail;
        self.slots[i].next = NIL;
        if q.tail == NIL {
            q.head = i;
        } else {
            self.slots[q.tail].next = i;
        }
        q.tail = i;
        q.len += 1;
    }

    /// Unlinks slot `i` from its class's queue.
    fn unlink(&mut self, i: usize) {
        let Slot {
            prev,
            next,
            critical,
            ..
        } = self.slots[i];
        let q = &mut self.queues[usize::from(critical)];
        if prev == NIL {
            q.head = next;
        } else {
            self.slots[prev].next = next;
        }
        if next == NIL {
            q.tail = prev;
        } else {
            self.slots[next].prev = prev;
        }
        q.len -= 1;
    }

    fn insert(&mut self, lease: LeaseId, critical: bool, expires_at: u64) {
        let i = self.slots.len();
        self.slots.push(Slot {
            lease,
            expires_at,
            prev: NIL,
            next: NIL,
            critical,
        });
        self.push_back(i);
        self.index.insert(lease, i);
    }

    /// Moves slot `i` to the back of its queue with a new (latest) expiry.
    fn renew(&mut self, i: usize, expires_at: u64) {
        self.unlink(i);
        self.slots[i].expires_at = expires_at;
        self.push_back(i);
    }

    /// Removes slot `i` and its index entry; the last slot fills the hole.
    fn remove(&mut self, i: usize) {
        self.unlink(i);
        let gone = self.slots.swap_remove(i);
        self.index.remove(&gone.lease);
        if i < self.slots.len() {
            let moved = self.slots[i];
            let q = &mut self.queues[usize::from(moved.critical)];
            if moved.prev == NIL {
                q.head = i;
            } else {
                self.slots[moved.prev].next = i;
            }
            if moved.next == NIL {
                q.tail = i;
            } else {
                self.slots[moved.next].prev = i;
            }
            if let Some(slot) = self.index.get_mut(&moved.lease) {
                *slot = i;
            }
        }
    }
}

impl Rule {
    fn new(
        capacity: u64,
        allowance: u64,
        shed: bool,
        lease_ttl: Duration,
    ) -> Result<Rule, ConfigError> {
        Ok(Rule {
            capacity,
            allowance,
            shed,
            lease_ttl,
            ttl_ns: param::period("lease_ttl", lease_ttl)?,
        })
    }

    fn limit(&self, critical: bool) -> u64 {
        if self.shed && critical {
            self.capacity
        } else {
            self.allowance
        }
    }

    fn counted(&self, critical: bool, views: &[ClassView; 2]) -> u64 {
        if self.shed && !critical {
            views[0].live
        } else {
            views[0].live.saturating_add(views[1].live)
        }
    }

    /// The decision's numbers for an operation of this class on `state` at `now`.
    fn decision(
        &self,
        state: &LeaseSet,
        now: u64,
        critical: bool,
        allowed: bool,
        retry_after: Option<u64>,
    ) -> Decision {
        let at = state.at(now);
        let views = [state.view(0, at), state.view(1, at)];
        let limit = self.limit(critical);
        let remaining = limit.saturating_sub(self.counted(critical, &views));
        let last = views[0]
            .last
            .unwrap_or(0)
            .max(views[1].last.unwrap_or(0))
            .max(state.seen);
        let reset_after = Duration::from_nanos(last.saturating_sub(now));
        if allowed {
            Decision::allow(limit, remaining, reset_after)
        } else {
            let retry = retry_after.map(|t| Duration::from_nanos(t.saturating_sub(now)));
            Decision::deny(limit, remaining, reset_after, retry)
        }
    }

    #[inline]
    fn apply(&self, state: &mut LeaseSet, now: Nanos, op: Op) -> Decision {
        let now = now.0;
        let at = state.at(now);
        match op {
            Op::Acquire { lease, critical } => {
                state.seen = at;
                state.purge(at);
                let expires_at = at.saturating_add(self.ttl_ns);
                if let Some(&i) = state.index.get(&lease) {
                    state.renew(i, expires_at);
                    return self.decision(state, now, state.slots[i].critical, true, None);
                }
                if self.shed && critical {
                    state.insert(lease, critical, expires_at);
                    return self.decision(state, now, critical, true, None);
                }
                let views = [state.view(0, at), state.view(1, at)];
                if self.counted(critical, &views) < self.limit(critical) {
                    state.insert(lease, critical, expires_at);
                    return self.decision(state, now, critical, true, None);
                }
                // A place of this class frees at the latest when the earliest lease counted
                // against it expires (none: the limit is 0, it never passes).
                let frees = if self.shed {
                    views[0].first
                } else {
                    match (views[0].first, views[1].first) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                };
                self.decision(state, now, critical, false, frees)
            }
            Op::Release { lease } => {
                state.seen = at;
                state.purge(at);
                match state.index.get(&lease) {
                    Some(&i) => {
                        let critical = state.slots[i].critical;
                        state.remove(i);
                        self.decision(state, now, critical, true, None)
                    }
                    None => self.decision(state, now, false, false, None),
                }
            }
            // `Check`, and unsupported operations answered as a probe of their cost.
            _ => {
                let views = [state.view(0, at), state.view(1, at)];
                let room = self.allowance.saturating_sub(self.counted(false, &views));
                self.decision(state, now, false, op.cost() <= room, None)
            }
        }
    }

    /// No live lease at `now`, and `now` is not before an instant already seen: every later
    /// operation (at an instant `≥ now`) decides as on a fresh state.
    fn is_fresh(&self, state: &LeaseSet, now: Nanos) -> bool {
        state.seen <= now.0
            && state
                .queues
                .iter()
                .all(|q| q.tail == NIL || state.slots[q.tail].expires_at <= now.0)
    }
}

impl Concurrency {
    /// At most `capacity` leases in flight per key; an unreleased lease expires after
    /// `lease_ttl`.
    ///
    /// Errors name the field: `capacity` must be at least 1, `lease_ttl` between 1 ns and 584
    /// years.
    pub fn new(capacity: u64, lease_ttl: Duration) -> Result<Concurrency, ConfigError> {
        let capacity = param::count("capacity", capacity)?;
        Ok(Concurrency {
            rule: Rule::new(capacity, capacity, false, lease_ttl)?,
        })
    }

    /// The most leases in flight per key.
    pub fn capacity(&self) -> u64 {
        self.rule.capacity
    }

    /// How long an unreleased lease holds its place.
    pub fn lease_ttl(&self) -> Duration {
        self.rule.lease_ttl
    }
}

impl Fleet {
    /// A shedder for a fleet of `capacity` places of which the fraction `reserved_for_critical`
    /// is kept for critical requests; an unreleased lease expires after `lease_ttl`.
    ///
    /// Errors name the field: `capacity` must be at least 1, `reserved_for_critical` a number in
    /// `[0, 1]`, `lease_ttl` between 1 ns and 584 years.
    pub fn new(
        capacity: u64,
        reserved_for_critical: f64,
        lease_ttl: Duration,
    ) -> Result<Fleet, ConfigError> {
        let capacity = param::count("capacity", capacity)?;
        let reserved = fraction("reserved_for_critical", reserved_for_critical)?;
        Ok(Fleet {
            rule: Rule::new(
                capacity,
                non_critical_allowance(capacity, reserved),
                true,
                lease_ttl,
            )?,
            reserved_for_critical: reserved,
        })
    }

    /// The fleet's places (the `limit` reported to critical requests).
    pub fn capacity(&self) -> u64 {
        self.rule.capacity
    }

    /// The fraction of `capacity` kept for critical requests.
    pub fn reserved_for_critical(&self) -> f64 {
        self.reserved_for_critical
    }

    /// The most non-critical leases in flight: `floor((1 − reserved_for_critical) × capacity)`
    /// (the `limit` reported to non-critical requests).
    pub fn non_critical_allowance(&self) -> u64 {
        self.rule.allowance
    }

    /// How long an unreleased lease holds its place.
    pub fn lease_ttl(&self) -> Duration {
        self.rule.lease_ttl
    }
}

/// A fraction must be a number in `[0, 1]`.
fn fraction(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::invalid(
            field,
            value,
            "must be a number between 0 and 1",
        ))
    }
}

/// `floor((1 − reserved) × capacity)`, where a product within `1e-9` (relative) of a whole number
/// is taken as that number.
fn non_critical_allowance(capacity: u64, reserved: f64) -> u64 {
    if reserved == 0.0 {
        return capacity;
    }
    let exact = (1.0 - reserved) * capacity as f64;
    let nearest = exact.round();
    let whole = if (exact - nearest).abs() <= 1e-9 * nearest.max(1.0) {
        nearest
    } else {
        exact.floor()
    };
    // `as` saturates; `reserved ≤ 1` keeps `whole ≥ 0`.
    (whole as u64).min(capacity)
}

/// The two lease algorithms differ only in their name and their [`Rule`]; their `Algorithm`
/// implementations are this one, written once.
macro_rules! lease_algorithm {
    ($ty:ty, $name:literal) => {
        impl Algorithm for $ty {
            type State = LeaseSet;

            fn name(&self) -> &'static str {
                $name
            }

            fn fresh(&self, _now: Nanos) -> LeaseSet {
                LeaseSet::new()
            }

            #[inline]
            fn apply(&self, state: &mut LeaseSet, now: Nanos, op: Op) -> Decision {
                self.rule.apply(state, now, op)
            }

            /// No live lease at `now` and no instant later than `now` seen. Sound for every
            /// later operation at an instant `≥ now`.
            fn is_fresh(&self, state: &LeaseSet, now: Nanos) -> bool {
                self.rule.is_fresh(state, now)
            }

            fn supports(&self, op: OpKind) -> bool {
                matches!(op, OpKind::Check | OpKind::Acquire | OpKind::Release)
            }
        }
    };
}

lease_algorithm!(Concurrency, "concurrency");
lease_algorithm!(Fleet, "fleet");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws::{check, ns};
    use proptest::prelude::*;

    fn acquire(lease: u64) -> Op {
        Op::Acquire {
            lease: lease.into(),
            critical: false,
        }
    }

    fn critical(lease: u64) -> Op {
        Op::Acquire {
            lease: lease.into(),
            critical: true,
        }
    }

    fn release(lease: u64) -> Op {
        Op::Release {
            lease: lease.into(),
        }
    }

    /// (allowed, limit, remaining, reset_after, retry_after) in nanoseconds.
    fn nums(d: Decision) -> (bool, u64, u64, u64, Option<u64>) {
        assert_eq!(d.wait, Duration::ZERO);
        (
            d.allowed,
            d.limit,
            d.remaining,
            d.reset_after.as_nanos() as u64,
            d.retry_after.map(|r| r.as_nanos() as u64),
        )
    }

    #[test]
    fn state_size() {
        assert_eq!(std::mem::size_of::<LeaseSet>(), 120);
        assert_eq!(std::mem::size_of::<Slot>(), 48);
    }

    /// capacity 2, lease_ttl 100 ns: hand-derived.
    #[test]
    fn concurrency_hand_sequence() {
        let c = Concurrency::new(2, ns(100)).unwrap();
        let mut s = c.fresh(Nanos(0));
        let mut at = |t: u64, op: Op| nums(c.apply(&mut s, Nanos(t), op));

        assert_eq!(at(0, acquire(1)), (true, 2, 1, 100, None));
        assert_eq!(at(10, acquire(2)), (true, 2, 0, 100, None));
        // Full: lease 1 frees its place at 100 at the latest.
        assert_eq!(at(20, acquire(3)), (false, 2, 0, 90, Some(80)));
        assert_eq!(at(30, release(1)), (true, 2, 1, 80, None));
        assert_eq!(at(30, acquire(3)), (true, 2, 0, 100, None));
        // Released twice: a no-op reporting false.
        assert_eq!(at(40, release(1)), (false, 2, 0, 90, None));
        // Renewal: lease 2 now expires at 150; counts unchanged.
        assert_eq!(at(50, acquire(2)), (true, 2, 0, 100, None));
        // Earliest live lease is now 3 (130).
        assert_eq!(at(60, acquire(4)), (false, 2, 0, 90, Some(70)));
        // 130: lease 3 expired (expiry is excluded), its place is free.
        assert_eq!(at(130, acquire(4)), (true, 2, 0, 100, None));
        assert_eq!(at(130, release(3)), (false, 2, 0, 100, None));
        assert_eq!(s.in_flight(Nanos(149)), 2);
        assert_eq!(s.in_flight(Nanos(150)), 1);
        assert!(!c.is_fresh(&s, Nanos(229)));
        assert!(c.is_fresh(&s, Nanos(230)));
        // Expired leases stay in memory until the next mutating operation drops them.
        assert_eq!(s.held(), 2);
        let _ = c.apply(&mut s, Nanos(300), release(9));
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn expiry_reclaims_a_leaked_place() {
        let c = Concurrency::new(1, ns(100)).unwrap();
        let mut s = c.fresh(Nanos(0));
        assert!(c.apply(&mut s, Nanos(0), acquire(7)).allowed);
        assert_eq!(
            nums(c.apply(&mut s, Nanos(99), acquire(8))),
            (false, 1, 0, 1, Some(1))
        );
        assert_eq!(
            nums(c.apply(&mut s, Nanos(100), acquire(8))),
            (true, 1, 0, 100, None)
        );
        // The leaked lease expired: releasing it reports false and changes nothing.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(100), release(7))),
            (false, 1, 0, 100, None)
        );
        assert_eq!(s.in_flight(Nanos(100)), 1);
        // An expired lease acquired again is a new lease, not a renewal.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(250), acquire(7))),
            (true, 1, 0, 100, None)
        );
    }

    #[test]
    fn concurrency_counts_critical_leases_too() {
        let c = Concurrency::new(2, ns(100)).unwrap();
        let mut s = c.fresh(Nanos(0));
        assert!(c.apply(&mut s, Nanos(0), critical(1)).allowed);
        assert!(c.apply(&mut s, Nanos(10), acquire(2)).allowed);
        // Refused, critical or not; the earliest lease of any class frees a place.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(20), critical(3))),
            (false, 2, 0, 90, Some(80))
        );
        assert_eq!(
            nums(c.apply(&mut s, Nanos(20), acquire(3))),
            (false, 2, 0, 90, Some(80))
        );
        assert_eq!(s.in_flight_critical(Nanos(20)), 1);
        assert_eq!(s.in_flight_non_critical(Nanos(20)), 1);
    }

    /// capacity 10, reserved 0.3: the non-critical allowance is 7.
    #[test]
    fn fleet_hand_sequence() {
        let f = Fleet::new(10, 0.3, ns(1000)).unwrap();
        assert_eq!(f.non_critical_allowance(), 7);
        let mut s = f.fresh(Nanos(0));
        for i in 0..7 {
            assert_eq!(
                nums(f.apply(&mut s, Nanos(i), acquire(i + 1))),
                (true, 7, 6 - i, 1000, None)
            );
        }
        // At the allowance: refused until lease 1 expires at 1000.
        assert_eq!(
            nums(f.apply(&mut s, Nanos(7), acquire(8))),
            (false, 7, 0, 999, Some(993))
        );
        // Critical requests pass, beyond the reservation and beyond capacity; their limit is
        // the capacity and they count every lease.
        let mut remaining = Vec::new();
        for lease in 100..113 {
            let d = f.apply(&mut s, Nanos(8), critical(lease));
            assert!(d.allowed);
            assert_eq!(d.limit, 10);
            remaining.push(d.remaining);
        }
        assert_eq!(remaining[..4], [2, 1, 0, 0]);
        // They neither reduce nor free non-critical places.
        assert_eq!(
            nums(f.apply(&mut s, Nanos(9), acquire(8))),
            (false, 7, 0, 999, Some(991))
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(9), check(1))),
            (false, 7, 0, 999, None)
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(9), release(1))),
            (true, 7, 1, 999, None)
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(9), check(1))),
            (true, 7, 1, 999, None)
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(9), acquire(8))),
            (true, 7, 0, 1000, None)
        );
        // Releasing a critical lease reports the critical numbers.
        assert_eq!(
            nums(f.apply(&mut s, Nanos(9), release(100))),
            (true, 10, 0, 1000, None)
        );
        assert_eq!(s.in_flight_critical(Nanos(9)), 12);
        assert_eq!(s.in_flight_non_critical(Nanos(9)), 7);
        assert_eq!(s.in_flight(Nanos(9)), 19);
    }

    #[test]
    fn fleet_retry_waits_for_a_non_critical_lease() {
        let f = Fleet::new(2, 0.5, ns(100)).unwrap();
        let mut s = f.fresh(Nanos(0));
        assert!(f.apply(&mut s, Nanos(0), critical(1)).allowed);
        assert!(f.apply(&mut s, Nanos(10), acquire(2)).allowed);
        // The critical lease expires first (100) but frees no non-critical place; lease 2 does.
        assert_eq!(
            nums(f.apply(&mut s, Nanos(20), acquire(3))),
            (false, 1, 0, 90, Some(90))
        );
    }

    #[test]
    fn fleet_edges() {
        // r = 0: everything is non-critical capacity; critical still never refused.
        let f = Fleet::new(3, 0.0, ns(100)).unwrap();
        let mut s = f.fresh(Nanos(0));
        for lease in 0..3 {
            assert!(f.apply(&mut s, Nanos(0), acquire(lease)).allowed);
        }
        assert_eq!(
            nums(f.apply(&mut s, Nanos(0), acquire(3))),
            (false, 3, 0, 100, Some(100))
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(0), critical(4))),
            (true, 3, 0, 100, None)
        );
        // r = 1: no non-critical request ever passes.
        let f = Fleet::new(3, 1.0, ns(100)).unwrap();
        assert_eq!(f.non_critical_allowance(), 0);
        let mut s = f.fresh(Nanos(0));
        assert_eq!(
            nums(f.apply(&mut s, Nanos(0), acquire(1))),
            (false, 0, 0, 0, None)
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(0), critical(2))),
            (true, 3, 2, 100, None)
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(0), acquire(1))),
            (false, 0, 0, 100, None)
        );
        assert_eq!(
            nums(f.apply(&mut s, Nanos(0), check(0))),
            (true, 0, 0, 100, None)
        );
    }

    #[test]
    fn allowance_rounding() {
        let a = |cap, r| Fleet::new(cap, r, ns(1)).unwrap().non_critical_allowance();
        assert_eq!(a(10, 0.9), 1);
        assert_eq!(a(10, 0.3), 7);
        assert_eq!(a(10, 0.7), 3);
        assert_eq!(a(3, 0.5), 1);
        assert_eq!(a(100, 0.01), 99);
        assert_eq!(a(100, 0.015), 98);
        assert_eq!(a(1, 0.0), 1);
        assert_eq!(a(1, 1e-12), 1);
        assert_eq!(a(u64::MAX, 0.0), u64::MAX);
        assert_eq!(a(u64::MAX, 1.0), 0);
        assert_eq!(a(u64::MAX, 1e-300), u64::MAX);
    }

    #[test]
    fn renewal_keeps_the_class_and_moves_the_expiry() {
        let f = Fleet::new(4, 0.5, ns(100)).unwrap();
        let mut s = f.fresh(Nanos(0));
        assert!(f.apply(&mut s, Nanos(0), acquire(1)).allowed);
        assert!(f.apply(&mut s, Nanos(10), acquire(2)).allowed);
        // Renewed as "critical": still a non-critical lease, now expiring at 150.
        assert_eq!(
            nums(f.apply(&mut s, Nanos(50), critical(1))),
            (true, 2, 0, 100, None)
        );
        assert_eq!(s.in_flight_critical(Nanos(50)), 0);
        // Lease 2 (110) is now the earliest.
        assert_eq!(
            nums(f.apply(&mut s, Nanos(60), acquire(3))),
            (false, 2, 0, 90, Some(50))
        );
        assert_eq!(s.in_flight(Nanos(110)), 1);
        assert_eq!(s.in_flight(Nanos(150)), 0);
    }

    #[test]
    fn check_is_a_read_only_probe() {
        let c = Concurrency::new(3, ns(100)).unwrap();
        let mut s = c.fresh(Nanos(0));
        let _ = c.apply(&mut s, Nanos(0), acquire(1));
        let _ = c.apply(&mut s, Nanos(50), acquire(2));
        assert_eq!(
            nums(c.apply(&mut s, Nanos(60), check(1))),
            (true, 3, 1, 90, None)
        );
        assert_eq!(
            nums(c.apply(&mut s, Nanos(60), check(2))),
            (false, 3, 1, 90, None)
        );
        assert_eq!(
            nums(c.apply(&mut s, Nanos(60), check(0))),
            (true, 3, 1, 90, None)
        );
        // Above the limit: never; still no retry_after.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(60), check(4))),
            (false, 3, 1, 90, None)
        );
        // Lease 1 expired at 100: the probe sees it, but does not drop it.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(100), check(2))),
            (true, 3, 2, 50, None)
        );
        assert_eq!(s.held(), 2);
        assert_eq!(s.seen, 50);
    }

    #[test]
    fn backwards_clock_counts_as_no_time_passed() {
        let c = Concurrency::new(1, ns(100)).unwrap();
        let mut s = c.fresh(Nanos(0));
        assert!(c.apply(&mut s, Nanos(500), acquire(1)).allowed);
        // 450 counts as 500: the lease was taken "now", durations measured from 450.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(450), acquire(2))),
            (false, 1, 0, 150, Some(150))
        );
        assert_eq!(s.in_flight(Nanos(0)), 1);
        // A lease expired at the latest instant seen does not come back to life.
        assert!(c.apply(&mut s, Nanos(600), acquire(2)).allowed);
        assert!(!c.apply(&mut s, Nanos(550), release(1)).allowed);
        // Renewed at 550, which counts as 600: expiry 700, never earlier than one held.
        assert_eq!(
            nums(c.apply(&mut s, Nanos(550), acquire(2))),
            (true, 1, 0, 150, None)
        );
        // Released everything at an instant behind the clock: not fresh until the clock is
        // back at 600.
        assert!(c.apply(&mut s, Nanos(10), release(2)).allowed);
        let d = c.apply(&mut s, Nanos(10), check(0));
        assert_eq!(d.reset_after, ns(590));
        assert!(!c.is_fresh(&s, Nanos(599)));
        assert!(c.is_fresh(&s, Nanos(600)));
    }

    #[test]
    fn constructors_validate_and_name_fields() {
        let field = |e: ConfigError| match e {
            ConfigError::Invalid { field, .. } => field,
            ConfigError::Missing { field } => field,
        };
        let ttl = Duration::from_secs(1);
        assert_eq!(field(Concurrency::new(0, ttl).unwrap_err()), "capacity");
        assert_eq!(
            field(Concurrency::new(1, Duration::ZERO).unwrap_err()),
            "lease_ttl"
        );
        assert_eq!(field(Fleet::new(0, 0.5, ttl).unwrap_err()), "capacity");
        for r in [-0.1, 1.1, f64::NAN, f64::INFINITY, -0.0 - 1e-300] {
            let e = Fleet::new(1, r, ttl).unwrap_err();
            assert_eq!(field(e.clone()), "reserved_for_critical");
            assert!(e.to_string().contains(&r.to_string()), "{e}");
        }
        assert_eq!(
            field(Fleet::new(1, 0.5, Duration::MAX).unwrap_err()),
            "lease_ttl"
        );
        let c = Concurrency::new(5, ttl).unwrap();
        assert_eq!(
            (c.capacity(), c.lease_ttl(), c.name()),
            (5, ttl, "concurrency")
        );
        let f = Fleet::new(8, 0.25, ttl).unwrap();
        assert_eq!(
            (
                f.capacity(),
                f.reserved_for_critical(),
                f.lease_ttl(),
                f.name()
            ),
            (8, 0.25, ttl, "fleet")
        );
        assert_eq!(f.non_critical_allowance(), 6);
    }

    #[test]
    fn unsupported_ops_are_probes() {
        let c = Concurrency::new(2, ns(100)).unwrap();
        let mut s = c.fresh(Nanos(0));
        let _ = c.apply(&mut s, Nanos(5), acquire(1));
        for op in [
            Op::Reserve { cost: 1 },
            Op::TryAcquire {
                cost: 2,
                timeout: Duration::ZERO,
            },
            Op::SetRate { rate: 1.0 },
        ] {
            assert!(!c.supports(op.kind()));
            let d = c.apply(&mut s, Nanos(6), op);
            assert_eq!(d, c.apply(&mut s, Nanos(6), check(op.cost())));
            assert_eq!((s.held(), s.seen), (1, 5));
        }
        for kind in [OpKind::Check, OpKind::Acquire, OpKind::Release] {
            assert!(c.supports(kind));
            assert!(Fleet::new(1, 0.5, ns(1)).unwrap().supports(kind));
        }
    }

    #[test]
    fn steady_state_does_not_allocate() {
        let c = Concurrency::new(64, ns(1_000)).unwrap();
        let mut s = c.fresh(Nanos(0));
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut now = 0;
        let mut run = |s: &mut LeaseSet, steps: usize, caps: &mut (usize, usize)| {
            for _ in 0..steps {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                now += x % 7;
                let lease = x % 96;
                let op = if x % 3 == 0 {
                    release(lease)
                } else {
                    Op::Acquire {
                        lease: lease.into(),
                        critical: x % 5 == 0,
                    }
                };
                let _ = c.apply(s, Nanos(now), op);
                caps.0 = caps.0.max(s.slots.capacity());
                caps.1 = caps.1.max(s.index.capacity());
            }
        };
        let mut warm = (0, 0);
        run(&mut s, 20_000, &mut warm);
        let mut steady = warm;
        run(&mut s, 50_000, &mut steady);
        assert_eq!(steady, warm);
    }

    // ---- Property tests against a naive model ----

    /// The rule written the obvious way: a list of (lease, expiry, critical), scanned each time.
    #[derive(Debug, Clone, Default)]
    struct Model {
        leases: Vec<(LeaseId, u64, bool)>,
        seen: u64,
    }

    struct Params {
        capacity: u64,
        allowance: u64,
        shed: bool,
        ttl: u64,
    }

    impl Params {
        /// Whether a lease of class `lease` counts against the limit of an operation of class
        /// `op`: always, except critical leases for a non-critical fleet operation.
        fn counts_against(&self, op: bool, lease: bool) -> bool {
            !(self.shed && !op && lease)
        }
    }

    impl Model {
        fn apply(&mut self, p: &Params, now: u64, op: Op) -> Decision {
            let at = now.max(self.seen);
            if matches!(op, Op::Acquire { .. } | Op::Release { .. }) {
                self.seen = at;
                self.leases.retain(|l| l.1 > at);
            }
            let live: Vec<(LeaseId, u64, bool)> =
                self.leases.iter().copied().filter(|l| l.1 > at).collect();
            let counts = |crit: bool| -> u64 {
                live.iter().filter(|l| p.counts_against(crit, l.2)).count() as u64
            };
            let limit = |crit: bool| {
                if p.shed && crit {
                    p.capacity
                } else {
                    p.allowance
                }
            };
            let (allowed, class, retry) = match op {
                Op::Acquire { lease, critical } => {
                    if let Some(l) = self.leases.iter_mut().find(|l| l.0 == lease) {
                        l.1 = at.saturating_add(p.ttl);
                        (true, l.2, None)
                    } else if (p.shed && critical) || counts(critical) < limit(critical) {
                        self.leases
                            .push((lease, at.saturating_add(p.ttl), critical));
                        (true, critical, None)
                    } else {
                        let retry = live.iter().filter(|l| !p.shed || !l.2).map(|l| l.1).min();
                        (false, critical, retry)
                    }
                }
                Op::Release { lease } => match self.leases.iter().position(|l| l.0 == lease) {
                    Some(i) => (true, self.leases.remove(i).2, None),
                    None => (false, false, None),
                },
                other => (
                    counts(false).saturating_add(other.cost()) <= limit(false),
                    false,
                    None,
                ),
            };
            let live: Vec<(LeaseId, u64, bool)> =
                self.leases.iter().copied().filter(|l| l.1 > at).collect();
            let counted = live.iter().filter(|l| p.counts_against(class, l.2)).count() as u64;
            let last = live.iter().map(|l| l.1).max().unwrap_or(0).max(self.seen);
            Decision {
                allowed,
                limit: limit(class),
                remaining: limit(class).saturating_sub(counted),
                reset_after: ns(last.saturating_sub(now)),
                retry_after: retry.map(|t| ns(t - now)),
                wait: Duration::ZERO,
            }
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Acquire(u64, bool),
        Release(u64),
        Check(u64),
    }

    impl Step {
        fn op(self) -> Op {
            match self {
                Step::Acquire(lease, critical) => Op::Acquire {
                    lease: lease.into(),
                    critical,
                },
                Step::Release(lease) => Op::Release {
                    lease: lease.into(),
                },
                Step::Check(cost) => Op::Check { cost },
            }
        }
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u64..8, any::<bool>()).prop_map(|(l, c)| Step::Acquire(l, c)),
            2 => (0u64..8).prop_map(Step::Release),
            1 => (0u64..5).prop_map(Step::Check),
        ]
    }

    /// Mostly forward, sometimes backwards, time steps.
    fn dt() -> impl Strategy<Value = i64> {
        prop_oneof![4 => 0i64..12, 1 => -15i64..0]
    }

    /// Either algorithm, as the property tests drive them.
    enum Subject {
        Concurrency(Concurrency),
        Fleet(Fleet),
    }

    impl Subject {
        fn new(fleet: bool, capacity: u64, reserved: f64, ttl: u64) -> Subject {
            if fleet {
                Subject::Fleet(Fleet::new(capacity, reserved, ns(ttl)).unwrap())
            } else {
                Subject::Concurrency(Concurrency::new(capacity, ns(ttl)).unwrap())
            }
        }

        fn apply(&self, s: &mut LeaseSet, now: u64, op: Op) -> Decision {
            match self {
                Subject::Concurrency(c) => c.apply(s, Nanos(now), op),
                Subject::Fleet(f) => f.apply(s, Nanos(now), op),
            }
        }

        fn is_fresh(&self, s: &LeaseSet, now: u64) -> bool {
            match self {
                Subject::Concurrency(c) => c.is_fresh(s, Nanos(now)),
                Subject::Fleet(f) => f.is_fresh(s, Nanos(now)),
            }
        }

        /// The parameters, for the model.
        fn params(&self) -> Params {
            match self {
                Subject::Concurrency(c) => Params {
                    capacity: c.capacity(),
                    allowance: c.capacity(),
                    shed: false,
                    ttl: c.lease_ttl().as_nanos() as u64,
                },
                Subject::Fleet(f) => Params {
                    capacity: f.capacity(),
                    allowance: f.non_critical_allowance(),
                    shed: true,
                    ttl: f.lease_ttl().as_nanos() as u64,
                },
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every decision equals the naive model's; in-flight never exceeds the limit; the
        /// accessors agree with the model; retry_after and reset_after are exact.
        #[test]
        fn matches_naive_model_and_bound(
            fleet in any::<bool>(),
            capacity in 1u64..6,
            reserved in prop_oneof![Just(0.0), Just(0.5), Just(1.0), 0.0f64..=1.0],
            ttl in 1u64..40,
            steps in prop::collection::vec((dt(), step()), 1..150),
        ) {
            let alg = Subject::new(fleet, capacity, reserved, ttl);
            let p = alg.params();
            let mut s = LeaseSet::new();
            let mut m = Model::default();
            let mut now = 100u64;
            for (dt, step) in steps {
                now = now.saturating_add_signed(dt);
                let op = step.op();
                let d = alg.apply(&mut s, now, op);
                prop_assert_eq!(d, m.apply(&p, now, op), "{:?} at {}", op, now);

                let at = now.max(m.seen);
                let live = |crit: bool| {
                    m.leases.iter().filter(|l| l.1 > at && l.2 == crit).count() as u64
                };
                prop_assert_eq!(s.in_flight_critical(Nanos(now)), live(true));
                prop_assert_eq!(s.in_flight_non_critical(Nanos(now)), live(false));
                prop_assert_eq!(s.in_flight(Nanos(now)), live(true) + live(false));
                if fleet {
                    prop_assert!(live(false) <= p.allowance);
                } else {
                    prop_assert!(live(true) + live(false) <= capacity);
                }
                prop_assert_eq!(s.held(), m.leases.len());

                if let (Op::Acquire { .. }, Some(r)) = (op, d.retry_after) {
                    let r = r.as_nanos() as u64;
                    prop_assert!(r > 0);
                    prop_assert!(!alg.apply(&mut s.clone(), now + r - 1, op).allowed);
                    prop_assert!(alg.apply(&mut s.clone(), now + r, op).allowed);
                }
                let reset = d.reset_after.as_nanos() as u64;
                prop_assert!(alg.is_fresh(&s, now + reset));
                if reset > 0 {
                    prop_assert!(!alg.is_fresh(&s, now + reset - 1));
                }
            }
        }

        /// Once `is_fresh`, the state and a fresh one decide alike at every later instant ≥ now.
        #[test]
        fn is_fresh_is_sound(
            fleet in any::<bool>(),
            capacity in 1u64..5,
            reserved in 0.0f64..=1.0,
            ttl in 1u64..30,
            before in prop::collection::vec((dt(), step()), 0..60),
            after in prop::collection::vec((0i64..12, step()), 1..60),
        ) {
            let alg = Subject::new(fleet, capacity, reserved, ttl);
            let mut s = LeaseSet::new();
            let mut now = 100u64;
            for (dt, step) in before {
                now = now.saturating_add_signed(dt);
                let _ = alg.apply(&mut s, now, step.op());
            }
            while !alg.is_fresh(&s, now) {
                now += 1;
            }
            let mut f = LeaseSet::new();
            for (dt, step) in after {
                now += dt as u64;
                prop_assert_eq!(alg.apply(&mut s, now, step.op()), alg.apply(&mut f, now, step.op()));
            }
        }

        /// No input panics: extreme capacities, lease ttls, lease ids, costs and instants.
        #[test]
        fn never_panics(
            fleet in any::<bool>(),
            capacity in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..10],
            reserved in prop_oneof![Just(0.0), Just(1.0), Just(1e-300), 0.0f64..=1.0],
            ttl in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
            ops in prop::collection::vec(
                (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..50],
                 prop_oneof![Just(0u64), Just(u64::MAX), 0u64..4, any::<u64>()],
                 0u8..3,
                 any::<bool>()),
                1..60,
            ),
        ) {
            let Ok(c) = Concurrency::new(capacity, ns(ttl)) else { return Ok(()); };
            let Ok(f) = Fleet::new(capacity, reserved, ns(ttl)) else { return Ok(()); };
            let alg: &dyn Fn(&mut LeaseSet, Nanos, Op) -> Decision = if fleet {
                &|s, t, op| f.apply(s, t, op)
            } else {
                &|s, t, op| c.apply(s, t, op)
            };
            let mut s = LeaseSet::new();
            for (now, x, kind, crit) in ops {
                let op = match kind {
                    0 => Op::Acquire { lease: x.into(), critical: crit },
                    1 => Op::Release { lease: x.into() },
                    _ => Op::Check { cost: x },
                };
                let d = alg(&mut s, Nanos(now), op);
                prop_assert!(d.remaining <= d.limit);
                s.in_flight(Nanos(now));
                c.is_fresh(&s, Nanos(now));
            }
        }
    }
}
