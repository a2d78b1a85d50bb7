//! The in-flight limits' Lua twin (`leases.lua`), one script for both: a concurrency limit is
//! a fleet limit that sheds nothing and keeps nothing for critical traffic.

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{CachedTwin, Lua, LuaTwin, MAX_EXACT, PAST_2_50};
use crate::Op;

use super::{Concurrency, Fleet};

/// `leases.lua`, for both limits.
const LEASES: &Lua = &Lua {
    function: "leases",
    source: include_str!("leases.lua"),
    helpers: &[],
};

/// The parameters `leases.lua` takes.
struct LeaseRule {
    tag: &'static str,
    capacity: u64,
    allowance: u64,
    shed: bool,
    ttl_ns: u64,
}

impl LeaseRule {
    /// `tag, capacity, allowance, shed, ttl_us, ttl_sub, kind, lease, critical, cost` for `op`
    /// (an op the algorithm supports); refused beyond the exact limits.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        if self.ttl_ns > MAX_EXACT || self.capacity > MAX_EXACT {
            return Err(PAST_2_50);
        }
        let (kind, lease, critical, cost) = match op {
            Op::Acquire { lease, critical } => ("a", lease.to_string(), critical, 0),
            Op::Release { lease } => ("r", lease.to_string(), false, 0),
            other => (
                "c",
                String::new(),
                false,
                other.cost().min(self.allowance + 1),
            ),
        };
        Ok(vec![
            self.tag.to_owned(),
            self.capacity.to_string(),
            self.allowance.to_string(),
            u8::from(self.shed).to_string(),
            (self.ttl_ns / 1000).to_string(),
            (self.ttl_ns % 1000).to_string(),
            kind.to_owned(),
            lease,
            u8::from(critical).to_string(),
            cost.to_string(),
        ])
    }

    /// A lease's expiry, in microseconds ahead of now, rounded up.
    fn horizon_us(&self) -> u64 {
        self.ttl_ns / 1000 + 2
    }
}

impl Concurrency {
    /// The rule `leases.lua` keeps for this limit: all of its capacity for any lease.
    fn lease_rule(&self) -> LeaseRule {
        LeaseRule {
            tag: "C",
            capacity: self.capacity(),
            allowance: self.capacity(),
            shed: false,
            ttl_ns: nanos(self.lease_ttl()),
        }
    }
}

impl Fleet {
    /// The rule `leases.lua` keeps for this limit: the allowance below the critical reserve
    /// for non-critical leases, shedding them past it.
    fn lease_rule(&self) -> LeaseRule {
        LeaseRule {
            tag: "L",
            capacity: self.capacity(),
            allowance: self.non_critical_allowance(),
            shed: true,
            ttl_ns: nanos(self.lease_ttl()),
        }
    }
}

impl LuaTwin for Concurrency {
    const LUA: &'static Lua = LEASES;
    const TAGS: &'static [&'static str] = &["C"];

    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        self.lease_rule().arguments(op)
    }

    /// A lease's expiry.
    fn horizon_us(&self) -> u64 {
        self.lease_rule().horizon_us()
    }
}

impl LuaTwin for Fleet {
    const LUA: &'static Lua = LEASES;
    const TAGS: &'static [&'static str] = &["L"];

    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        self.lease_rule().arguments(op)
    }

    /// A lease's expiry.
    fn horizon_us(&self) -> u64 {
        self.lease_rule().horizon_us()
    }
}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for Concurrency {}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for Fleet {}
