//! A core this thread handed to another thread in the middle of a poll ([`HandedOff`]), and its
//! reclaim: step 6 of the hand-off protocol in `threads` (steps 2 and 3 are `runner::hand_off`).
//! A `block_in_place` defers the reclaim to the end of the poll ([`defer`], [`reclaim_deferred`],
//! called by the worker loop when it finds the poll's lease gone).

use std::cell::Cell;
use std::sync::Arc;

use crate::group::GroupInner;
use crate::shim::{AtomicBool, Ordering};

use super::context;
use super::lease;
use super::shared::Shared;

/// A core this thread handed to another thread in the middle of a poll, until it takes it back
/// (steps 2, 3 and 6 of the hand-off protocol in `threads`).
pub(crate) struct HandedOff {
    idx: usize,
    shared: Arc<Shared>,
    blocked: Option<Arc<AtomicBool>>,
    /// The polled task's group, kept from the hand-off: a reclaim deferred to the end of the poll
    /// (`block_in_place`) runs after the task may have completed and dropped its own reference,
    /// so the thread's current-group pointer is no longer safe to follow then.
    group: Option<Arc<GroupInner>>,
}

impl HandedOff {
    /// Core `idx` of `shared` was handed over by this thread, marked blocked with `blocked`,
    /// during a poll of a task of `group`.
    pub(super) fn new(
        idx: usize,
        shared: Arc<Shared>,
        blocked: Option<Arc<AtomicBool>>,
        group: Option<Arc<GroupInner>>,
    ) -> Self {
        HandedOff {
            idx,
            shared,
            blocked,
            group,
        }
    }

    /// Takes the core back from its lent slot if no thread took it yet; the rest of the poll
    /// is then a new service segment of the polled task's group, which counts the poll when it
    /// returns. Otherwise the poll continues without a core (and the thread becomes a spare when it
    /// returns), so the poll is counted to the task's group here.
    pub(crate) fn reclaim(self) {
        match self.shared.threads().reclaim(self.idx) {
            Some(mut core) => {
                if let Some(b) = &self.blocked {
                    b.store(false, Ordering::SeqCst);
                }
                core.resume_segment(self.group);
                lease::install(core);
            }
            None => {
                if let Some(g) = &self.group {
                    g.record_service(1, 0);
                }
            }
        }
    }
}

/// Marks this runtime thread as blocked in user code without a core (or not); returns the mark.
pub(super) fn set_blocked(on: bool) -> Option<Arc<AtomicBool>> {
    context::with_thread(|t| {
        t.map(|t| {
            t.blocked.store(on, Ordering::SeqCst);
            t.blocked.clone()
        })
    })
}

thread_local! {
    /// The core this thread handed over in the current poll, to take back when the poll returns.
    static DEFERRED: Cell<Option<HandedOff>> = const { Cell::new(None) };
}

/// Leaves `handed` for the end of the current poll ([`reclaim_deferred`]). Gives it back at
/// thread teardown, where the cell is gone: the caller then reclaims it itself.
pub(super) fn defer(handed: HandedOff) -> Option<HandedOff> {
    let mut handed = Some(handed);
    // A thread holding a core has no reclaim pending (it would hold none), so this
    // replaces nothing.
    let older = DEFERRED
        .try_with(|d| d.replace(handed.take()))
        .ok()
        .flatten();
    // Were it not so, the older core would still go to the thread its hand-off woke or
    // started; only its reclaim would be lost.
    debug_assert!(
        older.is_none(),
        "a reclaim was pending on a thread with a core"
    );
    drop(older);
    handed
}

/// At the end of a poll that left this thread without its core: if the poll handed the core over
/// in `block_in_place`, takes it back into this thread's lease when no thread took it yet (see
/// `block_in_place`). True if a hand-off was pending (whether or not the core came back).
pub(crate) fn reclaim_deferred() -> bool {
    match DEFERRED.try_with(Cell::take) {
        Ok(Some(handed)) => {
            handed.reclaim();
            true
        }
        _ => false,
    }
}
