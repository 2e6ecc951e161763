//! Virtual time: what a group is charged for its service, scaled by its weight.
//!
//! A group's *virtual runtime* is the CPU time charged to it times `SCALE / weight`; the
//! scheduler serves the group whose virtual runtime is smallest (see `scheduler`), and a tree's
//! node the entity under it whose virtual runtime is smallest (see `tree`). Hints and keys hold
//! it in whole virtual nanoseconds (`vruntime / SCALE`), which are never more than the exact
//! value.

use crate::group::GroupInner;
use crate::group::inner::{GroupSched, effective_weight};
use crate::shim::Ordering;

/// Virtual time advances by `ns * SCALE / weight` per charged nanosecond.
pub(crate) const SCALE: u128 = 1 << 16;

/// A virtual runtime in whole virtual nanoseconds (`vruntime / SCALE`), as the hints give it.
pub(crate) fn virtual_ns(vruntime: u128) -> u64 {
    u64::try_from(vruntime / SCALE).unwrap_or(u64::MAX)
}

/// Whole virtual nanoseconds (a hint, a rotation key) as a virtual runtime: at most the exact
/// runtime they were taken from.
pub(crate) fn from_virtual_ns(v: u64) -> u128 {
    u128::from(v) * SCALE
}

/// Sets a group's virtual runtime and its lock-free hint (`GroupInner::vtime_hint`), and a tree
/// group's copy for its tree (`VClock::vns`), under the group's lock.
pub(crate) fn set_vruntime(g: &GroupInner, gs: &mut GroupSched, vruntime: u128) {
    gs.vruntime = vruntime;
    let vns = virtual_ns(vruntime);
    g.set_vtime_hint(vns);
    if let Some(node) = g.node() {
        node.clock.vns.store(vns, Ordering::Relaxed);
    }
}

/// Charges `ns` of service to a group, under its lock: its virtual runtime rises by
/// `ns / weight`. Its rotation key, if it has one, stays (lazy keys).
pub(crate) fn add_service(g: &GroupInner, gs: &mut GroupSched, ns: u64) {
    let delta = u128::from(ns) * SCALE / u128::from(effective_weight(gs).max(1));
    let charged = gs.vruntime + delta;
    set_vruntime(g, gs, charged);
}
