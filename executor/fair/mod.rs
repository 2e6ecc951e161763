//! Fairness between groups: which group a worker serves next, and what each group is charged.
//!
//! - `scheduler`: the rotation of groups with queued work, ordered by virtual runtime and split
//!   into shards with a lock each; the floor that keeps idle groups from banking credit; the
//!   inboxes through which pushers list groups without a lock; the remover's half of the listing
//!   protocol (the pusher's half is the group's `ListFlag`, `group::listed`).
//! - `inbox`: a shard's listed groups on their way in, and a hint of where the first one enters.
//! - `rotation`: the ordered set behind one shard of the rotation: a FIFO for the groups that
//!   enter in order (at the floor, which only rises), a B-tree for the others.
//! - `lane`: tasks woken from outside into groups idle at the floor, taken without a lock.
//! - `segment`: a worker's service segments (the time it spends on one group), the adaptive
//!   clock, and the quantum. Their times come from the cheap clock (`crate::clock`).
//!
//! This layer knows groups and tasks; it knows nothing of workers or threads. A worker calls it
//! with the time it measured and the group it served.

pub(crate) mod cap;
pub(crate) mod inbox;
pub(crate) mod lane;
mod rotation;
pub(crate) mod scheduler;
pub(crate) mod segment;
mod tree;
mod vtime;

pub(crate) use scheduler::{Picker, Scheduler, Verdict, WaitFrom};
pub(crate) use segment::Service;
