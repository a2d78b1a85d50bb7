//! The admin API's operations: who may call it, and the operator's switches (a stage's mode, a
//! user's plan), which reloads keep while the file leaves their settings alone
//! ([`super::switches`], [`super::reload`]).

use std::sync::{Arc, MutexGuard};

use floodgate::pipeline::Mode;

use super::switches::{PlanSwitch, Switches};
use super::{has_plan, plan_list, Server};
use crate::lease_token::constant_time_eq;

/// Why an admin call was refused (a failed reload is a
/// [`ConfigFileError`](crate::config::ConfigFileError)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// No admin token is configured: the admin API is off.
    #[error("the admin API is disabled")]
    Disabled,
    /// The bearer token is missing or wrong.
    #[error("unauthorized")]
    Unauthorized,
    /// The request names a stage the running configuration does not have.
    #[error("field `limiter`: `{limiter}` is not a configured limiter ({configured})")]
    UnknownLimiter {
        /// The limiter as sent.
        limiter: String,
        /// The configured stages' names, for the message.
        configured: String,
    },
    /// The request names a mode that does not exist.
    #[error("field `mode`: `{mode}` is not one of enforce, shadow, off")]
    UnknownMode {
        /// The mode as sent.
        mode: String,
    },
    /// The request names a plan the running config does not have.
    #[error("field `plan`: `{plan}` is not a configured plan ({configured})")]
    UnknownPlan {
        /// The plan as sent.
        plan: String,
        /// The configured plans, for the message.
        configured: String,
    },
    /// The request's `user` is empty.
    #[error("field `user`: must not be empty")]
    EmptyUser,
}

impl Server {
    /// Checks an admin call's bearer token (constant-time comparison).
    pub fn authorize(&self, bearer: Option<&str>) -> Result<(), AdminError> {
        let Some(expected) = &self.control.admin_token else {
            return Err(AdminError::Disabled);
        };
        match bearer {
            Some(given) if constant_time_eq(given.as_bytes(), expected.as_bytes()) => Ok(()),
            _ => Err(AdminError::Unauthorized),
        }
    }

    /// Switches the stage named `limiter` to `mode` now. The switch outlives reloads that
    /// leave the stage's configured mode alone ([`switches`](super::switches)); switching back to the
    /// configured mode clears it.
    pub fn set_mode(&self, limiter: &str, mode: &str) -> Result<(), AdminError> {
        let mode = Mode::from_name(mode).ok_or_else(|| AdminError::UnknownMode {
            mode: mode.to_string(),
        })?;
        let mut switches = self.switches();
        let served = self.decisions.served.load();
        let Some(&configured) = served.configured_modes.get(limiter) else {
            let names: Vec<&str> = served
                .pipeline
                .stages()
                .map(|s| s.name().as_str())
                .collect();
            return Err(AdminError::UnknownLimiter {
                limiter: limiter.to_string(),
                configured: if names.is_empty() {
                    "none is configured".to_string()
                } else {
                    format!("configured: {}", names.join(", "))
                },
            });
        };
        served.pipeline.set_mode(limiter, mode);
        switches.set_mode(limiter, mode, configured);
        tracing::info!(
            limiter,
            mode = mode.name(),
            configured = configured.name(),
            "mode switched"
        );
        Ok(())
    }

    /// Puts `user` on `plan`, before the configuration's `users:` and the plan a request
    /// names. The switch outlives reloads that leave the user's entry in `users:` alone and
    /// keep the plan ([`switches`](super::switches)).
    pub fn set_plan(&self, user: &str, plan: &str) -> Result<(), AdminError> {
        let mut switches = self.switches();
        let served = self.decisions.served.load();
        if !has_plan(&served, plan) {
            return Err(AdminError::UnknownPlan {
                plan: plan.to_string(),
                configured: plan_list(&served),
            });
        }
        if user.is_empty() {
            return Err(AdminError::EmptyUser);
        }
        let configured = served.users.get(user).map(String::as_str);
        switches.set_plan(user, plan, configured);
        self.decisions
            .plan_overrides
            .store(Arc::new(switches.plans_by_user()));
        // A user is a name, never a secret (API keys travel as secret attributes, digested
        // before any stage sees them), so the operator's line names it.
        tracing::info!(user, plan, configured, "plan switched for a user");
        Ok(())
    }

    /// The users put on a plan at run time ([`Server::set_plan`]), in name order: each user,
    /// the plan set, and the user's plan in `users:` when it was set (`None`: not listed).
    pub fn plan_overrides(&self) -> Vec<(String, PlanSwitch)> {
        self.switches()
            .plans
            .iter()
            .map(|(user, switch)| (user.clone(), switch.clone()))
            .collect()
    }

    /// Takes `user` off the plan set at run time, back to the configuration's plan for it;
    /// `Ok(false)` when no plan was set for it.
    pub fn clear_plan(&self, user: &str) -> Result<bool, AdminError> {
        if user.is_empty() {
            return Err(AdminError::EmptyUser);
        }
        let mut switches = self.switches();
        let cleared = switches.plans.remove(user);
        self.decisions
            .plan_overrides
            .store(Arc::new(switches.plans_by_user()));
        if let Some(switch) = &cleared {
            tracing::info!(user, plan = %switch.plan, "plan switch cleared for a user: the configuration's plan applies");
        }
        Ok(cleared.is_some())
    }

    pub(super) fn switches(&self) -> MutexGuard<'_, Switches> {
        // Switches are replaced whole; a poisoned lock is used as is.
        self.control
            .switches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}
