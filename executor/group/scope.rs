//! Moving work into a group mid-flight: [`Group::scope`](super::Group::scope).
//!
//! A task's group is fixed when it is spawned: its wakes are routed, its polls charged and its
//! cancellation scoped by that group. A server often learns a connection's tenant only after it
//! has parsed the first request, long after the connection's task was spawned. `scope` runs the
//! rest of the work as a task *of the new group* (so every later poll of it is charged to, and
//! scheduled by, that group; tasks it spawns join that group too) and makes the caller wait for
//! it as if it ran inline: dropping the [`Scoped`] future cancels the work, the way dropping an
//! inline future would, instead of detaching it as dropping a `JoinHandle` does.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::task::{JoinError, JoinHandle};

/// The future [`Group::scope`](super::Group::scope) returns: resolves to the work's output, or
/// to a [`JoinError`] if the work panicked or was cancelled (its group cancelled, its runtime
/// shut down). Dropping it before it resolves cancels the work.
///
/// # Panics
/// If polled again after it returned `Ready`.
#[must_use = "dropping a `Scoped` cancels its work: await it"]
pub struct Scoped<T> {
    handle: JoinHandle<T>,
    done: bool,
}

impl<T> Scoped<T> {
    pub(super) fn new(handle: JoinHandle<T>) -> Self {
        Scoped {
            handle,
            done: false,
        }
    }
}

impl<T> Future for Scoped<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Checked here, not left to the handle, so the message names the type the caller polled.
        assert!(
            !self.done,
            "Scoped polled after it returned Ready: a scope yields its work's result once; in a \
             select loop, stop polling the branch that completed (or fuse it)"
        );
        let out = Pin::new(&mut self.handle).poll(cx);
        if out.is_ready() {
            self.done = true;
        }
        out
    }
}

impl<T> Drop for Scoped<T> {
    fn drop(&mut self) {
        if !self.done {
            // The work is dropped by a worker at its next suspension (never inline here), and its
            // output, if it finished meanwhile, is dropped with the handle.
            self.handle.abort();
        }
    }
}

impl<T> fmt::Debug for Scoped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoped")
            .field("finished", &self.handle.is_finished())
            .finish()
    }
}
