//! A worker's local run queue: a bounded FIFO that its owner pushes to and pops from, and that idle
//! workers steal half of.
//!
//! It is a `concurrent_queue::ConcurrentQueue` in bounded mode (see ARCHITECTURE.md for why a
//! hand-written ring was not needed). The LIFO slot in front of it lives in the core and is never
//! stolen.

use concurrent_queue::ConcurrentQueue;

/// Slots in each local queue.
pub const LOCAL_CAPACITY: usize = 256;

/// A core's local queue of `T` (runnables in the runtime; plain values in the loom models).
pub struct LocalQueue<T> {
    q: ConcurrentQueue<T>,
}

impl<T> Default for LocalQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> LocalQueue<T> {
    /// An empty queue of `LOCAL_CAPACITY` slots.
    pub fn new() -> Self {
        LocalQueue {
            q: ConcurrentQueue::bounded(LOCAL_CAPACITY),
        }
    }

    /// Items queued now (a snapshot).
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True if nothing is queued (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Pushes at the back; gives the item back when the queue is full.
    pub fn push(&self, item: T) -> Result<(), T> {
        self.q.push(item).map_err(|e| e.into_inner())
    }

    /// Pops from the front (the oldest item).
    pub fn pop(&self) -> Option<T> {
        self.q.pop().ok()
    }

    /// Takes half of the queue (rounded up) from the front: returns one item to run now and moves
    /// the rest to `dest`, the thief's own queue. An item `dest` cannot take (it filled up
    /// meanwhile) goes to `overflow` rather than being lost. `None` if this queue was empty.
    pub fn steal_half_into(&self, dest: &LocalQueue<T>, mut overflow: impl FnMut(T)) -> Option<T> {
        let n = self.q.len().div_ceil(2);
        let first = self.q.pop().ok()?;
        for _ in 1..n {
            let Ok(item) = self.q.pop() else { break };
            if let Err(item) = dest.push(item) {
                overflow(item);
            }
        }
        Some(first)
    }
}
