//! The operator's switches: what `POST /admin/mode` and `POST /admin/plan` change at run time,
//! and how they outlive a reload.
//!
//! A switch remembers what the configuration said when it was made: the stage's configured
//! mode, or the user's plan in `users:` (or none). On reload, a switch stays when the new
//! configuration still says the same thing there, so that a reload of unrelated changes never
//! undoes an operator's kill switch. When the reload changes that very setting, the file wins:
//! the switch is dropped and the log says which one and why; it is dropped too when its stage or
//! plan is gone. Switching a stage back to its configured mode clears the switch.

use std::collections::{BTreeMap, HashMap};

use floodgate::pipeline::Mode;

/// A stage's mode set at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeSwitch {
    /// The mode set.
    pub mode: Mode,
    /// The stage's mode in the configuration when it was set.
    pub configured: Mode,
}

/// A user's plan set at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanSwitch {
    /// The plan set.
    pub plan: String,
    /// The user's plan in the configuration's `users:` when it was set (`None`: not listed).
    pub configured: Option<String>,
}

/// Every switch in force.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    /// By stage name.
    pub modes: BTreeMap<String, ModeSwitch>,
    /// By user.
    pub plans: BTreeMap<String, PlanSwitch>,
}

/// Why a reload dropped a switch, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// `mode of stage X` or `plan of user Y`.
    pub what: String,
    /// Why it was dropped.
    pub why: String,
}

/// What the configuration being loaded says where switches may apply.
pub struct Configured<'a> {
    /// Each stage's configured mode, by name.
    pub modes: &'a BTreeMap<String, Mode>,
    /// `users:`.
    pub users: &'a BTreeMap<String, String>,
    /// Whether a plan of this name exists.
    pub has_plan: &'a dyn Fn(&str) -> bool,
}

impl std::fmt::Debug for Configured<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Configured")
            .field("modes", &self.modes)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

impl Switches {
    /// Records `mode` for `stage`, whose configured mode is `configured`; setting it back to
    /// the configured mode clears the switch.
    pub fn set_mode(&mut self, stage: &str, mode: Mode, configured: Mode) {
        if mode == configured {
            self.modes.remove(stage);
        } else {
            self.modes
                .insert(stage.to_string(), ModeSwitch { mode, configured });
        }
    }

    /// Records `plan` for `user`, whose plan in `users:` is `configured`.
    pub fn set_plan(&mut self, user: &str, plan: &str, configured: Option<&str>) {
        self.plans.insert(
            user.to_string(),
            PlanSwitch {
                plan: plan.to_string(),
                configured: configured.map(str::to_string),
            },
        );
    }

    /// The switches that outlive a reload to `new`, and the ones it drops, with why (see the
    /// [module documentation](self)).
    pub fn after_reload(&self, new: &Configured<'_>) -> (Switches, Vec<Dropped>) {
        let mut kept = Switches::default();
        let mut dropped = Vec::new();
        for (stage, switch) in &self.modes {
            let what = format!("mode {} of stage {stage}", switch.mode.name());
            match new.modes.get(stage) {
                None => dropped.push(Dropped {
                    what,
                    why: "the stage is no longer configured".into(),
                }),
                Some(&now) if now != switch.configured => dropped.push(Dropped {
                    what,
                    why: format!(
                        "the configuration changed the stage's mode from {} to {}",
                        switch.configured.name(),
                        now.name()
                    ),
                }),
                Some(_) => {
                    kept.modes.insert(stage.clone(), *switch);
                }
            }
        }
        for (user, switch) in &self.plans {
            let what = format!("plan {} of user {user}", switch.plan);
            let now = new.users.get(user);
            if now != switch.configured.as_ref() {
                let shown = |p: Option<&String>| p.map_or("none".to_string(), |p| p.clone());
                dropped.push(Dropped {
                    what,
                    why: format!(
                        "the configuration changed the user's plan in users: from {} to {}",
                        shown(switch.configured.as_ref()),
                        shown(now)
                    ),
                });
            } else if !(new.has_plan)(&switch.plan) {
                dropped.push(Dropped {
                    what,
                    why: "the plan is no longer configured".into(),
                });
            } else {
                kept.plans.insert(user.clone(), switch.clone());
            }
        }
        (kept, dropped)
    }

    /// The plans set, by user: what a decision looks up.
    pub fn plans_by_user(&self) -> HashMap<String, String> {
        self.plans
            .iter()
            .map(|(user, s)| (user.clone(), s.plan.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured<'a>(
        modes: &'a BTreeMap<String, Mode>,
        users: &'a BTreeMap<String, String>,
        has_plan: &'a dyn Fn(&str) -> bool,
    ) -> Configured<'a> {
        Configured {
            modes,
            users,
            has_plan,
        }
    }

    #[test]
    fn a_switch_outlives_a_reload_that_leaves_its_setting_alone() {
        let mut switches = Switches::default();
        switches.set_mode("request_rate", Mode::Off, Mode::Enforce);
        switches.set_mode("fleet", Mode::Shadow, Mode::Enforce);
        switches.set_plan("alice", "pro", None);
        switches.set_plan("bob", "pro", Some("free"));
        let modes = BTreeMap::from([
            ("request_rate".to_string(), Mode::Enforce),
            ("fleet".to_string(), Mode::Off),
        ]);
        let users = BTreeMap::from([("bob".to_string(), "standard".to_string())]);
        let plans = |p: &str| p == "pro" || p == "standard";
        let (kept, dropped) = switches.after_reload(&configured(&modes, &users, &plans));
        assert_eq!(
            kept.modes.keys().collect::<Vec<_>>(),
            ["request_rate"],
            "{dropped:?}"
        );
        assert_eq!(kept.plans.keys().collect::<Vec<_>>(), ["alice"]);
        assert_eq!(dropped.len(), 2);
        assert!(dropped[0].what.contains("stage fleet"));
        assert!(
            dropped[0].why.contains("from enforce to off"),
            "{dropped:?}"
        );
        assert!(dropped[1].what.contains("user bob"));
        assert!(
            dropped[1].why.contains("from free to standard"),
            "{dropped:?}"
        );
    }

    #[test]
    fn a_switch_is_dropped_with_its_stage_or_plan_and_cleared_by_switching_back() {
        let mut switches = Switches::default();
        switches.set_mode("concurrency", Mode::Off, Mode::Enforce);
        switches.set_plan("alice", "gold", None);
        let (modes, users) = (BTreeMap::new(), BTreeMap::new());
        let plans = |p: &str| p == "free";
        let (kept, dropped) = switches.after_reload(&configured(&modes, &users, &plans));
        assert_eq!(kept, Switches::default());
        assert!(dropped[0].why.contains("no longer configured"));
        assert!(dropped[1].why.contains("plan is no longer configured"));
        switches.set_mode("concurrency", Mode::Enforce, Mode::Enforce);
        assert!(switches.modes.is_empty());
    }
}
