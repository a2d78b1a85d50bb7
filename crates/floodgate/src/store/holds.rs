//! Which namespaces the live limiters of one store count in, so that two limiters never share
//! one by accident.
//!
//! Two limiters that count in the same [`Namespace`] of one store count in the same keys: a
//! request to one spends the other's quota. Built apart, say as two tower layers on two routes
//! with their own pipelines, both would take their kind's default namespace (`request_rate`)
//! and one route's traffic would refuse the other's. So a limiter built without a namespace of
//! its own takes its default namespace *for itself*, and building a second limiter on the same
//! store in that namespace, while the first one lives, is refused with a [`ConfigError`] that
//! names the namespace and says how to share it or keep the two apart. A namespace given
//! explicitly (`.namespace("…")`) is a deliberate choice and may be shared by any number of
//! limiters (a service rebuilding its limiters on a reload does exactly that).
//!
//! The record belongs to one store value and its clones: two stores pointed at the same Redis
//! keep separate records, and limiters on other nodes are not seen. A store that keeps no
//! record ([`Store::namespaces`](super::Store::namespaces) answers `None`, the default for
//! stores written outside this crate) checks nothing.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::Namespace;
use crate::ConfigError;

/// How a namespace is held by the limiters that live on a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// By the one limiter that took it as its default.
    Alone,
    /// By this many limiters that each named it.
    Shared(usize),
}

/// The namespaces held on one store by its live limiters. Cheap to clone: clones share one
/// record, as a store's clones share its keys.
#[derive(Clone, Default)]
pub struct Namespaces {
    held: Arc<Mutex<HashMap<Namespace, Held>>>,
}

impl fmt::Debug for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<&str> = held.keys().map(Namespace::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Namespaces").field("held", &names).finish()
    }
}

impl Namespaces {
    /// An empty record.
    pub fn new() -> Namespaces {
        Namespaces::default()
    }

    /// Takes `namespace` for one limiter until the returned hold is dropped. `named` says the
    /// namespace was given explicitly: it may then be shared with other limiters that named it
    /// too. A default namespace (`named == false`) is taken alone: refused if any live limiter
    /// holds it, and while held, refused to any other limiter.
    pub fn hold(&self, namespace: &Namespace, named: bool) -> Result<NamespaceHold, ConfigError> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let now = match (held.get(namespace).copied(), named) {
            (None, false) => Held::Alone,
            (None, true) => Held::Shared(1),
            (Some(Held::Shared(n)), true) => Held::Shared(n + 1),
            (Some(Held::Alone), _) => {
                return Err(ConfigError::invalid(
                    "namespace",
                    format!("{:?}", namespace.as_str()),
                    "is already the namespace of another limiter on this store, which took it as \
                     its default: limiters in one namespace count in the same keys; give this \
                     limiter a namespace of its own with .namespace(\"…\"), or name the same \
                     namespace on both to share their counts on purpose",
                ));
            }
            (Some(Held::Shared(_)), false) => {
                return Err(ConfigError::invalid(
                    "namespace",
                    format!("{:?}", namespace.as_str()),
                    "is the default namespace of this limiter, and other limiters on this store \
                     already count in it: give this limiter a namespace of its own with \
                     .namespace(\"…\"), or name this one to share their counts on purpose",
                ));
            }
        };
        held.insert(namespace.clone(), now);
        Ok(NamespaceHold {
            namespaces: self.clone(),
            namespace: namespace.clone(),
        })
    }

    /// Whether a live limiter holds `namespace`.
    pub fn is_held(&self, namespace: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.keys().any(|n| n.as_str() == namespace)
    }
}

/// A limiter's hold on its namespace in a store's [`Namespaces`]; let go when dropped.
pub struct NamespaceHold {
    namespaces: Namespaces,
    namespace: Namespace,
}

impl fmt::Debug for NamespaceHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NamespaceHold")
            .field(&self.namespace)
            .finish()
    }
}

impl Drop for NamespaceHold {
    fn drop(&mut self) {
        let mut held = self
            .namespaces
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match held.get(&self.namespace).copied() {
            Some(Held::Shared(n)) if n > 1 => {
                held.insert(self.namespace.clone(), Held::Shared(n - 1));
            }
            _ => {
                held.remove(&self.namespace);
            }
        }
    }
}

/// Takes `namespace` on `store`'s record, if it keeps one (see the [module
/// documentation](self)).
pub(crate) fn hold_on<K: ?Sized, A: crate::algorithm::Algorithm>(
    store: &impl super::Store<K, A>,
    namespace: &Namespace,
    named: bool,
) -> Result<Option<NamespaceHold>, ConfigError> {
    store
        .namespaces()
        .map(|record| record.hold(namespace, named))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str) -> Namespace {
        Namespace::new(name).unwrap()
    }

    #[test]
    fn a_default_namespace_is_held_alone_until_let_go() {
        let record = Namespaces::new();
        let first = record.hold(&ns("request_rate"), false).unwrap();
        for named in [false, true] {
            let e = record.hold(&ns("request_rate"), named).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("`namespace`") && text.contains("request_rate"),
                "{text}"
            );
            assert!(text.contains(".namespace("), "{text}");
        }
        // Another namespace is free.
        let _other = record.hold(&ns("concurrency"), false).unwrap();
        drop(first);
        assert!(!record.is_held("request_rate"));
        let _again = record.hold(&ns("request_rate"), false).unwrap();
    }

    #[test]
    fn a_named_namespace_is_shared_by_those_who_name_it() {
        let record = Namespaces::new();
        let a = record.hold(&ns("api"), true).unwrap();
        let b = record.clone().hold(&ns("api"), true).unwrap();
        assert!(record.hold(&ns("api"), false).is_err());
        drop(a);
        assert!(record.is_held("api"));
        drop(b);
        assert!(!record.is_held("api"));
        let _default = record.hold(&ns("api"), false).unwrap();
    }
}
