//! The thread-local context: which runtime, worker and group the current thread is working for.
//!
//! One `const`-initialised thread-local holds everything, so a spawn or a wake reads it once. The raw
//! pointers in it are only ever set by the thread that owns the pointee, and only for as long as the
//! pointee is guaranteed alive (see each setter).

use std::cell::{Cell, RefCell};
use std::ptr;

use crate::group::GroupInner;
use crate::runtime::Handle;
use crate::worker::Worker;

pub(crate) struct Context {
    /// The runtime this thread belongs to: set on worker threads and inside `block_on`.
    handle: RefCell<Option<Handle>>,
    /// The worker running on this thread, or null. Set by the worker thread itself for the whole
    /// life of its `Worker`, which lives on that thread's stack.
    worker: Cell<*const Worker>,
    /// The group of the task being polled on this thread, or null. Set around each poll; the task's
    /// metadata holds an `Arc` of that group for the whole poll.
    group: Cell<*const GroupInner>,
    /// The cooperative budget of the task being polled (see `coop`).
    pub(crate) budget: Cell<u32>,
}

thread_local! {
    static CONTEXT: Context = const {
        Context {
            handle: RefCell::new(None),
            worker: Cell::new(ptr::null()),
            group: Cell::new(ptr::null()),
            budget: Cell::new(u32::MAX),
        }
    };
}

#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&Context) -> R) -> R {
    CONTEXT.with(f)
}

/// The current handle, if this thread is inside a runtime: while a worker polls a task, the
/// worker's runtime (even inside a nested `block_on` of another runtime, which sets `handle`);
/// otherwise the runtime of the innermost `block_on` or worker thread.
pub(crate) fn current_handle() -> Option<Handle> {
    CONTEXT
        .try_with(|c| {
            if !c.group.get().is_null() {
                if let Some(w) = c.worker() {
                    return Some(w.handle().clone());
                }
            }
            c.handle.borrow().clone()
        })
        .ok()
        .flatten()
}

/// Runs `f` with the current handle, without cloning it.
pub(crate) fn with_handle<R>(f: impl FnOnce(Option<&Handle>) -> R) -> R {
    CONTEXT.with(|c| f(c.handle.borrow().as_ref()))
}

/// Restores the previous handle when dropped.
pub(crate) struct EnterGuard {
    prev: Option<Handle>,
}

/// Makes `handle` the current runtime of this thread until the guard drops.
pub(crate) fn enter(handle: Handle) -> EnterGuard {
    let prev = CONTEXT.with(|c| c.handle.replace(Some(handle)));
    EnterGuard { prev }
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        let _ = CONTEXT.try_with(|c| c.handle.replace(prev));
    }
}

/// Restores the current group when dropped.
pub(crate) struct GroupScope {
    prev: *const GroupInner,
}

/// Runs the rest of the scope outside any task's group (for a `block_on` of another runtime nested
/// in a task: its future belongs to that runtime, not to the task's group).
pub(crate) fn leave_group() -> GroupScope {
    GroupScope {
        prev: CONTEXT.with(|c| c.group.replace(ptr::null())),
    }
}

impl Drop for GroupScope {
    fn drop(&mut self) {
        let _ = CONTEXT.try_with(|c| c.group.set(self.prev));
    }
}

impl Context {
    /// The worker on this thread.
    #[inline]
    pub(crate) fn worker(&self) -> Option<&Worker> {
        let p = self.worker.get();
        // SAFETY: `worker` is non-null only between `set_worker` and `clear_worker`, called by the
        // worker thread around the whole life of the `Worker` on its stack, and this reference cannot
        // leave the current thread (the closure passed to `with` borrows the thread-local).
        unsafe { p.as_ref() }
    }

    pub(crate) fn set_worker(&self, w: *const Worker) {
        self.worker.set(w);
    }

    /// The group of the task being polled on this thread (null outside a task).
    #[inline]
    pub(crate) fn group_ptr(&self) -> *const GroupInner {
        self.group.get()
    }

    #[inline]
    pub(crate) fn replace_group(&self, g: *const GroupInner) -> *const GroupInner {
        self.group.replace(g)
    }
}
