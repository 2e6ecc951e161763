//! `max_concurrency`: a group's admission gate.
//!
//! A limited group admits at most `max` of its tasks into the run queues at once; an admitted task
//! keeps its slot while it is queued or being polled, and passes it on when its poll ends (or when a
//! worker drops it as cancelled). Tasks that find no slot wait in the limiter's FIFO, not on a
//! worker, so a waiting task never blocks a thread. With `max = 1` the group is a strand: its tasks
//! are polled one at a time, in the order they became runnable.
//!
//! At shutdown the line is closed before it is drained: a runnable that arrives later is handed
//! back to its caller to drop, so no task can be stranded in a line nobody drains.

use std::collections::VecDeque;

use crate::shim::{Mutex, lock};
use crate::task::Runnable;

pub(crate) struct Limiter {
    max: usize,
    state: Mutex<LimiterState>,
}

struct LimiterState {
    admitted: usize,
    waiting: VecDeque<Runnable>,
    closed: bool,
}

/// What `admit` did with a runnable.
#[must_use]
pub(crate) enum Admit {
    /// It has a slot: queue it to run.
    Run(Runnable),
    /// It waits in line; `release` hands it out later.
    Queued,
    /// The runtime is shutting down: drop it.
    Closed(Runnable),
}

impl Limiter {
    pub(crate) fn new(max: usize) -> Self {
        Limiter {
            max,
            state: Mutex::new(LimiterState {
                admitted: 0,
                waiting: VecDeque::new(),
                closed: false,
            }),
        }
    }

    /// Gives the runnable back with a slot, keeps it in line, or refuses it after `close`.
    pub(crate) fn admit(&self, r: Runnable) -> Admit {
        let mut st = lock(&self.state);
        if st.closed {
            Admit::Closed(r)
        } else if st.admitted < self.max && st.waiting.is_empty() {
            st.admitted += 1;
            Admit::Run(r)
        } else {
            st.waiting.push_back(r);
            Admit::Queued
        }
    }

    /// Ends one admitted task's turn: its slot goes to the next in line, which is returned for the
    /// caller to queue (outside the lock).
    pub(crate) fn release(&self) -> Option<Runnable> {
        let mut st = lock(&self.state);
        match st.waiting.pop_front() {
            Some(r) => Some(r),
            None => {
                st.admitted -= 1;
                None
            }
        }
    }

    /// Refuses every later runnable (shutdown, before the last drain).
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
    }

    /// Tasks waiting for a slot (a snapshot, for metrics).
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    /// Takes every waiting runnable out (shutdown); the caller drops them outside the lock.
    pub(crate) fn drain(&self) -> VecDeque<Runnable> {
        std::mem::take(&mut lock(&self.state).waiting)
    }
}
