//! The registry of a group's unfinished tasks.
//!
//! It answers two needs with two mechanisms:
//!
//! - **Counting** (`Group::len`, `wait_idle`, metrics): per-shard atomic counters of tasks spawned
//!   and finished (completed, panicked or cancelled). A shard belongs to one worker (plus one shard
//!   for threads outside the runtime), so counting touches a cache line only that thread writes.
//! - **Reaching idle tasks** (`Group::cancel`, `JoinHandle::abort`, shutdown): a task's waker is
//!   stored in its shard's slab the first time a poll returns `Pending`, and removed when its future
//!   is dropped. Tasks that finish in their first poll (most short tasks) never take a lock.
//!   A task without an entry is never idle: it is queued or running, and whoever runs it next sees
//!   the cancel flags.
//!
//! Races (each side writes, then reads the other side's location, both SeqCst):
//! - abort stores `aborted` then reads `slot`; registration stores `slot` then reads `aborted`. If the
//!   registering task sees the flag it wakes itself, so it is dropped on its next turn.
//! - `Group::cancel` stores the flag and then locks every shard to wake its entries; registration
//!   inserts under the shard lock and then reads the flag. The lock orders the two.
//! - `wait_idle` increments `idle_waiters` then reads the counters; a finishing task increments
//!   `finished` then reads `idle_waiters`.
//!
//! Wakers are never woken, and never dropped, while a shard lock is held.

use std::task::Waker;

use slab::Slab;

use crate::group::GroupInner;
use crate::shim::{AtomicU64, Mutex, Ordering, lock};
use crate::task::{Outcome, TaskMeta};

/// `TaskMeta::slot` of a task that has no registry entry.
pub(crate) const UNREGISTERED: usize = usize::MAX;
const KEY_BITS: u32 = 40;

pub(crate) struct Registry {
    shards: Box<[Shard]>,
}

/// One worker's shard. Its hot counters come first and the struct is padded to 128 bytes, so two
/// shards' counters are at least 64 bytes apart (never on one cache line) without asking the
/// allocator for aligned memory.
struct Shard {
    spawned: AtomicU64,
    finished: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    panicked: AtomicU64,
    idle: Mutex<IdleTasks>,
    _pad: [u8; SHARD_PAD],
}

const SHARD_BODY: usize = 5 * 8 + std::mem::size_of::<Mutex<IdleTasks>>();
const SHARD_PAD: usize = 128usize.saturating_sub(SHARD_BODY);

#[derive(Default)]
struct IdleTasks {
    wakers: Slab<Waker>,
    /// Set at shutdown: nothing registers any more.
    closed: bool,
}

/// Totals over all shards.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) live: usize,
    pub(crate) spawned: u64,
    pub(crate) completed: u64,
    pub(crate) cancelled: u64,
    pub(crate) panicked: u64,
}

impl Registry {
    pub(crate) fn new(shards: usize) -> Self {
        Registry {
            shards: (0..shards)
                .map(|_| Shard {
                    spawned: AtomicU64::new(0),
                    finished: AtomicU64::new(0),
                    completed: AtomicU64::new(0),
                    cancelled: AtomicU64::new(0),
                    panicked: AtomicU64::new(0),
                    idle: Mutex::new(IdleTasks::default()),
                    _pad: [0; SHARD_PAD],
                })
                .collect(),
        }
    }

    fn shard(&self, g: &GroupInner) -> &Shard {
        &self.shards[crate::worker::current_shard(&g.shared) % self.shards.len()]
    }

    /// Counts a new task (before it is first scheduled).
    pub(crate) fn spawned(&self, g: &GroupInner) {
        self.shard(g).spawned.fetch_add(1, Ordering::Relaxed);
    }

    /// Called when a poll returned `Pending` and the task has no entry yet: stores its waker so the
    /// task can be reached while idle. If the task was cancelled meanwhile, or the runtime is
    /// shutting down, wakes it instead, so a worker drops it on its next turn.
    pub(crate) fn register_idle(&self, meta: &TaskMeta, waker: &Waker, g: &GroupInner) {
        let idx = crate::worker::current_shard(&g.shared) % self.shards.len();
        let mut idle = lock(&self.shards[idx].idle);
        if idle.closed {
            drop(idle);
            waker.wake_by_ref();
            return;
        }
        let key = idle.wakers.insert(waker.clone());
        meta.slot.store((idx << KEY_BITS) | key, Ordering::SeqCst);
        drop(idle);
        if meta.is_cancelled() {
            waker.wake_by_ref();
        }
    }

    /// Called once, after a task's future was dropped: counts how it ended, removes its entry, and
    /// wakes `wait_idle` callers if the group just became empty.
    pub(crate) fn finished(&self, meta: &TaskMeta, outcome: Outcome, g: &GroupInner) {
        let shard = self.shard(g);
        match outcome {
            Outcome::Completed => shard.completed.fetch_add(1, Ordering::Relaxed),
            Outcome::Cancelled => shard.cancelled.fetch_add(1, Ordering::Relaxed),
            Outcome::Panicked => shard.panicked.fetch_add(1, Ordering::Relaxed),
        };
        let slot = meta.slot.load(Ordering::Relaxed);
        if slot != UNREGISTERED {
            let (idx, key) = (slot >> KEY_BITS, slot & ((1 << KEY_BITS) - 1));
            let waker = lock(&self.shards[idx].idle).wakers.try_remove(key);
            drop(waker);
        }
        shard.finished.fetch_add(1, Ordering::SeqCst);
        if g.idle_waiters.load(Ordering::SeqCst) > 0 && self.live() == 0 {
            g.idle_event.notify(usize::MAX);
        }
    }

    /// Wakes the task registered at `slot`, if it is still registered.
    pub(crate) fn wake(&self, slot: usize) {
        if slot == UNREGISTERED {
            return;
        }
        let (idx, key) = (slot >> KEY_BITS, slot & ((1 << KEY_BITS) - 1));
        let waker = lock(&self.shards[idx].idle).wakers.get(key).cloned();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Wakes every idle task; with `close`, also refuses every later registration (such tasks
    /// wake themselves instead, see `register_idle`).
    pub(crate) fn wake_all(&self, close: bool) {
        let mut wakers = Vec::new();
        for shard in self.shards.iter() {
            let mut idle = lock(&shard.idle);
            if close {
                idle.closed = true;
            }
            wakers.extend(idle.wakers.iter().map(|(_, w)| w.clone()));
        }
        for w in wakers {
            w.wake();
        }
    }

    /// Tasks spawned and not finished. Reads every `finished` before any `spawned`: a task is
    /// counted spawned before it can finish, so the difference is never negative.
    pub(crate) fn live(&self) -> usize {
        let finished: u64 = self
            .shards
            .iter()
            .map(|s| s.finished.load(Ordering::SeqCst))
            .sum();
        let spawned: u64 = self
            .shards
            .iter()
            .map(|s| s.spawned.load(Ordering::SeqCst))
            .sum();
        spawned.saturating_sub(finished) as usize
    }

    pub(crate) fn counts(&self) -> Counts {
        let live = self.live();
        let sum = |f: fn(&Shard) -> &AtomicU64| -> u64 {
            self.shards
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum()
        };
        Counts {
            live,
            spawned: sum(|s| &s.spawned),
            completed: sum(|s| &s.completed),
            cancelled: sum(|s| &s.cancelled),
            panicked: sum(|s| &s.panicked),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live() == 0
    }
}
