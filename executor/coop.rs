//! Cooperative budget.
//!
//! Every task poll starts with [`BUDGET`] units. rondo's own leaf futures ([`JoinHandle`] and
//! [`consume_budget`]) spend one unit each time they are ready; when the budget is spent they return
//! `Pending` after waking their task, so a task that loops over always-ready rondo futures still
//! gives the worker back. Outside a rondo task the budget is unlimited. A future that never touches
//! rondo's futures cannot be preempted by any cooperative runtime: split such work with
//! [`yield_now`](crate::yield_now).
//!
//! [`JoinHandle`]: crate::JoinHandle

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::context;

/// Units a task may spend on ready rondo futures in one poll.
pub const BUDGET: u32 = 128;

/// Resets the budget for a new poll and returns the previous value (restored after the poll).
#[inline]
pub(crate) fn start_poll() -> u32 {
    context::with(|c| c.budget.replace(BUDGET))
}

#[inline]
pub(crate) fn end_poll(prev: u32) {
    context::with(|c| c.budget.set(prev));
}

/// Spends one unit; `Pending` (after waking the task) when the budget is spent.
#[inline]
pub(crate) fn poll_proceed(cx: &mut Context<'_>) -> Poll<()> {
    let ok = context::with(|c| {
        let b = c.budget.get();
        if b == 0 {
            false
        } else {
            if b != u32::MAX {
                c.budget.set(b - 1);
            }
            true
        }
    });
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
    context::with(|c| {
        let b = c.budget.get();
        if b != u32::MAX {
            c.budget.set(b + 1);
        }
    });
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
///         rondo::consume_budget().await;
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
