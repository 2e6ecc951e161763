//! Async synchronisation primitives that work under any executor: [`AsyncOneManyLock`], a fair
//! reader-writer lock, and [`Semaphore`].
//!
//! Neither primitive knows about rondo's scheduler: they only store and call [`Waker`]s, so they run
//! unchanged under rondo, tokio, async-executor or `futures::executor::block_on`.
//!
//! # Design
//!
//! **State word.** Each primitive keeps one `AtomicUsize`. For the lock: bit 0 = a writer holds it,
//! bit 1 = `QUEUED` (the waiter line is non-empty), bits 2.. = the number of readers holding it. For
//! the semaphore: bit 0 = closed, bit 1 = `QUEUED`, bits 2.. = free permits. An uncontended acquire is
//! a single compare-and-swap on this word (the lock's first guess is "free", so no load precedes it)
//! that succeeds only while `QUEUED` is clear; it completes on the future's first poll, allocates
//! nothing and never touches the line. An uncontended release is one atomic operation.
//!
//! **One FIFO line.** Everyone who cannot take the fast path locks the primitive's internal mutex, which
//! guards a FIFO line of waiters: a doubly linked list threaded through a [`slab`], so a cancelled
//! waiter leaves from the middle in O(1). Each node holds the request (lock mode or permit count), the
//! latest waker, and a status (`Waiting`, `Granted`, `Closed`). Under the mutex a newcomer retries the
//! acquire once, and if it still cannot have the resource, sets `QUEUED` *in the same CAS that checks
//! the resource is busy* and joins the back of the line. Because `QUEUED` makes every fast-path acquire
//! fail, newcomers cannot barge past waiters, and because it makes the holder's release take the slow
//! path (which needs the mutex, so it sees the new node), no wakeup can be missed.
//!
//! **Direct hand-off.** A release that finds `QUEUED` set updates the state under the mutex and then
//! runs `dispatch`: while the head of the line can be served, it transfers ownership to it *in the state
//! word* (sets the writer bit, adds a reader, or subtracts permits), marks its node `Granted` and takes
//! its waker. The woken task finds the resource already its own: it never competes again, and nobody
//! can take the resource in between. When the line empties, `dispatch` clears `QUEUED` and the fast
//! paths reopen.
//!
//! **Phase-fair admission.** The lock serves its head like this: a writer at the head is granted only
//! when the lock is completely free; a reader at the head is granted whenever no writer holds the lock,
//! and `dispatch` keeps going, so every reader up to the next waiting writer is admitted in the same
//! pass and woken in one batch (not a chain of readers each waking the next). Since any waiter sets
//! `QUEUED`, readers arriving while a writer waits queue behind it (writers are not starved), and the
//! readers that queued before a writer are all admitted when the previous writer leaves (readers are
//! not starved). The semaphore serves its head only when the free permits cover the whole request, so
//! an `acquire_many(5)` at the head is never overtaken by later `acquire(1)` calls.
//!
//! **Cancellation.** Each waiting future owns its node's key. Dropping it locks the mutex and removes
//! the node: if it was still `Waiting` it just leaves the line; if it had been `Granted` in a race with
//! the drop, it gives the grant back through the state word. Either way it then runs `dispatch`, so a
//! grant is passed on, and readers that were queued behind a cancelled writer are admitted at once.
//!
//! **Wakers outside the lock.** `dispatch` only *collects* wakers (the first inline, the rest in a
//! `Vec`, so the common single hand-off does not allocate); they are called after the mutex is unlocked.
//! A waker may run arbitrary executor code, even poll the woken future inline and re-enter this
//! primitive; calling it under the mutex could deadlock or extend the critical section unboundedly.
//!
//! **Limits.** Reader counts above [`AsyncOneManyLock::MAX_READERS`] panic (in the acquiring task, never
//! corrupting the state); permit counts above [`Semaphore::MAX_PERMITS`] panic in `new`, `add_permits`
//! and `acquire_many`. A future that is polled once and then neither polled nor dropped while at the
//! head of a line holds up everyone behind it; this is inherent to direct hand-off.
//!
//! [`Waker`]: core::task::Waker

mod one_many;
mod raw_one_many;
mod semaphore;
mod waiters;

pub use one_many::{
    AsyncOneManyLock, ExclusiveGuard, ExclusiveGuardArc, MappedExclusiveGuard, OneManyGuard,
    OneManyMode, SharedGuard, SharedGuardArc, Upgrade, UpgradableGuard,
};
pub use semaphore::{
    AcquireError, Semaphore, SemaphorePermit, SemaphorePermitArc, TryAcquireError,
};
