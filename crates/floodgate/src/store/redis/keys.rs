//! From a store key to the Redis key that holds its state: hash-tagged, so that what belongs to
//! one user (every namespace's `ns:user`) shares one Redis Cluster slot.

use std::collections::HashMap;
use std::hash::Hash;
use std::io::Write;

use redis::cluster_routing::Slot;
use redis::{RedisWrite, ToRedisArgs, ToSingleRedisArg};

/// The Redis key holding `key`'s state: `ns:{rest}` for `ns:rest` (split at the first `:`), and
/// `{key}` for a key without `:`. See the [module documentation](super#keys-and-state).
///
/// For looking at (or deleting) a key's state by hand; the store itself writes the same bytes
/// without building this string.
pub fn redis_key(key: &str) -> String {
    let tagged = Tagged(key);
    let mut out = String::with_capacity(tagged.len());
    let (namespace, rest) = tagged.parts();
    out.push_str(namespace);
    out.push('{');
    out.push_str(rest);
    out.push('}');
    out
}

/// A store key, written to Redis in its tagged form without an intermediate string.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tagged<'a>(pub(super) &'a str);

impl<'a> Tagged<'a> {
    /// The part before the tag (`ns:`, or empty) and the tagged part.
    fn parts(self) -> (&'a str, &'a str) {
        match self.0.find(':') {
            Some(colon) => self.0.split_at(colon + 1),
            None => ("", self.0),
        }
    }

    /// The length of the Redis key in bytes.
    fn len(self) -> usize {
        self.0.len() + 2
    }

    /// The Redis Cluster slot of the Redis key (computed on the stack for keys up to 128 bytes).
    pub(super) fn slot(self) -> Slot {
        let mut buffer = [0u8; 128];
        if self.len() <= buffer.len() {
            let mut cursor = &mut buffer[..];
            self.write_to(&mut cursor);
            Slot::for_key(&buffer[..self.len()])
        } else {
            Slot::for_key(redis_key(self.0))
        }
    }

    fn write_to(self, out: &mut impl Write) {
        let (namespace, rest) = self.parts();
        // Writing to a command buffer or a slice of the right length cannot fail.
        let _ = out
            .write_all(namespace.as_bytes())
            .and_then(|()| out.write_all(b"{"))
            .and_then(|()| out.write_all(rest.as_bytes()))
            .and_then(|()| out.write_all(b"}"));
    }
}

impl ToRedisArgs for Tagged<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        self.write_to(&mut out.writer_for_next_arg());
    }
}

impl ToSingleRedisArg for Tagged<'_> {}

/// A Redis key of the same slot as the store key `key` that never holds anything
/// (`floodgate!probe:{TAG}`, `TAG` the hash tag `key` is written with: no namespace holds
/// `!`), which the cluster batch script asks about to learn whether the slot is served where
/// the script runs and is not being moved (see `batch.lua`). Made from the key at once; only
/// a key whose tag is empty (a store key ending in its namespace's `:`, which Redis hashes
/// whole) takes a probe from [`probe_of_slot`]'s table.
pub(super) fn probe_key(key: &str) -> std::borrow::Cow<'static, str> {
    let (_, rest) = Tagged(key).parts();
    // Redis hashes what lies between the first `{` (the one the store writes) and the next `}`.
    let tag = rest.split('}').next().unwrap_or_default();
    if tag.is_empty() {
        return std::borrow::Cow::Borrowed(probe_of_slot(Tagged(key).slot()));
    }
    std::borrow::Cow::Owned(format!("floodgate!probe:{{{tag}}}"))
}

/// A Redis key of `slot` that never holds anything (`floodgate!slot:{N}`), found once for
/// every slot by counting `N` up until each slot has one: some 160,000 keys hashed, so only
/// for the rare key [`probe_key`] cannot make a probe from.
fn probe_of_slot(slot: Slot) -> &'static str {
    static PROBES: std::sync::OnceLock<HashMap<Slot, String>> = std::sync::OnceLock::new();
    let probes = PROBES.get_or_init(|| {
        let mut probes = HashMap::with_capacity(16384);
        let mut n: u32 = 0;
        while probes.len() < 16384 {
            let key = format!("floodgate!slot:{{{n}}}");
            probes.entry(Slot::for_key(&key)).or_insert(key);
            n += 1;
        }
        probes
    });
    probes
        .get(&slot)
        .map(String::as_str)
        .expect("every slot has a probe")
}

/// The indices `0..` of `slots`, grouped by slot in order of first appearance, each group cut
/// into runs of at most `max` (at least 1): what one script call or pipeline may carry on a
/// cluster, where everything one call touches must live in one slot. Linear in the number of
/// items, however many slots they spread over.
pub(super) fn group_by_slot<S: Copy + Eq + Hash>(
    slots: impl IntoIterator<Item = S>,
    max: usize,
) -> Vec<(S, Vec<usize>)> {
    let max = max.max(1);
    let mut groups: Vec<(S, Vec<usize>)> = Vec::new();
    // The group of each slot still taking items.
    let mut open: HashMap<S, usize> = HashMap::new();
    for (i, slot) in slots.into_iter().enumerate() {
        match open.get(&slot) {
            Some(&g) if groups[g].1.len() < max => groups[g].1.push(i),
            _ => {
                open.insert(slot, groups.len());
                groups.push((slot, vec![i]));
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_tagged_by_what_follows_the_namespace() {
        assert_eq!(redis_key("api:alice"), "api:{alice}");
        assert_eq!(redis_key("api:a:b"), "api:{a:b}");
        assert_eq!(redis_key("alice"), "{alice}");
        assert_eq!(redis_key("api:"), "api:{}");
        assert_eq!(redis_key(""), "{}");
        for key in ["api:alice", "alice", "api:", "x:{y}"] {
            let cmd = redis::cmd("GET").arg(Tagged(key)).clone();
            assert_eq!(
                cmd.args_iter().nth(1),
                Some(redis::Arg::Simple(redis_key(key).as_bytes()))
            );
        }
    }

    #[test]
    fn every_key_has_a_probe_of_its_slot() {
        for key in [
            "api:alice",
            "rls:3:rl",
            "x",
            "ns:a}b",
            "ns:{a}",
            "ns:}x",
            "api:",
        ] {
            let slot = Tagged(key).slot();
            let probe = probe_key(key);
            assert_eq!(Slot::for_key(&*probe), slot, "{key}: {probe}");
            assert!(probe.starts_with("floodgate!"), "{probe}");
            assert!(!probe.starts_with(&*redis_key(key)), "{probe}");
        }
        // Made from the key's tag, with no table, but for an empty tag.
        assert_eq!(probe_key("api:alice"), "floodgate!probe:{alice}");
        assert!(probe_key("api:").starts_with("floodgate!slot:{"));
    }

    #[test]
    fn one_users_keys_share_a_slot() {
        assert_eq!(Tagged("api:alice").slot(), Tagged("login:alice").slot());
        assert_eq!(Tagged("api:alice").slot(), Slot::for_key("alice"));
        assert_eq!(Tagged("alice").slot(), Slot::for_key("alice"));
        // Longer than the stack buffer: the same slot, computed from the string.
        let long = format!("api:{}", "u".repeat(300));
        assert_eq!(Tagged(&long).slot(), Slot::for_key("u".repeat(300)));
        // An empty tag: Redis hashes the whole key.
        assert_eq!(Tagged("api:").slot(), Slot::for_key("api:{}"));
    }

    #[test]
    fn groups_by_slot_in_order_of_first_appearance_and_cuts_them() {
        let groups = group_by_slot([3, 1, 3, 3, 2, 1, 3], 2);
        assert_eq!(
            groups,
            vec![
                (3, vec![0, 2]),
                (1, vec![1, 5]),
                (3, vec![3, 6]),
                (2, vec![4]),
            ]
        );
        assert_eq!(
            group_by_slot([7, 7, 7], 0),
            vec![(7, vec![0]), (7, vec![1]), (7, vec![2])]
        );
        assert_eq!(group_by_slot(Vec::<u16>::new(), 4), vec![]);
        // Many distinct slots: one group each, in order.
        let groups = group_by_slot(0..10_000u32, 256);
        assert_eq!(groups.len(), 10_000);
        assert!(groups
            .iter()
            .enumerate()
            .all(|(i, (s, g))| *s == i as u32 && *g == vec![i]));
    }
}
