//! The group of the task being polled on this thread.
//!
//! Set by a worker around each poll, and around the destructor of a task's unfinished future
//! wherever it runs (`Owner::as_current`), through a guard that restores the previous value on
//! drop, even if the poll unwinds. The pointer is borrowed from the polled task's metadata, which
//! holds an `Arc` of the group for the whole poll.

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::Arc;

use super::inner::GroupInner;

thread_local! {
    static CURRENT: Cell<*const GroupInner> = const { Cell::new(ptr::null()) };
}

/// Restores the previous current group when dropped.
#[must_use = "the previous group is restored when the scope drops"]
pub(crate) struct GroupScope {
    prev: *const GroupInner,
}

impl GroupScope {
    /// Makes `g` the current group until the scope drops. The caller keeps `g` alive for as long
    /// (a worker holds the polled task's runnable, whose metadata owns an `Arc` of the group).
    #[inline]
    pub(crate) fn enter(g: &Arc<GroupInner>) -> Self {
        Self::set(Arc::as_ptr(g))
    }

    /// Runs the rest of the scope outside any group (a `block_on` of another runtime nested in a
    /// task: its future belongs to that runtime, not to the task's group).
    pub(crate) fn leave() -> Self {
        Self::set(ptr::null())
    }

    #[inline]
    fn set(p: *const GroupInner) -> Self {
        GroupScope {
            prev: CURRENT.try_with(|c| c.replace(p)).unwrap_or(ptr::null()),
        }
    }
}

impl Drop for GroupScope {
    #[inline]
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| c.set(self.prev));
    }
}

/// Runs `f` with the group of the task being polled on this thread, without touching its
/// reference count.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Arc<GroupInner>>) -> R) -> R {
    let p = CURRENT.try_with(Cell::get).unwrap_or(ptr::null());
    if p.is_null() {
        return f(None);
    }
    // SAFETY: the pointer was set from the polled task's `Arc<GroupInner>`, which its metadata keeps
    // alive for the whole poll we are inside (see `GroupScope::enter`). `ManuallyDrop` makes this a
    // borrowed view: the strong count is neither incremented nor decremented.
    let arc = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
    f(Some(&arc))
}
