//! What a runtime thread knows about itself: the runtime it belongs to, and the core it holds while
//! it polls a task.
//!
//! A core is owned by exactly one thread at a time. Between polls the worker loop holds it in a
//! local variable; for the length of a poll it is parked in [`CORE`], so that the polled task can
//! reach it re-entrantly (a wake routed to the LIFO slot, a nested `block_on` that hands it to
//! another thread). The loop takes it back after the poll; if it is gone, the core was handed away
//! and this thread stops being a worker. Nothing here is a borrowed pointer: the cell owns the
//! core while it holds it (a pointer from `Box::into_raw`, turned back into the `Box` by whoever
//! takes it; a plain pointer keeps the cell free of a destructor, so reaching it costs no
//! registration check on the hot path).
//!
//! Every access uses `try_with`: a waker may fire, or a task be spawned, from another thread-local's
//! destructor, after these cells were destroyed. Such calls then take the path of a foreign thread.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::Arc;

use crate::group::GroupInner;
use crate::shim::AtomicBool;

use super::core::Core;
use super::shared::Shared;

thread_local! {
    /// The core this thread is polling a task with (from `Box::into_raw`), or null.
    static CORE: Cell<*mut Core> = const { Cell::new(ptr::null_mut()) };
    /// Set for the whole life of a runtime thread.
    static THREAD: RefCell<Option<ThreadCtx>> = const { RefCell::new(None) };
}

/// A runtime thread's identity.
pub(crate) struct ThreadCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) default_group: Arc<GroupInner>,
    /// True while this thread, having handed its core away, is inside user code (a nested
    /// `block_on`): shutdown must not wait for it.
    pub(crate) blocked: Arc<AtomicBool>,
}

/// Parks `core` in this thread's cell for the length of a poll. The cell is empty: a thread holds
/// at most one core, and takes it out before it installs another.
#[inline]
pub(crate) fn install(core: Box<Core>) {
    let raw = Box::into_raw(core);
    if CORE.try_with(|c| c.set(raw)).is_err() {
        // Thread teardown, where no poll runs: the core goes nowhere, so drop it.
        // SAFETY: `raw` came from `Box::into_raw` just above and was stored nowhere.
        drop(unsafe { Box::from_raw(raw) });
    }
}

/// Takes this thread's core out of its cell (after a poll, or to hand it away).
#[inline]
pub(crate) fn take() -> Option<Box<Core>> {
    let raw = CORE
        .try_with(|c| c.replace(ptr::null_mut()))
        .unwrap_or(ptr::null_mut());
    // SAFETY: a non-null pointer in the cell came from `Box::into_raw` in `install`, and replacing
    // it with null makes this the only owner.
    (!raw.is_null()).then(|| unsafe { Box::from_raw(raw) })
}

/// Runs `f` with the core this thread polls with, if any. `f` must not re-enter `with_core`
/// (it would see no core, which is safe but routes work the slow way).
#[inline]
pub(crate) fn with_core<R>(f: impl FnOnce(Option<&mut Core>) -> R) -> R {
    match take() {
        Some(mut core) => {
            let out = f(Some(&mut core));
            install(core);
            out
        }
        None => f(None),
    }
}

/// Marks this thread as a thread of `ctx.shared`'s runtime until the guard drops.
pub(crate) struct ThreadGuard;

impl ThreadGuard {
    pub(crate) fn enter(ctx: ThreadCtx) -> Self {
        let _ = THREAD.try_with(|t| *t.borrow_mut() = Some(ctx));
        ThreadGuard
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        let ctx = THREAD.try_with(|t| t.borrow_mut().take()).ok().flatten();
        drop(ctx);
    }
}

/// Runs `f` with this thread's runtime identity, if it is a runtime thread.
pub(crate) fn with_thread<R>(f: impl FnOnce(Option<&ThreadCtx>) -> R) -> R {
    let mut f = Some(f);
    let out = THREAD.try_with(|t| match t.try_borrow() {
        Ok(ctx) => (f.take().unwrap())(ctx.as_ref()),
        Err(_) => (f.take().unwrap())(None),
    });
    match out {
        Ok(v) => v,
        Err(_) => (f.take().unwrap())(None),
    }
}

/// The runtime of this thread and its default group, if this is a runtime thread.
pub(crate) fn thread_runtime() -> Option<(Arc<Shared>, Arc<GroupInner>)> {
    with_thread(|t| t.map(|t| (t.shared.clone(), t.default_group.clone())))
}
