//! The reader-writer lock's state word: who holds the lock and the flags that decide how a release
//! serves the line, in one `AtomicUsize`.
//!
//! | bits | name | meaning and invariant |
//! |---|---|---|
//! | 0 | `WRITER` | A writer holds the lock (after an exclusive acquire, or a completed upgrade). Never set together with a reader count above zero. |
//! | 1 | `QUEUED` | The line is non-empty, so a release that may let a waiter in must look at it. Set under the mutex, by the CAS that finds the lock busy, before the node joins; cleared under the mutex once the line is empty. |
//! | 2 | `HANDOFF` | Hand-off mode: the lock is passed directly to the head of the line and no newcomer may take it, even free. Only set while `QUEUED` is; always set with it in a fair lock, and in a barging one while the head has waited past the bound or is an upgrade. |
//! | 3 | `W_WAITING` | A writer waits in line, so newcomers may not take shared holds (they would keep the reader count above zero for ever). Set with `QUEUED` by a writer joining; cleared under the mutex when the line's last writer leaves it. |
//! | 4 | `UPGRADABLE` | An upgradable hold exists; it is also counted as a reader, and excludes a second one. |
//! | 5 | `NOTIFIED` | Barging mode: at least one waiter was woken to retry and has not polled yet. Set under the mutex when the first is woken; cleared when the last stops being one: its poll clears it in the CAS that takes the lock or finds it busy, so the holder it found releases through the mutex, and a hand-off or cancel that takes it out of the line unpolled clears it under the mutex. |
//! | 6..=9 | skips | How many releases in a row skipped the line because of `NOTIFIED`, up to `SKIP_LIMIT`; each adds one in the CAS that frees its hold. Reset whenever the line is served. |
//! | 10.. | readers | The shared holds, plain and upgradable, at most [`MAX_READERS`]; the bits above stay clear, so a detected overflow never wraps. |
//!
//! While `NOTIFIED` is set (and `HANDOFF` is not), the woken waiter on its way will look at the
//! lock under the mutex, so a release need not serve the line; past `SKIP_LIMIT` such releases
//! the next one serves it anyway, and checks the head's wait, so a woken waiter whose task is slow
//! to run (its worker busy with tasks that take the lock again and again) is still handed the lock
//! once past the bound.
//!
//! The word changes only through the transitions of [`AtomicState`]. Each one that leaves the
//! caller something to do (serve the line, grant a waiter, panic on an overflow) says so in a
//! `#[must_use]` result: ignoring it would lose a hold or a wake.

use crate::shim::{AtomicUsize, Ordering};
use crate::sync::waiters::{SKIP_LIMIT, update};

const WRITER: usize = 1;
const QUEUED: usize = 1 << 1;
const HANDOFF: usize = 1 << 2;
const W_WAITING: usize = 1 << 3;
const UPGRADABLE: usize = 1 << 4;
const NOTIFIED: usize = 1 << 5;
const ONE_SKIP: usize = 1 << 6;
const SKIPS: usize = 15 * ONE_SKIP;
const SKIPS_FULL: usize = SKIP_LIMIT * ONE_SKIP;
const READER_SHIFT: u32 = 10;
const ONE_READER: usize = 1 << READER_SHIFT;
const READERS: usize = !(ONE_READER - 1);

/// The most readers that may hold the lock at once.
pub(crate) const MAX_READERS: usize = usize::MAX >> (READER_SHIFT + 1);

/// What a waiter in the line asks for, or a holder gives back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Req {
    Shared,
    Exclusive,
    Upgradable,
    /// The holder of the upgradable hold wants to become the writer; it waits at the front.
    Upgrade,
}

/// Whether a word allows a request, and the word after granting it.
enum Grant {
    To(usize),
    /// The holds in the word exclude the request.
    Busy,
    /// Granting it would take the reader count past `MAX_READERS`.
    Overflow,
}

impl Req {
    /// Grants this request in `s`. Ignores the line (`HANDOFF`, `W_WAITING`): callers check those
    /// where they apply.
    #[inline]
    fn grant(self, s: usize) -> Grant {
        let new = match self {
            Req::Shared if s & WRITER == 0 => s + ONE_READER,
            Req::Exclusive if s & (WRITER | READERS) == 0 => s | WRITER,
            Req::Upgradable if s & (WRITER | UPGRADABLE) == 0 => (s + ONE_READER) | UPGRADABLE,
            Req::Upgrade if s & READERS == ONE_READER => (s - ONE_READER - UPGRADABLE) | WRITER,
            _ => return Grant::Busy,
        };
        if matches!(self, Req::Shared | Req::Upgradable) && s >> READER_SHIFT >= MAX_READERS {
            return Grant::Overflow;
        }
        Grant::To(new)
    }

    /// The flags that stop a newcomer: one that would share with current readers must not pass a
    /// waiting writer.
    #[inline]
    fn blocked_by(self) -> usize {
        match self {
            Req::Shared | Req::Upgradable => HANDOFF | W_WAITING,
            Req::Exclusive => HANDOFF,
            Req::Upgrade => 0,
        }
    }

    /// `s` with this hold given back.
    #[inline]
    fn undo(self, s: usize) -> usize {
        match self {
            Req::Shared => s - ONE_READER,
            Req::Exclusive | Req::Upgrade => s & !WRITER,
            Req::Upgradable => (s - ONE_READER) & !UPGRADABLE,
        }
    }
}

/// A change of the caller's own hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// Gives the hold back.
    Release(Req),
    /// Exclusive to shared, never letting the lock be free.
    Downgrade,
    /// Exclusive to upgradable, never letting the lock be free.
    DowngradeToUpgradable,
    /// Upgradable to plain shared (another upgradable may enter).
    UpgradableToShared,
}

impl Change {
    #[inline]
    fn apply(self, s: usize) -> usize {
        match self {
            Change::Release(held) => held.undo(s),
            Change::Downgrade => (s & !WRITER) + ONE_READER,
            Change::DowngradeToUpgradable => ((s & !WRITER) + ONE_READER) | UPGRADABLE,
            Change::UpgradableToShared => s & !UPGRADABLE,
        }
    }
}

/// A snapshot of the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct State(usize);

impl State {
    /// Nobody holds the lock and nobody waits: the first guess of every acquire.
    pub(super) const FREE: State = State(0);
    /// The caller's shared hold is the only hold, and nobody waits.
    pub(super) const SOLE_READER: State = State(ONE_READER);
    /// The caller's exclusive hold, and nobody waits.
    pub(super) const SOLE_WRITER: State = State(WRITER);
    /// The caller's upgradable hold is the only hold, and nobody waits.
    pub(super) const SOLE_UPGRADABLE: State = State(ONE_READER | UPGRADABLE);

    /// Whether `HANDOFF` is set.
    #[inline]
    pub(super) fn handoff(self) -> bool {
        self.0 & HANDOFF != 0
    }
}

/// Whether a shared release that leaves the word `new` may let a waiter in: a writer needs the
/// readers gone, an upgrade needs only itself left. Releases that leave other readers in place
/// cannot admit anyone, so they skip the mutex even with waiters.
#[inline]
fn may_admit(new: usize) -> bool {
    let readers = new & READERS;
    readers == 0 || (readers == ONE_READER && new & UPGRADABLE != 0)
}

/// Result of [`AtomicState::try_lock`], the fast path of an acquire.
#[must_use = "a hold taken and not handed to a guard is never released"]
pub(super) enum TryLock {
    /// The hold is the caller's.
    Acquired,
    /// The lock is held in an excluding way, or the line stops newcomers.
    Busy,
    /// Granting it would overflow the reader count; nothing changed. The caller panics.
    Overflow,
}

/// Result of [`AtomicState::acquire_or_queue`], a newcomer's attempt under the mutex.
#[must_use = "a waiter marked as queued must join the line, or no release wakes it"]
pub(super) enum Join {
    /// The hold is the caller's.
    Acquired,
    /// `QUEUED` (and `HANDOFF` or `W_WAITING` where they apply) is published: the caller must join
    /// the line before it unlocks the mutex.
    Queued,
    /// Granting it would overflow the reader count; nothing changed. The caller panics.
    Overflow,
}

/// Result of [`AtomicState::retry`], a woken waiter's retry under the mutex.
#[must_use = "a hold retaken must reach the waiter, and an overflowing one must leave the line"]
pub(super) enum Retry {
    /// The hold is the waiter's: its node must leave the line.
    Acquired,
    /// Overtaken: the waiter waits again in its place (with `HANDOFF` set if it was overdue).
    Overtaken,
    /// Granting it would overflow the reader count; nothing was granted (`NOTIFIED` and the skips
    /// are cleared if it was the last woken waiter). Its node must leave the line.
    Overflow,
}

/// Result of [`AtomicState::hand_over`], a hand-off to the head of the line.
#[must_use = "a hold handed over must reach the head of the line"]
pub(super) enum HandOver {
    /// The head's hold is taken for it: its node must be granted.
    Granted,
    /// The lock cannot be had by the head now; nothing changed but `HANDOFF`.
    Busy,
    /// Granting the head would overflow the reader count; its node must leave the line.
    Overflow,
}

/// Result of [`AtomicState::release`].
#[must_use = "a release may have changed nothing, or must serve the line"]
pub(super) enum Release {
    /// Released; nobody needs serving (nobody waits, the release cannot admit anyone, or a woken
    /// waiter on its way will look at the lock; the skip is counted).
    Done,
    /// Released in hand-off mode: the caller must serve the line.
    ServeLine,
    /// Nothing changed: the caller must release under the mutex
    /// ([`change_serving`](AtomicState::change_serving)), after the head's wait is checked, and
    /// serve the line.
    UnderMutex,
}

/// Result of [`AtomicState::try_change`].
#[must_use = "a change that did not happen must happen under the mutex"]
pub(super) enum Changed {
    /// Changed; nobody waits.
    Done,
    /// Nothing changed: the caller must make the change under the mutex
    /// ([`change_serving`](AtomicState::change_serving)) and serve the line.
    UnderMutex,
}

/// The lock's state word (see the module docs for its layout).
pub(super) struct AtomicState(AtomicUsize);

impl AtomicState {
    /// Free, no flag set.
    #[cfg(not(loom))]
    pub(super) const fn new() -> Self {
        AtomicState(AtomicUsize::new(0))
    }

    /// Free, no flag set.
    #[cfg(loom)]
    pub(super) fn new() -> Self {
        AtomicState(AtomicUsize::new(0))
    }

    /// A relaxed load: a guess for [`try_lock`](Self::try_lock), or a hint.
    #[inline]
    pub(super) fn peek(&self) -> State {
        State(self.0.load(Ordering::Relaxed))
    }

    /// The word (an acquire load), for [`confirm`](Self::confirm).
    #[inline]
    pub(super) fn snapshot(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// The holds in a word [`snapshot`](Self::snapshot) returned: the readers (plain and
    /// upgradable) and the writer.
    #[inline]
    pub(super) fn holds_in(s: usize) -> usize {
        (s >> READER_SHIFT) + (s & WRITER)
    }

    /// Under the mutex, in group-fair mode: whether the word is still `s`, in a CAS that leaves
    /// it as it is (acquire and release), so every acquire whose CAS follows sees what the caller
    /// wrote before (the fast word naming a new cached group, `group_fair.rs`), and none came
    /// in between.
    #[inline]
    pub(super) fn confirm(&self, s: usize) -> bool {
        self.0
            .compare_exchange(s, s, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether `NOTIFIED` looks set: a relaxed load, a hint.
    #[inline]
    pub(super) fn maybe_notified(&self) -> bool {
        self.0.load(Ordering::Relaxed) & NOTIFIED != 0
    }

    /// Whether the word allows granting `req` now (an acquire load), overflow or not.
    #[inline]
    pub(super) fn would_grant(&self, req: Req) -> bool {
        !matches!(req.grant(self.0.load(Ordering::Acquire)), Grant::Busy)
    }

    /// The fast path of an acquire: takes a hold of kind `req` in one CAS (acquire on success) if
    /// the lock allows it and the line does not stop newcomers, starting from the guess that the
    /// word is `guess`.
    #[inline]
    pub(super) fn try_lock(&self, req: Req, guess: State) -> TryLock {
        let mut s = guess.0;
        loop {
            if s & req.blocked_by() != 0 {
                return TryLock::Busy;
            }
            let new = match req.grant(s) {
                Grant::To(new) => new,
                Grant::Busy => return TryLock::Busy,
                Grant::Overflow => return TryLock::Overflow,
            };
            match self
                .0
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return TryLock::Acquired,
                Err(actual) => s = actual,
            }
        }
    }

    /// A newcomer under the mutex: takes the hold if a newcomer may, otherwise publishes `QUEUED`
    /// in the same CAS, with `HANDOFF` if the line is to be served by hand-off from this waiter on
    /// (`handoff`: a fair lock, or an upgrade) and `W_WAITING` for a writer. Once `QUEUED` is
    /// published the holder's release takes the slow path, which needs the mutex and so finds the
    /// caller's node.
    #[inline]
    pub(super) fn acquire_or_queue(&self, req: Req, handoff: bool) -> Join {
        let queued = if handoff { QUEUED | HANDOFF } else { QUEUED };
        let writer = if req == Req::Exclusive { W_WAITING } else { 0 };
        let mut acquired = false;
        let result = update(&self.0, |s| {
            acquired = false;
            if s & req.blocked_by() == 0 {
                match req.grant(s) {
                    Grant::To(new) => {
                        acquired = true;
                        Ok(new)
                    }
                    Grant::Busy => Ok(s | queued | writer),
                    Grant::Overflow => Err(()),
                }
            } else {
                Ok(s | queued | writer)
            }
        });
        match (result, acquired) {
            (Err(()), _) => Join::Overflow,
            (Ok(_), true) => Join::Acquired,
            (Ok(_), false) => Join::Queued,
        }
    }

    /// A woken waiter's retry under the mutex: takes the hold for `req` if no hand-off is under way
    /// and the lock allows it. The last woken waiter (`last_woken`) clears `NOTIFIED` and the skip
    /// count in the same CAS, so a holder it finds releases through the mutex. Overtaken, it sets
    /// `HANDOFF` in that CAS if `overdue()` says it waited past the bound at the head (asked at
    /// most once), so the holder's release cannot slip by unserved.
    #[inline]
    pub(super) fn retry(
        &self,
        req: Req,
        last_woken: bool,
        mut overdue: impl FnMut() -> bool,
    ) -> Retry {
        let clear = if last_woken { NOTIFIED | SKIPS } else { 0 };
        let mut acquired = false;
        let mut seen_overdue = None;
        let result = update(&self.0, |s| {
            acquired = false;
            if s & HANDOFF != 0 {
                return Ok(s & !clear);
            }
            match req.grant(s) {
                Grant::To(new) => {
                    acquired = true;
                    Ok(new & !clear)
                }
                Grant::Busy => {
                    let overdue = *seen_overdue.get_or_insert_with(&mut overdue);
                    Ok((s & !clear) | if overdue { HANDOFF } else { 0 })
                }
                Grant::Overflow => Err(()),
            }
        });
        if result.is_err() {
            if clear != 0 {
                self.0.fetch_and(!clear, Ordering::AcqRel);
            }
            return Retry::Overflow;
        }
        if acquired {
            Retry::Acquired
        } else {
            Retry::Overtaken
        }
    }

    /// Hand-off under the mutex: sets `HANDOFF` if it is clear (from now on no newcomer may take
    /// the lock, so the word changes only through the mutex's holders and holders' releases, which
    /// then serve the line), then takes the head's hold for `req` if the lock allows it.
    #[inline]
    pub(super) fn hand_over(&self, req: Req) -> HandOver {
        let s = self.enter_handoff();
        match req.grant(s.0) {
            Grant::To(_) => {}
            Grant::Busy => return HandOver::Busy,
            Grant::Overflow => return HandOver::Overflow,
        }
        let granted = update(&self.0, |s| match req.grant(s) {
            Grant::To(new) => Ok(new),
            Grant::Busy => Err(HandOver::Busy),
            Grant::Overflow => Err(HandOver::Overflow),
        });
        match granted {
            Ok(_) => HandOver::Granted,
            Err(refused) => refused,
        }
    }

    /// Sets `HANDOFF` if it is clear (under the mutex, or in a test); returns the word with it set.
    #[inline]
    pub(super) fn enter_handoff(&self) -> State {
        let mut s = self.0.load(Ordering::Acquire);
        if s & HANDOFF == 0 {
            s = self.0.fetch_or(HANDOFF, Ordering::AcqRel) | HANDOFF;
        }
        State(s)
    }

    /// Under the mutex, once the head may compete again: clears `HANDOFF` if it is set.
    #[inline]
    pub(super) fn leave_handoff(&self) {
        if self.0.load(Ordering::Relaxed) & HANDOFF != 0 {
            self.0.fetch_and(!HANDOFF, Ordering::AcqRel);
        }
    }

    /// Gives back the caller's hold of kind `held`, from the guess that the word is `guess`. With
    /// nobody to serve it is one CAS (release). A release that may let a waiter in skips the line
    /// while a woken waiter is on its way (`NOTIFIED` without `HANDOFF`) and the skip count is not
    /// full, counting the skip; otherwise, in barging mode, it changes nothing and leaves the
    /// release to the mutex, and in hand-off mode (no newcomer can take the freed lock) it
    /// releases at once and leaves the serving to the caller. A shared release that leaves
    /// other readers in place cannot admit anyone and skips the line, unless `always_serve()`
    /// (group-fair mode, read only with waiters in line: every release while anyone waits goes
    /// where the loans of weight inheritance are recomputed).
    #[inline]
    pub(super) fn release(
        &self,
        held: Req,
        guess: State,
        always_serve: impl Fn() -> bool,
    ) -> Release {
        let mut s = guess.0;
        loop {
            let mut new = held.undo(s);
            let mut serve =
                s & QUEUED != 0 && (held != Req::Shared || always_serve() || may_admit(new));
            if serve && s & (NOTIFIED | HANDOFF) == NOTIFIED && s & SKIPS != SKIPS_FULL {
                serve = false;
                new += ONE_SKIP;
            }
            if serve && s & HANDOFF == 0 {
                return Release::UnderMutex;
            }
            match self
                .0
                .compare_exchange_weak(s, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) if serve => return Release::ServeLine,
                Ok(_) => return Release::Done,
                Err(actual) => s = actual,
            }
        }
    }

    /// Changes the caller's hold in one CAS (release) if the word is `guess`.
    #[inline]
    pub(super) fn try_change(&self, change: Change, guess: State) -> Changed {
        let s = guess.0;
        match self
            .0
            .compare_exchange(s, change.apply(s), Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => Changed::Done,
            Err(_) => Changed::UnderMutex,
        }
    }

    /// Under the mutex, where the line is served next: changes the caller's hold and resets the
    /// skip count.
    #[inline]
    pub(super) fn change_serving(&self, change: Change) {
        let _ = update::<()>(&self.0, |s| Ok(change.apply(s) & !SKIPS));
    }

    /// Under the mutex: a waiter cancelled after it was granted `held` gives it back, or a
    /// cancelled upgrade gives back its upgradable hold (the line is served next).
    #[inline]
    pub(super) fn give_back(&self, held: Req) {
        let _ = update::<()>(&self.0, |s| Ok(held.undo(s)));
    }

    /// Under the mutex, as the first waiter is woken to retry: sets `NOTIFIED`.
    #[inline]
    pub(super) fn first_notified(&self) {
        self.0.fetch_or(NOTIFIED, Ordering::AcqRel);
    }

    /// Under the mutex, once the last woken waiter left the line without polling (granted by a
    /// hand-off, or cancelled): clears `NOTIFIED`.
    #[inline]
    pub(super) fn none_notified(&self) {
        self.0.fetch_and(!NOTIFIED, Ordering::AcqRel);
    }

    /// Under the mutex, once the line's last writer left it: clears `W_WAITING`.
    #[inline]
    pub(super) fn no_writer_waiting(&self) {
        self.0.fetch_and(!W_WAITING, Ordering::AcqRel);
    }

    /// Under the mutex, once the line is empty: clears `QUEUED`, `HANDOFF`, `W_WAITING` and the
    /// skip count, so releases take their fast path again.
    #[inline]
    pub(super) fn line_emptied(&self) {
        self.0
            .fetch_and(!(QUEUED | HANDOFF | W_WAITING | SKIPS), Ordering::AcqRel);
    }
}
