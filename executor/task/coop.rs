//! Cooperative budget.
//!
//! Every task poll, and every poll of a [`block_on`](crate::block_on) future, starts with
//! [`BUDGET`] units. rondo's own leaf futures ([`JoinHandle`], [`consume_budget`], a sleep of zero
//! duration, which is ready at once, and an [`Interval`] tick) spend one unit each time they are
//! ready; when the budget is spent they return `Pending` after waking their task, so a task that
//! loops over always-ready rondo futures still gives the worker back. Polled by anything else
//! (another executor, a hand-written poll outside the runtime) the budget is unlimited. A future
//! that never touches rondo's futures cannot be preempted by any cooperative runtime: split such
//! work with [`yield_now`](crate::yield_now).
//!
//! [`JoinHandle`]: crate::JoinHandle
//! [`Interval`]: crate::time::Interval

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::cell::Cell;

/// Units a task (or a `block_on` future) may spend on ready rondo futures in one poll.
pub const BUDGET: u32 = 128;

/// Outside a poll the budget is unlimited.
const UNLIMITED: u32 = u32::MAX;

thread_local! {
    /// The budget left to the poll running on this thread.
    static LEFT: Cell<u32> = const { Cell::new(UNLIMITED) };
}

/// Runs `f` on the current budget; during thread-local teardown the budget is unlimited.
#[inline]
fn with<R>(f: impl FnOnce(&Cell<u32>) -> R, teardown: R) -> R {
    LEFT.try_with(f).unwrap_or(teardown)
}

/// A fresh budget for one poll; the previous one comes back when the guard drops, even if the
/// poll unwinds.
#[must_use = "the budget is restored when the guard drops"]
pub(crate) struct PollBudget {
    prev: u32,
}

impl PollBudget {
    #[inline]
    pub(crate) fn start() -> Self {
        PollBudget {
            prev: with(|c| c.replace(BUDGET), UNLIMITED),
        }
    }
}

impl Drop for PollBudget {
    #[inline]
    fn drop(&mut self) {
        with(|c| c.set(self.prev), ());
    }
}

/// An unlimited budget while it lives (for polls that must see every ready future at once, such
/// as `JoinSet::try_join_next`, which never waits); the previous budget comes back when it drops.
#[must_use = "the budget is restored when the guard drops"]
pub(crate) struct Unconstrained {
    prev: u32,
}

impl Unconstrained {
    #[inline]
    pub(crate) fn start() -> Self {
        Unconstrained {
            prev: with(|c| c.replace(UNLIMITED), UNLIMITED),
        }
    }
}

impl Drop for Unconstrained {
    #[inline]
    fn drop(&mut self) {
        with(|c| c.set(self.prev), ());
    }
}

/// Spends one unit; `Pending` (after waking the task) when the budget is spent.
#[inline]
pub(crate) fn poll_proceed(cx: &mut Context<'_>) -> Poll<()> {
    let ok = with(
        |c| {
            let b = c.get();
            if b == 0 {
                false
            } else {
                if b != UNLIMITED {
                    c.set(b - 1);
                }
                true
            }
        },
        true,
    );
    if ok {
        Poll::Ready(())
    } else {
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Gives one unit back (used when the guarded future turned out to be pending).
#[inline]
pub(crate) fn refund() {
    with(
        |c| {
            let b = c.get();
            if b != UNLIMITED {
                c.set(b + 1);
            }
        },
        (),
    );
}

/// Spends one unit of the current task's cooperative budget, yielding to the worker when it is
/// spent.
///
/// Call it in loops that only ever see ready futures, so a busy task cannot hold a worker for more
/// than one budget's worth of iterations.
///
/// ```
/// rondo::block_on(async {
///     let mut sum = 0u64;
///     for i in 0..1_000 {
///         rondo::task::consume_budget().await;
///         sum += i;
///     }
///     assert_eq!(sum, 499_500);
/// });
/// ```
pub async fn consume_budget() {
    struct Consume(bool);
    impl Future for Consume {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            match poll_proceed(cx) {
                Poll::Ready(()) => {
                    self.0 = true;
                    Poll::Ready(())
                }
                Poll::Pending => Poll::Pending,
            }
        }
    }
    Consume(false).await
}
