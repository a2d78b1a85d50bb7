//! The background thread that makes decisions durable: every `sync_interval` it runs one group
//! commit (and a snapshot when the journal has grown past its limit). A plain thread, so the
//! store needs no async runtime; it sleeps on a condition variable, so stopping it is
//! immediate, and it holds the store's core only while the store is open.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Core;

/// The running thread and the flag that stops it.
pub(super) struct Syncer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: JoinHandle<()>,
}

impl Syncer {
    /// Starts the thread committing `core` every `interval`.
    pub(super) fn start(core: Arc<Core>, interval: Duration) -> std::io::Result<Syncer> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("floodgate-journal".into())
            .spawn(move || {
                let (lock, wake) = &*flag;
                loop {
                    let stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    let (stopped, _) = wake
                        .wait_timeout_while(stopped, interval, |stopped| !*stopped)
                        .unwrap_or_else(PoisonError::into_inner);
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    // A failure is recorded in the journal's stats and retried next time.
                    let _ = core.commit();
                }
            })?;
        Ok(Syncer { stop, thread })
    }

    /// Whether the thread is still running (it ends only when stopped, or if it panicked).
    pub(super) fn is_alive(&self) -> bool {
        !self.thread.is_finished()
    }

    /// Stops the thread and waits for it (at most the end of a commit under way).
    pub(super) fn stop(self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        let _ = self.thread.join();
    }
}
