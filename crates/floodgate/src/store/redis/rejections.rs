//! Redis's error answers read as [`Rejection`]s: each code (`READONLY`, `OOM`, …) its kind,
//! and what it means for an operator in Redis's own terms.

use crate::store::Rejection;

/// Each rejection and the Redis error code that stands for it (`ERR` for the others).
const CODES: [(Rejection, &str); 12] = [
    (Rejection::ReadOnly, "READONLY"),
    (Rejection::OutOfMemory, "OOM"),
    (Rejection::WritesStopped, "MISCONF"),
    (Rejection::NoPermission, "NOPERM"),
    (Rejection::Busy, "BUSY"),
    (Rejection::CrossSlot, "CROSSSLOT"),
    (Rejection::NoScript, "NOSCRIPT"),
    (Rejection::Loading, "LOADING"),
    (Rejection::MasterDown, "MASTERDOWN"),
    (Rejection::ClusterDown, "CLUSTERDOWN"),
    (Rejection::TryAgain, "TRYAGAIN"),
    (Rejection::Other, "ERR"),
];

/// The rejection an error answer's code stands for, and the code as Redis names it; a code
/// not listed is [`Rejection::Other`], named `ERR`.
pub(super) fn of_code(code: &str) -> (Rejection, &'static str) {
    CODES
        .into_iter()
        .find(|(_, c)| *c == code)
        .unwrap_or((Rejection::Other, "ERR"))
}

/// What `rejection` means on Redis and what to do about it, in a few words.
pub(super) fn hint(rejection: Rejection) -> &'static str {
    match rejection {
        Rejection::ReadOnly => "the server is a read-only replica: point the URL at the master (after a failover, the new one)",
        Rejection::OutOfMemory => "the server is at maxmemory and evicts nothing: raise maxmemory or choose a maxmemory-policy that evicts",
        Rejection::WritesStopped => "the server stopped writes after a failed save: fix its disk or persistence settings",
        Rejection::NoPermission => "the user may not run a command or touch a key Floodgate needs (EVALSHA, EVAL, GET, SET, …): grant them in its ACL",
        Rejection::Busy => "a script has run past the server's time limit and blocks every call until it ends (SCRIPT KILL)",
        Rejection::CrossSlot => "one call touched keys of several cluster slots",
        Rejection::NoScript => "the server keeps no script even when sent its source (is EVAL allowed?)",
        Rejection::Loading => "the server is loading its data set after a restart",
        Rejection::MasterDown => "the server is a replica that lost its master",
        Rejection::ClusterDown => "the cluster is down: a slot has no master",
        Rejection::TryAgain => "a cluster slot is being moved",
        _ => "the server answered an error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejection_has_one_code() {
        for rejection in Rejection::ALL {
            let codes: Vec<_> = CODES.iter().filter(|(r, _)| *r == rejection).collect();
            assert_eq!(codes.len(), 1, "{rejection:?}");
            assert_eq!(of_code(codes[0].1).0, rejection);
        }
        assert_eq!(of_code("NEVERHEARDOF"), (Rejection::Other, "ERR"));
    }
}
