//! A worker's local run queue: a bounded FIFO ring that only its owner pushes to, that its owner
//! pops from, and that other threads steal the older half of.
//!
//! The LIFO slot in front of it lives in the core and is never stolen.
//!
//! # Protocol
//! The *owner* is the thread that holds the queue's core (the core moves between threads with a
//! happens-before edge, and so does ownership). Only the owner pushes, so a push is a slot write
//! and a release store of `tail`: no read-modify-write. Everyone else only takes items.
//!
//! `head` packs two indices: `real`, the next item to take, and `steal`, the oldest item a thief
//! may still be copying out. They are equal unless a steal is under way.
//! - **Owner pop**: one compare-exchange that advances `real` (and `steal` with it when they are
//!   equal), then a read of the slot. No thief reads that slot: thieves claim only what lies at or
//!   past `real`, and the owner's own pushes cannot overlap its reads.
//! - **Steal** (a thief, or any other thread taking items): a compare-exchange that advances
//!   `real` alone over the claimed items, allowed only while `steal == real` (one steal at a time;
//!   a thief that finds another under way gives up, one that must drain waits); then it copies
//!   the claimed items out, then sets `steal = real` (whatever `real` the owner has moved to
//!   meanwhile).
//! - **Owner push** measures free space from `steal`, not `real`: a slot a thief is still copying
//!   is never overwritten. The thief's final compare-exchange releases its reads; the owner's load
//!   of `head` acquires them before it writes the slot again.
//!
//! Indices are `u32` and wrap; the capacity divides 2^32, so `index % CAPACITY` names the slot and
//! `tail - steal` (wrapping) counts the occupied and in-copy slots, never more than the capacity.
//!
//! loom models: `loom_models/runtime.rs` (`local_queue_*`), which drive this code with a capacity
//! of four.

use std::mem::MaybeUninit;

use crate::shim::{AtomicU32, AtomicU64, Ordering, UnsafeCell, spin_yield};

/// Slots in each local queue (a power of two).
#[cfg(not(loom))]
pub(crate) const LOCAL_CAPACITY: usize = 256;
/// Slots in each local queue: four under loom, so that a model can fill one.
#[cfg(loom)]
pub(crate) const LOCAL_CAPACITY: usize = 4;

const CAP: u32 = LOCAL_CAPACITY as u32;
const MASK: u32 = CAP - 1;
const _: () = assert!(LOCAL_CAPACITY.is_power_of_two() && LOCAL_CAPACITY <= 1 << 16);

fn pack(steal: u32, real: u32) -> u64 {
    (u64::from(steal) << 32) | u64::from(real)
}

fn unpack(head: u64) -> (u32, u32) {
    ((head >> 32) as u32, head as u32)
}

/// A core's local queue of `T` (runnables in the runtime; plain values in the loom models).
pub(crate) struct LocalQueue<T> {
    /// `steal << 32 | real`; see the module docs.
    head: AtomicU64,
    /// The next index the owner pushes at. Written only by the owner.
    tail: AtomicU32,
    /// Slot `i % CAPACITY` holds an item exactly when `i` is in `real..tail` or in a steal's
    /// claimed range not yet copied out.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: the queue moves `T`s between threads (whoever takes an item owns it) and never shares a
// `&T`, so `T: Send` is all it needs; the protocol gives each slot to one thread at a time.
unsafe impl<T: Send> Send for LocalQueue<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for LocalQueue<T> {}

impl<T> Default for LocalQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A claimed range: `n` items from index `first`, which the claimer copies out and then releases.
struct Claim {
    first: u32,
    n: u32,
}

impl<T> LocalQueue<T> {
    /// An empty queue of `LOCAL_CAPACITY` slots.
    pub(crate) fn new() -> Self {
        LocalQueue {
            head: AtomicU64::new(0),
            tail: AtomicU32::new(0),
            slots: (0..LOCAL_CAPACITY)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
        }
    }

    /// Items queued now (a snapshot; items a thief is copying out are not counted).
    pub(crate) fn len(&self) -> usize {
        // `head` first: `tail` only grows, and `real` never passes the `tail` of its time.
        let (_, real) = unpack(self.head.load(Ordering::Acquire));
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(real).min(CAP) as usize
    }

    /// True if nothing is queued (a snapshot).
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if a thief could take items now: some are queued and no other thief is copying out
    /// of the queue (a snapshot).
    pub(crate) fn is_stealable(&self) -> bool {
        let (steal, real) = unpack(self.head.load(Ordering::Acquire));
        steal == real && self.tail.load(Ordering::Acquire) != real
    }

    /// Pushes at the back; gives the item back when the queue is full.
    ///
    /// # Safety
    /// Only the queue's owner may push (the thread that holds its core; see the module docs).
    #[inline]
    pub(crate) unsafe fn push(&self, item: T) -> Result<(), T> {
        // Only the owner writes `tail`.
        let tail = self.tail.load(Ordering::Relaxed);
        let (steal, _) = unpack(self.head.load(Ordering::Acquire));
        if tail.wrapping_sub(steal) >= CAP {
            return Err(item);
        }
        self.slots[(tail & MASK) as usize].with_mut(|p| {
            // SAFETY: the slot is outside `steal..tail`, so no item is in it and no thread reads
            // it; only the owner writes slots.
            unsafe { (*p).write(item) };
        });
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Pops from the front (the oldest item).
    ///
    /// # Safety
    /// Only the queue's owner may call this; other threads take items with [`Self::steal`] or
    /// [`Self::steal_half_into`].
    #[inline]
    pub(crate) unsafe fn pop(&self) -> Option<T> {
        let tail = self.tail.load(Ordering::Relaxed);
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (steal, real) = unpack(head);
            if real == tail {
                return None;
            }
            let next_real = real.wrapping_add(1);
            let next = if steal == real {
                pack(next_real, next_real)
            } else {
                pack(steal, next_real)
            };
            match self
                .head
                .compare_exchange_weak(head, next, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: index `real` is ours now: no thief claims below the new `real`, and only
                // this thread (the owner) writes slots.
                Ok(_) => return Some(unsafe { self.read(real) }),
                Err(h) => head = h,
            }
        }
    }

    /// Tests: claims half of the queue as a thief does, runs `f` with the claim held (a thief
    /// between its claim and its release), then releases the claim and returns the claimed items.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn while_a_thief_copies_out<R>(&self, f: impl FnOnce() -> R) -> (R, Vec<T>) {
        let claim = self
            .claim(false, |avail| avail - avail / 2)
            .expect("nothing to claim");
        let taken = (0..claim.n)
            // SAFETY: the claim covers `first..first + n`.
            .map(|i| unsafe { self.read(claim.first.wrapping_add(i)) })
            .collect();
        let out = f();
        self.release();
        (out, taken)
    }

    /// Takes the oldest item from any thread (shutdown's drain): waits for a steal under way to
    /// finish rather than give up while items remain.
    pub(crate) fn steal(&self) -> Option<T> {
        let claim = self.claim(true, |_| 1)?;
        // SAFETY: the claim covers exactly index `claim.first`.
        let item = unsafe { self.read(claim.first) };
        self.release();
        Some(item)
    }

    /// Takes half of the queue (rounded up) from the front: returns one item to run now and moves
    /// the rest to `dest`, the thief's own queue. An item `dest` cannot take (it filled up
    /// meanwhile) goes to `overflow` rather than being lost. `None` if this queue was empty or
    /// another thief is copying out of it.
    ///
    /// # Safety
    /// The caller must own `dest` (see [`Self::push`]).
    pub(crate) unsafe fn steal_half_into(
        &self,
        dest: &LocalQueue<T>,
        mut overflow: impl FnMut(T),
    ) -> Option<T> {
        let claim = self.claim(false, |avail| avail - avail / 2)?;
        // Copy everything out before the release, so that `overflow` (user-visible work: it
        // pushes to a group's queue) runs with no steal under way.
        let mut taken: [MaybeUninit<T>; LOCAL_CAPACITY / 2 + 1] =
            [const { MaybeUninit::uninit() }; LOCAL_CAPACITY / 2 + 1];
        for (i, t) in taken.iter_mut().take(claim.n as usize).enumerate() {
            // SAFETY: the claim covers `first..first + n`.
            t.write(unsafe { self.read(claim.first.wrapping_add(i as u32)) });
        }
        self.release();
        let mut taken = taken.into_iter().take(claim.n as usize);
        // SAFETY: the first `n` (at least one) were written above.
        let first = unsafe { taken.next()?.assume_init() };
        for t in taken {
            // SAFETY: as above.
            let item = unsafe { t.assume_init() };
            // SAFETY: the caller owns `dest`.
            if let Err(item) = unsafe { dest.push(item) } {
                overflow(item);
            }
        }
        Some(first)
    }

    /// Claims `want(available)` items (at least one, at most what is available) from the front for
    /// a thread that is not necessarily the owner. With a steal under way: `wait` spins until it
    /// ends, otherwise gives up. `None` when nothing is available.
    fn claim(&self, wait: bool, want: impl Fn(u32) -> u32) -> Option<Claim> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (steal, real) = unpack(head);
            if steal != real {
                if !wait {
                    return None;
                }
                spin_yield();
                head = self.head.load(Ordering::Acquire);
                continue;
            }
            // Loaded after `head`: at least `real`. Acquire: the owner's slot writes before it.
            let tail = self.tail.load(Ordering::Acquire);
            let avail = tail.wrapping_sub(real).min(CAP);
            if avail == 0 {
                return None;
            }
            let n = want(avail).clamp(1, avail);
            match self.head.compare_exchange_weak(
                head,
                pack(steal, real.wrapping_add(n)),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(Claim { first: real, n }),
                Err(h) => head = h,
            }
        }
    }

    /// Ends a steal: `steal = real`, handing the copied slots back to the owner's pushes.
    fn release(&self) {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (_, real) = unpack(head);
            match self.head.compare_exchange_weak(
                head,
                pack(real, real),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Moves the item at index `i` out of its slot.
    ///
    /// # Safety
    /// The caller must have taken index `i` (an owner pop or a claim) and read it only once.
    unsafe fn read(&self, i: u32) -> T {
        self.slots[(i & MASK) as usize].with(|p| {
            // SAFETY: the caller took the index, so the slot holds an item nobody else reads, and
            // the acquire that took it follows the release store of `tail` that published it.
            unsafe { (*p).assume_init_read() }
        })
    }
}

impl<T> Drop for LocalQueue<T> {
    fn drop(&mut self) {
        // No steal is under way (`&mut self`), so `steal == real`.
        while self.steal().is_some() {}
    }
}
