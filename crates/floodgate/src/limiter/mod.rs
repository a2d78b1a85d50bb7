//! Stripe's four limiters, composed from algorithms and stores.

pub mod utilization;

pub use utilization::Priority;
