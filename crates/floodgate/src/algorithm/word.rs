//! The integers a slot's state word can be, and the atomics that hold them: `u64` in an
//! `AtomicU64` (GCRA, the leaky queue), `u128` in a 16-byte atomic (the fixed window's start
//! and count, a token bucket's tokens and instant).
//!
//! The 16-byte atomic is `portable_atomic::AtomicU128`: the standard library has none on stable
//! Rust. On x86-64, with the default target features, each operation is a call through a
//! pointer chosen once at run time from the CPU's features: the compare-and-swap is
//! `cmpxchg16b`, and the load is one `vmovdqa` on CPUs with AVX (which Intel and AMD document as
//! atomic when aligned), so that a refusal still writes nothing; on a CPU without AVX the load
//! is a `cmpxchg16b` too, which writes the line (the decision is the same, the scaling of
//! refusals is not), and without `cmpxchg16b` portable-atomic falls back to a lock. Other
//! targets use what portable-atomic has for them (on aarch64 without LSE2, a load also writes).
//! Loads are never torn on any of them.

use std::fmt::Debug;

use crate::sync::{AtomicU64, Ordering};

/// An integer that a [`WordStore`](crate::store::WordStore) slot holds a state in: `u64` or `u128`. Sealed: the
/// store relies on how the two are made atomic.
pub trait Word: Copy + Eq + Debug + Send + Sync + 'static + sealed::Atom {}

impl Word for u64 {}
impl Word for u128 {}

pub(crate) use sealed::Atom;

mod sealed {
    use super::*;

    /// How a [`super::Word`] is held and changed atomically.
    pub trait Atom: Sized {
        /// The atomic that holds it.
        type Atomic: Send + Sync;
        /// The word of a key being deleted or moved: all ones.
        const FROZEN: Self;
        /// A new atomic holding `word`.
        fn atomic(word: Self) -> Self::Atomic;
        /// Loads the word.
        fn load(atomic: &Self::Atomic, order: Ordering) -> Self;
        /// Stores `word`.
        fn store(atomic: &Self::Atomic, word: Self, order: Ordering);
        /// Stores `word` and returns the word it replaced.
        fn swap(atomic: &Self::Atomic, word: Self, order: Ordering) -> Self;
        /// Stores `new` if the word is `current`; the word found otherwise. May fail spuriously.
        fn compare_exchange_weak(
            atomic: &Self::Atomic,
            current: Self,
            new: Self,
            success: Ordering,
            failure: Ordering,
        ) -> Result<Self, Self>;
        /// Stores `new` if the word is `current`; the word found otherwise.
        fn compare_exchange(
            atomic: &Self::Atomic,
            current: Self,
            new: Self,
            success: Ordering,
            failure: Ordering,
        ) -> Result<Self, Self>;
    }

    /// Both words' atomics have the same methods under the same names: one body serves both.
    macro_rules! atom {
        ($word:ty, $atomic:ty) => {
            impl Atom for $word {
                type Atomic = $atomic;
                const FROZEN: $word = <$word>::MAX;

                fn atomic(word: $word) -> $atomic {
                    <$atomic>::new(word)
                }

                #[inline(always)]
                fn load(atomic: &$atomic, order: Ordering) -> $word {
                    atomic.load(order)
                }

                #[inline(always)]
                fn store(atomic: &$atomic, word: $word, order: Ordering) {
                    atomic.store(word, order)
                }

                #[inline(always)]
                fn swap(atomic: &$atomic, word: $word, order: Ordering) -> $word {
                    atomic.swap(word, order)
                }

                #[inline(always)]
                fn compare_exchange_weak(
                    atomic: &$atomic,
                    current: $word,
                    new: $word,
                    success: Ordering,
                    failure: Ordering,
                ) -> Result<$word, $word> {
                    atomic.compare_exchange_weak(current, new, success, failure)
                }

                #[inline(always)]
                fn compare_exchange(
                    atomic: &$atomic,
                    current: $word,
                    new: $word,
                    success: Ordering,
                    failure: Ordering,
                ) -> Result<$word, $word> {
                    atomic.compare_exchange(current, new, success, failure)
                }
            }
        };
    }

    // Under loom the `u64` atomic is loom's, so the model checker sees the table's protocol;
    // the `u128` one is always portable-atomic's (the loom models use `u64` words).
    atom!(u64, AtomicU64);
    atom!(u128, portable_atomic::AtomicU128);
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_u128_word_keeps_both_halves() {
        let word: u128 = (7 << 64) | 9;
        let atomic = u128::atomic(word);
        assert_eq!(u128::load(&atomic, Ordering::Acquire), word);
        let new = (7 << 64) | 10;
        assert_eq!(
            u128::compare_exchange(
                &atomic,
                (8 << 64) | 9,
                new,
                Ordering::AcqRel,
                Ordering::Acquire
            ),
            Err(word),
            "a word equal in its low half only is not the word"
        );
        assert_eq!(
            u128::compare_exchange(&atomic, word, new, Ordering::AcqRel, Ordering::Acquire),
            Ok(word)
        );
        assert_eq!(u128::swap(&atomic, u128::FROZEN, Ordering::AcqRel), new);
        assert_eq!(u128::load(&atomic, Ordering::Acquire), u128::MAX);
    }
}

/// An algorithm state that fits in one word (8 or 16 bytes), so that the [`WordStore`](crate::store::WordStore) can
/// update it with one compare-and-swap.
///
/// `from_word(to_word(s)) == s` must hold, and `to_word` must never return all ones
/// (`u64::MAX`, `u128::MAX`), which the store reserves for a key being deleted or moved (the
/// store panics if it does, before writing anything). A state whose natural word is all ones,
/// reachable only by saturation, is kept as its nearest neighbour, and its impl says so.
///
/// Implemented by [`GcraState`](super::gcra::GcraState) and [`LeakyQueueState`](crate::algorithm::leaky_queue::LeakyQueueState)
/// (`u64`), and by [`FixedWindowState`](crate::algorithm::fixed_window::FixedWindowState),
/// [`TokenBucketState`](crate::algorithm::token_bucket::TokenBucketState) and
/// [`LeakyBucketState`](crate::algorithm::leaky_bucket::LeakyBucketState) (`u128`).
pub trait WordState: Copy + PartialEq {
    /// The word the state is kept in: `u64`, or `u128` for states of two halves.
    type Word: Word;
    /// The state as a word other than all ones.
    fn to_word(self) -> Self::Word;
    /// The state a word of [`WordState::to_word`] came from.
    fn from_word(word: Self::Word) -> Self;
}
