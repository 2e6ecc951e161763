//! The semaphore's state word: the free permits and the flags that decide how a release serves the
//! line, in one `AtomicUsize`.
//!
//! | bits | name | meaning and invariant |
//! |---|---|---|
//! | 0 | `CLOSED` | [`Semaphore::close`](super::Semaphore::close) was called. Set once, never cleared; no acquire takes permits once it is set. |
//! | 1 | `QUEUED` | The line is non-empty, so a release must look at it. Set under the mutex, by the CAS that finds the permits short, before the node joins; cleared under the mutex once the line is empty. |
//! | 2 | `HANDOFF` | Hand-off mode: released permits go to the head of the line, and no newcomer may take free permits. Only set while `QUEUED` is; always set with it in a fair semaphore, and in a barging one while the head has waited past the bound. |
//! | 3 | `NOTIFIED` | Barging mode: at least one waiter was woken to compete for free permits and has not polled yet. Set under the mutex when the first is woken; cleared when the last stops being one: its poll clears it in the CAS that takes the permits or finds them gone, so the holders it found release through the mutex, and a hand-off or cancel that takes it out of the line unpolled clears it under the mutex. |
//! | 4..=7 | skips | How many releases in a row skipped the line because of `NOTIFIED`, up to `SKIP_LIMIT`; each adds one in the CAS that publishes its permits. Reset whenever the line is served. |
//! | 8.. | free | The free permits, at most [`MAX_PERMITS`]. |
//!
//! While `NOTIFIED` is set, the woken waiters on their way will look at the permits under the
//! mutex, so a release need not serve the line while every free permit, its own included, is
//! promised to them (`Semaphore::promised`); past `SKIP_LIMIT` such releases the next one serves
//! the line anyway and checks the head's wait. Every woken waiter's poll wakes the waiters that
//! free permits nobody is promised can serve.
//!
//! The word changes only through the transitions of [`AtomicState`]. Each one that leaves the
//! caller something to do (serve the line, give permits to a waiter) says so in a `#[must_use]`
//! result: ignoring it would lose permits or a wake.

use crate::shim::{AtomicUsize, Ordering};
use crate::sync::waiters::{SKIP_LIMIT, update};

const CLOSED: usize = 1;
const QUEUED: usize = 1 << 1;
const HANDOFF: usize = 1 << 2;
const NOTIFIED: usize = 1 << 3;
const ONE_SKIP: usize = 1 << 4;
const SKIPS: usize = 15 * ONE_SKIP;
const SKIPS_FULL: usize = SKIP_LIMIT * ONE_SKIP;
const SHIFT: u32 = 8;
/// The flag bits below the permits.
const FLAGS: usize = (1 << SHIFT) - 1;

/// The most free permits the word can count.
pub(super) const MAX_PERMITS: usize = usize::MAX >> SHIFT;

/// `s` with `n` more free permits. The sum cannot exceed `MAX_PERMITS` (see
/// `Semaphore::circulating`); the clamp only keeps a broken invariant from wrapping the word.
#[inline]
fn add(s: usize, n: usize) -> usize {
    let free = (s >> SHIFT).saturating_add(n).min(MAX_PERMITS);
    debug_assert_eq!(free, (s >> SHIFT) + n, "more permits than were ever added");
    (free << SHIFT) | (s & FLAGS)
}

/// Result of [`AtomicState::try_take`], the fast path of an acquire.
#[must_use = "permits taken and not handed to a permit are lost"]
pub(super) enum Take {
    /// The permits are the caller's.
    Taken,
    /// Too few permits are free, or (unless zero were asked for) the line is being handed off to.
    Short,
    /// The semaphore is closed.
    Closed,
}

impl Take {
    /// As the result of a `try_acquire`.
    #[inline]
    pub(super) fn ok(self) -> Result<(), crate::sync::TryAcquireError> {
        match self {
            Take::Taken => Ok(()),
            Take::Short => Err(crate::sync::TryAcquireError::NoPermits),
            Take::Closed => Err(crate::sync::TryAcquireError::Closed),
        }
    }
}

/// Result of [`AtomicState::take_or_queue`], a newcomer's attempt under the mutex.
#[must_use = "a waiter marked as queued must join the line, or no release wakes it"]
pub(super) enum Join {
    /// The permits are the caller's.
    Taken,
    /// `QUEUED` is published: the caller must join the line before it unlocks the mutex.
    Queued,
    /// The semaphore is closed; nothing changed.
    Closed,
}

/// Result of [`AtomicState::retake`], a woken waiter's retry under the mutex.
#[must_use = "permits retaken and not handed to the waiter are lost"]
pub(super) enum Retake {
    /// The permits are the waiter's: its node must leave the line.
    Taken,
    /// Overtaken: the waiter waits again in its place (with `HANDOFF` set if it was overdue).
    Overtaken,
}

/// Result of [`AtomicState::hand_over`], a hand-off to the head of the line.
#[must_use = "permits handed over must reach the head of the line"]
pub(super) enum HandOver {
    /// The head's permits are taken for it: its node must be granted.
    Granted,
    /// Too few permits are free; nothing changed.
    Short,
}

/// Result of [`AtomicState::put`], a release that publishes its permits at once.
#[must_use = "a release that finds waiters must serve the line, or a wake is lost"]
pub(super) enum Put {
    /// Published; nobody was in line.
    Done,
    /// Published while `QUEUED` was set: the caller must serve the line.
    ServeLine,
}

/// Result of [`AtomicState::put_past_line`], a barging release that found waiters in line a
/// moment ago.
#[must_use = "a release may have published nothing, or must serve the line"]
pub(super) enum PutPastLine {
    /// Published; nobody needs serving (the line is empty, or the woken waiters on their way are
    /// promised every free permit; the skip is counted).
    Done,
    /// Published in hand-off mode, or after the line emptied: the caller must serve the line.
    ServeLine,
    /// Nothing published: the caller must publish under the mutex
    /// ([`put_serving`](AtomicState::put_serving)), after the head's wait is checked, and serve the
    /// line.
    UnderMutex,
}

/// The semaphore's state word (see the module docs for its layout).
pub(super) struct AtomicState(AtomicUsize);

impl AtomicState {
    /// `permits` free, no flag set.
    #[cfg(not(loom))]
    pub(super) const fn new(permits: usize) -> Self {
        AtomicState(AtomicUsize::new(permits << SHIFT))
    }

    /// `permits` free, no flag set.
    #[cfg(loom)]
    pub(super) fn new(permits: usize) -> Self {
        AtomicState(AtomicUsize::new(permits << SHIFT))
    }

    /// The free permits (an acquire load).
    #[inline]
    pub(super) fn free(&self) -> usize {
        self.0.load(Ordering::Acquire) >> SHIFT
    }

    /// The word (an acquire load), for [`confirm`](Self::confirm).
    #[inline]
    pub(super) fn snapshot(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// The free permits in a word [`snapshot`](Self::snapshot) returned.
    #[inline]
    pub(super) fn free_in(s: usize) -> usize {
        s >> SHIFT
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

    /// Whether `CLOSED` is set (an acquire load).
    #[inline]
    pub(super) fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Whether `HANDOFF` is set (an acquire load).
    #[inline]
    pub(super) fn in_handoff(&self) -> bool {
        self.0.load(Ordering::Acquire) & HANDOFF != 0
    }

    /// Whether `QUEUED` looks set: a relaxed load, a hint for choosing a path. Every path that acts
    /// on `QUEUED` reads it again in its own read-modify-write.
    #[inline]
    pub(super) fn maybe_queued(&self) -> bool {
        self.0.load(Ordering::Relaxed) & QUEUED != 0
    }

    /// Whether `NOTIFIED` looks set: a relaxed load, a hint.
    #[inline]
    pub(super) fn maybe_notified(&self) -> bool {
        self.0.load(Ordering::Relaxed) & NOTIFIED != 0
    }

    /// The fast path of an acquire: takes `n` permits in one CAS (acquire on success) if they are
    /// free, the semaphore is open and no hand-off is under way. `n == 0` takes nothing from anyone,
    /// so it need not wait its turn.
    #[inline]
    pub(super) fn try_take(&self, n: usize) -> Take {
        let take = n << SHIFT;
        let mut s = self.0.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 {
                return Take::Closed;
            }
            // `s < take` compares the free permits: the flags sit below them.
            if (s & HANDOFF != 0 && n != 0) || s < take {
                return Take::Short;
            }
            match self
                .0
                .compare_exchange_weak(s, s - take, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Take::Taken,
                Err(actual) => s = actual,
            }
        }
    }

    /// A newcomer under the mutex: takes `n` permits if a newcomer may (free, no hand-off),
    /// otherwise publishes `QUEUED` in the same CAS, and `HANDOFF` with it if the line is to be
    /// served by hand-off from its first waiter on (`fair`). Once `QUEUED` is published every
    /// release takes the slow path, which needs the mutex and so finds the caller's node.
    #[inline]
    pub(super) fn take_or_queue(&self, n: usize, fair: bool) -> Join {
        let take = n << SHIFT;
        let queued = if fair { QUEUED | HANDOFF } else { QUEUED };
        let mut taken = false;
        let closed = update(&self.0, |s| {
            if s & CLOSED != 0 {
                return Err(());
            }
            taken = s & HANDOFF == 0 && s >= take;
            Ok(if taken { s - take } else { s | queued })
        });
        match (closed, taken) {
            (Err(()), _) => Join::Closed,
            (Ok(_), true) => Join::Taken,
            (Ok(_), false) => Join::Queued,
        }
    }

    /// A woken waiter's retry under the mutex: takes its `n` permits if no hand-off is under way,
    /// the semaphore is open and at least `need` permits are free (`need`: what the waiters from
    /// the head through this one ask for together; `None` when it already exceeded the free
    /// permits). The last woken waiter (`last_woken`) clears `NOTIFIED` and the skip count in the
    /// same CAS, so holders it finds release through the mutex. Overtaken, it sets `HANDOFF` in
    /// that CAS if `overdue()` says it waited past the bound at the head (asked at most once), so
    /// no release slips by unserved in between.
    #[inline]
    pub(super) fn retake(
        &self,
        n: usize,
        need: Option<usize>,
        last_woken: bool,
        mut overdue: impl FnMut() -> bool,
    ) -> Retake {
        let clear = if last_woken { NOTIFIED | SKIPS } else { 0 };
        let take = n << SHIFT;
        let mut taken = false;
        let mut seen_overdue = None;
        let _ = update::<()>(&self.0, |s| {
            taken = s & (HANDOFF | CLOSED) == 0 && need.is_some_and(|need| s >> SHIFT >= need);
            if taken {
                return Ok((s - take) & !clear);
            }
            let overdue = *seen_overdue.get_or_insert_with(&mut overdue);
            Ok((s & !clear) | if overdue { HANDOFF } else { 0 })
        });
        if taken {
            Retake::Taken
        } else {
            Retake::Overtaken
        }
    }

    /// Hand-off under the mutex: takes the head's `n` permits for it if they are free. `HANDOFF`
    /// stops every fast path, but `forget_permits` may still take free permits, hence a checked
    /// update.
    #[inline]
    pub(super) fn hand_over(&self, n: usize) -> HandOver {
        let taken = update(&self.0, |s| {
            if s >> SHIFT >= n {
                Ok(s - (n << SHIFT))
            } else {
                Err(())
            }
        });
        match taken {
            Ok(_) => HandOver::Granted,
            Err(()) => HandOver::Short,
        }
    }

    /// A release's fast path: publishes `n` permits with one `fetch_add` (release). No overflow
    /// check: see `Semaphore::circulating`.
    #[inline]
    pub(super) fn put(&self, n: usize) -> Put {
        let prev = self.0.fetch_add(n << SHIFT, Ordering::Release);
        if prev & QUEUED != 0 {
            Put::ServeLine
        } else {
            Put::Done
        }
    }

    /// A barging release that saw waiters in line. While the line is served by waking (no
    /// `HANDOFF`), it publishes nothing and leaves the release to the mutex, unless a woken waiter
    /// is on its way (`NOTIFIED`), the skip count is not full and the free permits, these `n`
    /// included, are all promised to woken waiters (`promised()`): then it publishes them and
    /// counts a skip. In hand-off mode, or once the line is empty, it publishes them at once.
    /// Every CAS is a release.
    #[inline]
    pub(super) fn put_past_line(&self, n: usize, promised: impl Fn() -> usize) -> PutPastLine {
        let mut s = self.0.load(Ordering::Relaxed);
        loop {
            if s & (QUEUED | HANDOFF) == QUEUED {
                let covered = (s >> SHIFT) + n <= promised();
                if s & NOTIFIED == 0 || s & SKIPS == SKIPS_FULL || !covered {
                    return PutPastLine::UnderMutex;
                }
                match self.0.compare_exchange_weak(
                    s,
                    add(s, n) + ONE_SKIP,
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return PutPastLine::Done,
                    Err(actual) => s = actual,
                }
                continue;
            }
            match self
                .0
                .compare_exchange_weak(s, add(s, n), Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) if s & QUEUED != 0 => return PutPastLine::ServeLine,
                Ok(_) => return PutPastLine::Done,
                Err(actual) => s = actual,
            }
        }
    }

    /// A release under the mutex, where the line is served next: publishes `n` permits and resets
    /// the skip count.
    #[inline]
    pub(super) fn put_serving(&self, n: usize) {
        let _ = update::<()>(&self.0, |s| Ok(add(s, n) & !SKIPS));
    }

    /// Under the mutex: a waiter cancelled after it was handed `n` permits gives them back (the
    /// line is served next).
    #[inline]
    pub(super) fn give_back(&self, n: usize) {
        let _ = update::<()>(&self.0, |s| Ok(add(s, n)));
    }

    /// Removes up to `n` free permits; returns how many it removed, which the caller must take out
    /// of the permits in existence.
    #[inline]
    #[must_use = "the removed permits must leave the count of permits in existence"]
    pub(super) fn forget(&self, n: usize) -> usize {
        let prev = update::<()>(&self.0, |s| {
            let k = n.min(s >> SHIFT);
            Ok(s - (k << SHIFT))
        });
        let free = prev.map_or(0, |s| s >> SHIFT);
        n.min(free)
    }

    /// Under the mutex, while the head must be handed permits: sets `HANDOFF` if it is clear.
    #[inline]
    pub(super) fn enter_handoff(&self) {
        if self.0.load(Ordering::Relaxed) & HANDOFF == 0 {
            self.0.fetch_or(HANDOFF, Ordering::AcqRel);
        }
    }

    /// Under the mutex, once the head may compete again: clears `HANDOFF` if it is set.
    #[inline]
    pub(super) fn leave_handoff(&self) {
        if self.0.load(Ordering::Relaxed) & HANDOFF != 0 {
            self.0.fetch_and(!HANDOFF, Ordering::AcqRel);
        }
    }

    /// Under the mutex, as the first waiter is woken to compete: sets `NOTIFIED`.
    #[inline]
    pub(super) fn first_notified(&self) {
        self.0.fetch_or(NOTIFIED, Ordering::AcqRel);
    }

    /// Under the mutex, once the last woken waiter left the line without polling (handed its
    /// permits, or cancelled): clears `NOTIFIED`.
    #[inline]
    pub(super) fn none_notified(&self) {
        self.0.fetch_and(!NOTIFIED, Ordering::AcqRel);
    }

    /// Under the mutex, once the line is empty: clears `QUEUED`, `HANDOFF`, `NOTIFIED` and the
    /// skip count, so releases take their fast path again.
    #[inline]
    pub(super) fn line_emptied(&self) {
        self.0
            .fetch_and(!(QUEUED | HANDOFF | NOTIFIED | SKIPS), Ordering::AcqRel);
    }

    /// Under the mutex: sets `CLOSED`. The caller then closes every waiter's node and empties the
    /// line ([`line_emptied`](Self::line_emptied)).
    #[inline]
    pub(super) fn close(&self) {
        self.0.fetch_or(CLOSED, Ordering::AcqRel);
    }
}
