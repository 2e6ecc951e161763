//! `yield_now`: give the worker back once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Yields once: the task goes to the back of its worker's local queue (never to the LIFO slot),
/// so the tasks already queued on that worker get a turn first; in a group with
/// [`max_concurrency`](crate::GroupBuilder::max_concurrency) it goes to the back of the group's
/// queue, behind every task of the group waiting to run.
///
/// ```
/// rondo::block_on(async {
///     let t = rondo::spawn(async {
///         for _ in 0..3 {
///             rondo::yield_now().await;
///         }
///         7
///     });
///     assert_eq!(t.await.unwrap(), 7);
/// });
/// ```
pub async fn yield_now() {
    YieldNow { yielded: false }.await
}

struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        // Woken while running: the scheduler sees `woken_while_running` and queues it at the back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
