//! CPU caps: a group's subtree uses at most its quota of service per period
//! (`GroupBuilder::cpu_limit`), as cgroup v2's `cpu.max` holds a container.
//!
//! Every charge to a group of a tree adds its service to each capped node on the way up
//! (`Scheduler::charge`). When a node's service in the current period reaches its quota, the
//! tree's next decision that passes through it (a pick's descent, a quantum end on its path)
//! throttles it: the node leaves its parent's rotation (the root: its shard's rotation) with its
//! tasks still queued, and the scheduler notes when the quota returns. Nothing else waits for it.
//! At that time a worker (looking for work, at a quantum end, or the keeper waking from its park
//! for it) puts the node back (`Scheduler::unthrottle_due`).
//!
//! Periods are aligned on the clock (`stamp / period`), the same for every cap. Charges arrive at
//! most a quantum late, a poll is never interrupted, and a worker notices that its quantum ended
//! within four polls, counting the one in which it ran out (`segment`: the clock is read at least
//! every fourth poll), so a period can overshoot its quota by up to a quantum plus four polls per
//! worker; the overshoot is carried into the next period (it
//! starts with that much used), so over several periods the average stays at the cap.

use crate::group::tree::{CapState, Node};
use crate::shim::{Ordering, lock};

/// The period length in nanoseconds.
pub(crate) fn period_ns() -> u64 {
    crate::clock::nanos(crate::group::CPU_PERIOD)
}

/// Moves `cs` to the period of `now`, paying back `quota` of what was used per period passed.
fn roll(cs: &mut CapState, quota: u64, now: u64) {
    let p = now / period_ns();
    if p > cs.period {
        cs.used = cs.used.saturating_sub(quota.saturating_mul(p - cs.period));
        cs.period = p;
    }
}

/// Adds `ns` of service to `node`'s period, if it is capped.
pub(crate) fn charge(node: &Node, ns: u64, now: u64) {
    let quota = node.cap_quota.load(Ordering::Relaxed);
    if quota == 0 {
        return;
    }
    let mut cs = lock(&node.cap);
    roll(&mut cs, quota, now);
    cs.used += ns;
}

/// If `node` has used its quota at `now`: the stamp from which it has not (the start of the
/// first period its carried-over use leaves room in).
pub(crate) fn exhausted_until(node: &Node, now: u64) -> Option<u64> {
    let quota = node.cap_quota.load(Ordering::Relaxed);
    if quota == 0 {
        return None;
    }
    let mut cs = lock(&node.cap);
    roll(&mut cs, quota, now);
    if cs.used < quota {
        return None;
    }
    Some((cs.period + cs.used / quota) * period_ns())
}

/// `node` is throttled from `now` (its throttled time starts counting).
pub(crate) fn mark_throttled(node: &Node, now: u64) {
    let mut cs = lock(&node.cap);
    if cs.throttled_since == 0 {
        cs.throttled_since = now.max(1);
    }
}

/// `node` is no longer throttled at `now`.
pub(crate) fn mark_unthrottled(node: &Node, now: u64) {
    let mut cs = lock(&node.cap);
    if cs.throttled_since != 0 {
        cs.throttled_ns += now.saturating_sub(cs.throttled_since);
        cs.throttled_since = 0;
    }
}
