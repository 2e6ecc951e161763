//! Group-fair waiting: the weighted fair queue over waiting groups that
//! [`Semaphore::group_fair`](super::Semaphore::group_fair) and
//! [`AsyncOneManyLock::group_fair`](super::AsyncOneManyLock::group_fair) serve their line by.
//!
//! # Protocol
//!
//! A group-fair primitive is a fair (hand-off) primitive whose releases pick the next waiter to
//! serve here instead of taking the head of the FIFO line. Everything below runs under the
//! primitive's internal mutex; nothing here is atomic but the published heaviest weight.
//!
//! 1. **Shares.** Each waiter belongs to a *share*: the group of the task that polled the acquire
//!    first, found by [`share_of_current`] (the one place that decides identity and weight). A
//!    waiter outside any group (a thread outside the runtime, `block_on`, another executor) belongs
//!    to one more share of weight 1, common to all of them.
//! 2. **Tags.** Each share has a virtual finish tag. A grant of `n` (permits for the semaphore, one
//!    per grant for the lock) advances its share's tag by `n / weight` (fixed point).
//! 3. **Pick.** The next waiter is the head of the waiting share with the smallest tag; equal tags
//!    go to the share whose head joined first. Within a share, waiters are served in FIFO order.
//! 4. **Virtual time.** The line's virtual time is the tag of the share last picked (so it only
//!    grows). A share that starts waiting enters at the virtual time, or at its own tag if that is
//!    later (it was granted ahead of the others just before it went idle): an idle share banks no
//!    credit and sheds no debt. An idle share is forgotten once the virtual time passes its tag.
//! 5. **Leaving.** A cancelled waiter leaves its share without a charge; a waiter that was granted
//!    and then cancelled was charged, and gives the grant back through the primitive as usual.
//!
//! Costs, all under the mutex and only on the slow path: picking, charging and publishing the
//! heaviest weight scan the shares, O(shares) per grant, with one entry per group that has a
//! waiter (and per recently served idle group); a cancelled waiter is found in its share's FIFO
//! by a scan of that FIFO. The fast paths (an uncontended acquire, a release with nobody in line)
//! never look at the queue. For weight inheritance (below) they add two loads of one word and a
//! thread-local read to the acquire and one load to the release, and no atomic read-modify-write,
//! as long as the holds are those of the primitive's cached group; a hold of another group is
//! taken and released under the mutex, O(holder groups) there. The other modes read one
//! immutable flag and skip all of it.
//!
//! # Heaviest waiter
//!
//! After every change the line publishes the largest weight among its waiting shares in an atomic
//! the primitive owns, readable without the mutex (`heaviest_waiting_weight`).
//!
//! # Weight inheritance
//!
//! A holder runs at its heaviest waiter's weight, charged to its own group, until it releases.
//! A hold belongs to the group of the task that takes it (its own group, not the top-level one;
//! outside any group, to none). The holds are known in two parts:
//!
//! - **Uncounted holds**, all of one group, the primitive's *cached* group: nothing records them
//!   one by one. Their number is the holds the state word shows (the lock's readers and writer;
//!   the semaphore's permits in existence minus the free ones) minus the counted holds, which is
//!   exact under the mutex: every change of the counted holds happens there together with its
//!   change of the state word, and so does every change of the semaphore's permits in existence
//!   (`add_permits`, `forget_permits` and a permit's `forget` take the mutex in this mode).
//! - **Counted holds**: one entry per other group holding the resource, with how many holds it
//!   has and the weight lent to it, under the mutex.
//!
//! The fast paths read the *fast word* (`FastHolds`), written only under the mutex: the cached
//! group's address (0 for outside any group), `COUNTED` (some holds are counted) and `SWITCHING`
//! (the cached group is changing).
//!
//! 1. **Taking.** An acquire reads the current group's address (a thread-local) and the fast
//!    word. If the word names that group (and `SWITCHING` is clear), it takes the hold with the
//!    primitive's usual CAS and reads the word again: if the word still names its group, the hold
//!    is uncounted and the acquire is done. Otherwise (before the CAS: the hold is then taken
//!    under the mutex; after it, in a race with a switch) the hold *settles* under the mutex: it
//!    stays uncounted if its group is the cached one by then; if the uncounted holds are only its
//!    own, the cached group switches to its group (below); otherwise it is counted for its group.
//!    A waiter granted under the mutex is counted in the same step, for the group it joined from
//!    (kept from its join as a weak reference).
//! 2. **Switching.** Under the mutex, the settling acquire reads the state word `s`, stores the
//!    fast word with its group and `SWITCHING`, and confirms with a CAS of `s` to `s` (acquire and
//!    release). If the CAS succeeds, no hold was taken since `s` was read, so the uncounted holds
//!    are its own only, and every acquire whose CAS comes later reads the new word after its CAS
//!    and so never counts itself for the old group. If it fails, the hold is counted instead.
//!    Either way the line then publishes the fast word without `SWITCHING`. An acquire that read
//!    the old group before its CAS and the new one after it settles under the mutex (counted);
//!    until it gets there, its hold counts as one of the cached group's.
//! 3. **Releasing.** A release reads the fast word: with `COUNTED` clear, every hold is
//!    uncounted, so the release is the fair mode's (with waiters in line it serves the line under
//!    the mutex, and in this mode a shared release that leaves other readers in place does too,
//!    so every release while anyone waits ends up where loans are recomputed). With `COUNTED`
//!    set, it gives its hold back under the mutex, and takes it off the entry of the releasing
//!    task's group, or, when that group has none (the permit or guard moved to another group or
//!    thread), off the uncounted holds, or off any entry. A grant given back by a cancelled waiter
//!    comes off the counted entries only. The entries' total is always the holds counted, so each
//!    loan ends at the latest when the last hold is released.
//! 4. **Lending.** After every change of the waiters or the holders (the line *publishes*), each
//!    counted entry with a group is lent the heaviest waiting weight
//!    ([`GroupInner::lend_weight`], on the group and each of its ancestors, so in a tenant tree
//!    the whole path to the holder runs at it), and so is the cached group while any hold is
//!    uncounted; a loan is returned when nobody waits or its holds are gone. A loan is changed
//!    only when that weight changes: return, then lend. Each entry, and the cached group, has at
//!    most one loan out, so each is returned exactly once. A waiter's weight is its top-level
//!    group's own weight, not one lent to it: a holder's loan is not passed on to the holders of
//!    what it waits for in turn.
//! 5. **Lifetimes.** A guard may outlive its task and its group's handles. A counted entry and
//!    a loan hold a strong reference to their group; the cached group is kept as a weak one (its
//!    allocation, and so its address, stays taken while it is cached, so no other group can be
//!    mistaken for it), upgraded only to lend to it: a cached group that is gone is lent nothing.
//!
//! Lock order: the primitive's mutex, then a group's scheduling lock (`lend_weight`,
//! `return_weight`, reading a waiter's own weight). The scheduler never takes a primitive's
//! mutex, so this cannot deadlock. No group is dropped under the mutex: a group whose entry or
//! loan ends is handed back to the caller to drop after unlocking (with the wakers), and waiters
//! and the cache keep only weak references.
//!
//! [`GroupInner::lend_weight`]: crate::group::GroupInner::lend_weight

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use crate::group::GroupInner;
use crate::shim::{AtomicU32, AtomicUsize, Ordering};

/// The identity and weight of the share a waiter waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShareKey {
    /// Unique among the shares waiting at one time.
    pub(crate) id: usize,
    /// At least 1.
    pub(crate) weight: u32,
}

/// The share of waiters outside any group.
pub(crate) const OUTSIDE: ShareKey = ShareKey { id: 0, weight: 1 };

/// The share of the code running on this thread: the top-level group above the current task's
/// group (the group itself if it is top-level), identified by the address of its shared state
/// (unique among live groups of every runtime; a waiting task keeps its group, and so its
/// ancestors, alive) and weighted by its weight; [`OUTSIDE`] when no group is current. With
/// tenant trees, tenants wait by their weights, and a tenant's connections and requests wait
/// in its one share, first come first served: opening more of them buys no more grants.
pub(crate) fn share_of_current() -> ShareKey {
    #[cfg(all(test, loom))]
    if let Some(k) = loom_share::get() {
        return k;
    }
    crate::group::with_current(|g| match g {
        Some(g) => {
            let top = g.top();
            ShareKey {
                id: top as *const crate::group::GroupInner as usize,
                // Its own weight, not one lent to it (see "Weight inheritance").
                weight: top.weight().max(1),
            }
        }
        None => OUTSIDE,
    })
}

/// The group of the task being polled on this thread (a new reference), if any: the group a hold
/// taken here is counted for.
pub(crate) fn current_group() -> Option<Arc<GroupInner>> {
    crate::group::with_current(|g| g.cloned())
}

/// The address of the current task's group, 0 outside any group: the identity holder entries and
/// the uncounted holds' group are known by. A thread-local read.
#[inline]
pub(crate) fn current_addr() -> usize {
    #[cfg(all(test, loom))]
    if let Some(k) = loom_share::get() {
        // Clear of the fast word's flags, as a group's address is.
        return k.id << 2;
    }
    crate::group::with_current(|g| g.map_or(0, |g| Arc::as_ptr(g) as usize))
}

/// The current task's group as a weak reference: the uncounted holds' group, kept by address.
fn current_weak() -> Option<Weak<GroupInner>> {
    crate::group::with_current(|g| g.map(Arc::downgrade))
}

/// The fast paths' view of the holders, one word written only under the primitive's mutex:
/// the address of the group whose holds go uncounted (0: outside any group), and two flags.
/// See "The uncounted holds" in the module docs.
pub(crate) struct FastHolds(AtomicUsize);

/// Some holds are counted by group: a release must go through the mutex to uncount its own.
const COUNTED: usize = 1;
/// The uncounted holds are changing group: no acquire may count itself uncounted now.
const SWITCHING: usize = 2;

impl FastHolds {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        FastHolds(AtomicUsize::new(0))
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        FastHolds(AtomicUsize::new(0))
    }

    /// Whether a hold taken by the group at `me` (a [`current_addr`]) goes uncounted: a relaxed
    /// load. Read before the acquire's CAS (a hold of another group is taken under the mutex
    /// instead) and after it (the word as of the CAS, see the module docs).
    #[inline]
    pub(crate) fn uncounted(&self, me: usize) -> bool {
        self.0.load(Ordering::Relaxed) & !COUNTED == me
    }

    /// Whether a release may skip the mutex: no hold is counted by group, so the released one
    /// was uncounted. A relaxed load.
    #[inline]
    pub(crate) fn release_uncounted(&self) -> bool {
        self.0.load(Ordering::Relaxed) & COUNTED == 0
    }

    /// Under the mutex, before the state CAS that confirms a switch to `me`: every acquire that
    /// reads the word now takes the mutex path.
    pub(crate) fn begin_switch(&self, me: usize) {
        self.0.store(me | SWITCHING | COUNTED, Ordering::Relaxed);
    }

    fn set(&self, word: usize) {
        self.0.store(word, Ordering::Relaxed);
    }

    /// For tests: the word's flags (`COUNTED` 1, `SWITCHING` 2).
    #[cfg(test)]
    pub(crate) fn flags(&self) -> usize {
        self.0.load(Ordering::Relaxed) & (COUNTED | SWITCHING)
    }
}

/// Under loom no task runs in a group: a model names the share of each of its threads here.
#[cfg(all(test, loom))]
pub(crate) mod loom_share {
    use super::ShareKey;
    use std::cell::Cell;

    loom::thread_local! {
        static SHARE: Cell<Option<ShareKey>> = Cell::new(None);
    }

    /// Makes the calling loom thread's waiters wait in `k`.
    pub(crate) fn set(k: ShareKey) {
        SHARE.with(|s| s.set(Some(k)));
    }

    pub(super) fn get() -> Option<ShareKey> {
        SHARE.with(Cell::get)
    }
}

/// Fixed-point unit of the tags: a grant of `n` to a share of weight `w` costs `n * UNIT / w`.
/// `UNIT` is a multiple of every weight up to 16 (720720 is their least common multiple) and of
/// 2^40, so those costs are exact and shares of such weights tie exactly where their grants do;
/// other weights round down by less than a 2^-60 part of a grant. `n` is at most 2^56
/// (`Semaphore::MAX_PERMITS`), so one cost is below 2^116, and tags saturate rather than wrap.
const UNIT: u128 = 720_720 << 40;

struct Share {
    key: ShareKey,
    /// The virtual finish tag.
    finish: u128,
    /// Line keys with the order each joined in, oldest first.
    waiters: VecDeque<(usize, u64)>,
}

/// One group's holds on a group-fair primitive and the weight lent to it for them.
struct Holder {
    /// `None` for holds taken outside any group (never lent anything).
    group: Option<Arc<GroupInner>>,
    /// Permits, or lock holds; at least 1 while the entry exists.
    holds: usize,
    /// The weight lent to `group` and its ancestors for these holds, 0 for none.
    lent: u32,
}

impl Holder {
    fn id(&self) -> Option<usize> {
        self.group.as_ref().map(|g| Arc::as_ptr(g) as usize)
    }

    /// Lends `want` (0: nothing) instead of what is lent now: the old loan is returned, the new
    /// one lent, on the group and each of its ancestors.
    fn lend(&mut self, want: u32) {
        let Some(g) = &self.group else { return };
        if self.lent == want {
            return;
        }
        let mut at = Some(g);
        while let Some(x) = at {
            if self.lent != 0 {
                x.return_weight();
            }
            if want != 0 {
                x.lend_weight(want);
            }
            at = x.parent();
        }
        self.lent = want;
    }
}

/// Groups whose entry or loan ended under the mutex, to drop after unlocking (dropping a group
/// may drop tasks, whose futures may use the very primitive).
pub(crate) type Released = Vec<Arc<GroupInner>>;

/// The weighted fair queue over the waiting shares of one primitive, and its holders (see the
/// module docs).
pub(crate) struct GroupLine {
    shares: Vec<Share>,
    /// The share of each waiting line key, indexed by key (line keys are small slab indices).
    owner: Vec<usize>,
    /// The group each waiting line key joined from (counted as a holder when it is granted).
    joined_from: Vec<Option<Weak<GroupInner>>>,
    vtime: u128,
    /// Join counter, for FIFO order within a share and ties between shares.
    joined: u64,
    /// The counted holds, by group, with their loans ("Weight inheritance").
    holders: Vec<Holder>,
    /// The holds in `holders`, all entries together.
    counted: usize,
    /// The weight lent to every holder entry with a group: the heaviest waiting weight when the
    /// line last published.
    lending: u32,
    /// The address of the group the uncounted holds belong to (0: outside any group), as in
    /// [`FastHolds`].
    cached: usize,
    /// That group, weakly: its allocation stays, so no other group takes its address while it
    /// is cached; upgraded only to lend to it.
    cached_group: Option<Weak<GroupInner>>,
    /// The loan to the cached group for the uncounted holds; `group` is set only while lent.
    uncounted_loan: Holder,
    /// The weight lent for the uncounted holds, 0 for none (also where their group is gone or
    /// they are outside any group, so nothing is lent to anyone).
    uncounted_lent: u32,
}

impl GroupLine {
    pub(crate) const fn new() -> Self {
        GroupLine {
            shares: Vec::new(),
            owner: Vec::new(),
            joined_from: Vec::new(),
            vtime: 0,
            joined: 0,
            holders: Vec::new(),
            counted: 0,
            lending: 0,
            cached: 0,
            cached_group: None,
            uncounted_loan: Holder {
                group: None,
                holds: 0,
                lent: 0,
            },
            uncounted_lent: 0,
        }
    }

    /// For tests: the holds counted by group, and the weight lent for the uncounted holds.
    #[cfg(test)]
    pub(crate) fn inheritance(&self) -> (usize, u32) {
        (self.counted, self.uncounted_lent)
    }

    /// For tests: whether the loan for the uncounted holds is what `publish` would make it now,
    /// with `held` holds in the state: the heaviest waiting weight while some are uncounted,
    /// none otherwise.
    #[cfg(test)]
    pub(crate) fn uncounted_loan_is_current(&self, held: usize) -> bool {
        let want = if held > self.counted {
            self.heaviest()
        } else {
            0
        };
        self.uncounted_lent == want
    }

    /// Settles `n` holds the current task's group took, already in the primitive's state (`held`
    /// holds in all) and not counted yet: they stay uncounted if its group is the cached one; if
    /// they are the only uncounted holds and `confirm` (the state CAS, after the fast word named
    /// the switch) succeeds, its group becomes the cached one; otherwise they are counted for it.
    /// The old cached group's loan, if one ends, goes into `released`. The caller publishes next.
    pub(crate) fn settle(
        &mut self,
        n: usize,
        held: usize,
        fast: &FastHolds,
        confirm: impl FnOnce() -> bool,
        released: &mut Released,
    ) {
        let me = current_addr();
        if me == self.cached {
            return;
        }
        debug_assert!(
            held >= self.counted + n,
            "uncounted holds missing from the state"
        );
        if held.saturating_sub(self.counted) == n {
            fast.begin_switch(me);
            if confirm() {
                self.end_uncounted_loan(released);
                self.cached = me;
                self.cached_group = current_weak();
                return;
            }
        }
        self.hold(current_group(), n);
    }

    fn end_uncounted_loan(&mut self, released: &mut Released) {
        self.uncounted_lent = 0;
        self.uncounted_loan.lend(0);
        released.extend(self.uncounted_loan.group.take());
    }

    /// Counts `n` holds for `group` (the taker's group, or the group a granted waiter joined
    /// from), lent the current heaviest waiting weight at once if anyone waits.
    pub(crate) fn hold(&mut self, group: Option<Arc<GroupInner>>, n: usize) {
        if n == 0 {
            return;
        }
        let id = group.as_ref().map(|g| Arc::as_ptr(g) as usize);
        let lending = self.lending;
        self.counted += n;
        match self.holders.iter_mut().find(|h| h.id() == id) {
            // `group` is dropped here: the entry holds another reference, so never the last.
            Some(h) => h.holds += n,
            None => {
                let mut h = Holder {
                    group,
                    holds: n,
                    lent: 0,
                };
                h.lend(lending);
                self.holders.push(h);
            }
        }
    }

    /// `n` holds were released (the primitive's state holds `held_after` now): they come off
    /// the releasing task's group's entry, then (unless `counted_only`: a grant given back, which
    /// was counted) off the uncounted holds, then off any entries (a permit or guard that moved
    /// to another group or thread). An entry left with none returns its loan and goes, its group
    /// into `released`.
    pub(crate) fn release(
        &mut self,
        mut n: usize,
        held_after: usize,
        counted_only: bool,
        released: &mut Released,
    ) {
        let id = current_addr();
        let own = self.holders.iter().position(|h| h.id().unwrap_or(0) == id);
        if let Some(i) = own {
            n -= self.take_from(i, n, released);
        }
        if !counted_only {
            // The uncounted holds before this release: `held_after + n` minus the counted ones.
            let uncounted = (held_after + n).saturating_sub(self.counted);
            n -= n.min(uncounted);
        }
        while n > 0 && !self.holders.is_empty() {
            n -= self.take_from(0, n, released);
        }
        debug_assert_eq!(n, 0, "released more holds than were counted");
    }

    /// Takes up to `n` holds off entry `i`; returns how many.
    fn take_from(&mut self, i: usize, n: usize, released: &mut Released) -> usize {
        let h = &mut self.holders[i];
        let took = n.min(h.holds);
        h.holds -= took;
        self.counted -= took;
        if h.holds == 0 {
            let mut h = self.holders.swap_remove(i);
            h.lend(0);
            released.extend(h.group.take());
        }
        took
    }

    fn find(&self, id: usize) -> Option<usize> {
        self.shares.iter().position(|s| s.key.id == id)
    }

    /// The waiter `key` joined the line in `share`; it is served after every earlier waiter of its
    /// share. The share's weight is the one its latest waiter brought.
    pub(crate) fn join(&mut self, key: usize, share: ShareKey, from: Option<Weak<GroupInner>>) {
        let seq = self.joined;
        self.joined += 1;
        let i = match self.find(share.id) {
            Some(i) => i,
            None => {
                self.shares.push(Share {
                    key: share,
                    finish: self.vtime,
                    waiters: VecDeque::new(),
                });
                self.shares.len() - 1
            }
        };
        let s = &mut self.shares[i];
        if s.waiters.is_empty() {
            s.finish = s.finish.max(self.vtime);
        }
        s.key.weight = share.weight.max(1);
        s.waiters.push_back((key, seq));
        if self.owner.len() <= key {
            self.owner.resize(key + 1, 0);
            self.joined_from.resize(key + 1, None);
        }
        self.owner[key] = share.id;
        self.joined_from[key] = from;
    }

    /// The waiter to serve next: the head of the waiting share with the smallest tag (ties: the
    /// earlier head). `None` when nobody waits.
    pub(crate) fn next(&self) -> Option<usize> {
        self.shares
            .iter()
            .filter_map(|s| s.waiters.front().map(|&(k, seq)| ((s.finish, seq), k)))
            .min_by_key(|&(tag, _)| tag)
            .map(|(_, k)| k)
    }

    /// The waiter `key` (the one [`next`](Self::next) returned) was granted `cost` (`holds`
    /// holds): it leaves its share, whose tag advances by `cost / weight`, the virtual time moves
    /// to the tag it was picked at, and its holds are counted for the group it joined from.
    pub(crate) fn granted(&mut self, key: usize, cost: usize, holds: usize) {
        let from = self.joined_from.get_mut(key).and_then(Option::take);
        // A group that is gone (its last task and handle dropped) holds nothing to lend to.
        self.hold(from.and_then(|w| w.upgrade()), holds);
        let Some(i) = self.remove(key) else {
            debug_assert!(false, "granted a waiter that is not in the group line");
            return;
        };
        let s = &mut self.shares[i];
        self.vtime = self.vtime.max(s.finish);
        s.finish = s
            .finish
            .saturating_add(cost as u128 * UNIT / u128::from(s.key.weight));
        self.forget_idle();
    }

    /// The waiter `key` left the line without a grant (cancelled, or refused).
    pub(crate) fn leave(&mut self, key: usize) {
        if let Some(w) = self.joined_from.get_mut(key) {
            *w = None;
        }
        if self.remove(key).is_some() {
            self.forget_idle();
        }
    }

    /// Everyone left the line (the semaphore was closed).
    pub(crate) fn clear(&mut self) {
        for s in &mut self.shares {
            s.waiters.clear();
        }
        self.joined_from.iter_mut().for_each(|w| *w = None);
        self.forget_idle();
    }

    /// Takes `key` out of its share's queue; returns the share's index.
    fn remove(&mut self, key: usize) -> Option<usize> {
        let i = self.find(*self.owner.get(key)?)?;
        let q = &mut self.shares[i].waiters;
        let at = q.iter().position(|&(k, _)| k == key)?;
        q.remove(at);
        Some(i)
    }

    /// Drops the idle shares whose tag the virtual time has reached: they would enter at the
    /// virtual time anyway.
    fn forget_idle(&mut self) {
        let vtime = self.vtime;
        self.shares
            .retain(|s| !s.waiters.is_empty() || s.finish > vtime);
    }

    /// The largest weight among the shares with a waiter; 0 when nobody waits.
    pub(crate) fn heaviest(&self) -> u32 {
        self.shares
            .iter()
            .filter(|s| !s.waiters.is_empty())
            .map(|s| s.key.weight)
            .max()
            .unwrap_or(0)
    }

    /// Stores [`heaviest`](Self::heaviest) where the primitive's readers find it and the fast
    /// word where its fast paths do, and lends the heaviest waiting weight to every counted
    /// holder and, if any of the primitive's `held` holds are uncounted, to the cached group
    /// (returns the loans when nobody waits; a loan that ends puts its group into `released`).
    pub(crate) fn publish(
        &mut self,
        to: &AtomicU32,
        fast: &FastHolds,
        held: usize,
        released: &mut Released,
    ) {
        let heaviest = self.heaviest();
        to.store(heaviest, Ordering::Relaxed);
        fast.set(self.cached | if self.counted > 0 { COUNTED } else { 0 });
        if heaviest != self.lending {
            self.lending = heaviest;
            for h in &mut self.holders {
                h.lend(heaviest);
            }
        }
        debug_assert!(held >= self.counted, "counted holds missing from the state");
        let want = if held > self.counted { heaviest } else { 0 };
        if want == 0 {
            self.end_uncounted_loan(released);
        } else {
            if self.uncounted_loan.group.is_none() {
                // A group that is gone holds nothing to lend to.
                self.uncounted_loan.group = self.cached_group.as_ref().and_then(Weak::upgrade);
            }
            self.uncounted_loan.lend(want);
            self.uncounted_lent = want;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn share(id: usize, weight: u32) -> ShareKey {
        ShareKey { id, weight }
    }

    /// Serves `n` grants of one unit from a line where every share always has a waiter; returns
    /// how many each share got.
    fn serve(line: &mut GroupLine, n: usize, next_key: &mut usize) -> Vec<(usize, usize)> {
        let mut got: Vec<(usize, usize)> = Vec::new();
        for _ in 0..n {
            let k = line.next().unwrap();
            let id = line.owner[k];
            line.granted(k, 1, 1);
            match got.iter_mut().find(|(i, _)| *i == id) {
                Some((_, c)) => *c += 1,
                None => got.push((id, 1)),
            }
            // The served waiter comes back at the end of its share's queue.
            line.join(*next_key, line_share(line, id), None);
            *next_key += 1;
        }
        got
    }

    fn line_share(line: &GroupLine, id: usize) -> ShareKey {
        line.shares[line.find(id).unwrap()].key
    }

    #[test]
    fn grants_follow_the_weights() {
        let mut line = GroupLine::new();
        let mut key = 0;
        for _ in 0..3 {
            line.join(key, share(1, 6), None);
            key += 1;
            line.join(key, share(2, 1), None);
            key += 1;
        }
        let got = serve(&mut line, 700, &mut key);
        let light = got.iter().find(|(i, _)| *i == 2).unwrap().1;
        assert_eq!(light, 100, "{got:?}");
        assert_eq!(line.heaviest(), 6);
    }

    #[test]
    fn an_idle_share_banks_no_credit() {
        let mut line = GroupLine::new();
        line.join(0, share(1, 1), None);
        line.join(1, share(2, 1), None);
        // Shares 1 and 2 take 50 grants between them; share 3, idle all along, then arrives and
        // must not be owed 25 grants in a row.
        let mut key = 2;
        serve(&mut line, 50, &mut key);
        line.join(key, share(3, 1), None);
        key += 1;
        let mut next_three = Vec::new();
        for _ in 0..3 {
            let k = line.next().unwrap();
            let id = line.owner[k];
            next_three.push(id);
            line.granted(k, 1, 1);
            line.join(key, share(id, 1), None);
            key += 1;
        }
        next_three.sort_unstable();
        assert_eq!(next_three, vec![1, 2, 3]);
    }

    #[test]
    fn an_idle_share_sheds_no_debt() {
        let mut line = GroupLine::new();
        line.join(0, share(1, 1), None);
        line.join(1, share(2, 1), None);
        let mut order = Vec::new();
        // Share 1 goes first (earlier head) and takes 3 units, then is idle for a moment.
        assert_eq!(line.next(), Some(0));
        line.granted(0, 3, 1);
        line.join(2, share(1, 1), None);
        // Share 2 is owed 3 units first; share 1's return does not wipe its debt.
        for next_key in [3, 4, 5] {
            let k = line.next().unwrap();
            order.push(k);
            line.granted(k, 1, 1);
            line.join(next_key, share(2, 1), None);
        }
        order.push(line.next().unwrap());
        assert_eq!(order, vec![1, 3, 4, 2]);
    }

    #[test]
    fn fifo_within_a_share_and_leave_without_charge() {
        let mut line = GroupLine::new();
        for k in 0..4 {
            line.join(k, share(7, 2), None);
        }
        line.leave(1);
        let mut order = Vec::new();
        while let Some(k) = line.next() {
            order.push(k);
            line.granted(k, 1, 1);
        }
        assert_eq!(order, vec![0, 2, 3]);
        assert_eq!(line.heaviest(), 0);
    }
}
