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

use crate::algorithm::{param, Algorithm, Parameters};
use crate::{ConfigError, Decision, LeaseId, Nanos, Op, OpKind};

#[cfg(feature = "redis")]
mod twin;

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

impl Parameters for Concurrency {
    fn fingerprint(&self) -> [u64; 2] {
        [self.capacity(), param::nanos(self.lease_ttl())]
    }

    /// None: an in-flight limit has no window.
    fn quota(&self) -> Option<(f64, Duration)> {
        None
    }

    fn share(&self, nodes: u32) -> Result<Concurrency, ConfigError> {
        Concurrency::new(param::part(self.capacity(), nodes), self.lease_ttl())
    }
}

impl Parameters for Fleet {
    fn fingerprint(&self) -> [u64; 2] {
        [
            self.capacity(),
            param::mix(
                param::nanos(self.lease_ttl()),
                self.reserved_for_critical().to_bits(),
            ),
        ]
    }

    /// None: an in-flight limit has no window.
    fn quota(&self) -> Option<(f64, Duration)> {
        None
    }

    /// The capacity is divided; the share reserved for critical traffic stays the same.
    fn share(&self, nodes: u32) -> Result<Fleet, ConfigError> {
        Fleet::new(
            param::part(self.capacity(), nodes),
            self.reserved_for_critical(),
            self.lease_ttl(),
        )
    }
}

#[cfg(feature = "file")]
mod parts;
#[cfg(test)]
mod tests;
