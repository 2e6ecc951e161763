//! What a task needs from its group: the task layer's [`Owner`], played by [`GroupInner`].
//!
//! Kept apart from `inner`, the group's state, because it also enters the group as the current one
//! (`current`), which itself names the group's state: this layer's files import one way.

use std::any::Any;
use std::sync::Arc;

use crate::shim::Ordering;
use crate::task::hooks::TaskHooks;
use crate::task::meta::{Binding, Outcome, Owner, TaskRef, Tasks};
use crate::task::{TaskMeta, TaskPanic};

use super::current::GroupScope;
use super::inner::{GroupInner, Host};

impl Binding for Tasks {
    type Owner = GroupInner;
}

/// Wakes the `wait_idle` callers of `g` once no task is left. Out of line: only a group with such
/// a caller gets here, while every task's completion runs the check in front of it
/// (`Owner::finished`).
#[cold]
#[inline(never)]
fn notify_if_idle(g: &GroupInner) {
    if g.registry.is_empty() {
        g.idle_event.notify(usize::MAX);
    }
}

impl Owner for GroupInner {
    #[inline(never)]
    fn as_current<R>(this: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        // `this` is the dropped task's metadata's `Arc`, alive until after the destructor.
        let _current = GroupScope::enter(this);
        f()
    }

    fn register_idle(&self, meta: &TaskMeta, waker: &std::task::Waker) {
        self.registry.register_idle(meta, waker);
    }

    fn finished(&self, meta: &TaskMeta, outcome: Outcome) {
        self.registry.finished(meta, outcome);
        if self.idle_waiters.load(Ordering::SeqCst) > 0 {
            notify_if_idle(self);
        }
    }

    fn wake_idle(&self, meta: &TaskMeta) {
        self.registry.wake(meta);
    }

    fn idle_waker(&self, meta: &TaskMeta) -> Option<std::task::Waker> {
        self.registry.waker_of(meta)
    }

    #[inline]
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    fn reports_panics(&self) -> bool {
        self.host.panic_hook().is_some()
    }

    fn report_panic(&self, payload: &(dyn Any + Send), task: Option<TaskRef<'_>>) {
        if let Some(hook) = self.host.panic_hook() {
            let p = TaskPanic {
                payload,
                group: self.name(),
                task,
            };
            // A panicking hook must not take down the thread that reports.
            if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&p)))
            {
                crate::task::future::drop_payload(again);
            }
        }
    }

    fn owner_name(&self) -> &str {
        self.name()
    }

    fn owner_id(&self) -> u64 {
        self.id()
    }

    #[inline]
    fn task_hooks(&self) -> Option<&TaskHooks> {
        self.host.task_hooks()
    }

    #[inline(always)]
    fn has_task_hooks(&self) -> bool {
        self.has_task_hooks
    }
}
