//! A core lent to a poll: the slot through which the polling thread reaches its core, and through
//! which the stall monitor can claim it while the poll is stuck.
//!
//! # The claim protocol
//! The slot holds one word, `generation << 1 | LENT`, and the lent item's pointer.
//!
//! 1. **Lend.** The thread that owns the item (between polls it is a local of the worker loop)
//!    stores the pointer (relaxed), then a word with the next generation and `LENT` set
//!    (release), and keeps that word as its *lease*. No other thread writes the word while
//!    `LENT` is clear, so a plain store suffices: lending costs no read-modify-write.
//! 2. **Access during the lease** ([`LentSlot::with`]): compare-exchange `lease → lease & !LENT`.
//!    Success makes this thread the exclusive owner for the access; afterwards it stores `lease`
//!    again (release), which lends the item once more under the same generation. Failure means
//!    the item was claimed: the access proceeds without it.
//! 3. **Take back** ([`LentSlot::take_back`], after the poll or to hand the core over): the same
//!    compare-exchange; success returns the item, failure means it was claimed.
//! 4. **Claim** ([`LentSlot::claim`], the monitor): with a word observed earlier with `LENT` set,
//!    compare-exchange `observed → observed & !LENT`. Success transfers ownership to the claimer.
//!
//! Every transfer of ownership is a successful compare-exchange from a word with `LENT` set to
//! one without it, and only the owner ever sets `LENT` again, so exactly one thread owns the item
//! at any time. The generation makes a stale lease harmless: once claimed, the item is lent again
//! (by its new thread) only under a newer generation, so the old lease's compare-exchange fails
//! for good. (Within one lease, a claim may observe the word, lose it to an access, and succeed
//! after the access stored the same word again: that is correct, as the item is lent again then.)
//! A claim never waits for the poll: a thread stuck in user code does not hold the slot, so the
//! claim succeeds at once.
//!
//! loom model: `tests/loom_rescue.rs`.

use std::marker::PhantomData;
use std::ptr;

use crate::shim::{AtomicPtr, AtomicU64, Ordering};

const LENT: u64 = 1;

/// See the module docs. On a cache line of its own: its owner writes it at every poll, and only
/// the monitor reads it.
#[repr(align(64))]
pub struct LentSlot<T> {
    word: AtomicU64,
    item: AtomicPtr<T>,
    /// The slot owns a `T` while it is lent; `*mut` so that `Send`/`Sync` are stated by hand.
    _owns: PhantomData<*mut T>,
}

// SAFETY: the slot moves a `T` between threads (whoever wins the compare-exchange owns it) and
// never shares a `&T` between two threads at once, so `T: Send` is what it needs.
unsafe impl<T: Send> Send for LentSlot<T> {}
// SAFETY: as above: shared access to the slot only ever gives one thread at a time the item.
unsafe impl<T: Send> Sync for LentSlot<T> {}

/// What a lender keeps to reach its item again: the word it stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease(u64);

impl Lease {
    /// A lease on nothing (never a word a slot holds while lent).
    pub const NONE: Lease = Lease(0);
    /// Not a lease: a mark that a lease was lost to a claim (never a word a slot holds while lent).
    pub const CLAIMED: Lease = Lease(2);
}

impl<T> Default for LentSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> LentSlot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        LentSlot {
            word: AtomicU64::new(0),
            item: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// Step 1: lends `item` under a new generation.
    #[inline]
    pub fn lend(&self, item: Box<T>) -> Lease {
        self.item.store(Box::into_raw(item), Ordering::Relaxed);
        // Not lent now, so only this thread writes the word: a load and a store.
        let word = (self.word.load(Ordering::Relaxed) | LENT) + 2;
        self.word.store(word, Ordering::Release);
        Lease(word)
    }

    /// Step 2: runs `f` with the item if it is still lent under `lease` (then lends it again under
    /// the same lease), or with `None` if it was claimed. The second value is false once claimed.
    /// `f` may panic: the item is lent again all the same.
    #[inline]
    pub fn with<R>(&self, lease: Lease, f: impl FnOnce(Option<&mut T>) -> R) -> (R, bool) {
        if !self.acquire(lease) {
            return (f(None), false);
        }
        struct Relend<'a>(&'a AtomicU64, u64);
        impl Drop for Relend<'_> {
            fn drop(&mut self) {
                self.0.store(self.1, Ordering::Release);
            }
        }
        let _relend = Relend(&self.word, lease.0);
        let p = self.item.load(Ordering::Relaxed);
        // SAFETY: the successful compare-exchange made this thread the item's only owner until
        // `_relend` stores the lease again; `p` came from `Box::into_raw` in `lend`.
        let item = unsafe { &mut *p };
        (f(Some(item)), true)
    }

    /// Step 3: takes the item back if it is still lent under `lease`.
    #[inline]
    pub fn take_back(&self, lease: Lease) -> Option<Box<T>> {
        if !self.acquire(lease) {
            return None;
        }
        // SAFETY: the successful compare-exchange transferred ownership to this thread for good
        // (nobody lends it again but its owner); the pointer came from `Box::into_raw`.
        Some(unsafe { Box::from_raw(self.item.load(Ordering::Relaxed)) })
    }

    /// The current word, for the monitor: its generation changes with every lend, and
    /// [`is_lent`] says whether it can be claimed.
    #[inline]
    pub fn observe(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Step 4: claims the item if it is still lent under the `observed` word.
    pub fn claim(&self, observed: u64) -> Option<Box<T>> {
        if !is_lent(observed) {
            return None;
        }
        self.take_back(Lease(observed))
    }

    #[inline]
    fn acquire(&self, lease: Lease) -> bool {
        self.word
            .compare_exchange(
                lease.0,
                lease.0 & !LENT,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
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
pub fn is_lent(word: u64) -> bool {
    word & LENT != 0
}

/// The generation of a word from [`LentSlot::observe`]: the same while one lease lasts.
#[inline]
pub fn generation(word: u64) -> u64 {
    word >> 1
}
