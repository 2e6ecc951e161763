//! Async synchronisation primitives that work under any executor: [`AsyncOneManyLock`], a fair
//! reader-writer lock, and [`Semaphore`].
//!
//! Neither primitive knows about rondo's scheduler: they only store and call [`Waker`]s, so they run
//! unchanged under rondo, tokio, async-executor or `futures::executor::block_on`. The group-fair
//! ones ([`Semaphore::group_fair`], [`AsyncOneManyLock::group_fair`]) also read which rondo group
//! the waiting task belongs to; elsewhere every waiter counts as one group of weight 1.
//!
//! # Design
//!
//! **State word.** Each primitive keeps one `AtomicUsize`. For the lock: bit 0 = a writer holds it,
//! bit 1 = `QUEUED` (the waiter line is non-empty), bit 2 = `HANDOFF` (see below), bit 3 =
//! `W_WAITING` (a writer is in the line), bit 4 = an upgradable hold exists, bit 5 = `NOTIFIED` and
//! bits 6–9 = a count of skipped releases (see below), bits 10.. = the number of shared holds (plain
//! and upgradable). For the semaphore: bit 0 = closed, bit 1 = `QUEUED`, bit 2 = `HANDOFF`, bit 3 =
//! `NOTIFIED`, bits 4–7 = a count of skipped releases, bits 8.. = free permits. Each word is a type
//! of its own (`raw_one_many/state.rs`, `semaphore/state.rs`) that documents every field with its
//! invariant and changes the word only through named transitions; a transition that leaves its
//! caller something to do (serve the line, hand a hold or permits to a waiter) returns a
//! `#[must_use]` result naming it. An uncontended acquire is a single compare-and-swap on this
//! word (the lock's first guess is "free", so no load precedes it); it completes on the future's
//! first poll, allocates nothing and never touches the line. An uncontended release of the lock is
//! one CAS (its first guess is "I am the only holder"); a semaphore's release is one `fetch_add`
//! (a barging one's after a load that finds `QUEUED` clear: with waiters it must check the head's
//! wait before it publishes, see below).
//!
//! **One FIFO line.** Everyone who cannot take the fast path locks the primitive's internal mutex, which
//! guards a FIFO line of waiters: a doubly linked list threaded through a [`slab`], so a cancelled
//! waiter leaves from the middle in O(1). Each node holds the request (lock mode or permit count), the
//! latest waker, a status (`Waiting`, `Notified`, `Granted`, `Closed`) and, for a barging primitive,
//! when it joined. Under the mutex a newcomer retries the acquire once, and if it still cannot have
//! the resource, sets `QUEUED` *in the same CAS that checks the resource is busy* and joins the back
//! of the line. `QUEUED` sends every release through the mutex, where it sees the new node, so no
//! wakeup can be missed. (A shared release that leaves other readers in place cannot admit anyone
//! and skips the mutex.)
//!
//! **Two modes of serving the line.** `HANDOFF` decides how a release serves the line, and it stops
//! every fast-path acquire:
//!
//! - *Hand-off* (`HANDOFF` set). The release updates the state (no newcomer can take what it frees)
//!   and then runs `dispatch` under the mutex: while the head of the line can be served, it transfers
//!   ownership to it *in the state word* (sets the writer bit, adds a reader, or subtracts permits),
//!   marks its node `Granted` and takes its waker. The woken task finds the resource already its own; nobody can take it in between. A fair
//!   primitive ([`AsyncOneManyLock::new`], [`Semaphore::new`]) sets `HANDOFF` with `QUEUED` and
//!   always serves this way: strict FIFO, no barging.
//! - *Bounded barging* (`with_barging(.., bound)`, after Go's `sync.Mutex`). While the head has waited
//!   less than `bound`, `HANDOFF` stays clear: a release leaves the resource free and `dispatch` only
//!   *notifies* the waiters that could have it (marks them `Notified`, takes their wakers). A task
//!   that is already running may take the free resource first, which saves a sleep and a wake per
//!   hand-off when the same tasks acquire again and again. A notified waiter retries under the mutex
//!   when polled; if it was overtaken it goes back to `Waiting` *in its old place*, and the next
//!   release notifies it again (a notified waiter is never notified twice, so one release wakes one
//!   writer, and the semaphore's wakes never promise more permits than are free). Whenever
//!   `dispatch` or a failed retry finds that the head has waited `bound` or longer, it sets `HANDOFF`
//!   (a failed retry in the same CAS that finds the resource taken, so the taker's release serves
//!   the line): from then on releases hand off directly and newcomers queue, until the head is
//!   younger than `bound` again. While `HANDOFF` is clear and anyone waits, the release itself
//!   happens under the mutex, after the head's wait was checked, so a waiter past the bound is
//!   handed the resource by the very next release, before any newcomer.
//! - *Woken waiters on their way* (`NOTIFIED`, barging mode only, after Go's
//!   `mutexWoken`). While a notified waiter has not polled yet, a release need not serve the line:
//!   that waiter will look at the lock under the mutex anyway. So a release that sees `NOTIFIED`
//!   without `HANDOFF` frees the lock with one CAS, like an uncontended one; without this, every
//!   release during a woken task's wake-up latency (tens of microseconds when its thread was
//!   asleep) took the mutex. The last notified waiter to poll clears the bit *in the same CAS* that
//!   takes the lock or finds it held, so either it holds the lock (and its own release serves the
//!   line) or the holder it found releases through the mutex; a reader that takes the lock this way
//!   also notifies the readers behind it that can share with it, as a release would have. A woken
//!   waiter past the bound is checked when it polls (as in Go), and also by every sixteenth
//!   release in a row: each skipping release counts itself in the state word (in its own CAS), and
//!   when the count is full the next release serves the line after all, under the mutex, where it
//!   finds the head past the bound and hands the lock over. Without that cap, a woken task whose
//!   worker is busy with tasks that take the lock again and again (they never wait, so they never
//!   yield) could be kept out for as long as those tasks run. The semaphore counts its skips the
//!   same way, but the release that serves the line hands nothing to a woken head that has not
//!   polled yet, past the bound or not: its task is in some worker's queue, perhaps behind a thread
//!   the OS has descheduled (16 workers on 2 cores), and permits handed to it would sit idle until
//!   it runs while every newcomer queues (that kept the barging semaphore below async-lock there).
//!   Its own poll sets `HANDOFF` if it finds the permits taken past the bound, so what it waits
//!   past the bound is its task's scheduling delay plus the holds under way when it polls. The
//!   lock keeps the stricter rule: its holds are short, handing it to a woken head did not cost it
//!   throughput, and without the rule its worst waits grew from the bound to several times it.
//!   A semaphore's release also skips only if the free permits, its own included, are all promised
//!   to woken waiters (`promised`, an atomic count changed under the mutex), so a release that frees
//!   a permit nobody is promised still wakes a waiter for it, and two releases wake two. A count
//!   read before a woken waiter withdrew its promise can let one release too many skip; every
//!   woken waiter's poll therefore wakes the waiters that free, unpromised permits can serve.
//! - *A short spin* (barging lock only, as Go's running acquirers spin). Before a newcomer joins
//!   the line it looks at the lock a few more times over a few hundred nanoseconds, giving up at
//!   once in hand-off mode; a look is the fast path again, so a spin that acquires is a newcomer
//!   that arrived a moment later. A per-lock credit turns the spin off (but for one contended
//!   acquire in eight) where it keeps failing, i.e. where holds outlast it.
//!
//! **Phase-fair admission.** The lock serves its head like this: a writer at the head is granted (or
//! notified) only when the lock is completely free; a reader at the head is granted whenever no writer
//! holds the lock. In hand-off mode `dispatch` keeps going, so every reader up to the next waiting
//! writer is admitted in the same pass and woken in one batch. In barging mode the release wakes
//! only the first of those readers, and each woken reader that takes the lock wakes the next: woken
//! in one batch, the readers beyond the first would go to the run queue of the releasing worker,
//! idle workers would steal them, and the readers of a hot lock would stay spread over every
//! worker, moving the state word's cache line between them at each acquire and release; woken one by one from the
//! thread that holds the lock, they gather on it (BENCHMARKS.md, sync primitives). Readers arriving
//! while a writer waits queue behind it (`HANDOFF` in a fair lock, `W_WAITING` in a barging one),
//! so writers are not starved; the readers that queued before a writer all get in before it, so
//! readers are not starved. In barging mode a newcomer *writer* may take a free lock before readers
//! that were woken for it; the bound caps how long that can go on. The semaphore serves its head
//! only when the free permits cover the whole request, so an `acquire_many(5)` at the head is never
//! overtaken by later waiters' `acquire(1)`.
//! In barging mode one release may wake several waiters, and a newcomer may take some of the
//! permits before they run; a woken waiter therefore takes its permits only if enough stay free
//! for every waiter ahead of it in line (a walk from the head, which stops once the requests
//! exceed the free permits), so among themselves waiters are still served in FIFO order.
//!
//! **Group-fair mode** (`group_fair.rs`). A fair primitive whose releases pick the next waiter from
//! a weighted fair queue over the waiting groups instead of taking the head of the line; the state
//! word, the line, hand-off, cancellation and the wakers work as in the fair mode. Each waiter
//! joins both the line and its group's FIFO (the group is read once, when it joins, by one
//! function, `share_of_current`). Each waiting group has a virtual finish tag; a grant of `n`
//! permits (of one lock hold, shared or exclusive) advances it by `n ÷ weight`; `dispatch` serves
//! the group with the smallest tag (ties: the earlier waiter), and a group that starts waiting
//! enters at the tag last served, so idle time banks no credit. The semaphore serves the picked
//! waiter only when the free permits cover it, as it serves its head; the lock admits picked
//! readers for as long as no writer holds it and stops at the first writer picked, so reader
//! batches and writers alternate. An upgrade still waits at the head and is served first. A
//! waiter cancelled while waiting leaves its group's FIFO uncharged; one granted in a race with
//! its drop was charged and gives the grant back as in the fair mode. After each change the line
//! publishes the heaviest waiting weight in an atomic (`heaviest_waiting_weight`) and lends it to
//! the groups holding the primitive, so a light holder runs at its heaviest waiter's weight until
//! it releases (weight inheritance, `group_fair.rs`). The fast paths record no hold of the
//! primitive's *cached* group: a waiter, under the mutex, finds those holds as the state word's
//! holds minus the holds counted by group there. The acquire adds a thread-local read and two
//! loads of one word (its group is the cached one, before and after the CAS), the release one
//! load (no hold is counted); a hold of another group is counted under the mutex, and the cached
//! group changes when its holds are gone (`group_fair.rs`, "Weight inheritance").
//!
//! **Upgradable holds.** An upgradable hold counts as a reader and sets its own bit, which excludes a
//! second one. [`UpgradableGuard::upgrade`] completes at once if its holder is the only reader;
//! otherwise it joins the *front* of the line with `HANDOFF` set (so no writer or new reader gets in)
//! and is granted by the release that leaves it the only reader.
//!
//! **Cancellation.** Each waiting future owns its node's key. Dropping it locks the mutex and removes
//! the node: if it was still `Waiting` it just leaves the line; if it was `Notified` its wake passes
//! on; if it had been `Granted` in a race with the drop, it gives the grant back through the state
//! word. Either way it then runs `dispatch`, so a grant or wake is passed on, and readers that were
//! queued behind a cancelled writer are admitted at once.
//!
//! **Wakers outside the lock.** `dispatch` only *collects* wakers (the first inline, the rest in a
//! `Vec`, so the common single hand-off does not allocate); they are called after the mutex is unlocked.
//! A waker may run arbitrary executor code, even poll the woken future inline and re-enter this
//! primitive; calling it under the mutex could deadlock or extend the critical section unboundedly.
//! Cloning and dropping a waker run its code too (the last drop of a waker that owns a permit or a
//! guard of this very primitive releases it), so neither happens under the mutex either. A waiter
//! clones its waker before it takes the mutex: always when it joins the line; when re-polled, up
//! front only if it was probably woken to compete (its node gave its waker up), otherwise only
//! once its node turns out to need the clone, and then it takes the mutex again. A waker that a
//! node gives up (replaced, or left by a cancelled waiter) is carried out and dropped after
//! unlocking.
//!
//! **Limits.** Reader counts above [`AsyncOneManyLock::MAX_READERS`] panic (in the acquiring task, never
//! corrupting the state); permit counts above [`Semaphore::MAX_PERMITS`] panic in `new`, `add_permits`
//! and `acquire_many`; `add_permits` counts the permits in existence (free and held) and checks
//! before it publishes anything, so no release can push the free count past the maximum. A future that is polled
//! once and then neither polled nor dropped while at the head of a line holds up everyone behind it
//! (in hand-off mode); this is inherent to direct hand-off.
//!
//! # Compile-time guarantees
//!
//! The `_arc` futures own a clone of the `Arc`, so they are `'static` and can be spawned:
//!
//! ```
//! use std::future::Future;
//! use std::sync::Arc;
//! use rondo::sync::{AsyncOneManyLock, Semaphore};
//! fn spawnable<F: Future + Send + 'static>(f: F) -> F {
//!     f
//! }
//! let lock = Arc::new(AsyncOneManyLock::new(0));
//! let sem = Arc::new(Semaphore::new(1));
//! let futures = (
//!     spawnable(lock.shared_arc()),
//!     spawnable(lock.exclusive_arc()),
//!     spawnable(lock.upgradable_arc()),
//!     spawnable(lock.try_upgradable_arc().unwrap().upgrade()),
//!     spawnable(sem.acquire_arc()),
//!     spawnable(sem.acquire_many_arc(1)),
//! );
//! drop((lock, sem)); // the futures keep both alive
//! drop(futures);
//! ```
//!
//! The borrowing futures are not, and must not be:
//!
//! ```compile_fail
//! fn spawnable<F: std::future::Future + 'static>(_: F) {}
//! let lock = std::sync::Arc::new(rondo::sync::AsyncOneManyLock::new(0));
//! spawnable(lock.shared());
//! ```
//! ```compile_fail
//! fn spawnable<F: std::future::Future + 'static>(_: F) {}
//! let sem = std::sync::Arc::new(rondo::sync::Semaphore::new(1));
//! spawnable(sem.acquire());
//! ```
//!
//! Guard variance is checked on [`AsyncOneManyLock`].
//!
//! [`Waker`]: core::task::Waker

mod group_fair;
#[cfg(all(test, not(loom)))]
mod inherit_tests;
#[cfg(all(test, loom))]
pub(crate) use group_fair::{ShareKey, loom_share};
mod one_many;
mod raw_one_many;
mod semaphore;
mod waiters;

pub use one_many::{
    AsyncOneManyLock, ExclusiveGuard, ExclusiveGuardArc, MappedExclusiveGuard, OneManyGuard,
    OneManyMode, SharedGuard, SharedGuardArc, UpgradableGuard, UpgradableGuardArc, Upgrade,
};
pub use semaphore::{
    AcquireError, GroupFairError, Semaphore, SemaphorePermit, SemaphorePermitArc, TryAcquireError,
};
