//! The group scheduler: which group a worker serves next.
//!
//! Every group has a *virtual runtime*: the CPU time its tasks were charged, scaled by
//! `1 / weight`. The *rotation* holds the groups that have tasks waiting in their global queue,
//! ordered by virtual runtime; a worker that needs work takes the group with the smallest one, and
//! a worker whose quantum ends switches if some listed group is behind the one it serves. This is
//! stride scheduling; with equal weights it is round-robin by time.
//!
//! Rules that keep it fair:
//! - Time is charged, not polls: each worker measures how long it served a group and charges it
//!   (at its next visit here, at most a quantum later), wherever the group's tasks came from.
//! - A group that joins the rotation starts at `max(own, floor)`, where `floor` tracks the smallest
//!   virtual runtime among active groups: an idle group banks no credit. Active means listed *or
//!   served by a worker*: a group whose tasks all sit in workers' local queues is out of the
//!   rotation but not idle, and keeps its credit when it re-enters (`update_floor`).
//! - Only groups with queued work are in the rotation, so idle groups cost nothing per decision.
//! - Pushers never take the scheduler lock: a group that becomes runnable goes through a lock-free
//!   inbox that workers fold into the rotation when they next hold the lock.
//!
//! The listing protocol (lock-free part): `GroupInner::listed` is true while the group is in the
//! rotation or about to be inserted. A pusher pushes to the group queue, fences, then sets `listed`
//! (inserting the group if it was false). The remover (`pick_and_take`, when it empties the queue)
//! clears `listed` under the scheduler lock, fences, then re-checks the queue and re-lists if a push
//! slipped in. One of
//! the two always sees the other, so no task is left in an unlisted queue (loom model:
//! `tests/loom_runtime.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use concurrent_queue::ConcurrentQueue;

use crate::group::GroupInner;
use crate::shim::{AtomicBool, AtomicUsize, Mutex, Ordering, fence, lock};
use crate::task::Runnable;

/// The lock-free half of the listing protocol: `true` while a group is in the rotation or about to
/// be inserted. Both sides write, fence, then read the other side's location.
pub struct ListFlag(AtomicBool);

impl Default for ListFlag {
    fn default() -> Self {
        ListFlag(AtomicBool::new(false))
    }
}

impl ListFlag {
    /// Pusher side, after pushing to the queue: true if the caller must insert the group.
    pub fn after_push(&self) -> bool {
        fence(Ordering::SeqCst);
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::AcqRel)
    }

    /// Remover side, under the scheduler lock, having seen the queue empty.
    pub fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Remover side, after the lock is released: true if a push slipped in and the caller must
    /// insert the group again.
    pub fn after_clear(&self, queue_is_empty: impl FnOnce() -> bool) -> bool {
        fence(Ordering::SeqCst);
        !queue_is_empty() && !self.0.swap(true, Ordering::AcqRel)
    }
}

/// Virtual time advances by `ns * SCALE / weight` per charged nanosecond.
const SCALE: u128 = 1 << 16;
/// A group queue at most this long is taken whole by one worker.
const SMALL_QUEUE: usize = 16;
/// The most tasks one pick moves to a worker's local queue (half of it).
const MAX_BATCH: usize = crate::queue::LOCAL_CAPACITY / 2;

/// Service time a worker owes a group, charged at its next visit to the scheduler.
pub(crate) type Charge = (Arc<GroupInner>, u64);

/// What a worker does when its quantum ends.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Another listed group is behind the served one: hand all local work back and pick again.
    Switch,
    /// Keep serving the group. `others_listed` says other groups wait in the rotation, so the
    /// worker should expose its local surplus (see `worker`).
    Stay { others_listed: bool },
}

pub(crate) struct Scheduler {
    state: Mutex<SchedState>,
    /// How many groups are in the rotation or its inbox; read without the lock as a hint.
    listed: AtomicUsize,
    /// Groups a pusher just made runnable, with the time they became so, waiting to enter the
    /// rotation. Pushers never take the scheduler lock: workers move the inbox into the rotation
    /// inside the critical sections they take anyway (`pick_and_take`, `charge_and_check`).
    inbox: ConcurrentQueue<(Arc<GroupInner>, Instant)>,
}

struct SchedState {
    rotation: BTreeMap<(u128, u64), Arc<GroupInner>>,
    floor: u128,
    /// Per worker: the id and virtual runtime of the group it serves, or `None` while it parks.
    /// Set at each of the worker's visits here; every charge to that group updates the runtime.
    /// What it misses is service not charged yet (at most a quantum per worker), which makes it
    /// only lower, so the floor stays conservative.
    served: Box<[Option<(u64, u128)>]>,
}

/// A group's scheduling state; only touched while the scheduler lock is held.
pub(crate) struct GroupSched {
    pub(crate) weight: u32,
    pub(crate) vruntime: u128,
    pub(crate) in_rotation: bool,
    /// When the group last entered the rotation without a worker picking it yet.
    pub(crate) listed_at: Option<Instant>,
}

impl GroupSched {
    pub(crate) fn new(weight: u32) -> Self {
        GroupSched {
            weight,
            vruntime: 0,
            in_rotation: false,
            listed_at: None,
        }
    }
}

impl Scheduler {
    pub(crate) fn new(workers: usize) -> Self {
        Scheduler {
            state: Mutex::new(SchedState {
                rotation: BTreeMap::new(),
                floor: 0,
                served: vec![None; workers].into_boxed_slice(),
            }),
            listed: AtomicUsize::new(0),
            inbox: ConcurrentQueue::unbounded(),
        }
    }

    /// True if some group has queued work (a hint; exact under the lock).
    pub(crate) fn has_listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst) > 0
    }

    /// Called after a pusher flipped `g.listed` from false to true: queues `g` for the rotation.
    /// The count goes up first, so a worker about to park sees work (see `idle`).
    pub(crate) fn list(&self, g: &Arc<GroupInner>) {
        self.listed.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.inbox.push((g.clone(), Instant::now())) {
            // The inbox is never closed; keep the count honest anyway.
            drop(e.into_inner());
            self.listed.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Moves the inbox into the rotation; a group enters at `max(own, floor)` (no banked credit).
    fn admit_inbox(&self, st: &mut SchedState) {
        while let Ok((g, since)) = self.inbox.pop() {
            let mut gs = lock(&g.sched);
            if gs.in_rotation {
                // Cannot happen (one lister per false-to-true flip of `listed`); keep the count exact.
                self.listed.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            gs.vruntime = gs.vruntime.max(st.floor);
            gs.in_rotation = true;
            gs.listed_at = Some(since);
            let key = (gs.vruntime, g.id);
            drop(gs);
            st.rotation.insert(key, g);
        }
    }

    fn charge_locked(st: &mut SchedState, g: &GroupInner, gs: &mut GroupSched, ns: u64) {
        let delta = u128::from(ns) * SCALE / u128::from(gs.weight.max(1));
        if gs.in_rotation {
            if let Some(entry) = st.rotation.remove(&(gs.vruntime, g.id)) {
                gs.vruntime += delta;
                st.rotation.insert((gs.vruntime, g.id), entry);
            } else {
                gs.vruntime += delta;
            }
        } else {
            gs.vruntime += delta;
        }
        for (id, v) in st.served.iter_mut().flatten() {
            if *id == g.id {
                *v = gs.vruntime;
            }
        }
    }

    /// Raises the floor to the smallest virtual runtime among the active groups: those in the
    /// rotation and those the workers last said they serve. A served group counts even while it
    /// is out of the rotation (its tasks are in a worker's local queue): otherwise the floor would
    /// pass it, and when it re-entered the rotation it would lose the credit it is owed, which is
    /// what kept a weight-4 group with two tasks at about 2.4× a weight-1 group instead of 4×.
    fn update_floor(st: &mut SchedState) {
        let listed = st.rotation.first_key_value().map(|((v, _), _)| *v);
        let served = st.served.iter().flatten().map(|&(_, v)| v);
        if let Some(lowest) = listed.into_iter().chain(served).min() {
            st.floor = st.floor.max(lowest);
        }
    }

    /// Applies a worker's pending charges under an already-held lock.
    fn charge_pending(st: &mut SchedState, pending: &mut Vec<Charge>) {
        for (g, ns) in pending.drain(..) {
            let mut gs = lock(&g.sched);
            Self::charge_locked(st, &g, &mut gs, ns);
        }
    }

    /// Applies `pending` (segments a worker finished since its last visit) under one lock. With
    /// `parking`, that worker serves nothing from now on.
    pub(crate) fn charge_all(&self, pending: &mut Vec<Charge>, parking: Option<usize>) {
        if pending.is_empty() && parking.is_none() {
            return;
        }
        let mut st = lock(&self.state);
        self.admit_inbox(&mut st);
        Self::charge_pending(&mut st, pending);
        if let Some(worker) = parking {
            st.served[worker] = None;
        }
        Self::update_floor(&mut st);
    }

    /// Applies the worker's pending charges, then takes work from the listed group with the
    /// smallest virtual runtime, all in one critical section: a long queue is shared out
    /// (`len / workers + 1` tasks, at most `MAX_BATCH`), a short one (at most `SMALL_QUEUE`) is
    /// taken whole. Only one group is taken: a worker's local queue holds one group's tasks, so
    /// that it serves them in virtual-runtime order, not in queue order. (Taking several short
    /// groups at once saved scheduler round trips for one-shot groups, but made backlogged groups
    /// share by task count: weights 1:2:4 came out 53:34:13.)
    ///
    /// A group whose queue this empties leaves the rotation; the listing protocol's re-check runs
    /// after the lock is released. Returns the group and its first task (`None` if another worker
    /// emptied the queue first); the rest of the batch goes to `batch`.
    pub(crate) fn pick_and_take(
        &self,
        pending: &mut Vec<Charge>,
        now: Instant,
        worker: usize,
        batch: &mut Vec<Runnable>,
    ) -> Option<(Arc<GroupInner>, Option<Runnable>)> {
        let mut st = lock(&self.state);
        self.admit_inbox(&mut st);
        Self::charge_pending(&mut st, pending);
        Self::update_floor(&mut st);
        let workers = st.served.len();
        let g = st.rotation.first_key_value()?.1.clone();
        let mut gs = lock(&g.sched);
        if let Some(t) = gs.listed_at.take() {
            let waited = now.saturating_duration_since(t).as_nanos() as u64;
            g.wait_ns.fetch_add(waited, Ordering::Relaxed);
        }
        let first = g.queue.pop_batch(
            |len| {
                if len <= SMALL_QUEUE {
                    len
                } else {
                    (len / workers + 1).min(MAX_BATCH)
                }
            },
            batch,
        );
        if first.is_some() {
            st.served[worker] = Some((g.id, gs.vruntime));
        }
        let mut unlisted = false;
        if g.queue.is_empty() && gs.in_rotation {
            st.rotation.remove(&(gs.vruntime, g.id));
            gs.in_rotation = false;
            gs.listed_at = None;
            g.listed.clear();
            self.listed.fetch_sub(1, Ordering::SeqCst);
            unlisted = true;
        }
        drop(gs);
        drop(st);
        if unlisted && g.listed.after_clear(|| g.queue.is_empty()) {
            self.list(&g);
        }
        Some((g, first))
    }

    /// Charges `ns` to the group a worker is serving at the end of its quantum and decides what
    /// the worker does next.
    pub(crate) fn charge_and_check(
        &self,
        pending: &mut Vec<Charge>,
        worker: usize,
        g: &GroupInner,
        ns: u64,
    ) -> Verdict {
        let mut st = lock(&self.state);
        self.admit_inbox(&mut st);
        Self::charge_pending(&mut st, pending);
        let mut gs = lock(&g.sched);
        Self::charge_locked(&mut st, g, &mut gs, ns);
        st.served[worker] = Some((g.id, gs.vruntime));
        Self::update_floor(&mut st);
        match st.rotation.first_key_value() {
            Some(((v, id), _)) if *id != g.id && *v < gs.vruntime => Verdict::Switch,
            _ => Verdict::Stay {
                others_listed: st.rotation.len() > usize::from(gs.in_rotation),
            },
        }
    }

    pub(crate) fn set_weight(&self, g: &GroupInner, weight: u32) {
        let _st = lock(&self.state);
        lock(&g.sched).weight = weight;
    }
}
