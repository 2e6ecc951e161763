//! A worker's local run queue: a bounded FIFO that its owner pushes to and pops from, and that idle
//! workers steal half of.
//!
//! It is a `concurrent_queue::ConcurrentQueue` in bounded mode (see ARCHITECTURE.md for why a
//! hand-written ring was not needed). The LIFO slot in front of it lives in the core and is never
//! stolen.

use concurrent_queue::ConcurrentQueue;

use crate::task::Runnable;

/// Slots in each local queue.
pub(crate) const LOCAL_CAPACITY: usize = 256;

pub(crate) struct LocalQueue {
    q: ConcurrentQueue<Runnable>,
}

impl LocalQueue {
    pub(crate) fn new() -> Self {
        LocalQueue {
            q: ConcurrentQueue::bounded(LOCAL_CAPACITY),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Pushes at the back; gives the runnable back when the queue is full.
    pub(crate) fn push(&self, r: Runnable) -> Result<(), Runnable> {
        self.q.push(r).map_err(|e| e.into_inner())
    }

    /// Pops from the front (the oldest task).
    pub(crate) fn pop(&self) -> Option<Runnable> {
        self.q.pop().ok()
    }

    /// Takes half of the queue (rounded up) from the front: returns one task to run now and moves
    /// the rest to `dest`, which must be empty. `None` if this queue was empty.
    pub(crate) fn steal_half_into(&self, dest: &LocalQueue) -> Option<Runnable> {
        let n = self.q.len().div_ceil(2);
        let first = self.q.pop().ok()?;
        for _ in 1..n {
            let Ok(r) = self.q.pop() else { break };
            // `dest` is empty and takes at most half of a full queue, so this cannot fail; if it
            // ever did, the task goes to its group's global queue rather than being lost.
            if let Err(r) = dest.push(r) {
                let g = r.metadata().group.clone();
                super::shared::push_global(&g, r);
            }
        }
        Some(first)
    }
}
