//! The core a runtime thread polls with: lent for the length of a poll, so that the polled task
//! reaches it re-entrantly.
//!
//! A core is owned by exactly one thread at a time. Between polls the worker loop holds it in a
//! local variable; for the length of a poll it is *lent* through its slot in `Remote`
//! (`lent::LentSlot`, where the stall monitor can claim it if the poll gets stuck), and this
//! thread keeps the lease in [`LEASE`], so that the polled task can reach the core re-entrantly (a
//! wake routed to the LIFO slot, a nested `block_on` that hands it to another thread). The loop
//! takes it back after the poll; if it is gone, the core was handed away or claimed by a rescue,
//! and this thread stops being a worker.
//!
//! The lease points into the runtime's `Shared`, which outlives it: a lease is held only by a
//! runtime thread during a poll, and a runtime thread's `ThreadCtx` (`context`) holds the
//! `Shared`.
//!
//! Every access uses `try_with`: a waker may fire, or a task be spawned, from another thread-local's
//! destructor, after these cells were destroyed. Such calls then take the path of a foreign thread.

use std::cell::Cell;
use std::ptr;

use super::core::Core;
use super::lent::{Lease, LentSlot};
use super::shared::{Remote, Shared};

/// The slot of the core this thread polls with and the lease it holds on it; a null slot when it
/// holds none.
type Held = (*const LentSlot<Core>, Lease);

const NOTHING: Held = (ptr::null(), Lease::NONE);

thread_local! {
    /// The core this thread is polling a task with (see the module docs).
    static LEASE: Cell<Held> = const { Cell::new(NOTHING) };
}
/// Lends `core` for the length of a poll (see the module docs). This thread holds no core: a thread
/// holds at most one, and takes it back before it lends another.
#[inline]
pub(crate) fn install(core: Box<Core>) {
    let slot = core.lent_slot();
    // SAFETY: the core's `Shared` (which holds the slot) lives at least as long as the core.
    let hint = core.has_private_work();
    // SAFETY: as above.
    let lease = unsafe { &*slot }.lend(core, hint);
    if LEASE.try_with(|c| c.set((slot, lease))).is_err() {
        // Thread teardown, where no poll runs: the core goes nowhere, so drop it.
        // SAFETY: as above; the core is lent, so its `Shared` is alive.
        drop(unsafe { &*slot }.take_back(lease));
    }
}

/// Whether the core lent to this thread, if any, is one of `shared`'s.
pub(crate) fn lends_core_of(shared: &Shared) -> bool {
    lent_remote().is_some_and(|r| shared.cores().as_ptr_range().contains(&ptr::from_ref(r)))
}

/// This thread's lease was lost to a claim during the current poll.
const CLAIMED: Held = (ptr::null(), Lease::CLAIMED);

/// Takes this thread's core back (to hand it away, or when a runtime is dropped inside its own
/// task). `None` if it holds none or the core was claimed by a rescue.
#[inline]
pub(crate) fn take() -> Option<Box<Core>> {
    let (slot, lease) = LEASE.try_with(Cell::get).unwrap_or(NOTHING);
    if slot.is_null() {
        return None;
    }
    // SAFETY: a lease is held only while the runtime's `Shared` is alive (module docs).
    let core = unsafe { &*slot }.take_back(lease);
    let _ = LEASE.try_with(|c| c.set(if core.is_some() { NOTHING } else { CLAIMED }));
    core
}

/// Takes this thread's core back after a poll. `Err(true)` if a rescue claimed it during the
/// poll, `Err(false)` if the thread holds none for another reason (the poll handed it away).
#[inline]
pub(crate) fn take_after_poll() -> Result<Box<Core>, bool> {
    let (slot, lease) = LEASE.try_with(|c| c.replace(NOTHING)).unwrap_or(NOTHING);
    if slot.is_null() {
        return Err(lease == Lease::CLAIMED);
    }
    // SAFETY: a lease is held only while the runtime's `Shared` is alive (module docs).
    unsafe { &*slot }.take_back(lease).ok_or(true)
}

/// Runs `f` with the core this thread polls with, if any (and not claimed). `f` must not re-enter
/// `with_core` (it would see no core, which is safe but routes work the slow way). Inlined into
/// its caller, the schedule path, so that path builds one call frame, not two.
#[inline(always)]
pub(crate) fn with_core<R>(f: impl FnOnce(Option<&mut Core>) -> R) -> R {
    let (slot, lease) = LEASE.try_with(Cell::get).unwrap_or(NOTHING);
    if slot.is_null() {
        return f(None);
    }
    // SAFETY: a lease is held only while the runtime's `Shared` is alive (module docs).
    let (out, still_lent) = unsafe { &*slot }.with(lease, f, Core::has_private_work);
    if !still_lent {
        // Claimed by a rescue: forget the lease, so later wakes in this poll skip the slot.
        let _ = LEASE.try_with(|c| c.set(CLAIMED));
    }
    out
}

/// The `Remote` of the core this thread polls with, if it holds a lease (claimed or not: a
/// claim this thread has not noticed yet still shows the slot). For what any thread may use
/// without an access to the core: the core's timer shard (`time::Source`). Never its local queue,
/// which only the core's holder pushes to.
#[inline]
pub(crate) fn lent_remote<'a>() -> Option<&'a Remote> {
    let (slot, _) = LEASE.try_with(Cell::get).unwrap_or(NOTHING);
    if slot.is_null() {
        return None;
    }
    // SAFETY: a lent slot is the `lent` field of a `Remote` in `Shared::cores`, alive while the
    // lease is held (module docs); the caller uses it only during the poll.
    Some(unsafe {
        &*slot
            .cast::<u8>()
            .sub(std::mem::offset_of!(Remote, lent))
            .cast::<Remote>()
    })
}
