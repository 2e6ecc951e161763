//! `max_concurrency` and the concurrent/exclusive pair: a group's admission gate.
//!
//! A limited group admits at most `max` of its tasks into the run queues at once; an admitted task
//! keeps its slot while it is queued or being polled, and passes it on when its poll ends (or when a
//! worker drops it as cancelled). Tasks that find no slot wait in the limiter's FIFO, not on a
//! worker, so a waiting task never blocks a thread. With `max = 1` the group is a strand: its tasks
//! are polled one at a time, in the order they became runnable.
//!
//! A *pair* (`GroupBuilder::build_pair`) is two groups whose limiters share one gate: the
//! concurrent side admits up to its `max` tasks at once, the exclusive side one, and never while a
//! concurrent task holds a slot; an exclusive task waiting stops new concurrent admissions, so
//! exclusive work goes first when both wait (as .NET's `ConcurrentExclusiveSchedulerPair` does).
//! Since a slot is held from admission to the end of the poll, no poll of an exclusive task
//! overlaps any other poll of the pair.
//!
//! At shutdown the line is closed before it is drained: a runnable that arrives later is handed
//! back to its caller to drop, so no task can be stranded in a line nobody drains.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::shim::{Mutex, lock};
use crate::task::Runnable;

/// Which side of the gate a limiter admits to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Up to the gate's `max` at once, while no exclusive task runs or waits.
    Concurrent,
    /// One at a time, while no concurrent task holds a slot.
    Exclusive,
}

pub(crate) struct Limiter {
    side: Side,
    gate: Arc<Mutex<Gate>>,
}

struct Gate {
    /// The most concurrent tasks admitted at once.
    max: usize,
    /// Concurrent tasks holding a slot.
    admitted: usize,
    /// An exclusive task holds the gate.
    exclusive: bool,
    waiting: VecDeque<Runnable>,
    waiting_exclusive: VecDeque<Runnable>,
    closed: bool,
}

impl Gate {
    fn new(max: usize) -> Arc<Mutex<Gate>> {
        Arc::new(Mutex::new(Gate {
            max,
            admitted: 0,
            exclusive: false,
            waiting: VecDeque::new(),
            waiting_exclusive: VecDeque::new(),
            closed: false,
        }))
    }

    /// Hands the free gate to whoever waits: an exclusive task first, once no concurrent task
    /// holds a slot; else concurrent tasks up to `max`, while no exclusive task waits.
    fn dispatch(&mut self, out: &mut Released) {
        if self.exclusive {
            return;
        }
        if !self.waiting_exclusive.is_empty() {
            if self.admitted == 0 {
                self.exclusive = true;
                out.push(self.waiting_exclusive.pop_front());
            }
            return;
        }
        while self.admitted < self.max {
            let Some(r) = self.waiting.pop_front() else {
                break;
            };
            self.admitted += 1;
            out.push(Some(r));
        }
    }
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

/// The runnables a `release` admitted, for the caller to queue (each to its own group: in a pair,
/// they may be the other side's). At most one, except when an exclusive task's end lets several
/// concurrent ones in.
#[must_use = "released runnables hold their slots: queue them, or they are stranded"]
#[derive(Default)]
pub(crate) struct Released {
    first: Option<Runnable>,
    more: Vec<Runnable>,
}

impl Released {
    fn push(&mut self, r: Option<Runnable>) {
        let Some(r) = r else { return };
        if self.first.is_none() {
            self.first = Some(r);
        } else {
            self.more.push(r);
        }
    }
}

impl IntoIterator for Released {
    type Item = Runnable;
    type IntoIter = std::iter::Chain<std::option::IntoIter<Runnable>, std::vec::IntoIter<Runnable>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.more)
    }
}

impl Limiter {
    /// A group's own gate of `max` slots (`max_concurrency`).
    pub(crate) fn new(max: usize) -> Self {
        Limiter {
            side: Side::Concurrent,
            gate: Gate::new(max),
        }
    }

    /// The two sides of a pair's gate: (concurrent, up to `max` at once; exclusive).
    pub(crate) fn pair(max: usize) -> (Limiter, Limiter) {
        let gate = Gate::new(max);
        (
            Limiter {
                side: Side::Concurrent,
                gate: gate.clone(),
            },
            Limiter {
                side: Side::Exclusive,
                gate,
            },
        )
    }

    /// Gives the runnable back with a slot, keeps it in line, or refuses it after `close`.
    pub(crate) fn admit(&self, r: Runnable) -> Admit {
        let mut g = lock(&self.gate);
        if g.closed {
            return Admit::Closed(r);
        }
        match self.side {
            Side::Concurrent => {
                if !g.exclusive
                    && g.waiting_exclusive.is_empty()
                    && g.admitted < g.max
                    && g.waiting.is_empty()
                {
                    g.admitted += 1;
                    return Admit::Run(r);
                }
                g.waiting.push_back(r);
            }
            Side::Exclusive => {
                if !g.exclusive && g.admitted == 0 && g.waiting_exclusive.is_empty() {
                    g.exclusive = true;
                    return Admit::Run(r);
                }
                g.waiting_exclusive.push_back(r);
            }
        }
        Admit::Queued
    }

    /// Ends one admitted task's turn: its slot goes to whoever waits, returned for the caller to
    /// queue (outside the lock).
    pub(crate) fn release(&self) -> Released {
        let mut out = Released::default();
        let mut g = lock(&self.gate);
        match self.side {
            Side::Concurrent => g.admitted -= 1,
            Side::Exclusive => g.exclusive = false,
        }
        g.dispatch(&mut out);
        out
    }

    /// Refuses every later runnable (shutdown, before the last drain).
    pub(crate) fn close(&self) {
        lock(&self.gate).closed = true;
    }

    /// This side's tasks waiting for a slot (a snapshot, for metrics).
    pub(crate) fn waiting(&self) -> usize {
        let g = lock(&self.gate);
        match self.side {
            Side::Concurrent => g.waiting.len(),
            Side::Exclusive => g.waiting_exclusive.len(),
        }
    }

    /// Takes this side's waiting runnables out (shutdown); the caller drops them outside the lock.
    pub(crate) fn drain(&self) -> VecDeque<Runnable> {
        let mut g = lock(&self.gate);
        match self.side {
            Side::Concurrent => std::mem::take(&mut g.waiting),
            Side::Exclusive => std::mem::take(&mut g.waiting_exclusive),
        }
    }
}
