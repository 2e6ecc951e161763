//! `Timeout`: a future with a deadline.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::Instant;
use super::sleep::{Sleep, sleep, sleep_until};

/// Runs `future` for at most `duration`: its output in `Ok`, or `Err(Elapsed)` if the time ran
/// out first, in which case the future is dropped when the `Timeout` is. Cancel-safe exactly when
/// `future` is: the runtime's `Semaphore::acquire` and the lock's acquisitions are, so a timed-out
/// wait takes nothing. With a zero duration the future is polled once: its output if it is ready
/// then, `Err(Elapsed)` if not.
///
/// ```
/// use std::time::Duration;
/// rondo::block_on(async {
///     let slow = rondo::time::sleep(Duration::from_secs(3600));
///     assert!(rondo::time::timeout(Duration::from_millis(2), slow).await.is_err());
///     let fast = async { 7 };
///     assert_eq!(rondo::time::timeout(Duration::from_secs(1), fast).await, Ok(7));
/// });
/// ```
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        sleep: sleep(duration),
    }
}

/// Runs `future` until `deadline` at most; see [`timeout`]. The deadline is a
/// [`rondo::time::Instant`](Instant) or a [`std::time::Instant`].
///
/// ```
/// use std::time::Duration;
/// use rondo::time::Instant;
/// rondo::block_on(async {
///     let deadline = Instant::now() + Duration::from_millis(2);
///     let r = rondo::time::timeout_at(deadline, std::future::pending::<()>()).await;
///     assert_eq!(r, Err(rondo::time::Elapsed));
/// });
/// ```
pub fn timeout_at<F: IntoFuture>(
    deadline: impl Into<Instant>,
    future: F,
) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        sleep: sleep_until(deadline),
    }
}

pin_project_lite::pin_project! {
    /// A future with a deadline; made by [`timeout`] and [`timeout_at`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The inner future; the deadline is dropped.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The future first: an output ready at the deadline is not thrown away.
        if let Poll::Ready(v) = this.future.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F: fmt::Debug> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("future", &self.future)
            .field("deadline", &self.sleep.deadline())
            .finish()
    }
}

/// The error of a [`Timeout`] whose deadline passed before its future completed.
///
/// ```
/// let e = rondo::time::Elapsed;
/// assert_eq!(e.to_string(), "deadline has elapsed");
/// let _: &dyn std::error::Error = &e;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// An [`io::Error`](std::io::Error) of kind `TimedOut`, carrying the `Elapsed`, so that `?` on a
/// timeout works in a function returning `io::Result`, as with tokio's `Elapsed`.
///
/// ```
/// use std::time::Duration;
/// async fn read_with_deadline() -> std::io::Result<()> {
///     rondo::time::timeout(Duration::from_millis(1), std::future::pending::<()>()).await?;
///     Ok(())
/// }
/// let e = rondo::block_on(read_with_deadline()).unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
/// assert_eq!(e.to_string(), "deadline has elapsed");
/// ```
impl From<Elapsed> for std::io::Error {
    fn from(e: Elapsed) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, e)
    }
}
