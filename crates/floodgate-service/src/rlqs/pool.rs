//! One node's streams on one bucket: the first level of the division. The node claims the
//! bucket's limit at the store on behalf of all of them (one claim, with their
//! [`Profile`]), and divides what the store grants it among them here, in memory.
//!
//! **Units.** Demands, margins and grants here, and the claims at the store, are thousandths
//! of a request per unit of the limit, so that a share below one request per unit (a
//! thousand Envoys on 100 per second) is still a share, not a denial.
//!
//! **Division.** At each of the node's steps ([`Pool::stepped`]) the node's grant `G` is divided
//! among its streams by [`floodgate::quota::divide`], in full (the store keeps the reserve),
//! and each stream's *assigned* share moves towards its target as the store's do: a share that
//! shrinks shrinks at once (sent at the stream's next tick), one that grows takes only the room
//! `G` leaves (shared among the growers in proportion to what each lacks) beside what every
//! other stream holds (the larger of what it was sent and what it
//! is assigned, until that was sent) and what closed streams still hold. So what this node's
//! streams hold never passes `G`, but while the store shrinks it, and then what they hold is
//! what the node reports holding, so the store keeps counting it. Changes within 1/32 of what
//! a stream holds are not made (each would restart the Envoy's token bucket), unless the
//! streams hold more than `G`.
//!
//! **Newcomers.** A stream that joins is assigned at once, out of the room: its need (at most an
//! even split of `G`), or, when the room is short even after the node has stepped asking the
//! store for room (at most twenty times a second, for what its newcomers lack and as much for
//! as many more as have just joined), its demand, or what room is left. A newcomer left with
//! nothing on a bucket whose needs fit is sent nothing (its Envoy keeps its
//! `no_assignment_behavior`) until a tick finds it room, rather than a denial. The store grants the room asked for out
//! of its reserve (half of what the demands leave of the limit), past the node's target if
//! need be, until the node's next periodic step, so newcomers whose demands fit in the reserve
//! are never sent nothing.

use std::collections::HashMap;

use floodgate::quota::{divide, Claimed, Group, Profile};
use floodgate::Nanos;

/// One stream's claim on the bucket, in thousandths of a request per unit.
#[derive(Clone, Debug)]
struct Member {
    demand: u64,
    margin: u64,
    reported_at: Nanos,
    /// What it was last sent, and until when that holds at its Envoy.
    sent: u64,
    sent_until: Nanos,
    /// What it is to be sent next.
    assigned: u64,
}

impl Member {
    fn sent_in_force(&self, now: Nanos) -> u64 {
        if self.sent_until > now {
            self.sent
        } else {
            0
        }
    }

    /// What it holds, or will once its assignment is sent.
    fn held(&self, now: Nanos) -> u64 {
        self.sent_in_force(now).max(self.assigned)
    }

    fn need(&self) -> u64 {
        self.demand.saturating_add(self.margin)
    }
}

/// A node's streams on one bucket (see the [module documentation](self)).
#[derive(Debug, Default)]
pub struct Pool {
    members: HashMap<String, Member>,
    profile: Profile,
    /// What closed streams still hold: thousandths, and until when.
    retiring: Vec<(u64, Nanos)>,
    /// The node's grant, thousandths of a request per unit.
    grant: u64,
    /// Assignments may be sent before this: the last good step and [`STEP_EVERY`].
    fresh_until: Nanos,
    /// When the node last took a periodic step on the bucket (good or not): a step for
    /// newcomers does not count, so that newcomers joining all the time do not hold the
    /// division back.
    stepped_at: Option<Nanos>,
    /// When the node last stepped for newcomers (good or not): at most one such step per
    /// [`ASK_EVERY`].
    asked_at: Option<Nanos>,
    /// Streams that joined since start, and as of the last step for newcomers: how many the
    /// next quarter second may bring.
    joined: u64,
    joined_at_ask: u64,
    /// Whether the streams' needs overflowed the grant at the last division (then a
    /// newcomer's share is its demand, not its need).
    crowded: bool,
}

/// How often a node steps on a bucket its streams use: its claim at the store is renewed,
/// and its grant divided again.
pub const STEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The least time between two of a node's steps for newcomers on one bucket: while streams
/// join and find no room, at most twenty a second beside the periodic one; none once they
/// have joined.
pub const ASK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

impl Pool {
    /// No stream.
    pub fn new() -> Pool {
        Pool::default()
    }

    /// Records `stream`'s report of `demand` and `margin` at `now`; returns whether it joined.
    pub fn report(&mut self, stream: &str, demand: u64, margin: u64, now: Nanos) -> bool {
        match self.members.get_mut(stream) {
            Some(member) => {
                self.profile.remove(member.demand, member.margin);
                member.demand = demand;
                member.margin = margin;
                member.reported_at = now;
                self.profile.add(demand, margin);
                false
            }
            None => {
                let member = Member {
                    demand,
                    margin,
                    reported_at: now,
                    sent: 0,
                    sent_until: now,
                    assigned: 0,
                };
                self.profile.add(demand, margin);
                self.members.insert(stream.to_string(), member);
                self.joined += 1;
                true
            }
        }
    }

    /// `stream` leaves at `now`: what it was sent stays counted until it ends.
    pub fn leave(&mut self, stream: &str, now: Nanos) {
        if let Some(member) = self.members.remove(stream) {
            self.retire(member, now);
        }
    }

    /// Streams that have not reported for `idle` leave.
    pub fn expire(&mut self, now: Nanos, idle: std::time::Duration) {
        let quiet: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| now.saturating_since(m.reported_at) >= idle)
            .map(|(name, _)| name.clone())
            .collect();
        for name in quiet {
            self.leave(&name, now);
        }
        self.retiring.retain(|(_, until)| *until > now);
    }

    fn retire(&mut self, member: Member, now: Nanos) {
        self.profile.remove(member.demand, member.margin);
        if member.sent_in_force(now) > 0 {
            self.retiring.push((member.sent, member.sent_until));
        }
    }

    /// Whether the node should step now: its last step is [`STEP_EVERY`] old, or it never
    /// stepped.
    pub fn due(&self, now: Nanos) -> bool {
        self.stepped_at
            .is_none_or(|at| now.saturating_since(at) >= STEP_EVERY)
    }

    /// What the node claims with: its streams' groups, what its Envoys hold in force (what
    /// they were sent, not what is yet to be sent) and, with `for_newcomers`, the room it asks
    /// for beyond that: what is assigned and yet to be sent, what its newcomers lack of their
    /// needs, and as much again for each stream that joined since its last ask, eight at
    /// least (so many may come before the next). Thousandths of a request per unit.
    pub fn claim(&mut self, now: Nanos, for_newcomers: bool) -> (Vec<Group>, u64, u64) {
        let in_force = self.in_force(now);
        let wanted = match for_newcomers {
            false => 0,
            true => {
                let (lacking, lack) = self
                    .members
                    .values()
                    .filter(|m| m.sent == 0)
                    .map(|m| m.need().max(1).saturating_sub(m.assigned))
                    .fold((0u64, 0u64), |(n, sum), l| (n + 1, sum.saturating_add(l)));
                // As many again as joined since the last ask (eight at least): the next ones
                // find room too.
                let recent = self.joined - self.joined_at_ask;
                self.joined_at_ask = self.joined;
                let each = lack / lacking.max(1);
                let pending = self.held(now).saturating_sub(in_force);
                pending
                    .saturating_add(lack)
                    .saturating_add(each.saturating_mul(recent.max(8)))
            }
        };
        (self.profile.groups(), in_force, wanted)
    }

    /// What this node's Envoys hold in force at `now`: what each stream was sent, closed
    /// ones included, thousandths of a request per unit.
    pub fn in_force(&self, now: Nanos) -> u64 {
        let members: u64 = self.members.values().map(|m| m.sent_in_force(now)).sum();
        members + self.retiring_in_force(now)
    }

    /// What every stream holds or is assigned, closed ones included, thousandths.
    fn held(&self, now: Nanos) -> u64 {
        let members: u64 = self.members.values().map(|m| m.held(now)).sum();
        members + self.retiring_in_force(now)
    }

    fn retiring_in_force(&self, now: Nanos) -> u64 {
        self.retiring
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(held, _)| held)
            .sum()
    }

    /// The node stepped at `now`: on `Ok`, the store granted it `claimed.granted`; its
    /// streams' shares are divided again when `divide_all` (a periodic step), else only those
    /// never assigned are (a step for a newcomer). On `Err` nothing is sent until the next
    /// good step.
    pub fn stepped(&mut self, claimed: Option<Claimed>, now: Nanos, divide_all: bool) {
        match divide_all {
            true => self.stepped_at = Some(now),
            false => self.asked_at = Some(now),
        }
        let Some(claimed) = claimed else { return };
        self.grant = claimed.granted.unwrap_or(0);
        self.fresh_until = now.saturating_add(STEP_EVERY);
        if divide_all {
            self.divide(now);
        } else {
            self.fit(now);
        }
    }

    /// Takes back what is yet to be sent beyond the node's grant (the store counts only what
    /// was sent).
    fn fit(&mut self, now: Nanos) {
        let capacity = self.grant;
        let mut over = self.held(now).saturating_sub(capacity);
        for m in self.members.values_mut() {
            if over == 0 {
                break;
            }
            let sent = m.sent_in_force(now);
            let back = m.assigned.saturating_sub(sent).min(over);
            m.assigned -= back;
            over -= back;
        }
    }

    /// Whether assignments may be sent at `now` (the last good step is recent).
    pub fn fresh(&self, now: Nanos) -> bool {
        now < self.fresh_until
    }

    /// Whether `stream` is a newcomer (never sent anything but a denial) short of its
    /// newcomer's share by more than the room left, and the node has not stepped for
    /// newcomers within [`ASK_EVERY`]: the node should step first, asking for room.
    pub fn wants_room(&self, stream: &str, now: Nanos) -> bool {
        if self
            .asked_at
            .is_some_and(|at| now.saturating_since(at) < ASK_EVERY)
        {
            return false;
        }
        match self.members.get(stream) {
            Some(m) if m.sent == 0 => {
                let short = self.newcomer_share(m).saturating_sub(m.assigned);
                short > self.room(now) || !self.fresh(now)
            }
            _ => false,
        }
    }

    /// A newcomer's share: its need (its demand when the needs overflowed the grant at the
    /// last division), at most an even split of the node's grant.
    fn newcomer_share(&self, member: &Member) -> u64 {
        let even = self.grant / self.members.len().max(1) as u64;
        let wanted = match self.crowded {
            false => member.need(),
            true => member.demand,
        };
        wanted.min(even).max(1)
    }

    fn room(&self, now: Nanos) -> u64 {
        self.grant.saturating_sub(self.held(now))
    }

    /// Tops a newcomer up to its newcomer's share, out of the room.
    fn admit(&mut self, stream: &str, now: Nanos) {
        // Only a newcomer is admitted (and only then is the room, a sum over the streams,
        // counted).
        if self.members.get(stream).is_none_or(|m| m.sent != 0) {
            return;
        }
        let room = self.room(now);
        let Some(member) = self.members.get(stream) else {
            return;
        };
        // Its share if the room holds it, else its demand (room for newcomers is kept for
        // demands: half of what the demands leave of the limit), else what is left.
        let share = self.newcomer_share(member);
        let more = match share.saturating_sub(member.assigned) {
            lack if lack <= room => lack,
            _ => member
                .demand
                .max(1)
                .saturating_sub(member.assigned)
                .min(room),
        };
        if let Some(member) = self.members.get_mut(stream) {
            member.assigned += more;
        }
    }

    /// `stream`'s assignment, marked sent at `now` for `ttl` (its Envoy holds it that long):
    /// `None` when nothing may be sent (no recent good step, or no such stream), or for a
    /// newcomer not yet served on a bucket whose needs fit (never a denial there). With
    /// `changed_only`, `None` too when it is what the stream holds already.
    pub fn send(
        &mut self,
        stream: &str,
        now: Nanos,
        ttl: std::time::Duration,
        changed_only: bool,
    ) -> Option<u64> {
        if !self.fresh(now) {
            return None;
        }
        self.admit(stream, now);
        let crowded = self.crowded || self.grant == 0;
        let member = self.members.get_mut(stream)?;
        if changed_only && member.sent == member.assigned && member.sent_until > now {
            return None;
        }
        // A newcomer the room could not serve yet, on a bucket whose needs fit: nothing rather
        // than a denial (its Envoy keeps its filter's no_assignment_behavior until the next
        // tick finds it room).
        if member.sent == 0 && member.assigned == 0 && member.sent_until <= now && !crowded {
            return None;
        }
        member.sent = member.assigned;
        member.sent_until = now.saturating_add(ttl);
        Some(member.assigned)
    }

    /// Divides the node's grant among its streams again (see the [module
    /// documentation](self)).
    fn divide(&mut self, now: Nanos) {
        let capacity = self.grant;
        let retiring = self.retiring_in_force(now);
        let mut members: Vec<&mut Member> = self.members.values_mut().collect();
        let groups: Vec<Group> = members
            .iter()
            .map(|m| Group::one(m.demand, m.margin))
            .collect();
        let needs: u64 = groups.iter().map(|g| g.need()).sum();
        self.crowded = needs > capacity;
        let targets: Vec<u64> = divide(capacity, &groups, false)
            .into_iter()
            .map(|s| s.floor() as u64)
            .collect();
        // Shrinks first, by less than 1/32 not at all while the total fits.
        let kept = |held: u64, target: u64| target * 32 >= held * 31;
        // Whether every stream's target still fits beside the shrinks not made.
        let planned: u64 = members
            .iter()
            .zip(&targets)
            .map(|(m, &t)| {
                let held = m.sent_in_force(now);
                if t <= held && kept(held, t) {
                    held
                } else {
                    t
                }
            })
            .sum();
        let tolerant = planned + retiring <= capacity;
        let mut growers = Vec::new();
        for (i, (m, &t)) in members.iter_mut().zip(&targets).enumerate() {
            let held = m.sent_in_force(now);
            m.assigned = if t > held {
                growers.push(i);
                held
            } else if tolerant && kept(held, t) {
                held
            } else {
                t
            };
        }
        // Then growth into the room, shared in proportion to what each grower lacks.
        let committed: u64 = members.iter().map(|m| m.held(now)).sum::<u64>() + retiring;
        let room = capacity.saturating_sub(committed);
        growers.retain(|&i| {
            let held = members[i].assigned;
            held == 0 || targets[i] * 32 > held * 33
        });
        let lack: u64 = growers
            .iter()
            .map(|&i| targets[i] - members[i].assigned)
            .sum();
        for i in growers {
            let want = targets[i] - members[i].assigned;
            let more = match lack <= room {
                true => want,
                false => (u128::from(want) * u128::from(room) / u128::from(lack)) as u64,
            };
            members[i].assigned += more;
        }
    }

    /// Whether the pool can be forgotten: no stream, nothing held.
    pub fn is_idle(&self, now: Nanos) -> bool {
        self.members.is_empty() && self.retiring_in_force(now) == 0
    }

    /// Whether no stream is on the bucket.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The node's grant, thousandths of a request per unit.
    pub fn grant(&self) -> u64 {
        self.grant
    }
}

#[cfg(test)]
mod tests;
