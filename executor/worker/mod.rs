//! Workers: the threads that run cores, the worker loop, and how work moves between them.
//!
//! - `core`: a worker's run state (`Core`), owned by whichever thread runs it, and the worker loop.
//! - `threads`: the threads that run cores, and the core hand-off protocol (numbered there).
//! - `schedule`: where a woken or spawned task goes (the routing of wakes).
//! - `shared`: the runtime-wide state the cores share (`Shared`, the groups' host), and how work
//!   is published to other workers.
//! - `local`: a core's local run queue; `idle`: parking and waking cores; `parker`: where a core's
//!   thread sleeps.
//! - `block_on`: running a future on the calling thread, handing the core away when nested.
//! - `block_in_place`: running blocking code in a task's poll, with the core handed away first.
//! - `context`: what a runtime thread knows about itself (its runtime, the core it polls with).
//! - `lent`: the slot through which a poll reaches its core and a rescue claims it.
//! - `monitor`: the stall monitor, which rescues a core whose poll is stuck while work waits;
//!   `os_thread`: whether a stuck poll's thread is blocked or only waiting for a CPU.
//! - `metrics`: what each core counts for `Runtime::metrics`.
//! - `reactor` (feature `io`): the worker loop inside `async_io::block_on`, so the keeper sleeps in
//!   the I/O reactor and readiness wakes are dispatched on a worker thread.
//!
//! This layer builds on `fair` (which group to serve, what to charge), `group` and `task`.

pub(crate) mod block_in_place;
pub(crate) mod block_on;
pub(crate) mod context;
pub(crate) mod core;
pub(crate) mod idle;
pub(crate) mod lent;
pub(crate) mod local;
pub(crate) mod metrics;
pub(crate) mod monitor;
mod os_thread;
pub(crate) mod parker;
#[cfg(all(feature = "io", not(loom), not(miri)))]
mod reactor;
mod schedule;
pub(crate) mod shared;
pub(crate) mod threads;

pub(crate) use block_in_place::block_in_place;
pub(crate) use block_on::block_on;
#[cfg(all(feature = "io", not(loom), not(miri)))]
pub(crate) use reactor::apply_dropped_timers;
pub(crate) use shared::{Blocking, BlockingBinding, Config, Shared, ThreadHook};
