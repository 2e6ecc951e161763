//! What a runtime thread knows about itself: the runtime it belongs to, its default group, and
//! whether it is blocked in user code without a core. The core it polls with is in `lease`.
//!
//! Every access uses `try_with`: a waker may fire, or a task be spawned, from another thread-local's
//! destructor, after this cell was destroyed. Such calls then take the path of a foreign thread.

use std::cell::RefCell;
use std::sync::Arc;

use crate::group::GroupInner;
use crate::shim::AtomicBool;

use super::shared::Shared;

thread_local! {
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
