//! Time sources. Every algorithm and store takes "now" from a [`Clock`], never from the OS, so
//! that tests are deterministic ([`ManualClock`]) and production can pick a cheap source.
//!
//! Two production clocks, both anchored to the Unix epoch and never going backwards:
//! - [`SystemClock`] reads the OS monotonic clock on every call: exact to the nanosecond, about
//!   25 ns a read on this project's benchmark machine;
//! - [`CoarseClock`] is a cached instant that a background thread refreshes every `resolution`
//!   (1 ms by default): a read is one atomic load (about 1 ns), and instants are up to one
//!   resolution late. The in-memory store uses it by default; see BENCHMARKS.md for the numbers
//!   behind that choice.
//!
//! Instants are [`Nanos`]: whole nanoseconds since the clock's epoch. The system clocks' epoch is
//! the Unix epoch, so windows "aligned to the epoch" (fixed windows) line up with wall-clock
//! seconds, minutes and hours; it never goes backwards, because it advances with the monotonic
//! clock from a wall-clock anchor taken once. Algorithms still treat a clock going backwards as
//! "no time passed", so any `Clock` is safe to plug in.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An instant: whole nanoseconds since the epoch of the [`Clock`] that produced it.
///
/// `u64` nanoseconds cover 584 years, so Unix-epoch instants are good until the year 2554.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The epoch itself.
    pub const ZERO: Nanos = Nanos(0);

    /// An instant `secs` whole seconds after the epoch.
    pub const fn from_secs(secs: u64) -> Nanos {
        Nanos(secs.saturating_mul(1_000_000_000))
    }

    /// An instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Nanos {
        Nanos(millis.saturating_mul(1_000_000))
    }

    /// The instant `secs` (a non-negative, finite number of seconds) after the epoch, rounded to
    /// the nearest nanosecond; negative or non-finite input gives the epoch, huge input saturates.
    pub fn from_secs_f64(secs: f64) -> Nanos {
        if secs.is_finite() && secs > 0.0 {
            // `as` saturates on overflow, which is what we want here.
            Nanos((secs * 1e9).round() as u64)
        } else {
            Nanos(0)
        }
    }

    /// Seconds since the epoch, as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later (a clock that went
    /// backwards counts as no time passed).
    pub fn saturating_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at the largest instant.
    pub fn saturating_add(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_nanos(d)))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A duration in whole nanoseconds as `u64`, saturating (`Duration` can hold more).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of [`Nanos`]. Implementations must be cheap: a store reads the clock once per
/// decision.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Nanos;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

/// The production clock: monotonic, anchored to the Unix epoch when it is created.
///
/// `now()` is one read of the OS monotonic clock (a vDSO call on Linux, about 20 ns) plus an
/// addition. Because it advances with the monotonic clock, NTP steps of the wall clock after
/// creation do not move it.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    anchor: std::time::Instant,
    unix_nanos_at_anchor: u64,
}

impl SystemClock {
    /// A clock whose epoch is the Unix epoch.
    #[allow(clippy::disallowed_methods)] // this is the one place that reads the OS clocks
    pub fn new() -> SystemClock {
        let anchor = std::time::Instant::now();
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(duration_nanos)
            .unwrap_or(0);
        SystemClock {
            anchor,
            unix_nanos_at_anchor: unix,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        let elapsed = duration_nanos(self.anchor.elapsed());
        Nanos(self.unix_nanos_at_anchor.saturating_add(elapsed))
    }
}

/// A cached clock: one atomic load a read, refreshed by a background thread every `resolution`.
///
/// Instants lag the true time by at most about one resolution (plus scheduling delay when the
/// machine is overloaded), and never go backwards. Clones share the cache and its thread; the
/// thread stops once every clone is dropped. [`CoarseClock::shared`] gives the process-wide
/// 1 ms clock that [`crate::store::MemoryStore`] uses by default.
#[derive(Clone, Debug)]
pub struct CoarseClock {
    inner: Arc<CoarseInner>,
}

#[derive(Debug)]
#[repr(align(128))] // alone on its cache lines: readers never share them with other writes
struct CoarseInner {
    nanos: AtomicU64,
    /// False if the refresh thread could not be started: reads then go to the OS clock.
    ticking: AtomicBool,
    source: SystemClock,
}

impl CoarseClock {
    /// A clock refreshed every `resolution` (at least 100 µs) by a new background thread.
    pub fn new(resolution: Duration) -> CoarseClock {
        let resolution = resolution.max(Duration::from_micros(100));
        let source = SystemClock::new();
        let inner = Arc::new(CoarseInner {
            nanos: AtomicU64::new(source.now().0),
            ticking: AtomicBool::new(true),
            source,
        });
        // The thread holds only a weak reference, so dropping the last clone stops it.
        let weak = Arc::downgrade(&inner);
        let spawned = std::thread::Builder::new()
            .name("floodgate-clock".into())
            .spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    inner
                        .nanos
                        .fetch_max(inner.source.now().0, Ordering::Relaxed);
                    drop(inner);
                    std::thread::sleep(resolution);
                }
            });
        if spawned.is_err() {
            inner.ticking.store(false, Ordering::Relaxed);
        }
        CoarseClock { inner }
    }

    /// The process-wide clock with 1 ms resolution, started on first use.
    pub fn shared() -> CoarseClock {
        static SHARED: std::sync::OnceLock<CoarseClock> = std::sync::OnceLock::new();
        SHARED
            .get_or_init(|| CoarseClock::new(Duration::from_millis(1)))
            .clone()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Nanos {
        if self.inner.ticking.load(Ordering::Relaxed) {
            Nanos(self.inner.nanos.load(Ordering::Relaxed))
        } else {
            self.inner.source.now()
        }
    }
}

/// A clock that moves only when told to: for tests and simulations, ours and our users'.
///
/// Clones share the same time, so a test can keep one handle and give another to a store.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Nanos) -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start.0)),
        }
    }

    /// Moves the clock to `t`, forwards or backwards.
    pub fn set(&self, t: Nanos) {
        self.nanos.store(t.0, Ordering::SeqCst);
    }

    /// Moves the clock forwards by `d` (saturating).
    pub fn advance(&self, d: Duration) {
        let d = duration_nanos(d);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(d))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_between_clones() {
        let a = ManualClock::new(Nanos::from_secs(5));
        let b = a.clone();
        a.advance(Duration::from_millis(1500));
        assert_eq!(b.now(), Nanos(6_500_000_000));
        b.set(Nanos::from_secs(1));
        assert_eq!(a.now(), Nanos::from_secs(1));
    }

    #[test]
    fn system_clock_is_unix_anchored_and_monotonic() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        // Later than 2020-01-01 and earlier than 2200: proves the Unix anchor.
        assert!(a > Nanos::from_secs(1_577_836_800));
        assert!(a < Nanos::from_secs(7_258_118_400));
    }

    #[test]
    fn coarse_clock_follows_the_system_clock_within_its_resolution() {
        let coarse = CoarseClock::new(Duration::from_millis(1));
        let system = SystemClock::new();
        let a = coarse.now();
        // Wait (boundedly) until the refresh thread has moved the cache at least once.
        let mut moved = false;
        for _ in 0..10_000_000 {
            if coarse.now() > a {
                moved = true;
                break;
            }
            std::thread::yield_now();
        }
        let (c, s) = (coarse.now(), system.now());
        assert!(moved, "the refresh thread never ticked");
        // Two clocks anchored separately agree to well within a second.
        assert!(
            c.0.abs_diff(s.0) < 1_000_000_000,
            "coarse {c} vs system {s}"
        );
    }

    #[test]
    fn saturating_arithmetic_never_panics() {
        assert_eq!(Nanos(5).saturating_since(Nanos(9)), Duration::ZERO);
        assert_eq!(
            Nanos(u64::MAX).saturating_add(Duration::MAX),
            Nanos(u64::MAX)
        );
        assert_eq!(Nanos::from_secs_f64(-1.0), Nanos(0));
        assert_eq!(Nanos::from_secs_f64(f64::NAN), Nanos(0));
        assert_eq!(Nanos::from_secs_f64(1.5), Nanos(1_500_000_000));
    }
}
