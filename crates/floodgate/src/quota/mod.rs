//! One limit shared by clients that each enforce their part of it alone, such as the Envoys of
//! a fleet under the Rate Limit Quota Service: each reports what it wanted, and gets back a
//! share it enforces until told otherwise.
//!
//! - [`share`]: how a limit is divided among groups of clients (margins for random arrivals
//!   first, max-min fair past the limit, half the headroom kept for newcomers at the store);
//! - [`profile`]: a node's clients summed up in a few groups, what it claims with;
//! - [`claims`]: the nodes that claim a limit now, each with its groups, what its clients
//!   hold and what it has been granted; grants move towards the targets without the grants in
//!   force ever summing to more than the limit.
//!
//! All are pure: the caller passes the time, and a store keeps the [`claims::Claims`] of each
//! shared limit (in memory, or beside its twin in Redis so that several nodes agree).

pub mod claims;
pub mod profile;
pub mod share;
mod table;

pub use claims::{Claim, ClaimStep, ClaimTerms, Claimed, Claims};
pub use profile::Profile;
pub use share::{divide, Group};
pub use table::ClaimsTable;
