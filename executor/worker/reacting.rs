//! Who dispatches readiness wakes (feature `io`): the marks the I/O-aware wake policy reads
//! (`Shared::notify_work` in `publish`, `schedule`) and the reactor's loop sets (`reactor`). Which
//! thread waits in the reactor for which keeper, the tasks its dispatch keeps for that keeper to
//! run, whether this thread is async-io's fallback thread, and when I/O last woke the keeper. The
//! policy they serve is described in `reactor`.

use std::cell::Cell;
use std::ptr;
use std::time::{Duration, Instant};

use crate::task::Runnable;

use super::shared::Shared;

thread_local! {
    /// The runtime and core index of the keeper waiting in the reactor on this thread (see
    /// `reactor`); null while the thread runs its loop.
    static REACTING: Cell<(*const Shared, usize)> = const { Cell::new((ptr::null(), 0)) };
}

thread_local! {
    /// The tasks this thread's reactor dispatch woke for the keeper marked in [`REACTING`] to run
    /// itself, in the order woken (see `reactor`, *Where readiness wakes go*). Filled only while
    /// the mark is set, emptied by the keeper's loop when it is polled next, on this thread.
    static DISPATCHED: Cell<Vec<Runnable>> = const { Cell::new(Vec::new()) };
}

/// How long the keeper keeps waking at least every `reactor::REACTOR_TICK` after a readiness wake
/// (see `reactor`, *Keeping the reactor*).
const IO_RECENT: Duration = Duration::from_secs(1);

/// A readiness wake claimed the keeper (on the keeper's thread, from the reactor's dispatch), or the
/// fallback thread's dispatch woke it.
pub(crate) fn note_io(shared: &Shared) {
    let tick = shared.timers().now_tick(Instant::now());
    shared.note_io_at(tick);
}

/// Whether [`note_io`] was called within [`IO_RECENT`] of `now`.
pub(crate) fn io_recent(shared: &Shared, now: Instant) -> bool {
    let seen = shared.io_seen();
    seen != 0 && shared.timers().instant_of(seen) + IO_RECENT > now
}

/// The name async-io gives its fallback thread (async-io 2.6, `driver.rs`).
const FALLBACK_THREAD: &str = "async-io";

thread_local! {
    /// Whether this thread is async-io's fallback thread, once looked up.
    static FALLBACK: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether this thread is async-io's fallback thread: a wake it makes comes from the reactor's
/// dispatch, while it holds the reactor. The name is looked up once per thread (a
/// `thread::current()` is a reference count taken and dropped). `thread::current` panics only once
/// the thread's handle is gone, after every thread-local destructor of the thread has run: no wake
/// gets here then.
pub(crate) fn on_fallback_thread() -> bool {
    if let Some(known) = FALLBACK.try_with(Cell::get).unwrap_or(Some(false)) {
        return known;
    }
    let yes = std::thread::current().name() == Some(FALLBACK_THREAD);
    let _ = FALLBACK.try_with(|c| c.set(Some(yes)));
    yes
}

/// The core this thread keeps in the reactor for `shared`, if it is waiting there now: a wake on
/// this thread then comes from the reactor's dispatch.
#[inline]
pub(crate) fn reacting_core(shared: &Shared) -> Option<usize> {
    let (s, idx) = REACTING.try_with(Cell::get).ok()?;
    ptr::eq(s, shared).then_some(idx)
}

/// Marks this thread as waiting in the reactor for core `v.1` of `v.0` (null: not waiting).
pub(crate) fn set_reacting(v: (*const Shared, usize)) {
    let _ = REACTING.try_with(|c| c.set(v));
}

/// Keeps `r`, woken by this thread's reactor dispatch, for the keeper waiting here (see
/// [`DISPATCHED`]): `Ok(true)` if it is the first kept since the keeper's loop last looked. Gives
/// `r` back during the thread's teardown.
pub(crate) fn keep_dispatched(r: Runnable) -> Result<bool, Runnable> {
    let mut r = Some(r);
    DISPATCHED
        .try_with(|d| {
            let mut kept = d.take();
            kept.extend(r.take());
            let first = kept.len() == 1;
            d.set(kept);
            first
        })
        .map_err(|_| r.take().expect("kept only inside the closure"))
}

/// Moves the tasks kept by [`keep_dispatched`] to the end of `into` (a buffer the caller reuses,
/// so that keeping allocates only while the thread's own buffer grows).
pub(crate) fn take_dispatched(into: &mut Vec<Runnable>) {
    let _ = DISPATCHED.try_with(|d| {
        let mut kept = d.take();
        if !kept.is_empty() {
            into.append(&mut kept);
        }
        d.set(kept);
    });
}
