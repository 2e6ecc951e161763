//! A core lent to a poll: the slot through which the polling thread reaches its core, and through
//! which the stall monitor can claim it while the poll is stuck.
//!
//! # The claim protocol
//! The slot holds the lent item's pointer and three words:
//! - `word`, written by the owner: `generation << 2 | HINT | LENT`. `LENT` clear means the owner
//!   is using the item (between polls, or inside an access during a poll). `HINT` is a bit the
//!   owner sets from the item at each lend and after each access (the runtime: a task waits where
//!   only the core reaches it, in its LIFO slot or its extras), for the monitor; it changes
//!   nothing in the protocol.
//! - `claim`, written by the claimer: `generation << 2 | state`, the state `PENDING`, `GRANTED`
//!   or none (withdrawn). Its generation never decreases.
//! - `next`, the owner's generation counter.
//!
//! The owner's side costs no read-modify-write and no hardware fence, because polls and wakes are
//! the hot path and claims are rare: the two sides meet through an asymmetric fence pair
//! (`shim::light_barrier`, a compiler fence, against `shim::heavy_barrier`, Linux `membarrier`,
//! which makes every thread of the process execute a full fence).
//!
//! 1. **Lend.** The owner stores the pointer, then `word = g << 2 | hint | LENT` for a new
//!    generation `g` (release), and keeps the generation as its *lease*.
//! 2. **Acquire** (an access during the poll, [`LentSlot::with`], or the take-back after it,
//!    [`LentSlot::take_back`]): if `claim` shows a claim of `g`, see step 4. Otherwise store
//!    `word = g << 2` (the owner is busy), light barrier, read `claim` again: no claim of `g` means
//!    the owner has the item; an access ends by storing `g << 2 | hint | LENT` again (release).
//! 3. **Claim** ([`LentSlot::claim`], the monitor), with a word observed lent under `g`: store
//!    `claim = g << 2 | PENDING`, heavy barrier, read `word`. If it still equals the observed
//!    word, store `GRANTED` (release) and `word = g << 2` (no longer lent: no second claim): the
//!    claimer owns the item. Otherwise withdraw (store `g << 2`).
//! 4. An owner that finds a claim of its generation waits while it is `PENDING` (a few
//!    microseconds: the claimer is between two stores around one system call); `GRANTED`, or a
//!    claim of a newer generation, means the item is gone for good; a withdrawn claim found before
//!    its busy store means it looks again, found after it means the item is the owner's.
//!
//! Why exactly one side wins: the owner stores `word`, then reads `claim`; the claimer stores
//! `claim`, then reads `word`, with the heavy barrier between. The barrier guarantees that either
//! the owner's read sees `PENDING` (so it waits for the decision) or the claimer's read sees the
//! owner's busy store (so it withdraws). A claimer that reads the lease therefore knows the owner
//! is outside every access and will wait at its next one; it grants itself the item, and the
//! owner's release store of the lease (step 2) publishes what the owner did to the item.
//!
//! The generation makes a stale lease harmless: once claimed, the item is lent again (by its new
//! owner) only under a newer generation; the old lease reads a claim of its own generation
//! `GRANTED` or of a newer one, and fails. (The heavy barrier of its claim precedes anything the
//! stale owner reads afterwards, so it cannot read an older claim.) A stale busy store names the
//! old generation, which the claimer's equality test never matches: at worst it hides a newer
//! lease from the monitor until the next lend. Without the heavy barrier
//! (kernels before 4.3, or a sandbox that forbids `membarrier`) claims always withdraw: rescue is
//! off, and nothing else changes.
//!
//! loom model: `loom_models/rescue.rs` (it models both barriers as SeqCst fences).

use std::marker::PhantomData;
use std::ptr;

use crate::shim::{AtomicPtr, AtomicU64, Ordering, heavy_barrier, light_barrier, spin_yield};

const LENT: u64 = 1;
const HINT: u64 = 2;
const PENDING: u64 = 1;
const GRANTED: u64 = 2;
const CLAIM_STATE: u64 = 3;

/// See the module docs. On a cache-line pair of its own (128 bytes: x86 prefetches lines in
/// pairs): its owner writes it at every poll, and only the monitor reads it.
#[repr(align(128))]
pub(crate) struct LentSlot<T> {
    word: AtomicU64,
    claim: AtomicU64,
    next: AtomicU64,
    item: AtomicPtr<T>,
    /// The slot owns a `T` while it is lent; `*mut` so that `Send`/`Sync` are stated by hand.
    _owns: PhantomData<*mut T>,
}

// SAFETY: the slot moves a `T` between threads (whoever acquires it owns it) and never shares a
// `&T` between two threads at once, so `T: Send` is what it needs.
unsafe impl<T: Send> Send for LentSlot<T> {}
// SAFETY: as above: shared access to the slot only ever gives one thread at a time the item.
unsafe impl<T: Send> Sync for LentSlot<T> {}

/// What a lender keeps to reach its item again: the lent word of its generation, hint clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease(u64);

impl Lease {
    /// A lease on nothing (never a word a slot holds while lent).
    pub(crate) const NONE: Lease = Lease(0);
    /// Not a lease: a mark that a lease was lost to a claim (never a lease: `LENT` is clear).
    pub(crate) const CLAIMED: Lease = Lease(4);
}

impl<T> Default for LentSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// What `claim` says about generation `g`.
enum Claim {
    None,
    Pending,
    Granted,
}

impl<T> LentSlot<T> {
    /// An empty slot.
    pub(crate) fn new() -> Self {
        LentSlot {
            word: AtomicU64::new(0),
            claim: AtomicU64::new(0),
            next: AtomicU64::new(0),
            item: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// Step 1: lends `item` under a new generation, with the monitor's `hint`.
    #[inline]
    pub(crate) fn lend(&self, item: Box<T>, hint: bool) -> Lease {
        self.item.store(Box::into_raw(item), Ordering::Relaxed);
        // Only the owner writes `next`, and ownership moves with a happens-before edge.
        let g = self.next.load(Ordering::Relaxed) + 1;
        self.next.store(g, Ordering::Relaxed);
        let lease = Lease(g << 2 | LENT);
        self.word.store(lease.with_hint(hint), Ordering::Release);
        lease
    }

    /// Step 2: runs `f` with the item if it is still lent under `lease` (then lends it again under
    /// the same lease, with the monitor's hint `hint(item)`), or with `None` if it was claimed.
    /// The second value is false once claimed. `f` may panic: the item is lent again all the same.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        lease: Lease,
        f: impl FnOnce(Option<&mut T>) -> R,
        hint: impl FnOnce(&T) -> bool,
    ) -> (R, bool) {
        if !self.acquire(lease) {
            return (f(None), false);
        }
        struct Relend<'a>(&'a AtomicU64, u64);
        impl Drop for Relend<'_> {
            fn drop(&mut self) {
                self.0.store(self.1, Ordering::Release);
            }
        }
        // Lends it again if `f` unwinds (with the hint set: the monitor may look).
        let relend = Relend(&self.word, lease.with_hint(true));
        let p = self.item.load(Ordering::Relaxed);
        // SAFETY: `acquire` made this thread the item's only owner until the item is lent again
        // below (or by `relend` if `f` unwinds); `p` came from `Box::into_raw` in `lend`.
        let item = unsafe { &mut *p };
        let out = f(Some(&mut *item));
        let word = lease.with_hint(hint(item));
        std::mem::forget(relend);
        self.word.store(word, Ordering::Release);
        (out, true)
    }

    /// Step 2: takes the item back if it is still lent under `lease`.
    #[inline]
    pub(crate) fn take_back(&self, lease: Lease) -> Option<Box<T>> {
        if !self.acquire(lease) {
            return None;
        }
        // SAFETY: `acquire` made this thread the owner for good (the word stays busy until it
        // lends again); the pointer came from `Box::into_raw` in `lend`.
        Some(unsafe { Box::from_raw(self.item.load(Ordering::Relaxed)) })
    }

    /// The current word, for the monitor: its generation changes with every lend, and
    /// [`is_lent`] says whether it can be claimed.
    #[inline]
    pub(crate) fn observe(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Step 3: claims the item if it is still lent under the `observed` word. Only one thread may
    /// claim a slot at a time (the runtime's monitor).
    pub(crate) fn claim(&self, observed: u64) -> Option<Box<T>> {
        if !is_lent(observed) {
            return None;
        }
        let g = generation(observed);
        self.claim.store(g << 2 | PENDING, Ordering::Relaxed);
        let granted = heavy_barrier() && self.word.load(Ordering::Acquire) == observed;
        if !granted {
            // Withdrawn, keeping the generation: claims only ever name newer generations.
            self.claim.store(g << 2, Ordering::Release);
            return None;
        }
        self.claim.store(g << 2 | GRANTED, Ordering::Release);
        // The item is no longer lent: no second claim of this lease. (The stale owner may store
        // this same busy word too.)
        self.word.store(g << 2, Ordering::Relaxed);
        // SAFETY: the owner is outside every access and waits for this decision at its next one
        // (module docs); the acquire load read its release store of the lease, made after its
        // last use of the item. The pointer came from `Box::into_raw` in `lend`.
        Some(unsafe { Box::from_raw(self.item.load(Ordering::Relaxed)) })
    }

    /// Step 2 (and 4): true if the owner of `lease` has the item now. A claim names at most the
    /// current generation, so one comparison per read tells "no claim of this lease" apart.
    #[inline]
    fn acquire(&self, lease: Lease) -> bool {
        let g = generation(lease.0);
        if self.claim.load(Ordering::Acquire) >> 2 >= g {
            return self.acquire_slow(lease);
        }
        self.word.store(lease.0 & !(LENT | HINT), Ordering::Relaxed);
        light_barrier();
        if self.claim.load(Ordering::Acquire) >> 2 >= g {
            return self.busy_and_claimed(g);
        }
        true
    }

    /// `acquire` when a claim of this lease (or a newer one) was seen before the busy store.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, lease: Lease) -> bool {
        let g = generation(lease.0);
        loop {
            match self.claim_of(g) {
                Claim::None => break,
                // A stale lease must not store its busy word after the item moved on.
                Claim::Granted => return false,
                // Withdrawn without having seen this owner busy: the item is still lent, so
                // look again before using it.
                Claim::Pending => {
                    if !self.wait_for_claim(g) {
                        return false;
                    }
                }
            }
        }
        self.word.store(lease.0 & !(LENT | HINT), Ordering::Relaxed);
        light_barrier();
        self.busy_and_claimed(g)
    }

    /// `acquire` after the busy store: a pending claim withdraws (it saw the owner busy) or was
    /// granted before the store became visible.
    #[cold]
    #[inline(never)]
    fn busy_and_claimed(&self, g: u64) -> bool {
        match self.claim_of(g) {
            Claim::None => true,
            Claim::Granted => false,
            Claim::Pending => self.wait_for_claim(g),
        }
    }

    #[inline]
    fn claim_of(&self, g: u64) -> Claim {
        let c = self.claim.load(Ordering::Acquire);
        if c >> 2 > g {
            // A claim of a newer lease: this one's item was claimed and lent again since.
            return Claim::Granted;
        }
        if c >> 2 < g {
            return Claim::None;
        }
        match c & CLAIM_STATE {
            PENDING => Claim::Pending,
            GRANTED => Claim::Granted,
            _ => Claim::None,
        }
    }

    /// Step 4 (cold): waits for the claimer's decision on generation `g`: false if granted, true
    /// if withdrawn.
    #[cold]
    #[inline(never)]
    fn wait_for_claim(&self, g: u64) -> bool {
        loop {
            match self.claim_of(g) {
                Claim::Pending => spin_yield(),
                Claim::Granted => return false,
                Claim::None => return true,
            }
        }
    }
}

impl<T> Drop for LentSlot<T> {
    fn drop(&mut self) {
        // `&mut self`: no other thread can touch the slot, so relaxed loads see its last state.
        if is_lent(self.word.load(Ordering::Relaxed)) {
            // SAFETY: nobody else can hold or claim the item; it is still lent, so the pointer
            // came from `Box::into_raw` and was taken back by nobody.
            drop(unsafe { Box::from_raw(self.item.load(Ordering::Relaxed)) });
        }
    }
}

/// True if a word from [`LentSlot::observe`] shows a lent item.
#[inline]
pub(crate) fn is_lent(word: u64) -> bool {
    word & LENT != 0
}

/// The generation of a word from [`LentSlot::observe`]: the same while one lease lasts.
#[inline]
pub(crate) fn generation(word: u64) -> u64 {
    word >> 2
}

/// The owner's hint in a word from [`LentSlot::observe`].
#[inline]
pub(crate) fn hint(word: u64) -> bool {
    word & HINT != 0
}

impl Lease {
    #[inline]
    fn with_hint(self, hint: bool) -> u64 {
        self.0 | if hint { HINT } else { 0 }
    }
}
