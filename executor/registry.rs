//! The registry of a group's unfinished tasks.
//!
//! Every task is registered (its waker stored) from spawn until its future is dropped. The registry
//! is what `Group::cancel`, `Group::len`, `Group::wait_idle`, `JoinHandle::abort` and runtime
//! shutdown use to reach tasks that sit idle with nobody holding their `Runnable`.
//!
//! It is sharded: one shard per worker plus one for threads outside the runtime, each its own
//! mutex on its own cache line, so spawns and completions on different workers do not contend.
//! A task's shard and key are packed into `TaskMeta::slot`.
//!
//! Wakers are never woken, and never dropped, while a shard lock is held: they are cloned or taken
//! out under the lock and used after it is released.

use std::task::Waker;

use slab::Slab;

use crate::group::GroupInner;
use crate::runtime::Shared;
use crate::shim::{Mutex, Ordering, lock};
use crate::task::{Outcome, Runnable, TaskMeta};

/// `TaskMeta::slot` of a task that was never registered.
pub(crate) const UNREGISTERED: usize = usize::MAX;
const KEY_BITS: u32 = 40;

pub(crate) struct Registry {
    shards: Box<[Shard]>,
}

#[repr(align(128))]
struct Shard {
    inner: Mutex<ShardInner>,
}

#[derive(Default)]
struct ShardInner {
    tasks: Slab<Waker>,
    /// Set at shutdown: nothing registers any more.
    closed: bool,
    spawned: u64,
    completed: u64,
    cancelled: u64,
    panicked: u64,
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
                    inner: Mutex::new(ShardInner::default()),
                })
                .collect(),
        }
    }

    /// Registers a new task. False when the runtime is shutting down (the caller drops it).
    pub(crate) fn register(&self, runnable: &Runnable, shared: &Shared) -> bool {
        let shard = crate::worker::current_shard(shared) % self.shards.len();
        let waker = runnable.waker();
        let mut inner = lock(&self.shards[shard].inner);
        if inner.closed {
            drop(inner);
            return false;
        }
        let key = inner.tasks.insert(waker);
        inner.spawned += 1;
        runnable
            .metadata()
            .slot
            .store((shard << KEY_BITS) | key, Ordering::Relaxed);
        true
    }

    /// Removes a task whose future has just been dropped, counting how it ended. Wakes
    /// `wait_idle` callers when this was the last task of a shard and someone is waiting.
    pub(crate) fn deregister(&self, meta: &TaskMeta, outcome: Outcome, group: &GroupInner) {
        let slot = meta.slot.load(Ordering::Relaxed);
        if slot == UNREGISTERED {
            return;
        }
        let (shard, key) = (slot >> KEY_BITS, slot & ((1 << KEY_BITS) - 1));
        let mut inner = lock(&self.shards[shard].inner);
        let waker = inner.tasks.try_remove(key);
        match outcome {
            Outcome::Completed => inner.completed += 1,
            Outcome::Cancelled => inner.cancelled += 1,
            Outcome::Panicked => inner.panicked += 1,
        }
        // Read under the shard lock: `wait_idle` announces itself before it locks the shards to
        // check them, so either it sees this removal or this load sees its announcement.
        let notify = inner.tasks.is_empty() && group.idle_waiters.load(Ordering::Relaxed) > 0;
        drop(inner);
        drop(waker);
        if notify {
            group.idle_event.notify(usize::MAX);
        }
    }

    /// Wakes the task registered at `slot`, if it is still registered.
    pub(crate) fn wake(&self, slot: usize) {
        if slot == UNREGISTERED {
            return;
        }
        let (shard, key) = (slot >> KEY_BITS, slot & ((1 << KEY_BITS) - 1));
        let waker = lock(&self.shards[shard].inner).tasks.get(key).cloned();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Wakes every registered task; with `close`, also refuses every later registration.
    pub(crate) fn wake_all(&self, close: bool) {
        let mut wakers = Vec::new();
        for shard in self.shards.iter() {
            let mut inner = lock(&shard.inner);
            if close {
                inner.closed = true;
            }
            wakers.extend(inner.tasks.iter().map(|(_, w)| w.clone()));
        }
        for w in wakers {
            w.wake();
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for shard in self.shards.iter() {
            let inner = lock(&shard.inner);
            c.live += inner.tasks.len();
            c.spawned += inner.spawned;
            c.completed += inner.completed;
            c.cancelled += inner.cancelled;
            c.panicked += inner.panicked;
        }
        c
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(&s.inner).tasks.is_empty())
    }
}
