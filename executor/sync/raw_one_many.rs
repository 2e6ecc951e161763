//! The untyped core of [`AsyncOneManyLock`](super::AsyncOneManyLock): the state word, the FIFO line
//! and the hand-off rules. Kept free of `T` so it is compiled once, not once per protected type.

use core::future::Future;
use core::hint::spin_loop;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::sync::Arc;

use self::state::{AtomicState, Change, Changed, HandOver, Join, Release, Retry, State, TryLock};
pub(crate) use self::state::{MAX_READERS, Req};
use super::group_fair::{
    FastHolds, GroupLine, Released, current_addr, current_group, share_of_current,
};
use super::waiters::{Stamp, Status, WaitList, WakeList, serve_line};
use crate::shim::{AtomicU32, Mutex, Ordering, lock};

mod state;

/// How many times a newcomer looks at a busy lock before it joins the line, pausing twice as long
/// before each look (see `RawOneMany::spin_acquire`). None under loom: a look is the fast path
/// again (a relaxed load and `try_fast`'s CAS), which is what a newcomer arriving a moment later
/// does, so it adds no behaviour the models do not cover, only interleavings that multiply their
/// running time.
#[cfg(not(loom))]
const SPIN_LOOKS: u32 = 4;
#[cfg(loom)]
const SPIN_LOOKS: u32 = 0;
/// The spin's credit at first and at most (see `RawOneMany::spin_acquire`).
const SPIN_CREDIT_START: u32 = 8;
const SPIN_CREDIT_MAX: u32 = 16;
/// At zero credit, one contended acquire in this many spins anyway.
const SPIN_SAMPLE_EVERY: u32 = 8;

/// Key value meaning "this future is not in the line".
const NOT_QUEUED: usize = usize::MAX;

#[cold]
#[inline(never)]
fn reader_overflow() -> ! {
    panic!(
        "AsyncOneManyLock: reader count overflow (more than {MAX_READERS} shared guards alive or forgotten)"
    )
}

/// The line and the count of writers in it (which decides `W_WAITING`). `NOTIFIED` follows the
/// line's count of woken waiters: set when it leaves zero, cleared when it returns there.
struct Line {
    waiters: WaitList<Req>,
    writers: usize,
    /// Group-fair mode only: the weighted fair queue that picks whom releases serve. Every waiter
    /// is in it but an upgrade, which is served first (it already holds part of the lock).
    groups: Option<Box<GroupLine>>,
}

pub(crate) struct RawOneMany {
    /// Who holds the lock and the flags that decide how releases serve the line (`state.rs`).
    state: AtomicState,
    /// How long a waiter may be overtaken by newcomers before the lock switches to hand-off mode;
    /// zero for a fair lock (always hand-off).
    bound: Duration,
    /// Barging mode: whether spinning before joining the line has been paying off (see
    /// `spin_acquire`). A heuristic: racing updates may lose a step, never correctness.
    spin_credit: AtomicU32,
    /// Contended acquires that skipped the spin while `spin_credit` was zero.
    spin_skips: AtomicU32,
    /// Group-fair mode: the largest weight among the waiting groups, published under the mutex
    /// (see `group_fair.rs`); 0 otherwise.
    heaviest: AtomicU32,
    /// Group-fair mode: whose holds are uncounted, for weight inheritance (`group_fair.rs`).
    /// Read before a fast-path acquire and before a release: one byte on the state word's line.
    group_fair: bool,
    /// Group-fair mode: the fast paths' view of the holders (`group_fair.rs`).
    fast: FastHolds,
    line: Mutex<Line>,
}

impl RawOneMany {
    #[cfg(not(loom))]
    pub(crate) const fn new(bound: Duration) -> Self {
        RawOneMany {
            state: AtomicState::new(),
            bound,
            spin_credit: AtomicU32::new(SPIN_CREDIT_START),
            spin_skips: AtomicU32::new(0),
            heaviest: AtomicU32::new(0),
            group_fair: false,
            fast: FastHolds::new(),
            line: Mutex::new(Line {
                waiters: WaitList::new(),
                writers: 0,
                groups: None,
            }),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(bound: Duration) -> Self {
        RawOneMany {
            state: AtomicState::new(),
            bound,
            spin_credit: AtomicU32::new(SPIN_CREDIT_START),
            spin_skips: AtomicU32::new(0),
            heaviest: AtomicU32::new(0),
            group_fair: false,
            fast: FastHolds::new(),
            line: Mutex::new(Line {
                waiters: WaitList::new(),
                writers: 0,
                groups: None,
            }),
        }
    }

    /// A fair lock whose releases serve the waiting groups by weight (`group_fair.rs`).
    pub(crate) fn group_fair() -> Self {
        let mut raw = Self::new(Duration::ZERO);
        raw.group_fair = true;
        lock(&raw.line).groups = Some(Box::new(GroupLine::new()));
        raw
    }

    /// For tests, in group-fair mode: the holds the state shows, the holds counted by group, the
    /// weight lent for the uncounted holds and the fast word's flags, read under the mutex.
    #[cfg(test)]
    pub(crate) fn inheritance_snapshot(&self) -> (usize, usize, u32, usize) {
        let line = lock(&self.line);
        let (counted, lent) = line.groups.as_ref().map_or((0, 0), |g| g.inheritance());
        (
            AtomicState::holds_in(self.state.snapshot()),
            counted,
            lent,
            self.fast.flags(),
        )
    }

    /// For tests, in group-fair mode: whether the loan for the uncounted holds is current
    /// (`GroupLine::uncounted_loan_is_current`), read under the mutex.
    #[cfg(test)]
    pub(crate) fn uncounted_loan_is_current(&self) -> bool {
        let line = lock(&self.line);
        let held = AtomicState::holds_in(self.state.snapshot());
        line.groups
            .as_ref()
            .is_none_or(|g| g.uncounted_loan_is_current(held))
    }

    /// Under the mutex: publishes the line's heaviest waiting weight and the fast word, and lends
    /// to the holders (`group_fair.rs`).
    fn publish(&self, g: &mut GroupLine, released: &mut Released) {
        let held = AtomicState::holds_in(self.state.snapshot());
        g.publish(&self.heaviest, &self.fast, held, released);
    }

    /// Under the mutex, once a hold was taken for the current task (in the state word, not
    /// counted yet): settles who it is held by (`GroupLine::settle`).
    fn settle(&self, line: &mut Line, released: &mut Released) {
        let Some(g) = &mut line.groups else { return };
        let s0 = self.state.snapshot();
        g.settle(
            1,
            AtomicState::holds_in(s0),
            &self.fast,
            || self.state.confirm(s0),
            released,
        );
        self.publish(g, released);
    }

    /// A fast-path acquire: one CAS from "free"; in group-fair mode only if the current task's
    /// group is the one whose holds go uncounted (checked again after the CAS), otherwise the
    /// acquire happens under the mutex.
    #[inline]
    fn try_acquire(&self, req: Req) -> bool {
        if self.group_fair {
            return self.try_group_fair(req);
        }
        self.try_fast(req, State::FREE)
    }

    /// [`try_acquire`](Self::try_acquire) in group-fair mode.
    #[inline]
    fn try_group_fair(&self, req: Req) -> bool {
        let me = current_addr();
        if !self.fast.uncounted(me) {
            return self.try_counted(req);
        }
        if !self.try_fast(req, State::FREE) {
            return false;
        }
        if !self.fast.uncounted(me) {
            self.settle_taken();
        }
        true
    }

    /// A group-fair acquire by a group whose holds are counted: under the mutex.
    #[cold]
    #[inline(never)]
    fn try_counted(&self, req: Req) -> bool {
        let mut released = Released::new();
        let mut line = lock(&self.line);
        let taken = self.try_fast(req, self.state.peek());
        if taken {
            self.settle(&mut line, &mut released);
        }
        drop(line);
        drop(released);
        taken
    }

    /// After a fast-path acquire whose group turned out not to be the cached one after all (it
    /// changed between the two looks): settles it under the mutex.
    #[cold]
    #[inline(never)]
    fn settle_taken(&self) {
        let mut released = Released::new();
        let mut line = lock(&self.line);
        self.settle(&mut line, &mut released);
        drop(line);
        drop(released);
    }

    /// A group-fair release while some holds are counted: the hold is given back and uncounted
    /// under the mutex, and the line is served.
    #[cold]
    #[inline(never)]
    fn release_counted(&self, held: Req) {
        serve_line(&self.line, |line| {
            self.state.change_serving(Change::Release(held));
            let mut released = Released::new();
            if let Some(g) = &mut line.groups {
                let left = AtomicState::holds_in(self.state.snapshot());
                g.release(1, left, false, &mut released);
            }
            let mut wakers = self.dispatch(line);
            wakers.released.append(&mut released);
            wakers
        });
    }

    /// The largest weight among the waiting groups of a group-fair lock; 0 otherwise.
    pub(crate) fn heaviest_waiting_weight(&self) -> u32 {
        self.heaviest.load(Ordering::Relaxed)
    }

    /// Fast path for a shared hold: one CAS when the lock is free (the first guess is "free").
    #[inline]
    pub(crate) fn try_shared(&self) -> bool {
        self.try_acquire(Req::Shared)
    }

    /// Fast path for an exclusive hold: one CAS from "free".
    #[inline]
    pub(crate) fn try_exclusive(&self) -> bool {
        self.try_acquire(Req::Exclusive)
    }

    #[inline]
    pub(crate) fn try_upgradable(&self) -> bool {
        self.try_acquire(Req::Upgradable)
    }

    /// The upgradable holder becomes the writer if it is the only reader.
    #[inline]
    pub(crate) fn try_upgrade(&self) -> bool {
        self.try_fast(Req::Upgrade, State::SOLE_UPGRADABLE)
    }

    #[inline]
    fn try_fast(&self, req: Req, guess: State) -> bool {
        match self.state.try_lock(req, guess) {
            TryLock::Acquired => true,
            TryLock::Busy => false,
            TryLock::Overflow => reader_overflow(),
        }
    }

    /// Gives back a hold of kind `held`. Without waiters this is one CAS (first guess: the caller is the
    /// only holder); with waiters the state changes under the mutex and the lock is passed on.
    #[inline]
    fn release(&self, held: Req, guess: State) {
        // A woken waiter on its way (`NOTIFIED` without `HANDOFF`) will find the lock free: the
        // release skips the line. In barging mode a release that serves the line happens under
        // the mutex, after the head's wait was checked, so a waiter past the bound gets the lock
        // before any newcomer. In hand-off mode no newcomer can take the freed lock, so it is
        // released at once and the mutex is held only to serve the line.
        // Group-fair: with no hold counted, the released one was uncounted. With waiters, every
        // release serves the line under the mutex (a shared one too), which lends anew.
        if self.group_fair && !self.fast.release_uncounted() {
            self.release_counted(held);
            return;
        }
        match self.state.release(held, guess, || self.group_fair) {
            Release::Done => {}
            Release::ServeLine => self.serve(),
            Release::UnderMutex => self.release_slow(Change::Release(held)),
        }
    }

    #[inline]
    pub(crate) fn release_shared(&self) {
        self.release(Req::Shared, State::SOLE_READER)
    }

    #[inline]
    pub(crate) fn release_exclusive(&self) {
        self.release(Req::Exclusive, State::SOLE_WRITER)
    }

    #[inline]
    pub(crate) fn release_upgradable(&self) {
        self.release(Req::Upgradable, State::SOLE_UPGRADABLE)
    }

    /// Turns the caller's exclusive hold into a shared one without ever letting the lock be free, so
    /// no writer can slip in between.
    pub(crate) fn downgrade(&self) {
        self.change(Change::Downgrade, State::SOLE_WRITER);
    }

    /// Turns the caller's exclusive hold into an upgradable one, never letting the lock be free.
    pub(crate) fn downgrade_to_upgradable(&self) {
        self.change(Change::DowngradeToUpgradable, State::SOLE_WRITER);
    }

    /// Turns the caller's upgradable hold into a plain shared one (another upgradable may now enter).
    pub(crate) fn upgradable_to_shared(&self) {
        self.change(Change::UpgradableToShared, State::SOLE_UPGRADABLE);
    }

    /// Changes the caller's hold from one kind to another. Everything in it that can panic (the
    /// wakers, and dropping them) runs after the state has changed, so a guard made for the new
    /// hold before the call releases that hold on such a panic.
    fn change(&self, change: Change, guess: State) {
        match self.state.try_change(change, guess) {
            Changed::Done => {}
            Changed::UnderMutex => self.release_slow(change),
        }
    }

    /// Applies `change` to the state under the mutex, then passes the lock on to whoever at the head
    /// of the line can now have it, and wakes them after unlocking.
    #[cold]
    fn release_slow(&self, change: Change) {
        serve_line(&self.line, |line| {
            self.state.change_serving(change);
            self.dispatch(line)
        });
    }

    /// Passes the lock on after a release that already updated the state.
    #[cold]
    fn serve(&self) {
        serve_line(&self.line, |line| self.dispatch(line));
    }

    /// Whether the lock must be handed to the head directly rather than the head woken to compete.
    fn handoff_due(&self, line: &Line, head: usize, now: &mut Option<Stamp>) -> bool {
        if self.bound.is_zero() || line.waiters.request(head) == Req::Upgrade {
            return true;
        }
        let now = *now.get_or_insert_with(|| line.waiters.now());
        line.waiters.waited(head, self.bound, now)
    }

    /// Serves the line after the state changed. In hand-off mode it grants the lock to the head for
    /// as long as the head can have it: one writer when the lock is free, or every reader up to the
    /// next waiting writer while no writer holds it. In barging mode it wakes, without granting, the
    /// head if it could have the lock now (readers behind it follow one by one, see `notify_head`),
    /// and it competes with newcomers.
    /// Clears `QUEUED` when the line empties. Must be called with the mutex held; returns the wakers
    /// to call after unlocking.
    fn dispatch(&self, line: &mut Line) -> WakeList {
        let mut wakers = WakeList::new();
        let mut now = None;
        loop {
            let Some(head) = Self::next_waiter(line) else {
                self.state.line_emptied();
                break;
            };
            if !self.handoff_due(line, head, &mut now) {
                self.state.leave_handoff();
                self.notify_head(line, head, &mut wakers);
                break;
            }
            // Hand-off: with `HANDOFF` set no newcomer may take the lock, so the word changes only
            // through this mutex's holders and holders' releases (which then run dispatch).
            match self.state.hand_over(line.waiters.request(head)) {
                HandOver::Granted => self.leave(line, head, Status::Granted, &mut wakers),
                // The waiter's own poll panics; the line moves on.
                HandOver::Overflow => self.leave(line, head, Status::Overflow, &mut wakers),
                HandOver::Busy => break,
            }
        }
        if let Some(g) = &mut line.groups {
            self.publish(g, &mut wakers.released);
        }
        wakers
    }

    /// The waiter releases serve next: the head of the line, or in group-fair mode a waiting
    /// upgrade (always at the head) and otherwise the waiter the weighted fair queue picks. A
    /// reader picked while readers hold the lock is admitted at once and the pick goes on, so the
    /// readers picked in a row form one batch; a writer picked while readers hold the lock stops
    /// the pass, and readers of later picks wait for it (phase-fair, by weight).
    fn next_waiter(line: &Line) -> Option<usize> {
        let head = line.waiters.head();
        match &line.groups {
            None => head,
            Some(_) if head.is_some_and(|h| line.waiters.request(h) == Req::Upgrade) => head,
            Some(g) => {
                let next = g.next();
                debug_assert_eq!(next.is_some(), head.is_some());
                next
            }
        }
    }

    /// Barging mode: wakes the head of the line, without granting, if it could have the lock in
    /// its current state (a writer only when the lock is free, a reader while no writer holds it)
    /// and is not awake already. Readers queued together are woken one at a time: each, once it
    /// holds the lock, wakes the next (`compete`). Woken together, all but the first would go to
    /// the releasing worker's run queue, from which idle workers would steal them, so the readers
    /// of a hot lock would stay spread over the workers and every acquire and release would move
    /// the state word's cache line between them; woken one by one from the thread that holds the lock, they follow
    /// it (BENCHMARKS.md, sync primitives). The readers queued before a waiting writer still all
    /// get in before it: it is woken only when the lock is free, and newcomer readers queue behind
    /// it (`W_WAITING`).
    fn notify_head(&self, line: &mut Line, head: usize, wakers: &mut WakeList) {
        if !self.state.would_grant(line.waiters.request(head))
            || line.waiters.status(head) != Status::Waiting
        {
            return;
        }
        if line.waiters.notified() == 0 {
            self.state.first_notified();
        }
        line.waiters.notify(head, wakers);
    }

    /// Takes `key` out of the line with a final status, keeping the writer count and `W_WAITING`.
    fn leave(&self, line: &mut Line, key: usize, status: Status, wakers: &mut WakeList) {
        let req = line.waiters.request(key);
        self.forget_writer(line, req);
        if let (Some(g), true) = (&mut line.groups, req != Req::Upgrade) {
            // A grant costs its group one unit, shared or exclusive alike.
            if status == Status::Granted {
                g.granted(key, 1, 1);
            } else {
                g.leave(key);
            }
        }
        let was_notified = line.waiters.status(key) == Status::Notified;
        line.waiters.finish(key, status, wakers);
        self.forget_notified(line, was_notified);
    }

    /// Clears `NOTIFIED` when the last woken waiter leaves the line without polling (granted by a
    /// hand-off, or cancelled).
    fn forget_notified(&self, line: &Line, was_notified: bool) {
        if was_notified && line.waiters.notified() == 0 {
            self.state.none_notified();
        }
    }

    fn forget_writer(&self, line: &mut Line, req: Req) {
        if req == Req::Exclusive {
            line.writers -= 1;
            if line.writers == 0 {
                self.state.no_writer_waiting();
            }
        }
    }

    /// Barging mode: before joining the line, waits a little for a holder on another thread to
    /// release, as a running acquirer of Go's mutex spins: most critical sections are shorter than
    /// a park and a wake. Gives up at once in hand-off mode (the head is overdue, or an upgrade
    /// waits: the line comes first) and after a bounded number of looks, so a lock held across an
    /// `.await` costs a spinner under half a microsecond. A fair lock never spins: once anyone
    /// waits its newcomers queue anyway, so a spin there only costs throughput. Returns
    /// whether it acquired.
    ///
    /// The spin adapts to how long the lock is held: a spin that acquires adds two to the lock's
    /// credit (up to a cap), one that gives up takes one away, and at zero credit only every
    /// eighth contended acquire spins (to notice holds that got shorter). So where holds outlast
    /// the spin, nearly every acquire joins the line at once.
    ///
    /// An upgrade never spins: it waits at the front of the line in hand-off mode anyway.
    #[inline(never)]
    // Under loom `SPIN_LOOKS` is 0 and the loop below never runs (the early return covers it).
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    fn spin_acquire(&self, req: Req) -> bool {
        if SPIN_LOOKS == 0 || self.bound.is_zero() || req == Req::Upgrade {
            return false;
        }
        let credit = self.spin_credit.load(Ordering::Relaxed);
        if credit == 0 && self.spin_skips.fetch_add(1, Ordering::Relaxed) % SPIN_SAMPLE_EVERY != 0 {
            return false;
        }
        let mut pause = 1;
        for _ in 0..SPIN_LOOKS {
            for _ in 0..pause {
                spin_loop();
            }
            pause *= 2;
            let s = self.state.peek();
            if s.handoff() {
                return false;
            }
            if self.try_fast(req, s) {
                self.spin_credit
                    .store((credit + 2).min(SPIN_CREDIT_MAX), Ordering::Relaxed);
                return true;
            }
        }
        self.spin_credit
            .store(credit.saturating_sub(1), Ordering::Relaxed);
        false
    }

    /// First slow-path attempt: acquires under the mutex if a newcomer may, otherwise joins the line
    /// (an upgrade at the front). Returns the line key, or `None` if the lock was acquired.
    fn acquire_or_enqueue(&self, req: Req, waker: &Waker) -> Option<usize> {
        // Cloning runs the waker's code, so not under the mutex. Declared before `line`: a clone
        // the retry below leaves unused is dropped after the mutex is unlocked.
        let waker = waker.clone();
        // Declared before `line`: groups let go of under the mutex are dropped after unlocking.
        let mut released = Released::new();
        let mut line = lock(&self.line);
        let handoff = self.bound.is_zero() || req == Req::Upgrade;
        match self.state.acquire_or_queue(req, handoff) {
            Join::Acquired => {
                // An upgrade's hold is already in the state and settled.
                if req != Req::Upgrade {
                    self.settle(&mut line, &mut released);
                }
                return None;
            }
            Join::Overflow => {
                drop(line);
                reader_overflow();
            }
            // The holder's release now takes the slow path, which needs this mutex and so sees
            // our node.
            Join::Queued => {}
        }
        if req == Req::Exclusive {
            line.writers += 1;
        }
        let since = (!self.bound.is_zero()).then(|| line.waiters.now());
        Some(if req == Req::Upgrade {
            line.waiters.push_front(req, waker, since)
        } else {
            let key = line.waiters.push_back(req, waker, since);
            if let Some(g) = &mut line.groups {
                // A thread-local read and an atomic load: no user code runs under the mutex.
                let from = current_group().map(|g| Arc::downgrade(&g));
                g.join(key, share_of_current(), from);
                self.publish(g, &mut released);
            }
            key
        })
    }

    /// `Ready(false)`: admitting this reader would overflow the reader count (the node is gone).
    fn poll_waiting(&self, key: usize, waker: &Waker) -> Poll<bool> {
        // A waiter that waits on needs a clone of `waker` in its node, unless the node holds one
        // that wakes the same task. Cloning runs the waker's code, so it is made before the mutex
        // is taken: at once if the waiter was probably woken to compete (its node gave its waker
        // up then), otherwise only once the node turns out to need it, which costs a second look
        // under the mutex.
        let mut fresh = self.state.maybe_notified().then(|| waker.clone());
        loop {
            // Declared before `line`, so dropped after it.
            let mut spent = None;
            let mut wakers = WakeList::new();
            let mut line = lock(&self.line);
            let done = match line.waiters.poll(key) {
                Status::Waiting => None,
                Status::Notified => self.compete(&mut line, key, &mut spent, &mut wakers),
                Status::Granted => return Poll::Ready(true),
                Status::Overflow => return Poll::Ready(false),
                Status::Closed => unreachable!("AsyncOneManyLock is never closed"),
            };
            let parked = done.is_some() || line.waiters.park(key, waker, &mut fresh, &mut spent);
            drop(line);
            wakers.wake_all();
            drop(spent);
            if let Some(granted) = done {
                return Poll::Ready(granted);
            }
            if parked {
                return Poll::Pending;
            }
            fresh = Some(waker.clone());
        }
    }

    /// A woken waiter's retry, under the mutex: takes the lock if it is still compatible, else
    /// waits again in the same place. The last woken waiter clears `NOTIFIED` in the same CAS, so
    /// a holder it finds releases through the mutex and wakes it again. Returns `Some(true)` if it
    /// took the lock, `Some(false)` if admitting it would overflow the reader count (either way
    /// its node is gone, and the waker the node held is in `spent`), `None` if it was overtaken.
    fn compete(
        &self,
        line: &mut Line,
        key: usize,
        spent: &mut Option<Waker>,
        wakers: &mut WakeList,
    ) -> Option<bool> {
        let last_woken = line.waiters.notified() == 0;
        let req = line.waiters.request(key);
        // Overtaken at the head past the bound: `HANDOFF` goes in with the same CAS that finds the
        // lock held, so the holder's release cannot slip by unserved.
        let overdue = || {
            line.waiters.head() == Some(key)
                && line.waiters.waited(key, self.bound, line.waiters.now())
        };
        match self.state.retry(req, last_woken, overdue) {
            Retry::Acquired => {}
            // Whoever holds the lock now releases through the slow path (`QUEUED` without
            // `NOTIFIED`, or `HANDOFF`) and wakes us again, or hands off to us if we have waited
            // past the bound.
            Retry::Overtaken => return None,
            Retry::Overflow => {
                // The node leaves the line; the rest of it is served as it was.
                *spent = line.waiters.take(key);
                return Some(false);
            }
        }
        self.forget_writer(line, req);
        *spent = line.waiters.take(key);
        // A reader wakes the next waiter, which can share with it if it is a reader (see
        // `notify_head`).
        if matches!(req, Req::Shared | Req::Upgradable) {
            if let Some(head) = line.waiters.head() {
                self.notify_head(line, head, wakers);
            }
        }
        Some(true)
    }

    /// A waiting future was dropped: leave the line, give back a grant that raced the drop, and let
    /// whoever that unblocks in (e.g. readers queued behind a cancelled writer). A dropped upgrade
    /// also gives back the upgradable hold it was holding.
    fn cancel(&self, key: usize) {
        // The node's waker, dropped after the mutex is unlocked: dropping it runs its code, which
        // may even release a hold on this lock.
        let mut spent = None;
        // Declared before the closure's lock: dropped after unlocking.
        let mut released = Released::new();
        serve_line(&self.line, |line| {
            let (status, req, waker) = line.waiters.remove(key);
            spent = waker;
            self.forget_notified(line, status == Status::Notified);
            // A grant given back (counted when granted), or an upgrade's upgradable hold: one
            // hold fewer, after the state gave it back.
            let given_back = match status {
                Status::Granted => {
                    self.state.give_back(req);
                    Some(true)
                }
                Status::Waiting | Status::Notified => {
                    self.forget_writer(line, req);
                    if req == Req::Upgrade {
                        self.state.give_back(Req::Upgradable);
                        Some(false)
                    } else {
                        if let Some(g) = &mut line.groups {
                            // Left before being served: no charge.
                            g.leave(key);
                        }
                        None
                    }
                }
                Status::Closed | Status::Overflow => None,
            };
            if let (Some(g), Some(counted_only)) = (&mut line.groups, given_back) {
                let left = AtomicState::holds_in(self.state.snapshot());
                g.release(1, left, counted_only, &mut released);
            }
            self.dispatch(line)
        });
        drop(spent);
    }
}

/// The slow-path future: waits in the line until the lock is granted for `req`.
///
/// Dropping it before completion leaves the line (and passes on a grant that already arrived). A
/// `Wait` for an upgrade owns the caller's upgradable hold until it completes: dropped unfinished, it
/// gives that hold back too.
pub(crate) struct Wait<'a> {
    raw: &'a RawOneMany,
    req: Req,
    key: usize,
    done: bool,
}

impl<'a> Wait<'a> {
    pub(crate) fn new(raw: &'a RawOneMany, req: Req) -> Self {
        Wait {
            raw,
            req,
            key: NOT_QUEUED,
            done: false,
        }
    }
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        assert!(!self.done, "lock future polled after completion");
        let ready = if self.key == NOT_QUEUED {
            if self.raw.spin_acquire(self.req) {
                self.done = true;
                return Poll::Ready(());
            }
            match self.raw.acquire_or_enqueue(self.req, cx.waker()) {
                None => true,
                Some(key) => {
                    self.key = key;
                    return Poll::Pending;
                }
            }
        } else {
            match self.raw.poll_waiting(self.key, cx.waker()) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(granted) => {
                    self.key = NOT_QUEUED;
                    if !granted {
                        self.done = true;
                        reader_overflow();
                    }
                    true
                }
            }
        };
        self.done = ready;
        Poll::Ready(())
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.key != NOT_QUEUED {
            self.raw.cancel(self.key);
        } else if !self.done && self.req == Req::Upgrade {
            self.raw.release_upgradable();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn credit(raw: &RawOneMany) -> u32 {
        raw.spin_credit.load(Ordering::Relaxed)
    }

    #[test]
    fn the_spin_backs_off_where_holds_outlast_it_and_returns_where_they_do_not() {
        let raw = RawOneMany::new(Duration::from_secs(3600));
        assert!(raw.try_exclusive());
        // Held throughout: every spin gives up, one credit each, down to zero.
        for left in (0..SPIN_CREDIT_START).rev() {
            assert!(!raw.spin_acquire(Req::Shared));
            assert_eq!(credit(&raw), left);
        }
        // At zero credit only one contended acquire in `SPIN_SAMPLE_EVERY` spins.
        for _ in 0..3 * SPIN_SAMPLE_EVERY {
            assert!(!raw.spin_acquire(Req::Shared));
        }
        assert_eq!(
            raw.spin_skips.load(Ordering::Relaxed),
            3 * SPIN_SAMPLE_EVERY
        );
        assert_eq!(credit(&raw), 0);
        // A sampled spin that acquires earns credit back, up to the cap.
        raw.release_exclusive();
        while raw.spin_skips.load(Ordering::Relaxed) % SPIN_SAMPLE_EVERY != 0 {
            assert!(!raw.spin_acquire(Req::Shared));
        }
        assert!(raw.spin_acquire(Req::Shared));
        assert_eq!(credit(&raw), 2);
        for _ in 0..SPIN_CREDIT_MAX {
            assert!(raw.spin_acquire(Req::Shared));
        }
        assert_eq!(credit(&raw), SPIN_CREDIT_MAX);
    }

    #[test]
    fn a_fair_lock_never_spins_and_a_hand_off_stops_a_spin() {
        let fair = RawOneMany::new(Duration::ZERO);
        assert!(
            !fair.spin_acquire(Req::Shared),
            "the lock is free, yet a fair lock spun"
        );
        let barging = RawOneMany::new(Duration::from_secs(3600));
        let _ = barging.state.enter_handoff();
        assert!(
            !barging.spin_acquire(Req::Shared),
            "took the lock past a hand-off"
        );
    }
}
