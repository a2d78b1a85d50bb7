//! One limit shared by clients that each enforce their part of it alone, such as the Envoys of
//! a fleet under the Rate Limit Quota Service: each reports what it wanted, and gets back a
//! share it enforces until told otherwise.
//!
//! - [`share`]: how a limit is divided among the demands (max-min fair, every request of the
//!   limit handed out);
//! - [`claims`]: who claims a limit now, with the demand of its last report and what it has
//!   been granted; grants move towards the fair shares without the grants in force ever
//!   summing to more than the limit, and a claimant that leaves, or stops reporting, gives its
//!   share back once its last grant can no longer be in force.
//!
//! Both are pure: the caller passes the time, and a store keeps the [`claims::Claims`] of each
//! shared limit (in memory, or beside its twin in Redis so that several nodes agree).

pub mod claims;
pub mod share;

pub use claims::{Claim, ClaimStep, ClaimTerms, Claimed, Claims};
pub use share::divide;
