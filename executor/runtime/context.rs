//! Which runtime is current on this thread, and `EnterGuard`.
//!
//! Inside a task, the current runtime is the one polling it (the thread's runtime). Elsewhere it is
//! the runtime of the innermost `block_on` or `enter` on this thread, or, on a runtime thread, that
//! runtime. Every access uses `try_with`, so code running in a thread-local destructor sees no
//! runtime instead of aborting the process.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;

use crate::group::{HostOf, with_current};
use crate::worker::context::thread_runtime;

use super::Handle;

thread_local! {
    /// The runtime of the innermost `block_on` or `enter` on this thread.
    static ENTERED: RefCell<Option<Handle>> = const { RefCell::new(None) };
    /// How many `EnterGuard`s of this thread are alive: each guard knows its own depth, so one
    /// dropped out of order is caught.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// The current runtime's handle (see the module docs), or `None`.
pub(crate) fn current_handle() -> Option<Handle> {
    // The task's own runtime, which is the thread's unless a runtime shutting down on a worker of
    // another one is dropping its task here.
    let in_task_of = with_current(|g| g.map(|g| g.host_addr()));
    if let Some(host) = in_task_of {
        if let Some((shared, default_group)) = thread_runtime() {
            if std::ptr::eq(Arc::as_ptr(&shared) as *const HostOf, host) {
                return Some(Handle {
                    shared,
                    default_group,
                });
            }
        }
    }
    let entered = ENTERED
        .try_with(|h| h.try_borrow().ok().and_then(|h| h.clone()))
        .ok()
        .flatten();
    entered.or_else(|| {
        thread_runtime().map(|(shared, default_group)| Handle {
            shared,
            default_group,
        })
    })
}

/// Makes a runtime current on this thread until dropped; see [`Runtime::enter`](crate::Runtime::enter)
/// and [`Handle::enter`]. Guards must be dropped in the reverse order of their creation, on the
/// thread that created them (the type is `!Send`).
///
/// # Panics
///
/// Dropping a guard while a guard created after it on the same thread is still alive (or was
/// leaked with `mem::forget`) panics: the runtime it restored would not be the one that was
/// current before it.
///
/// ```
/// let rt = rondo::Runtime::new().unwrap();
/// assert!(rondo::Handle::try_current().is_none());
/// let guard = rt.enter();
/// assert!(rondo::Handle::try_current().is_some());
/// drop(guard);
/// assert!(rondo::Handle::try_current().is_none());
/// ```
#[must_use = "the runtime stays current only while the guard lives"]
pub struct EnterGuard<'a> {
    prev: Option<Handle>,
    /// The guards alive on this thread once this one was made (0: made in a thread-local
    /// destructor, where nothing is checked).
    depth: usize,
    _not_send: PhantomData<(&'a Handle, *const ())>,
}

impl std::fmt::Debug for EnterGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnterGuard").finish_non_exhaustive()
    }
}

/// Makes `handle` the current runtime of this thread until the guard drops.
pub(crate) fn enter<'a>(handle: Handle) -> EnterGuard<'a> {
    let mut handle = Some(handle);
    let prev = ENTERED
        .try_with(|h| {
            h.try_borrow_mut()
                .ok()
                .map(|mut h| h.replace(handle.take().unwrap()))
        })
        .ok()
        .flatten()
        .flatten();
    let depth = DEPTH
        .try_with(|d| {
            d.set(d.get() + 1);
            d.get()
        })
        .unwrap_or(0);
    EnterGuard {
        prev,
        depth,
        _not_send: PhantomData,
    }
}

impl Drop for EnterGuard<'_> {
    fn drop(&mut self) {
        let in_order = DEPTH
            .try_with(|d| {
                let innermost = d.get() == self.depth;
                if innermost {
                    d.set(self.depth - 1);
                }
                innermost
            })
            .unwrap_or(true);
        if !in_order && self.depth != 0 && !std::thread::panicking() {
            panic!(
                "rondo: an `EnterGuard` was dropped while a guard entered after it on this thread \
                 is still alive (or was forgotten); drop enter guards in the reverse order of \
                 their creation"
            );
        }
        let prev = self.prev.take();
        // The replaced handle is dropped after the borrow ends: its drop may run arbitrary code.
        let replaced = ENTERED
            .try_with(|h| {
                h.try_borrow_mut()
                    .ok()
                    .map(|mut h| std::mem::replace(&mut *h, prev))
            })
            .ok()
            .flatten();
        drop(replaced);
    }
}

/// Timers find their shard here: a task polled by a worker arms in that worker's shard; any
/// other thread in a shard of the current runtime's foreign shards (the global runtime's if none).
impl crate::time::Source for crate::time::Current {
    fn with_shard<R>(f: impl FnOnce(&Arc<crate::time::Shard>) -> R) -> R {
        // A poll's lease names the core it runs on, claimed by a rescue or not: its shard, with
        // no access to the core (a shard is a locked wheel; any thread may arm in it).
        if let Some(remote) = crate::worker::lease::lent_remote() {
            return f(&remote.timer_shard);
        }
        let hint = thread_hint();
        match current_handle() {
            Some(h) => f(h.shared.timers().shard(None, hint)),
            None => f(super::global().shared.timers().shard(None, hint)),
        }
    }

    fn with_timers<R>(f: impl FnOnce(Option<&crate::time::Timers>) -> R) -> R {
        match current_handle() {
            Some(h) => f(Some(h.shared.timers())),
            None => f(None),
        }
    }
}

/// A small number that differs between threads, to spread them over shards.
fn thread_hint() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.try_with(|h| *h).unwrap_or(0)
}
