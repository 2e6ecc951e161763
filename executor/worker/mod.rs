//! Workers: the threads that run cores, the worker loop, and how work moves between them.
//!
//! The files, from the top down: each imports only files below it.
//!
//! - `lifecycle`: starting a runtime's threads (one per core, and the stall monitor) and stopping
//!   the monitor at shutdown.
//! - `monitor`: the stall monitor, which rescues a core whose poll is stuck while work waits.
//! - `controller`: the worker-count controller the monitor runs: how many cores are active.
//! - `block_in_place`: running blocking code in a task's poll, with the core handed away first.
//! - `block_on`: running a future on the calling thread, handing the core away when nested.
//! - `runner`: the runtime's part of the hand-off protocol: handing a core to another thread, the
//!   rescue's claim, starting a thread, and the body every runtime thread runs.
//! - `reactor` (feature `io`): the worker loop inside `async_io::block_on`, so the keeper sleeps
//!   in the I/O reactor and readiness wakes are dispatched on a worker thread.
//! - `run`: the worker loop: next task, poll with the core lent, park.
//! - `schedule`: where a woken or spawned task goes (the routing of wakes; `Shared` as the groups'
//!   host).
//! - `handoff`: a core handed away in the middle of a poll, and its reclaim.
//! - `lease`: the core a thread polls with, lent for the length of a poll.
//! - `search`: where a worker looks for its next task (steps 1 to 7).
//! - `quantum`: the end of a quantum: charge, then stay with the served group or switch.
//! - `park`: parking a core (step 8), and keeping time.
//! - `handover`: a core leaving its thread: hand-off, rescue claim, retirement.
//! - `core`: a worker's run state (`Core`), owned by whichever thread runs it, and its basic
//!   operations.
//! - `publish`: publishing work to other workers (global queues, the lane, listing, waking a
//!   sleeper with the I/O-aware choice of whom).
//! - `reacting` (feature `io`): the marks of who dispatches readiness wakes.
//! - `context`: what a runtime thread knows about itself (its runtime, its default group).
//! - `shutdown`: shutdown's drain of what is still queued.
//! - `shared`: the runtime-wide state the cores share (`Shared`, the groups' host; `Remote`, the
//!   part of a core other threads reach).
//! - `threads`: the rendezvous of threads and cores, and the core hand-off protocol (numbered
//!   there).
//! - `config`: the settings a runtime runs with.
//! - `monitor_state`: the stall monitor's state in `Shared`.
//! - `idle`: parking and waking cores; `parker`: where a core's thread sleeps.
//! - `local`: a core's local run queue.
//! - `lent`: the slot through which a poll reaches its core and a rescue claims it.
//! - `metrics`: what each core counts for `Runtime::metrics`.
//! - `os_thread`: whether a stuck poll's thread is blocked or only waiting for a CPU.
//! - `cpus`: the default worker count (CPU affinity and the cgroup v2 quota).
//!
//! This layer builds on `fair` (which group to serve, what to charge), `group` and `task`.

mod block_in_place;
mod block_on;
mod config;
pub(crate) mod context;
mod controller;
mod core;
pub(crate) mod cpus;
mod handoff;
mod handover;
pub(crate) mod idle;
pub(crate) mod lease;
pub(crate) mod lent;
mod lifecycle;
pub(crate) mod local;
mod metrics;
mod monitor;
mod monitor_state;
mod os_thread;
mod park;
pub(crate) mod parker;
pub(crate) mod publish;
mod quantum;
mod run;
mod runner;
mod schedule;
mod search;
pub(crate) mod shared;
mod shutdown;
pub(crate) mod threads;

cfg_reactor! {
    mod reactor;
    mod reacting;

    pub(crate) use reactor::apply_dropped_timers;
}

pub(crate) use block_in_place::block_in_place;
pub(crate) use block_on::block_on;
pub(crate) use config::{Blocking, BlockingBinding, Config, ThreadHook, run_hook};
pub(crate) use shared::Shared;
pub(crate) use shutdown::Drained;
