//! Where the layer takes time from, and how it waits.
//!
//! The layer never reads the OS clock itself: it asks a [`Timer`] for the current instant and
//! for a future that completes after a delay. [`TokioTimer`] is the production timer (the
//! Unix-epoch [`SystemClock`] and tokio's timer wheel); [`ManualTimer`] runs on a
//! [`ManualClock`] and "sleeps" by moving that clock forwards, so that a test or a simulation
//! (with servers reading the same clock) runs hours of pacing in milliseconds.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use floodgate::{Clock, ManualClock, Nanos, SystemClock};

/// A boxed future that completes when a wait is over.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A clock the layer can also wait on.
pub trait Timer: Send + Sync + fmt::Debug + 'static {
    /// The current instant; its epoch must be the Unix epoch for epoch resets and HTTP-dates
    /// to be read right (both timers here are).
    fn now(&self) -> Nanos;

    /// A future that completes once `d` has passed on this timer's clock.
    fn sleep(&self, d: Duration) -> Sleep;
}

/// The production timer: [`SystemClock`] for instants, `tokio::time::sleep` for waits (so it
/// needs a tokio runtime with the time driver enabled).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioTimer {
    clock: SystemClock,
}

impl TokioTimer {
    /// A timer on a new [`SystemClock`].
    pub fn new() -> TokioTimer {
        TokioTimer {
            clock: SystemClock::new(),
        }
    }
}

impl Timer for TokioTimer {
    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A timer on a [`ManualClock`]: a wait moves the clock forwards to its end (never backwards)
/// and completes after yielding once to the runtime, so other tasks see the new time.
///
/// For tests and simulations whose servers read the same [`ManualClock`]: nothing really
/// waits, and the pacing arithmetic is exact to the nanosecond.
#[derive(Clone, Debug)]
pub struct ManualTimer {
    clock: ManualClock,
}

impl ManualTimer {
    /// A timer moving `clock` (clones share the time).
    pub fn new(clock: ManualClock) -> ManualTimer {
        ManualTimer { clock }
    }

    /// The clock this timer moves.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }
}

impl Timer for ManualTimer {
    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        let clock = self.clock.clone();
        Box::pin(async move {
            let until = clock.now().saturating_add(d);
            if clock.now() < until {
                clock.set(until);
            }
            tokio::task::yield_now().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_sleep_moves_the_clock_forwards_only() {
        let timer = ManualTimer::new(ManualClock::new(Nanos::from_secs(10)));
        timer.sleep(Duration::from_millis(1500)).await;
        assert_eq!(timer.now(), Nanos::from_millis(11_500));
        timer.sleep(Duration::ZERO).await;
        assert_eq!(timer.now(), Nanos::from_millis(11_500));
    }
}
