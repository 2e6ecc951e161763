//! The FIFO line of waiters (and the CAS loop on the state word) shared by [`AsyncOneManyLock`](super::AsyncOneManyLock) and
//! [`Semaphore`](super::Semaphore).
//!
//! The line is a doubly linked list threaded through a [`Slab`], so a waiter can leave from the middle
//! in O(1) when its future is dropped. A node stays in the slab after it is granted (it is only
//! unlinked from the line) until the future that owns its key removes it; keys are therefore never
//! reused while a future still refers to them. A *notified* node (bounded-barging mode) stays linked
//! in its place: it was woken to retry, and keeps its turn if the retry fails. All of this lives
//! inside the primitive's internal mutex: nothing here is atomic.

use core::task::Waker;
use core::time::Duration;
use slab::Slab;

#[cfg(not(loom))]
use crate::clock;

use super::group_fair::Released;
use crate::shim::{AtomicUsize, Mutex, Ordering, lock};

/// Barging mode: how many releases in a row may skip the line while a woken waiter is on its way
/// (each primitive counts them in a 4-bit field of its state word). The release after them serves
/// the line and checks the head's wait, so a woken waiter whose task is slow to run is still
/// served once past the bound. Under loom one skip fills the count, so the models reach that
/// release.
#[cfg(not(loom))]
pub(crate) const SKIP_LIMIT: usize = 15;
/// See the non-loom version.
#[cfg(loom)]
pub(crate) const SKIP_LIMIT: usize = 1;

/// Locks a primitive's line, lets `f` change the state and serve the line (collecting wakers), and
/// calls the wakers only after unlocking.
pub(crate) fn serve_line<L>(line: &Mutex<L>, f: impl FnOnce(&mut L) -> WakeList) {
    let mut guard = lock(line);
    let wakers = f(&mut guard);
    drop(guard);
    wakers.wake_all();
}

/// Runs `f` on a primitive's state word until its CAS succeeds; `f` returns the new state, or `Err`
/// to give up. Returns the state the successful CAS replaced.
pub(crate) fn update<E>(
    state: &AtomicUsize,
    mut f: impl FnMut(usize) -> Result<usize, E>,
) -> Result<usize, E> {
    let mut s = state.load(Ordering::Relaxed);
    loop {
        let new = f(s)?;
        match state.compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return Ok(s),
            Err(actual) => s = actual,
        }
    }
}

/// When a waiter joined the line, for the barging bound: nanoseconds of the runtime's cheap clock
/// (`crate::clock`: a counter read, where `Instant::now()` costs several times more, and a barging
/// release reads it each time it serves the line), except under loom, where the
/// line's own clock counts its reads instead (all of them happen under the primitive's mutex), so
/// a model can make a bound of `n` nanoseconds expire exactly `n` reads after a waiter joined,
/// deterministically, in every interleaving loom explores.
pub(crate) type Stamp = u64;

/// Marks "no node" in the `prev`/`next` links.
const NIL: usize = usize::MAX;

/// Where a waiter stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// In the line, not yet served.
    Waiting,
    /// Still in the line, woken to retry the acquire itself (bounded-barging mode): nothing was
    /// handed to it, and a newcomer may take the resource first.
    Notified,
    /// Served: ownership (a shared or exclusive hold, or permits) was handed to this waiter. Whoever
    /// owns the key must either use the grant or give it back.
    Granted,
    /// The semaphore was closed while this waiter stood in line; nothing was granted.
    Closed,
    /// Admitting this reader would overflow the reader count; nothing was granted and the waiter's
    /// poll panics with a clear message.
    Overflow,
}

struct Node<R> {
    request: R,
    waker: Option<Waker>,
    status: Status,
    /// When the waiter joined the line; only recorded when the primitive has a barging bound.
    since: Option<Stamp>,
    prev: usize,
    next: usize,
}

/// Wakers collected while the internal lock is held and called after it is released.
///
/// The first waker is stored inline, so the common single hand-off does not allocate.
#[derive(Default)]
pub(crate) struct WakeList {
    first: Option<Waker>,
    rest: Vec<Waker>,
    /// Groups whose last reference a group-fair primitive let go of under its mutex, dropped
    /// after the wakers run (dropping a group may drop tasks, whose futures may use the very
    /// primitive).
    pub(crate) released: Released,
}

impl WakeList {
    pub(crate) const fn new() -> Self {
        WakeList {
            first: None,
            rest: Vec::new(),
            released: Vec::new(),
        }
    }

    fn push(&mut self, waker: Waker) {
        if self.first.is_none() {
            self.first = Some(waker);
        } else {
            self.rest.push(waker);
        }
    }

    /// Calls every collected waker. Must be called with no internal lock held.
    ///
    /// A waker is its owner's code and may panic. The waiters after it were served or told to
    /// retry, and nothing else will wake them, so they are woken before the panic goes on to the
    /// caller: on the way out, each inside `catch_unwind` (a second panic while unwinding would
    /// abort the process).
    pub(crate) fn wake_all(self) {
        struct Rest<I: Iterator<Item = Waker>>(I);
        impl<I: Iterator<Item = Waker>> Drop for Rest<I> {
            fn drop(&mut self) {
                for w in self.0.by_ref() {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()));
                }
            }
        }
        // Dropped after the wakers, also if one panics.
        let _released = self.released;
        let mut all = Rest(self.first.into_iter().chain(self.rest));
        for w in all.0.by_ref() {
            w.wake();
        }
    }
}

/// A FIFO line of waiters, each asking for an `R` (a lock mode, or a number of permits).
pub(crate) struct WaitList<R> {
    nodes: Slab<Node<R>>,
    head: usize,
    tail: usize,
    /// How many nodes are `Notified`.
    notified: usize,
    /// The logical clock of [`Stamp`] under loom.
    #[cfg(loom)]
    ticks: core::cell::Cell<u64>,
}

impl<R: Copy> WaitList<R> {
    pub(crate) const fn new() -> Self {
        WaitList {
            nodes: Slab::new(),
            head: NIL,
            tail: NIL,
            notified: 0,
            #[cfg(loom)]
            ticks: core::cell::Cell::new(0),
        }
    }

    /// The time, for [`waited`](Self::waited) and the `since` of a new waiter.
    #[cfg(not(loom))]
    pub(crate) fn now(&self) -> Stamp {
        clock::stamp()
    }

    /// The line's logical time: every read advances it by one (see [`Stamp`]).
    #[cfg(loom)]
    pub(crate) fn now(&self) -> Stamp {
        self.ticks.set(self.ticks.get() + 1);
        self.ticks.get()
    }

    fn insert(&mut self, request: R, waker: Waker, since: Option<Stamp>) -> usize {
        self.nodes.insert(Node {
            request,
            waker: Some(waker),
            status: Status::Waiting,
            since,
            prev: NIL,
            next: NIL,
        })
    }

    /// Joins the back of the line; returns the key that identifies this waiter.
    pub(crate) fn push_back(&mut self, request: R, waker: Waker, since: Option<Stamp>) -> usize {
        let key = self.insert(request, waker, since);
        self.nodes[key].prev = self.tail;
        if self.tail == NIL {
            self.head = key;
        } else {
            self.nodes[self.tail].next = key;
        }
        self.tail = key;
        key
    }

    /// Joins the front of the line (an upgrade, which already holds part of the lock, goes first).
    pub(crate) fn push_front(&mut self, request: R, waker: Waker, since: Option<Stamp>) -> usize {
        let key = self.insert(request, waker, since);
        self.nodes[key].next = self.head;
        if self.head == NIL {
            self.tail = key;
        } else {
            self.nodes[self.head].prev = key;
        }
        self.head = key;
        key
    }

    /// The key of the waiter at the head of the line.
    pub(crate) fn head(&self) -> Option<usize> {
        (self.head != NIL).then_some(self.head)
    }

    /// The key of the waiter behind `key` in the line.
    pub(crate) fn next(&self, key: usize) -> Option<usize> {
        let next = self.nodes[key].next;
        (next != NIL).then_some(next)
    }

    pub(crate) fn request(&self, key: usize) -> R {
        self.nodes[key].request
    }

    pub(crate) fn status(&self, key: usize) -> Status {
        self.nodes[key].status
    }

    /// How many waiters were notified and have not polled yet.
    pub(crate) fn notified(&self) -> usize {
        self.notified
    }

    /// Whether the waiter `key` joined the line at least `bound` before `now`.
    pub(crate) fn waited(&self, key: usize, bound: Duration, now: Stamp) -> bool {
        let waited = |since: Stamp| u128::from(now.saturating_sub(since)) >= bound.as_nanos();
        self.nodes[key].since.is_some_and(waited)
    }

    fn unlink(&mut self, key: usize) {
        let (prev, next) = {
            let n = &self.nodes[key];
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
        let n = &mut self.nodes[key];
        n.prev = NIL;
        n.next = NIL;
    }

    /// Takes a waiter (waiting or notified) out of the line with the given final status and queues
    /// its waker, if it still has one.
    pub(crate) fn finish(&mut self, key: usize, status: Status, wakers: &mut WakeList) {
        self.unlink(key);
        let node = &mut self.nodes[key];
        if node.status == Status::Notified {
            self.notified -= 1;
        }
        node.status = status;
        if let Some(w) = node.waker.take() {
            wakers.push(w);
        }
    }

    /// Wakes a waiting node to retry its acquire, leaving it in its place in line.
    pub(crate) fn notify(&mut self, key: usize, wakers: &mut WakeList) {
        let node = &mut self.nodes[key];
        debug_assert_eq!(node.status, Status::Waiting);
        node.status = Status::Notified;
        self.notified += 1;
        if let Some(w) = node.waker.take() {
            wakers.push(w);
        }
    }

    /// Closes every waiter in line (semaphore `close`).
    pub(crate) fn close_all(&mut self, wakers: &mut WakeList) {
        while self.head != NIL {
            self.finish(self.head, Status::Closed, wakers);
        }
    }

    /// Checks on a waiter from its future's `poll`. A waiting or notified node keeps its place (a
    /// notified one is set back to waiting: its caller either completes and calls
    /// [`take`](Self::take), or waits again and calls [`park`](Self::park)). A finished node is
    /// removed. Returns the status found.
    pub(crate) fn poll(&mut self, key: usize) -> Status {
        let node = &mut self.nodes[key];
        match node.status {
            status @ (Status::Waiting | Status::Notified) => {
                if status == Status::Notified {
                    self.notified -= 1;
                }
                node.status = Status::Waiting;
                status
            }
            status => {
                // `finish` took the waker, so removing the node drops none under the mutex.
                debug_assert!(node.waker.is_none());
                self.nodes.remove(key);
                status
            }
        }
    }

    /// Makes the waiting node `key` wake `waker`'s task. A waker that already does stays. Otherwise
    /// the node needs a clone of `waker`, made outside the mutex (cloning runs the waker's own
    /// code): `fresh` supplies it, and the waker it replaces goes into `spent`, to be dropped after
    /// unlocking. Returns `false`, changing nothing, if a clone is needed and `fresh` is empty.
    pub(crate) fn park(
        &mut self,
        key: usize,
        waker: &Waker,
        fresh: &mut Option<Waker>,
        spent: &mut Option<Waker>,
    ) -> bool {
        let node = &mut self.nodes[key];
        debug_assert_eq!(node.status, Status::Waiting);
        if node.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            return true;
        }
        let Some(new) = fresh.take() else {
            return false;
        };
        debug_assert!(spent.is_none());
        *spent = node.waker.replace(new);
        true
    }

    /// Removes a waiter that acquired by itself after being notified. Returns the waker its node
    /// held, for the caller to drop after unlocking.
    pub(crate) fn take(&mut self, key: usize) -> Option<Waker> {
        self.unlink(key);
        self.nodes.remove(key).waker
    }

    /// Removes a waiter whose future is being dropped; returns its status at that moment, its
    /// request and the waker its node held (for the caller to drop after unlocking: dropping a
    /// waker runs its code, which may even release this primitive). A `Granted` status means the
    /// caller must give the grant back; a `Waiting` or `Notified` one means the node has just left
    /// the line.
    pub(crate) fn remove(&mut self, key: usize) -> (Status, R, Option<Waker>) {
        match self.nodes[key].status {
            Status::Notified => {
                self.notified -= 1;
                self.unlink(key);
            }
            Status::Waiting => self.unlink(key),
            _ => {}
        }
        let node = self.nodes.remove(key);
        (node.status, node.request, node.waker)
    }
}
