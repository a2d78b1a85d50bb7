//! Calling Floodgate from synchronous code.
//!
//! Every store and limiter is `async`, because a remote store answers over the network. The
//! memory store answers at once, and a synchronous caller (a thread-per-request server, a
//! command-line tool, a test) should not need an async runtime for it. [`block_on`] runs one
//! future to completion on the calling thread, parking the thread while the future waits; the
//! limiters' `*_blocking` methods are built on it.
//!
//! `block_on` drives only the future it is given: a store whose futures need a runtime of their
//! own (a network client's reactor) must have that runtime running on other threads. Never call
//! it from inside an async task: it would block that task's worker thread.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

/// Wakes the thread blocked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on the calling thread and returns its output. A future that is
/// ready at once (every memory store operation) costs one poll and no allocation beyond the
/// waker's.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    // The memory store's futures are ready at once: a first poll with a waker that allocates
    // nothing answers them without the `Arc` a parking waker costs. A pending future is polled
    // again with the real waker, which it registers then (every poll registers its waker).
    if let Poll::Ready(output) = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        return output;
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        // A wake that came before this park makes it return at once; a spurious return only
        // costs one more poll.
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    #[test]
    fn a_ready_future_returns_its_output() {
        assert_eq!(block_on(async { 7 }), 7);
    }

    /// A future that is pending until another thread completes it and wakes the waiter: the
    /// blocked thread must wake up and see the value.
    #[test]
    fn a_future_completed_by_another_thread_wakes_the_caller() {
        #[derive(Default)]
        struct Shared {
            done: AtomicBool,
            waker: Mutex<Option<Waker>>,
        }
        struct WaitFor(Arc<Shared>);
        impl Future for WaitFor {
            type Output = &'static str;
            fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
                *self.0.waker.lock().unwrap() = Some(cx.waker().clone());
                if self.0.done.load(Ordering::Acquire) {
                    Poll::Ready("done")
                } else {
                    Poll::Pending
                }
            }
        }
        let shared = Arc::new(Shared::default());
        let completer = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                // Wait until the blocked side has registered its waker, then complete.
                while shared.waker.lock().unwrap().is_none() {
                    thread::yield_now();
                }
                shared.done.store(true, Ordering::Release);
                if let Some(w) = shared.waker.lock().unwrap().take() {
                    w.wake();
                }
            })
        };
        assert_eq!(block_on(WaitFor(Arc::clone(&shared))), "done");
        completer.join().unwrap();
    }
}
