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
//! rotation or about to be inserted (`group::listed`). The remover's half runs here: `pick_and_take`
//! clears the flag under the scheduler lock when it empties the queue, then re-checks the queue
//! after releasing the lock and re-lists the group if a push slipped in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use concurrent_queue::ConcurrentQueue;

use crate::group::GroupInner;
use crate::group::inner::GroupSched;
use crate::shim::{AtomicU64, AtomicUsize, Mutex, Ordering, lock};
use crate::task::Runnable;

use super::lane::Lane;
use super::rotation::{Key, Rotation};

/// Virtual time advances by `ns * SCALE / weight` per charged nanosecond.
const SCALE: u128 = 1 << 16;
/// A group queue at most this long is taken whole by one worker.
const SMALL_QUEUE: usize = 16;
/// When a pick's group gives a worker at most this many tasks, the same visit also takes up to
/// `EXTRA_GROUPS` more groups that have at most this many queued tasks each and are due now (see
/// `pick_and_take`).
const EXTRA_MAX_TASKS: usize = 2;
/// The most extra groups one visit takes.
pub(super) const EXTRA_GROUPS: usize = 8;

/// A group woken from outside may take the lane while at most `1 / LANE_PASS` of a quantum of its
/// own service ahead of the rotation's first group (`lane_admits`). Not zero: groups woken from
/// outside one task at a time (a task per connection) are charged about alike, so whenever one of
/// them waits in the rotation, half the others are a few microseconds ahead of it, and each of
/// their wakes would take the rotation too (a pick under the scheduler lock) until it empties.
/// Small, so that a group waiting in the rotation is passed only by groups less than an eighth of
/// a quantum of service ahead of it, where a task run beside the served group may be a whole one.
const LANE_PASS: u64 = 8;

/// A served entry not refreshed for this long (or for two quanta, if longer) belongs to a worker
/// stuck in one poll: it no longer holds the floor down. Well above a quantum, so that a worker the
/// operating system merely preempted for a while keeps its group's credit.
const STALE_AFTER: Duration = Duration::from_millis(20);

/// A virtual runtime in whole virtual nanoseconds (`vruntime / SCALE`), as the hints give it.
fn virtual_ns(vruntime: u128) -> u64 {
    u64::try_from(vruntime / SCALE).unwrap_or(u64::MAX)
}

/// Whole virtual nanoseconds (a hint, a rotation key) as a virtual runtime: at most the exact
/// runtime they were taken from.
fn from_virtual_ns(v: u64) -> u128 {
    u128::from(v) * SCALE
}

/// A group's place in the rotation (see `rotation::Key`), from what its lock holds: its virtual
/// runtime in whole virtual nanoseconds (half the size of the exact `u128`; groups less than a
/// virtual nanosecond apart are served in the order they entered, which no share can tell), then
/// its entry count.
fn rotation_key(gs: &GroupSched) -> Key {
    (virtual_ns(gs.vruntime), gs.entered)
}

/// A fresh rotation key for a group about to be inserted at its current virtual runtime; stores
/// its entry count so that [`rotation_key`] finds it again.
fn enter_key(st: &mut SchedState, gs: &mut GroupSched) -> Key {
    let key = st.rotation.key(virtual_ns(gs.vruntime));
    gs.entered = key.1;
    key
}

/// Sets a group's virtual runtime and its lock-free hint (`GroupInner::vtime_hint`), under the
/// group's lock.
fn set_vruntime(g: &GroupInner, gs: &mut GroupSched, vruntime: u128) {
    gs.vruntime = vruntime;
    g.vtime_hint.store(virtual_ns(vruntime), Ordering::Relaxed);
}

/// Charges `ns` of service to a group, under its lock: its virtual runtime rises by
/// `ns / weight`. The caller moves its rotation entry if it has one.
fn add_service(g: &GroupInner, gs: &mut GroupSched, ns: u64) {
    let delta = u128::from(ns) * SCALE / u128::from(gs.weight.max(1));
    let charged = gs.vruntime + delta;
    set_vruntime(g, gs, charged);
}

/// A quantum of `g`'s own service in virtual nanoseconds (`quantum_ns / weight`, from its weight
/// hint). In u64 (this runs on every cross-group wake, and a u128 division is a library call),
/// and no division at all for the default weight.
fn own_quantum(g: &GroupInner, quantum_ns: u64) -> u64 {
    match g.weight_hint.load(Ordering::Relaxed) {
        0 | 1 => quantum_ns,
        weight => quantum_ns / u64::from(weight),
    }
}

/// Lifts `g`, which a hint showed behind `floor` (virtual nanoseconds), to `floor` under its
/// lock: an idle group banks no credit. The rotation's key is the virtual runtime, so only a group
/// out of it may move.
fn lift_to(g: &GroupInner, floor: u64) {
    let mut gs = lock(&g.sched);
    if !gs.in_rotation {
        let lifted = gs.vruntime.max(from_virtual_ns(floor));
        set_vruntime(g, &mut gs, lifted);
    }
}

/// From when a group that a push lists counts as waiting (`GroupMetrics::wait`: queued work that
/// no worker serving the group has taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitFrom {
    /// From the listing: nobody serves the group (a wake, a spawn, a worker switching away).
    Now,
    /// From an earlier clock stamp: the tasks were taken from the group's queue then, but never
    /// run (a worker's extras, handed back).
    Stamp(u64),
    /// Not at all: the pushing worker keeps serving the group (it exposes part of its local
    /// backlog); the group waits only once that worker leaves it (`charge_and_check`).
    Served,
}

/// Up to `EXTRA_GROUPS` groups, on the stack: a pick's extra candidates, or the groups it took
/// out of the rotation.
type FewGroups = [Option<Arc<GroupInner>>; EXTRA_GROUPS];

/// Service a worker gave a group since its last visit to the scheduler: charged at the next
/// visit (`ns`), and flushed to the group's metrics after it (`ns` and `polls`; see `segment`).
pub(crate) struct Charge {
    pub(crate) group: Arc<GroupInner>,
    pub(crate) ns: u64,
    pub(crate) polls: u64,
}

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

/// Who asks `Scheduler::pick_and_take` for work, and how much it may take.
pub(crate) struct Picker<L: Fn() -> usize> {
    /// The worker's index (its served entry).
    pub(crate) worker: usize,
    /// The most tasks of one group its local queue can take.
    pub(crate) max_batch: usize,
    /// How many would-be extra groups to leave in the rotation (the other workers searching);
    /// asked only when a pick finds a group it could take as an extra.
    pub(crate) leave: L,
}

pub(crate) struct Scheduler {
    state: Mutex<SchedState>,
    /// How many groups are in the rotation or its inbox; read without the lock as a hint.
    listed: AtomicUsize,
    /// The rotation's length, stored under the lock whenever it changes; read without it (see
    /// `may_pick`).
    rotation_len: AtomicUsize,
    /// Groups a pusher just made runnable, with the clock stamp from which they count as waiting
    /// (`None`: a worker serves them; see [`WaitFrom`]), waiting to enter the rotation. Pushers
    /// never take the scheduler lock: workers move the inbox into the rotation inside the critical
    /// sections they take anyway (`pick_and_take`, `charge_and_check`).
    inbox: ConcurrentQueue<(Arc<GroupInner>, Option<u64>)>,
    /// The quantum in nanoseconds: how far past the picked group's virtual runtime (scaled by the
    /// other group's weight) an extra group may be and still be taken with it.
    quantum_ns: u128,
    /// The floor in virtual nanoseconds (`floor / SCALE`), stored under the lock whenever it
    /// rises; read without it by `lane_admits`.
    floor_hint: AtomicU64,
    /// The virtual runtime of the rotation's first group in virtual nanoseconds (`u64::MAX` for
    /// an empty rotation), stored under the lock at the end of each visit that may change it;
    /// read without it by `lane_admits`.
    front_hint: AtomicU64,
    /// Tasks woken from outside the workers whose groups were idle at the floor (see `lane`).
    lane: Lane<Runnable>,
}

struct SchedState {
    /// Keyed by [`rotation_key`].
    rotation: Rotation<GroupInner>,
    floor: u128,
    /// Per worker: the group it serves, or `None` while it parks. Set at each of the worker's
    /// visits here; every charge to that group updates the runtime. What it misses is service not
    /// charged yet (at most a quantum per worker), which makes it only lower, so the floor stays
    /// conservative.
    served: Box<[Option<Served>]>,
    /// A served entry older than this is left out of the floor (see `update_floor`).
    stale_after: Duration,
}

/// What a worker last told the scheduler about the group it serves.
#[derive(Clone, Copy)]
struct Served {
    group: u64,
    vruntime: u128,
    /// The worker's last visit. A worker that serves normally visits at least once a quantum.
    at: Instant,
}

impl Scheduler {
    /// A scheduler for `workers` workers that charge at least once per `quantum` while serving.
    pub(crate) fn new(workers: usize, quantum: Duration) -> Self {
        Scheduler {
            state: Mutex::new(SchedState {
                rotation: Rotation::default(),
                floor: 0,
                served: vec![None; workers].into_boxed_slice(),
                stale_after: (quantum * 2).max(STALE_AFTER),
            }),
            listed: AtomicUsize::new(0),
            rotation_len: AtomicUsize::new(0),
            inbox: ConcurrentQueue::unbounded(),
            quantum_ns: quantum.as_nanos(),
            floor_hint: AtomicU64::new(0),
            front_hint: AtomicU64::new(u64::MAX),
            lane: Lane::default(),
        }
    }

    /// Tasks waiting in the lane (a snapshot, for metrics).
    pub(crate) fn lane_len(&self) -> usize {
        self.lane.len()
    }

    /// True if a task waits in the lane (a snapshot; the idle protocol's re-check reads it after
    /// its fence).
    #[inline]
    pub(crate) fn lane_has_work(&self) -> bool {
        !self.lane.is_empty()
    }

    /// May a task of `g`, woken by a thread that holds no core of this runtime, go to the lane
    /// (see `lane`)? Yes if `g` is not listed, has no task in the lane yet, is at most
    /// `1 / LANE_PASS` of a quantum of its own service past the rotation's first group (a group
    /// waiting in the rotation is passed over by no more than that), and is at most a quantum of
    /// its own service (`quantum / weight`) past the floor (so a worker's switch for it at a
    /// quantum end costs the served group at most that).
    /// True means the caller holds the group's lane flag and must push the task with
    /// [`push_lane`](Self::push_lane).
    ///
    /// A group further behind than the floor (idle for a while) is first lifted to it under its
    /// own lock, as entering the rotation would lift it: an idle group banks no credit, through
    /// the lane or not. Otherwise this reads hints only, no lock.
    pub(crate) fn lane_admits(&self, g: &GroupInner) -> bool {
        if g.listed.is_set() || g.in_lane.is_set() {
            return false;
        }
        let floor = self.floor_hint.load(Ordering::Relaxed);
        let front = self.front_hint.load(Ordering::Relaxed);
        let vtime = g.vtime_hint.load(Ordering::Relaxed);
        let slack = own_quantum(g, u64::try_from(self.quantum_ns).unwrap_or(u64::MAX));
        let limit = floor
            .saturating_add(slack)
            .min(front.saturating_add(slack / LANE_PASS));
        if vtime > limit || !g.in_lane.enter() {
            return false;
        }
        if vtime < floor {
            lift_to(g, floor);
        }
        true
    }

    /// Pushes `r`, a task of `g`, to the lane, after [`lane_admits`](Self::lane_admits) said yes.
    /// Gives it back if the runtime shut the lane.
    pub(crate) fn push_lane(&self, g: &GroupInner, r: Runnable) -> Result<(), Runnable> {
        self.lane.push(&g.in_lane, r, crate::clock::stamp())
    }

    /// Takes the lane's oldest task, with the clock stamp of its push.
    #[inline]
    pub(crate) fn pop_lane(&self) -> Option<(Runnable, u64)> {
        if self.lane.is_empty() {
            return None;
        }
        self.lane.pop(|r| &r.metadata().group.in_lane)
    }

    /// Shutdown: refuses every later push to the lane and takes out what waits there, for the
    /// caller to drop.
    pub(crate) fn close_lane(&self) -> Vec<Runnable> {
        self.lane.close();
        std::iter::from_fn(|| self.pop_lane().map(|(r, _)| r)).collect()
    }

    /// True if some group has queued work (a hint; exact under the lock).
    pub(crate) fn has_listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst) > 0
    }

    /// True if a pick may find a group: the rotation or the inbox holds one (a hint, read without
    /// the lock). `has_listed` can be true while neither does: a pusher counts a group as listed
    /// before it queues it in the inbox (so that a worker about to park sees it), and between the
    /// two a pick finds nothing. A worker that saw the count looks elsewhere and checks again
    /// instead of taking the scheduler lock for nothing each turn, which would contend with the
    /// workers doing real picks (foreign wakes into many groups open this window once per wake).
    pub(crate) fn may_pick(&self) -> bool {
        self.rotation_len.load(Ordering::Relaxed) > 0 || !self.inbox.is_empty()
    }

    /// True if a task waits in the lane, or a listed group has tasks queued now: a group just
    /// listed (in the inbox: a push listed it), or one in the rotation whose queue is not empty.
    /// `has_listed` alone also counts a group a worker has emptied, which stays listed until that
    /// worker's next pick. Takes the lock; for rare callers (the stall monitor).
    pub(crate) fn has_queued_work(&self) -> bool {
        if self.lane_has_work() {
            return true;
        }
        if !self.has_listed() {
            return false;
        }
        if !self.inbox.is_empty() {
            return true;
        }
        lock(&self.state)
            .rotation
            .iter()
            .any(|(_, g)| !g.queue.is_empty())
    }

    /// Called after a pusher flipped `g.listed` from false to true: queues `g` for the rotation.
    /// The count goes up first, so a worker about to park sees work (see `idle`). `wait` says from
    /// when the group counts as waiting in its metrics.
    pub(crate) fn list(&self, g: &Arc<GroupInner>, wait: WaitFrom) {
        // Everything but the push before the count: the window in which the group is counted but
        // not in the inbox stays as short as it can be (see `may_pick`).
        let since = match wait {
            WaitFrom::Now => Some(crate::clock::stamp()),
            WaitFrom::Stamp(since) => Some(since),
            WaitFrom::Served => None,
        };
        let entry = (g.clone(), since);
        self.listed.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.inbox.push(entry) {
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
            let at_floor = gs.vruntime <= st.floor;
            let entered = gs.vruntime.max(st.floor);
            set_vruntime(&g, &mut gs, entered);
            gs.in_rotation = true;
            // 0 for a group a worker serves: it does not wait (see `WaitFrom`).
            g.waiting_since
                .store(since.map_or(0, |s| s.max(1)), Ordering::Relaxed);
            let key = enter_key(st, &mut gs);
            drop(gs);
            st.rotation.insert(key, g, at_floor);
        }
        self.rotation_len
            .store(st.rotation.len(), Ordering::Relaxed);
    }

    fn charge_locked(st: &mut SchedState, g: &GroupInner, gs: &mut GroupSched, ns: u64) {
        let entry = if gs.in_rotation {
            st.rotation.remove(&rotation_key(gs))
        } else {
            None
        };
        add_service(g, gs, ns);
        if let Some(entry) = entry {
            let key = enter_key(st, gs);
            st.rotation.insert(key, entry, false);
        }
        for s in st.served.iter_mut().flatten() {
            if s.group == g.id {
                s.vruntime = gs.vruntime;
            }
        }
    }

    /// Raises the floor to the smallest virtual runtime among the active groups: those in the
    /// rotation and those the workers last said they serve. A served group counts even while it
    /// is out of the rotation (its tasks are in a worker's local queue): otherwise the floor would
    /// pass it, and when it re-entered the rotation it would lose the credit it is owed, which is
    /// what kept a weight-4 group with two tasks at about 2.4× a weight-1 group instead of 4×.
    ///
    /// A served entry the worker has not refreshed for `stale_after` is left out: that worker is
    /// stuck in one poll, and its group's frozen virtual runtime would otherwise pin the floor, so
    /// a group arriving meanwhile would enter far behind the groups still being served and take
    /// the free workers for itself.
    fn update_floor(&self, st: &mut SchedState, now: Instant) {
        // The key's whole virtual nanoseconds, scaled back: at most the exact value, so the floor
        // stays at or below the front group.
        let listed = st.rotation.first().map(|((v, _), _)| from_virtual_ns(*v));
        let fresh_since = now.checked_sub(st.stale_after);
        let served = st
            .served
            .iter()
            .flatten()
            .filter(|s| fresh_since.is_none_or(|t| s.at >= t))
            .map(|s| s.vruntime);
        if let Some(lowest) = listed.into_iter().chain(served).min() {
            if lowest > st.floor {
                st.floor = lowest;
                self.floor_hint.store(virtual_ns(lowest), Ordering::Relaxed);
            }
        }
        self.publish_front(st);
    }

    /// Stores the rotation's first virtual runtime for `lane_admits` (see `front_hint`).
    fn publish_front(&self, st: &SchedState) {
        let front = st.rotation.first().map_or(u64::MAX, |((v, _), _)| *v);
        if self.front_hint.load(Ordering::Relaxed) != front {
            self.front_hint.store(front, Ordering::Relaxed);
        }
    }

    /// Applies a worker's pending charges under an already-held lock. The caller clears them
    /// after the visit (outside the lock: a charge may hold a group's last `Arc`).
    fn charge_pending(st: &mut SchedState, pending: &[Charge]) {
        for c in pending.iter().filter(|c| c.ns > 0) {
            let mut gs = lock(&c.group.sched);
            Self::charge_locked(st, &c.group, &mut gs, c.ns);
        }
    }

    /// Applies `c` if that needs no scheduler lock: a group out of the rotation has no key there
    /// to move, so its own lock is enough to raise its virtual runtime. True if `c` is applied
    /// (or has nothing to apply); otherwise the caller charges it with
    /// [`charge_all`](Self::charge_all).
    ///
    /// A worker that serves one group after another (tasks woken from outside, each in its own
    /// group, through the lane) then lists their charges without a scheduler visit per handful of
    /// groups. Two things a visit also does are left to the next one (a pick or a quantum end, at
    /// most a quantum away): updating the served entries' virtual runtimes, which only keeps the
    /// floor lower (conservative, as the module docs say of charges not applied yet), and raising
    /// the floor. Groups listed meanwhile wait in the inbox for a visit to admit them, so with the
    /// inbox not empty it applies nothing and the caller visits, as before.
    pub(crate) fn charge_off_rotation(&self, c: &Charge) -> bool {
        if c.ns == 0 {
            return true;
        }
        if !self.inbox.is_empty() {
            return false;
        }
        let mut gs = lock(&c.group.sched);
        if gs.in_rotation {
            return false;
        }
        add_service(&c.group, &mut gs, c.ns);
        true
    }

    /// Applies `pending` (segments a worker finished since its last visit) under one lock. With
    /// `parking`, that worker serves nothing from now on.
    pub(crate) fn charge_all(&self, pending: &[Charge], parking: Option<usize>) {
        if pending.is_empty() && parking.is_none() {
            return;
        }
        let mut st = lock(&self.state);
        self.admit_inbox(&mut st);
        Self::charge_pending(&mut st, pending);
        if let Some(worker) = parking {
            st.served[worker] = None;
        }
        self.update_floor(&mut st, crate::clock::now());
    }

    /// Applies the worker's pending charges, then takes work from the listed group with the
    /// smallest virtual runtime, all in one critical section: a long queue is shared out
    /// (`len / workers + 1` tasks, at most `max_batch`, what the worker's local queue can take), a short one (at most `SMALL_QUEUE`) is
    /// taken whole. The worker's local queue gets that one group's tasks, so that it serves
    /// groups in virtual-runtime order, not in queue order. (Putting several short groups' tasks in
    /// the local queue saved scheduler round trips for one-shot groups, but made backlogged groups
    /// share by task count: weights 1:2:4 came out 53:34:13.)
    ///
    /// **Extra groups.** When the picked group gives at most `EXTRA_MAX_TASKS` tasks, the same
    /// visit also takes up to `EXTRA_GROUPS` further groups from the front of the rotation, each
    /// whole, if each has at most `EXTRA_MAX_TASKS` tasks queued and is *due*: its virtual runtime
    /// is at most a quantum of its own (`quantum / weight`) past the picked group's, so a pick
    /// would reach it within a quantum anyway. Their tasks go to `extras`, which the worker runs
    /// after its local queue, each charged to its own group by time like any task. Foreign wakes
    /// into many groups (a task per connection, each in its group) then cost one visit per
    /// several groups. A backlogged group is never an extra unless its queue is down to
    /// `EXTRA_MAX_TASKS`, and then only while it is due, so shares stay those of the weights.
    /// The first `leave` groups that would be extras stay in the rotation: the caller passes the
    /// number of other workers searching for work, each woken to take a group like them. (Taken
    /// as extras, two one-task groups that yield in turn kept one worker between them for
    /// hundreds of milliseconds while the other, woken at each listing, found nothing and parked.)
    ///
    /// A group whose queue this empties leaves the rotation; the listing protocol's re-check runs
    /// after the lock is released. Returns the group and its first task (`None` if another worker
    /// emptied the queue first); the rest of the batch goes to `batch`.
    pub(crate) fn pick_and_take(
        &self,
        pending: &[Charge],
        now: Instant,
        picker: Picker<impl Fn() -> usize>,
        batch: &mut Vec<Runnable>,
        extras: &mut Vec<Runnable>,
    ) -> Option<(Arc<GroupInner>, Option<Runnable>)> {
        let Picker {
            worker,
            max_batch,
            leave,
        } = picker;
        let mut st = lock(&self.state);
        self.admit_inbox(&mut st);
        Self::charge_pending(&mut st, pending);
        self.update_floor(&mut st, now);
        let workers = st.served.len();
        let g = st.rotation.first()?.1.clone();
        let mut gs = lock(&g.sched);
        g.end_wait(|| crate::clock::stamp_of(now));
        let taken = g.queue.take_batch(
            |len| {
                if len <= SMALL_QUEUE {
                    // At least one: a push may be on its way into a queue that read empty.
                    len.max(1)
                } else {
                    (len / workers + 1).min(max_batch)
                }
            },
            batch,
        );
        let (first, left) = match taken {
            Some((first, left)) => (Some(first), left),
            None => (None, 0),
        };
        if first.is_some() {
            st.served[worker] = Some(Served {
                group: g.id,
                vruntime: gs.vruntime,
                at: now,
            });
        }
        let picked_vruntime = gs.vruntime;
        let unlisted = left == 0 && self.unlist(&mut st, &g, &mut gs);
        drop(gs);
        let mut extra_groups: FewGroups = Default::default();
        if first.is_some() && batch.len() < EXTRA_MAX_TASKS {
            let picked = (&*g, picked_vruntime);
            self.take_extras(&mut st, picked, leave, now, extras, &mut extra_groups);
        }
        self.publish_front(&st);
        drop(st);
        if unlisted && g.listed.after_clear(|| g.queue.is_empty()) {
            self.list(&g, WaitFrom::Now);
        }
        for e in extra_groups.iter().flatten() {
            if e.listed.after_clear(|| e.queue.is_empty()) {
                self.list(e, WaitFrom::Now);
            }
        }
        Some((g, first))
    }

    /// Takes `g`, whose queue the caller just found empty, out of the rotation (the remover's half
    /// of the listing protocol: the caller re-checks the queue after releasing the lock). True if
    /// it did.
    fn unlist(&self, st: &mut SchedState, g: &GroupInner, gs: &mut GroupSched) -> bool {
        if !gs.in_rotation {
            return false;
        }
        st.rotation.remove(&rotation_key(gs));
        self.rotation_len
            .store(st.rotation.len(), Ordering::Relaxed);
        gs.in_rotation = false;
        g.waiting_since.store(0, Ordering::Relaxed);
        g.listed.clear();
        self.listed.fetch_sub(1, Ordering::SeqCst);
        true
    }

    /// The extra groups of a pick (see `pick_and_take`), the first `leave` of them left in the
    /// rotation: their tasks go to `extras`, and the groups it unlisted to `unlisted`, for the
    /// caller's re-check after the lock.
    fn take_extras(
        &self,
        st: &mut SchedState,
        (picked, picked_vruntime): (&GroupInner, u128),
        leave: impl Fn() -> usize,
        now: Instant,
        extras: &mut Vec<Runnable>,
        unlisted: &mut FewGroups,
    ) {
        // The furthest any group may be past the picked one: a weight-1 quantum, in the keys'
        // whole virtual nanoseconds (a key at most this is at most the exact horizon).
        let horizon = virtual_ns(picked_vruntime + self.quantum_ns * SCALE);
        // Candidates by their queues' lock-free lengths; the take below checks the length again.
        let mut candidates: FewGroups = Default::default();
        let front = st
            .rotation
            .iter()
            .take_while(|((v, _), _)| *v <= horizon)
            .take(4 * EXTRA_GROUPS)
            .filter(|(_, g)| g.id != picked.id && g.queue.len_hint() <= EXTRA_MAX_TASKS)
            .map(|(_, g)| g.clone());
        for (slot, g) in candidates.iter_mut().zip(front) {
            *slot = Some(g);
        }
        let mut unlisted_n = 0;
        let mut to_leave: Option<usize> = None;
        for e in candidates.into_iter().flatten() {
            let mut gs = lock(&e.sched);
            let due = picked_vruntime + self.quantum_ns * SCALE / u128::from(gs.weight.max(1));
            if !gs.in_rotation || gs.vruntime > due {
                continue;
            }
            // Asked at the first group that could be taken: a pick with none reads nothing.
            let n = to_leave.get_or_insert_with(&leave);
            if *n > 0 {
                *n -= 1;
                continue;
            }
            let before = extras.len();
            let small = |len| if len <= EXTRA_MAX_TASKS { len } else { 0 };
            let taken = e.queue.take_batch(small, extras);
            let Some((first, left)) = taken else { continue };
            // `take_batch` hands the first task back and the rest into `extras`: keep queue order.
            extras.insert(before, first);
            e.end_wait(|| crate::clock::stamp_of(now));
            if left == 0 && self.unlist(st, &e, &mut gs) {
                drop(gs);
                unlisted[unlisted_n] = Some(e);
                unlisted_n += 1;
            }
        }
    }

    /// Applies a worker's charges at the end of its quantum (`g`, the group it was serving, among
    /// them) and decides what the worker does next.
    pub(crate) fn charge_and_check(
        &self,
        pending: &[Charge],
        worker: usize,
        g: &GroupInner,
        now: Instant,
    ) -> Verdict {
        let mut st = lock(&self.state);
        self.admit_inbox(&mut st);
        Self::charge_pending(&mut st, pending);
        let gs = lock(&g.sched);
        st.served[worker] = Some(Served {
            group: g.id,
            vruntime: gs.vruntime,
            at: now,
        });
        self.update_floor(&mut st, now);
        match st.rotation.first() {
            Some(((v, _), first)) if first.id != g.id && *v < virtual_ns(gs.vruntime) => {
                // The worker leaves `g`: if `g` stays in the rotation with tasks queued (a pick
                // took only part of its queue, so no new listing will start its wait), it waits
                // from now. Under the lock, so no unlisting (which clears the stamp) races it.
                if gs.in_rotation && g.waiting_since.load(Ordering::Relaxed) == 0 {
                    g.waiting_since
                        .store(crate::clock::stamp_of(now).max(1), Ordering::Relaxed);
                }
                Verdict::Switch
            }
            _ => Verdict::Stay {
                others_listed: st.rotation.len() > usize::from(gs.in_rotation),
            },
        }
    }

    /// May a worker serving `serving` run a task of `woken` (woken by one of `serving`'s tasks)
    /// next, on its own, without the task going through `woken`'s global queue and the rotation?
    /// Yes if `woken` is not ahead of `serving` by more than one `quantum` of its own service:
    /// the scheduler would then pick it at least as soon. Its service is charged to it like any
    /// other segment's, and a quantum end still switches to a group the rotation says is behind.
    ///
    /// A group out of the rotation that is further behind is first lifted to one quantum below
    /// `serving` under its own lock (an idle group banks no more credit than that, as it would not
    /// entering the rotation at the floor). Otherwise this reads the groups' hints only, no lock:
    /// it runs on every cross-group wake on a worker. The hints miss charges not applied yet (at
    /// most a quantum's worth per worker), which shifts the comparison by as much, never the
    /// shares.
    pub(crate) fn may_run_beside(
        serving: &GroupInner,
        woken: &GroupInner,
        quantum: Duration,
    ) -> bool {
        let ahead_of = serving.vtime_hint.load(Ordering::Relaxed);
        let vtime = woken.vtime_hint.load(Ordering::Relaxed);
        let slack = own_quantum(woken, crate::clock::nanos(quantum));
        if vtime > ahead_of.saturating_add(slack) {
            return false;
        }
        let floor = ahead_of.saturating_sub(slack);
        if vtime < floor {
            lift_to(woken, floor);
        }
        true
    }

    /// Empties the rotation, the inbox and the served entries (shutdown's last step): they hold
    /// `Arc`s of groups, which hold the runtime's shared state, so leaving them would keep the
    /// whole runtime alive after it is dropped.
    pub(crate) fn clear(&self) {
        let rotation = {
            let mut st = lock(&self.state);
            st.served.iter_mut().for_each(|s| *s = None);
            self.rotation_len.store(0, Ordering::Relaxed);
            self.front_hint.store(u64::MAX, Ordering::Relaxed);
            std::mem::take(&mut st.rotation)
        };
        let mut inbox = Vec::new();
        while let Ok((g, _)) = self.inbox.pop() {
            inbox.push(g);
        }
        self.listed.store(0, Ordering::SeqCst);
        // Dropped outside the lock: the last `Arc` of a group runs its destructor.
        drop(rotation);
        drop(inbox);
    }
}
