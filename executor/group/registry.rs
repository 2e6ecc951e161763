//! The registry of a group's unfinished tasks.
//!
//! It answers two needs with two mechanisms:
//!
//! - **Counting** (`Group::len`, `wait_idle`, metrics): atomic counters of tasks spawned and
//!   finished (completed, panicked or cancelled), inline in the group, the spawners' counter and the
//!   finishers' on separate cache lines. (Per-worker shards would cost every group an allocation
//!   and make no difference to `spawn_many_local` in one group: ARCHITECTURE.md, *Tried and not
//!   kept*.)
//! - **Reaching idle tasks** (`Group::cancel`, `JoinHandle::abort`, shutdown): a task's waker is
//!   stored in one of the group's slabs the first time a poll returns `Pending`, and removed when
//!   its future is dropped. Tasks that finish in their first poll (most short tasks) never take a
//!   lock. A task without an entry is never idle: it is queued or running, and whoever runs it
//!   next sees the cancel flags.
//!
//!   The slabs are [`SHARDS`] shards, each behind its own mutex on its own cache line, allocated
//!   together when the group's first task registers (a group whose tasks never wait, a group per
//!   short task, allocates none). A task registers in the shard of the thread that polls it (each
//!   thread is given one, round robin), and its `slot` records the shard with the key, so its end
//!   locks the same shard wherever it runs. With one mutex per group, every worker's tasks of a
//!   busy group would meet at it twice per task lifetime (a first `Pending` and an end): the lock
//!   would be contended, and its cache line would travel between the workers' caches. Walking every entry
//!   (cancel, shutdown) allocates the shards if need be and locks them one after another.
//!
//! Races (each side writes, then reads the other side's location, both SeqCst):
//! - abort stores `aborted` then reads `slot`; registration stores `slot` then reads `aborted`. If the
//!   registering task sees the flag it wakes itself, so it is dropped on its next turn. An entry
//!   records its task's identity, and a finished task resets its `slot`: an `abort` that read a
//!   slot just before the task finished, and that another task then reused, wakes nobody.
//! - `Group::cancel` stores the flag and then locks each shard to wake its entries; registration
//!   inserts under its shard's lock and then reads the flag. That shard's lock orders the two.
//! - `wait_idle` increments `idle_waiters` then reads the counters; a finishing task increments
//!   its outcome counter then reads `idle_waiters`.
//!
//! Wakers are never woken, and never dropped, while the slab lock is held.

use std::sync::OnceLock;
use std::task::Waker;

use slab::Slab;

use crate::shim::{AtomicU64, Mutex, Ordering, lock};
use crate::task::TaskMeta;
use crate::task::meta::{Outcome, task_id};

/// Bytes that keep two fields off each other's cache line whatever the allocation's alignment
/// (groups are allocated with the allocator's default alignment, not a cache line's).
pub(crate) const LINE_GAP: usize = 64;

/// Shards of a group's idle tasks (see the module docs): a power of two.
pub(crate) const SHARDS: usize = 8;

/// Laid out in order, each part on cache lines of its own: the counter spawners write, the counters
/// finishing workers write, then the shards, which only a task's first `Pending` and its end write.
/// (With the counters on one line, or beside the `Arc` counts, the spawning thread and the workers
/// would fight over the line on every spawn.)
#[repr(C)]
pub(crate) struct Registry {
    spawned: AtomicU64,
    _gap1: [u8; LINE_GAP],
    // Finished tasks are the sum of these three.
    completed: AtomicU64,
    cancelled: AtomicU64,
    panicked: AtomicU64,
    _gap2: [u8; LINE_GAP],
    idle: OnceLock<Box<[Shard; SHARDS]>>,
}

/// One shard of the idle tasks, on a cache line of its own (the shards are one allocation of their
/// own, so this alignment does not raise the group's).
#[repr(align(64))]
#[derive(Default)]
struct Shard(Mutex<IdleTasks>);

/// The shard this thread registers tasks in: threads are dealt shards round robin, so the
/// runtime's workers (started together) get different ones.
fn this_threads_shard() -> usize {
    // A plain std counter (a shard is a placement, not part of any protocol): loom's atomics
    // cannot live in a static.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS;
    }
    SHARD.try_with(|s| *s).unwrap_or(0)
}

/// A task's `slot`: its shard and its key there.
fn slot_of(shard: usize, key: usize) -> usize {
    key * SHARDS + shard
}

/// The shard and the key a `slot` names.
fn shard_and_key(slot: usize) -> (usize, usize) {
    (slot % SHARDS, slot / SHARDS)
}

#[derive(Default)]
struct IdleTasks {
    /// Each idle task's identity (`task_id`) and waker.
    wakers: Slab<(usize, Waker)>,
    /// Set at shutdown: nothing registers any more.
    closed: bool,
}

/// The group's counts.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) live: usize,
    pub(crate) spawned: u64,
    pub(crate) completed: u64,
    pub(crate) cancelled: u64,
    pub(crate) panicked: u64,
}

impl Registry {
    pub(crate) fn new() -> Self {
        Registry {
            spawned: AtomicU64::new(0),
            _gap1: [0; LINE_GAP],
            completed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            _gap2: [0; LINE_GAP],
            idle: OnceLock::new(),
        }
    }

    /// The shards, allocated by the first caller.
    #[inline]
    fn shards(&self) -> &[Shard; SHARDS] {
        self.idle.get_or_init(Default::default)
    }

    /// Counts a new task (before it is first scheduled).
    pub(crate) fn spawned(&self) {
        self.spawned.fetch_add(1, Ordering::Relaxed);
    }

    /// Called when a poll returned `Pending` and the task has no entry yet: stores its waker so the
    /// task can be reached while idle. If the task was cancelled meanwhile, or the runtime is
    /// shutting down, wakes it instead, so a worker drops it on its next turn.
    pub(crate) fn register_idle(&self, meta: &TaskMeta, waker: &Waker) {
        let shard = this_threads_shard();
        let mut idle = lock(&self.shards()[shard].0);
        if idle.closed {
            drop(idle);
            waker.wake_by_ref();
            return;
        }
        let key = idle.wakers.insert((task_id(meta), waker.clone()));
        meta.set_slot(slot_of(shard, key));
        drop(idle);
        if meta.is_cancelled() {
            waker.wake_by_ref();
        }
    }

    /// Called once, after a task's future was dropped: counts how it ended and removes its entry.
    /// The caller then reads `idle_waiters` (the other half of the `wait_idle` pair).
    #[inline]
    pub(crate) fn finished(&self, meta: &TaskMeta, outcome: Outcome) {
        // Only the task's own polls register it, and they happen before this (whoever holds the
        // task holds it alone), so a plain load says whether it has an entry: a task that never
        // waited skips the read-modify-write.
        if let Some(slot) = meta.slot(Ordering::Relaxed) {
            self.unregister(meta, slot);
        }
        let counter = match outcome {
            Outcome::Completed => &self.completed,
            Outcome::Cancelled => &self.cancelled,
            Outcome::Panicked => &self.panicked,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    /// Removes the entry at `slot` of a task that waited. Out of line: it takes a shard's lock,
    /// and the counting around it runs for every task. A plain store resets the slot, for the same
    /// reason a plain load read it; a `wake` that read the old slot finds, under the shard's lock,
    /// no entry or another task's (its id differs) and wakes nobody.
    #[inline(never)]
    fn unregister(&self, meta: &TaskMeta, slot: usize) {
        meta.clear_slot();
        let (shard, key) = shard_and_key(slot);
        let entry = lock(&self.shards()[shard].0).wakers.try_remove(key);
        drop(entry);
    }

    /// Wakes `meta`'s task if it is registered as idle (the entry at its slot is its own).
    pub(crate) fn wake(&self, meta: &TaskMeta) {
        if let Some(w) = self.waker_of(meta) {
            w.wake();
        }
    }

    /// A copy of `meta`'s task's waker if it is registered as idle (the entry at its slot is its
    /// own), for a caller that wakes it later (after releasing its own lock).
    pub(crate) fn waker_of(&self, meta: &TaskMeta) -> Option<Waker> {
        let slot = meta.slot(Ordering::SeqCst)?;
        let id = task_id(meta);
        let (shard, key) = shard_and_key(slot);
        lock(&self.shards()[shard].0)
            .wakers
            .get(key)
            .filter(|(owner, _)| *owner == id)
            .map(|(_, w)| w.clone())
    }

    /// Wakes every idle task; with `close`, also refuses every later registration (such tasks
    /// wake themselves instead, see `register_idle`).
    pub(crate) fn wake_all(&self, close: bool) {
        let mut wakers: Vec<Waker> = Vec::new();
        for shard in self.shards() {
            let mut idle = lock(&shard.0);
            if close {
                idle.closed = true;
            }
            wakers.extend(idle.wakers.iter().map(|(_, (_, w))| w.clone()));
        }
        for w in wakers {
            w.wake();
        }
    }

    /// Tasks spawned and not finished. Reads the finished counts before `spawned`: a task is counted
    /// spawned before it can finish, so the difference is never negative.
    pub(crate) fn live(&self) -> usize {
        let finished = self.completed.load(Ordering::SeqCst)
            + self.cancelled.load(Ordering::SeqCst)
            + self.panicked.load(Ordering::SeqCst);
        let spawned = self.spawned.load(Ordering::SeqCst);
        spawned.saturating_sub(finished) as usize
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts {
            live: self.live(),
            spawned: self.spawned.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            panicked: self.panicked.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live() == 0
    }
}
