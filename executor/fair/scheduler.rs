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
//! - Pushers never take a scheduler lock: a group that becomes runnable goes through a lock-free
//!   inbox that workers fold into the rotation when they next hold its lock.
//!
//! # Shards: no runtime-wide lock
//! The rotation is split into shards (a power of two, up to one per worker, at most
//! [`MAX_SHARDS`]), each behind its own mutex with its own inbox; a group always lists in the same
//! shard (a hash of its id). Virtual runtimes stay global: a group's share is the same whichever
//! shard holds it and whichever workers serve it. What ties the shards together is lock-free:
//! - each shard publishes its first group's virtual runtime (`Shard::front`) at the end of every
//!   visit; a worker that needs work reads the fronts and visits the shard whose front is lowest
//!   (counting the groups waiting in its inbox where they will enter, see `inbox`);
//! - the floor is the smallest of the fronts and of the virtual runtimes the workers last
//!   published for the groups they serve (`Served`), raised with `fetch_max` so that it only
//!   rises (`update_floor`);
//! - a worker whose quantum ends compares its group with the fronts, and visits a shard only if
//!   its front is behind.
//!
//! **Charges take no scheduler lock.** A charge raises the group's virtual runtime under the
//! group's own lock and leaves its rotation key as it was (*lazy keys*): a key is at most the
//! group's virtual runtime, never more. A visit re-keys the first groups of its shard until the
//! first one's key is current (`fix_front`) before it picks or publishes the front, so a pick
//! never takes a group that a charge has put behind another. A stale key further back only makes
//! the published front and the floor lower than they could be, which is the conservative side.
//!
//! So the pick path takes one shard's lock, and a charge, a wake and a spawn take none; the
//! locks a quantum end takes are those of the shards whose front is behind the served group.
//!
//! The listing protocol (lock-free part): a group's listed flag is true while the group is in the
//! rotation or about to be inserted (`group::listed`). The remover's half runs here: `pick_and_take`
//! clears the flag under the shard's lock when it empties the queue (`unlist`), then re-checks the
//! queue after releasing the lock (`GroupInner::after_unlist`) and re-lists the group if a push
//! slipped in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::group::GroupInner;
use crate::group::inner::{GroupSched, effective_weight};
use crate::group::listed::{LaneEntry, Listing};
use crate::group::tree::{Node, NodeState, Tree};
use crate::shim::{AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, fence, lock};
use crate::task::Runnable;

use super::cap;
use super::inbox::Inbox;
use super::lane::Lane;
use super::rotation::{Key, Rotation};
use super::tree::{self, Activated, Throttled, lock_tree};
use super::vtime::{SCALE, add_service, from_virtual_ns, set_vruntime, virtual_ns};

/// A group queue at most this long is taken whole by one worker.
const SMALL_QUEUE: usize = 16;
/// When a pick's group gives a worker at most this many tasks, the same visit also takes up to
/// `EXTRA_GROUPS` more groups that have at most this many queued tasks each and are due now (see
/// `pick_and_take`).
const EXTRA_MAX_TASKS: usize = 2;
/// The most extra groups one visit takes.
pub(super) const EXTRA_GROUPS: usize = 8;
/// The most shards the rotation is split into.
pub(crate) const MAX_SHARDS: usize = 8;

/// A group woken from outside may take the lane while at most `1 / LANE_PASS` of a quantum of its
/// own service ahead of the rotation's first group (`lane_admits`). Not zero: groups woken from
/// outside one task at a time (a task per connection) are charged about alike, so whenever one of
/// them waits in the rotation, half the others are a few microseconds ahead of it, and each of
/// their wakes would take the rotation too (a pick under a shard lock) until it empties.
/// Small, so that a group waiting in the rotation is passed only by groups less than an eighth of
/// a quantum of service ahead of it, where a task run beside the served group may be a whole one.
const LANE_PASS: u64 = 8;

/// A served entry not refreshed for this long (or for two quanta, if longer) belongs to a worker
/// stuck in one poll: it no longer holds the floor down. Well above a quantum, so that a worker the
/// operating system merely preempted for a while keeps its group's credit.
const STALE_AFTER: Duration = Duration::from_millis(20);

/// The most stale keys one visit re-keys at its shard's front (see `fix_front`); charges that keep
/// landing on the first group meanwhile cannot hold the visit.
const FIX_FRONT_MAX: usize = 64;

/// The key under which a group in the rotation is stored (see `rotation::Key`): its virtual
/// runtime in whole virtual nanoseconds when it was (re-)keyed, then its entry count. At most its
/// current virtual runtime (lazy keys, see the module docs).
fn rotation_key(gs: &GroupSched) -> Key {
    (gs.key_vns, gs.entered)
}

/// A fresh rotation key for a group about to be inserted at its current virtual runtime; stores
/// it in the group's state so that [`rotation_key`] finds it again.
fn enter_key(rotation: &mut Rotation<GroupInner>, gs: &mut GroupSched) -> Key {
    let key = rotation.key(virtual_ns(gs.vruntime));
    gs.key_vns = key.0;
    gs.entered = key.1;
    key
}

/// A quantum of `g`'s own service in virtual nanoseconds (`quantum_ns / weight`, from its weight
/// hint). In u64 (this runs on every cross-group wake, and a u128 division is a library call),
/// and no division at all for the default weight.
fn own_quantum(g: &GroupInner, quantum_ns: u64) -> u64 {
    match g.weight_hint() {
        0 | 1 => quantum_ns,
        weight => quantum_ns / u64::from(weight),
    }
}

/// Lifts `g`, which a hint showed behind `floor` (virtual nanoseconds), to `floor` under its
/// lock: an idle group banks no credit. The rotation's key is the virtual runtime, so only a group
/// out of it may move.
fn lift_to(g: &GroupInner, floor: u64) {
    let mut gs = g.sched();
    if !gs.in_rotation {
        let lifted = gs.vruntime.max(from_virtual_ns(floor));
        set_vruntime(g, &mut gs, lifted);
    }
}

/// Re-keys the first groups of a shard's rotation whose keys a charge left behind their virtual
/// runtimes, until the first key is current (or `FIX_FRONT_MAX` re-keys), so that the first group
/// is the one with the smallest virtual runtime. A group's hint is its virtual runtime, written
/// under its lock with it; a charge racing this visit makes the key stale again, as if it came a
/// moment later.
fn fix_front(rotation: &mut Rotation<GroupInner>) {
    for _ in 0..FIX_FRONT_MAX {
        let key = match rotation.first() {
            Some((key, g)) if g.vtime_hint() > key.0 => *key,
            _ => return,
        };
        let Some(g) = rotation.remove(&key) else {
            return;
        };
        let mut gs = g.sched();
        let key = enter_key(rotation, &mut gs);
        drop(gs);
        rotation.insert(key, g, false);
    }
}

/// The top-level group above `g` (`g` itself if it is top-level), as an `Arc`.
fn top_arc(g: &Arc<GroupInner>) -> &Arc<GroupInner> {
    let mut top = g;
    while let Some(p) = top.parent() {
        top = p;
    }
    top
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

/// What [`Scheduler::unlist`] did with a group whose queue its caller found empty.
#[must_use = "`Unlisted::Yes` leaves the caller the listing protocol's re-check after the lock \
              (`GroupInner::after_unlist`): without it, a task pushed meanwhile is stranded"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unlisted {
    /// It took the group out of the rotation and cleared its listed flag.
    Yes,
    /// The group was not in the rotation (another visit took it out).
    No,
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
    /// The worker's index (its served entry, and the shard it prefers among equals).
    pub(crate) worker: usize,
    /// The most tasks of one group its local queue can take.
    pub(crate) max_batch: usize,
    /// How many would-be extra groups to leave in the rotation (the other workers searching);
    /// asked only when a pick finds a group it could take as an extra.
    pub(crate) leave: L,
}

/// One shard of the rotation, on cache lines of its own.
#[repr(align(128))]
struct Shard {
    /// Keyed by [`rotation_key`].
    rotation: Mutex<Rotation<GroupInner>>,
    /// Groups a pusher just made runnable, with the clock stamp from which they count as waiting
    /// (`None`: a worker serves them; see [`WaitFrom`]), waiting to enter the rotation. Pushers
    /// never take the lock: workers move the inbox into the rotation when they visit the shard.
    inbox: Inbox<(Arc<GroupInner>, Option<u64>)>,
    /// The rotation's length, stored under the lock whenever it changes; read without it.
    len: AtomicUsize,
    /// The virtual runtime of the rotation's first group in virtual nanoseconds (`u64::MAX` for
    /// an empty rotation), stored under the lock at the end of each visit, after `fix_front`.
    front: AtomicU64,
}

impl Shard {
    fn new() -> Self {
        Shard {
            rotation: Mutex::new(Rotation::default()),
            inbox: Inbox::default(),
            len: AtomicUsize::new(0),
            front: AtomicU64::new(u64::MAX),
        }
    }

    /// Where the first group would be after the inbox is admitted (a hint): the published front
    /// or the inbox's (`floor` if the inbox does not know yet).
    fn front_with_inbox(&self, floor: u64) -> u64 {
        let front = self.front.load(Ordering::Relaxed);
        self.inbox.front(floor).map_or(front, |f| front.min(f))
    }

    /// Stores the rotation's length and first key (see `len`, `front`), under the lock.
    fn publish(&self, rotation: &Rotation<GroupInner>) {
        self.len.store(rotation.len(), Ordering::Relaxed);
        let front = rotation.first().map_or(u64::MAX, |((v, _), _)| *v);
        if self.front.load(Ordering::Relaxed) != front {
            self.front.store(front, Ordering::Relaxed);
        }
    }
}

/// What a worker last published about the group it serves (see `update_floor`), on a cache line
/// of its own: only that worker writes it.
#[repr(align(128))]
struct Served {
    /// The group's virtual runtime in virtual nanoseconds at the worker's last visit, or
    /// `u64::MAX` while the worker serves nothing (parked).
    vtime: AtomicU64,
    /// The clock stamp of that visit. A worker that serves normally visits at least once a
    /// quantum.
    at: AtomicU64,
    /// The served top-level group's address, as an identity only (never dereferenced): tells
    /// entries of one group apart from entries of two (`spread_hint`).
    group: AtomicUsize,
    /// For a tree, the served path's lag at a visit (`tree::path_lag`, in the root's virtual
    /// nanoseconds). It belongs to the visit stamped `at` only while `lag_at` equals `at`: a
    /// flat group's visit leaves both alone (its hot path pays nothing for trees), and its new
    /// `at` retires the lag.
    lag: AtomicU64,
    /// The clock stamp of the visit `lag` was published at.
    lag_at: AtomicU64,
}

/// How far apart the groups being served are (`Scheduler::spread_hint`), in virtual
/// nanoseconds of the top-level groups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Spread {
    /// Between the top-level groups served and the first listed one, if two or more are served.
    pub(crate) groups: Option<u64>,
    /// Within a tree being served, at its worst node (0 if none).
    pub(crate) tree_lag: u64,
}

pub(crate) struct Scheduler {
    shards: Box<[Shard]>,
    /// Per worker.
    served: Box<[Served]>,
    /// How many groups are in the rotation or an inbox; read as a hint.
    listed: AtomicUsize,
    /// The quantum in nanoseconds: how far past the picked group's virtual runtime (scaled by the
    /// other group's weight) an extra group may be and still be taken with it.
    quantum_ns: u128,
    /// The floor in virtual nanoseconds: only rises (`fetch_max`, see `update_floor`).
    floor: AtomicU64,
    /// The smallest of the shards' fronts, counting their inboxes (`Shard::front_with_inbox`),
    /// for `lane_admits`, which runs on every wake from outside and reads this one word instead
    /// of every shard's. Recomputed at the end of each shard visit, lowered by each listing; two
    /// visits that end at once may leave it a little high until the next one.
    front: AtomicU64,
    /// A served entry older than this (in nanoseconds of the clock's stamps) is left out of the
    /// floor (see `update_floor`).
    stale_after: u64,
    /// Tasks woken from outside the workers whose groups were idle at the floor (see `lane`).
    lane: Lane<Runnable>,
    /// Tree nodes a CPU cap throttled, each with the stamp at which its quota returns (`cap`).
    throttled: Mutex<Vec<(Arc<Tree>, usize, u64)>>,
    /// The earliest of those stamps (`u64::MAX`: none), read lock-free by every worker that looks
    /// for work.
    next_unthrottle: AtomicU64,
}

impl Scheduler {
    /// A scheduler for `workers` workers that charge at least once per `quantum` while serving.
    pub(crate) fn new(workers: usize, quantum: Duration) -> Self {
        let shards = workers.max(1).next_power_of_two().min(MAX_SHARDS);
        Scheduler {
            shards: (0..shards).map(|_| Shard::new()).collect(),
            served: (0..workers)
                .map(|_| Served {
                    vtime: AtomicU64::new(u64::MAX),
                    at: AtomicU64::new(0),
                    group: AtomicUsize::new(0),
                    lag: AtomicU64::new(0),
                    lag_at: AtomicU64::new(u64::MAX),
                })
                .collect(),
            listed: AtomicUsize::new(0),
            quantum_ns: quantum.as_nanos(),
            floor: AtomicU64::new(0),
            front: AtomicU64::new(u64::MAX),
            stale_after: crate::clock::nanos((quantum * 2).max(STALE_AFTER)),
            lane: Lane::default(),
            throttled: Mutex::new(Vec::new()),
            next_unthrottle: AtomicU64::new(u64::MAX),
        }
    }

    /// The shard a group lists in: a hash of its id (ids are not spread evenly by themselves).
    fn shard_of(&self, g: &GroupInner) -> &Shard {
        let h = g.id().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        // The shard count is a power of two.
        &self.shards[(h as usize) & (self.shards.len() - 1)]
    }

    /// Ends a visit to `shard`: publishes its length and front, then the smallest front of all
    /// (see `front`), recomputed from every shard (the visit may have admitted the inbox whose
    /// listing lowered it, and taken that group out again).
    fn publish(&self, shard: &Shard, rotation: &Rotation<GroupInner>) {
        shard.publish(rotation);
        let floor = self.floor.load(Ordering::Relaxed);
        let front = self
            .shards
            .iter()
            .map(|s| s.front_with_inbox(floor))
            .min()
            .unwrap_or(u64::MAX);
        if self.front.load(Ordering::Relaxed) != front {
            self.front.store(front, Ordering::Relaxed);
        }
    }

    /// How far apart the groups being served are, in virtual nanoseconds of the top-level
    /// groups (a hint, for the worker-count controller):
    /// - [`Spread::groups`]: the spread between the smallest and the largest virtual runtime
    ///   among the first listed group and the groups the workers published as served within
    ///   `fresh` (clock-stamp nanoseconds); `None` unless the workers served at least two groups:
    ///   the entries of one group published at different times differ by what it was charged in
    ///   between (many workers in long polls), which is no spread between groups. Each served
    ///   group counts with its freshest entry (a virtual runtime only rises).
    /// - [`Spread::tree_lag`]: the largest lag a worker serving a tree published within `fresh`
    ///   (`tree::path_lag`): two entities of one node apart, read at one instant under the
    ///   tree's lock and scaled to the root's frame, so that one tree whose groups drift from
    ///   their shares counts too, two groups or not.
    pub(crate) fn spread_hint(&self, fresh: u64) -> Spread {
        let fresh_since = crate::clock::stamp().saturating_sub(fresh);
        let mut groups: Vec<(usize, u64)> = Vec::new();
        let mut tree_lag = 0;
        for s in self.served.iter() {
            let v = s.vtime.load(Ordering::Relaxed);
            if v == u64::MAX || s.at.load(Ordering::Relaxed) < fresh_since {
                continue;
            }
            if s.lag_at.load(Ordering::Relaxed) == s.at.load(Ordering::Relaxed) {
                tree_lag = tree_lag.max(s.lag.load(Ordering::Relaxed));
            }
            let id = s.group.load(Ordering::Relaxed);
            match groups.iter_mut().find(|(g, _)| *g == id) {
                Some((_, freshest)) => *freshest = (*freshest).max(v),
                None => groups.push((id, v)),
            }
        }
        if groups.len() < 2 {
            return Spread {
                groups: None,
                tree_lag,
            };
        }
        let front = self.front.load(Ordering::Relaxed);
        let spread = groups
            .iter()
            .map(|&(_, v)| v)
            .chain(std::iter::once(front))
            .filter(|&v| v != u64::MAX)
            .fold(None, |r, v| match r {
                None => Some((v, v)),
                Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
            })
            .map(|(lo, hi)| hi - lo);
        Spread {
            groups: spread,
            tree_lag,
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
    /// [`LaneEntry::Entered`] means the caller holds the group's lane flag and must push the task
    /// with [`push_lane`](Self::push_lane).
    ///
    /// A group further behind than the floor (idle for a while) is first lifted to it under its
    /// own lock, as entering the rotation would lift it: an idle group banks no credit, through
    /// the lane or not. Otherwise this reads hints only, no lock.
    pub(crate) fn lane_admits(&self, g: &GroupInner) -> LaneEntry {
        // A tree's groups are reached through their tree (`tree`), never the lane.
        if g.is_listed() || g.has_task_in_lane() || g.node().is_some() {
            return LaneEntry::Refused;
        }
        let floor = self.floor.load(Ordering::Relaxed);
        let front = self.front.load(Ordering::Relaxed);
        let vtime = g.vtime_hint();
        let slack = own_quantum(g, u64::try_from(self.quantum_ns).unwrap_or(u64::MAX));
        let limit = floor
            .saturating_add(slack)
            .min(front.saturating_add(slack / LANE_PASS));
        if vtime > limit {
            return LaneEntry::Refused;
        }
        let entry = g.enter_lane();
        if entry == LaneEntry::Entered && vtime < floor {
            lift_to(g, floor);
        }
        entry
    }

    /// Pushes `r`, a task of `g`, to the lane, after [`lane_admits`](Self::lane_admits) gave
    /// [`LaneEntry::Entered`]. Gives it back if the runtime shut the lane.
    pub(crate) fn push_lane(&self, g: &GroupInner, r: Runnable) -> Result<(), Runnable> {
        self.lane.push(g.lane_flag(), r, crate::clock::stamp())
    }

    /// Takes the lane's oldest task, with the clock stamp of its push.
    #[inline]
    pub(crate) fn pop_lane(&self) -> Option<(Runnable, u64)> {
        if self.lane.is_empty() {
            return None;
        }
        self.lane.pop(|r| r.metadata().group.lane_flag())
    }

    /// Shutdown: refuses every later push to the lane and takes out what waits there, for the
    /// caller to drop.
    pub(crate) fn close_lane(&self) -> Vec<Runnable> {
        self.lane.close();
        std::iter::from_fn(|| self.pop_lane().map(|(r, _)| r)).collect()
    }

    /// True if some group has queued work (a hint; exact under the locks).
    fn has_listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst) > 0
    }

    /// True if a pick may find a group: a shard's rotation or inbox holds one (a hint, read
    /// without the locks). `has_listed` can be true while none does: a pusher counts a group as
    /// listed before it queues it in an inbox (a visit that drains the inbox takes the count
    /// down, so the count must go up first), and between the two a pick finds nothing. A worker
    /// that saw the count without this neither takes a shard lock for nothing (which would
    /// contend with the workers doing real picks) nor stays awake for it: the pusher fences after
    /// its push and then looks for a sleeper to wake (`list`), so a worker about to park that
    /// finds nothing here may park. (A pusher preempted in that window, a thread outside the
    /// runtime on an oversubscribed machine, kept every idle worker going round its search and
    /// its park's re-check until the pusher ran again.)
    fn may_pick(&self) -> bool {
        // The smallest front (see `front`) says at once that some shard holds a group; "none"
        // may lag behind a listing, so it is checked shard by shard. Each shard's inbox before
        // its length: a visit raises the length before it takes the first group from the inbox,
        // so a reader that finds the inbox emptied also finds the raised length.
        self.front.load(Ordering::Relaxed) != u64::MAX
            || self
                .shards
                .iter()
                .any(|s| !s.inbox.is_empty() || s.len.load(Ordering::Relaxed) > 0)
    }

    /// True if a pick would find a listed group (a hint): one is counted as listed and a shard
    /// shows it. The count alone is not enough (see `may_pick`).
    #[inline]
    pub(crate) fn has_pickable(&self) -> bool {
        self.has_listed() && self.may_pick()
    }

    /// True if a task waits in the lane, or a listed group has tasks queued now: a group just
    /// listed (in an inbox: a push listed it), or one in the rotation whose queue is not empty.
    /// `has_listed` alone also counts a group a worker has emptied, which stays listed until that
    /// worker's next pick. Takes the shard locks; for rare callers (the stall monitor).
    pub(crate) fn has_queued_work(&self) -> bool {
        if self.lane_has_work() {
            return true;
        }
        if !self.has_listed() {
            return false;
        }
        self.shards.iter().any(|s| {
            !s.inbox.is_empty()
                || lock(&s.rotation)
                    .iter()
                    .any(|(_, g)| !g.queue_is_empty() || g.node().is_some())
        })
    }

    /// Called after a pusher flipped `g`'s listed flag from false to true ([`Listing::Insert`]):
    /// queues `g` for its shard's rotation. The count goes up first (see `may_pick`), and a fence
    /// follows the push, so a worker about to park either sees the group in the inbox or is asleep
    /// when the caller looks for a sleeper to wake (see `idle`).
    /// `wait` says from when the group counts as waiting in its metrics.
    pub(crate) fn list(&self, g: &Arc<GroupInner>, wait: WaitFrom) {
        match g.node() {
            None => self.list_top(g, wait),
            Some(node) => self.list_in_tree(g, node, wait),
        }
    }

    /// [`list`](Self::list) for a group of a tree: activates its own queue and its ancestors
    /// (`tree`, step 1), then lists the root if that made it active.
    fn list_in_tree(&self, g: &Arc<GroupInner>, node: &Node, wait: WaitFrom) {
        let fresh_since = crate::clock::stamp().saturating_sub(self.stale_after);
        let activated = {
            let mut st = lock_tree(&node.tree);
            tree::activate_own(&mut st, node.slot, fresh_since)
        };
        if activated == Activated::ListRoot {
            self.list_top(top_arc(g), wait);
        }
        // The group's tasks are reachable: a worker about to park sees the root (listed now or
        // before) or is counted asleep when the caller looks for one (the fence in `list_top`,
        // or the one of the pusher that listed the root).
        fence(Ordering::SeqCst);
    }

    /// Queues a top-level group (flat, or a tree's root) for its shard's rotation.
    fn list_top(&self, g: &Arc<GroupInner>, wait: WaitFrom) {
        // Everything but the push before the count: the window in which the group is counted but
        // not in the inbox stays as short as it can be (see `may_pick`).
        let since = match wait {
            WaitFrom::Now => Some(crate::clock::stamp()),
            WaitFrom::Stamp(since) => Some(since),
            WaitFrom::Served => None,
        };
        let entry = (g.clone(), since);
        let shard = self.shard_of(g);
        let enters_at = g.vtime_hint().max(self.floor.load(Ordering::Relaxed));
        self.listed.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = shard.inbox.push(entry, enters_at) {
            // The inbox is never closed; keep the count honest anyway.
            drop(e);
            self.listed.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        // Orders the push before the caller's idle check (`Shared::notify_work`): a worker about
        // to park re-checks the inboxes after its own fence (`may_pick`), not the count, so it
        // either sees this group or is counted asleep when the caller looks for a sleeper.
        fence(Ordering::SeqCst);
        if enters_at < self.front.load(Ordering::Relaxed) {
            self.front.fetch_min(enters_at, Ordering::Relaxed);
        }
    }

    /// Moves a shard's inbox into its rotation, under its lock; a group enters at
    /// `max(own, floor)` (no banked credit). The floor is read under the lock, so the groups that
    /// enter a shard at the floor arrive in key order (see `rotation`).
    ///
    /// The shard's length counts the groups on their way in before the first leaves the inbox,
    /// and the rotation's true length is stored as soon as they are in, not at the end of the
    /// visit: a listed group must never vanish from the other workers' sight. A worker reads a
    /// listed group that no shard shows as one a pusher is still queueing: it looks again instead
    /// of parking, and never takes the lock that would make it wait for this visit, so a visitor
    /// preempted with a group in hand would keep every idle worker spinning until it ran again.
    fn admit_inbox(&self, shard: &Shard, rotation: &mut Rotation<GroupInner>) {
        if shard.inbox.is_empty() {
            return;
        }
        shard.len.store(rotation.len() + 1, Ordering::Relaxed);
        let floor = from_virtual_ns(self.floor.load(Ordering::Relaxed));
        shard.inbox.drain(|(g, since)| {
            let mut gs = g.sched();
            if gs.in_rotation {
                // Cannot happen (one lister per false-to-true flip of `listed`); keep the count exact.
                self.listed.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            let at_floor = gs.vruntime <= floor;
            let entered = gs.vruntime.max(floor);
            set_vruntime(&g, &mut gs, entered);
            gs.in_rotation = true;
            // 0 for a group a worker serves: it does not wait (see `WaitFrom`).
            g.set_waiting(since);
            let key = enter_key(rotation, &mut gs);
            drop(gs);
            rotation.insert(key, g, at_floor);
        });
        shard.len.store(rotation.len(), Ordering::Relaxed);
    }

    /// Raises the floor to the smallest virtual runtime among the active groups: the shards'
    /// fronts and the groups the workers last said they serve. A served group counts even while
    /// it is out of the rotation (its tasks are in a worker's local queue): otherwise the floor
    /// would pass it, and when it re-entered the rotation it would lose the credit it is owed (a
    /// weight-4 group with two tasks would get well under 4× a weight-1 group).
    ///
    /// A served entry the worker has not refreshed for `stale_after` is left out: that worker is
    /// stuck in one poll, and its group's frozen virtual runtime would otherwise pin the floor, so
    /// a group arriving meanwhile would enter far behind the groups still being served and take
    /// the free workers for itself.
    ///
    /// Lock-free: every value read is at most the virtual runtime it stands for (fronts are keys,
    /// served entries are published before later charges), so the floor stays at or below every
    /// active group but those a racing visit is inserting (which enter at a floor read under their
    /// shard's lock, at most a visit earlier).
    fn update_floor(&self, now: u64) {
        let fresh_since = now.saturating_sub(self.stale_after);
        let served = self
            .served
            .iter()
            .filter(|s| s.at.load(Ordering::Relaxed) >= fresh_since)
            .map(|s| s.vtime.load(Ordering::Relaxed));
        let lowest = self
            .shards
            .iter()
            .map(|s| s.front.load(Ordering::Relaxed))
            .chain(served)
            .min()
            .unwrap_or(u64::MAX);
        if lowest != u64::MAX && lowest > self.floor.load(Ordering::Relaxed) {
            self.floor.fetch_max(lowest, Ordering::Relaxed);
        }
    }

    /// Publishes the group `worker` serves (its virtual runtime, `vruntime`) for the floor; a
    /// tree's caller publishes its path's lag after, with the same stamp (`publish_lag`).
    fn publish_served(&self, worker: usize, g: &GroupInner, vruntime: u128, now: u64) {
        let s = &self.served[worker];
        s.vtime.store(virtual_ns(vruntime), Ordering::Relaxed);
        s.at.store(now, Ordering::Relaxed);
        let id = std::ptr::from_ref(g) as usize;
        if s.group.load(Ordering::Relaxed) != id {
            s.group.store(id, Ordering::Relaxed);
        }
    }

    /// Publishes the lag of the tree path `worker` serves (`spread_hint`), for the visit that
    /// `publish_served` stamped `now`.
    fn publish_lag(&self, worker: usize, lag: u64, now: u64) {
        let s = &self.served[worker];
        s.lag.store(lag, Ordering::Relaxed);
        s.lag_at.store(now, Ordering::Relaxed);
    }

    /// Applies `c` under its group's lock alone: raises the group's virtual runtime (its rotation
    /// key, if it is listed, stays: see the module docs). Always succeeds; true for the caller's
    /// list of charges (`segment`).
    pub(crate) fn charge(&self, c: &Charge) -> bool {
        if c.ns > 0 {
            let mut gs = c.group.sched();
            add_service(&c.group, &mut gs, c.ns);
            if let Some(node) = c.group.node() {
                // A tree: the group's own queue in its own node's frame, then every ancestor
                // (`tree`, shares), each under its own lock.
                node.clock.own_vns.fetch_add(c.ns, Ordering::Relaxed);
                node.tree.charged.fetch_add(c.ns, Ordering::Relaxed);
                drop(gs);
                let now = crate::clock::stamp();
                cap::charge(node, c.ns, now);
                let mut up = c.group.parent();
                while let Some(p) = up {
                    add_service(p, &mut p.sched(), c.ns);
                    if let Some(pn) = p.node() {
                        cap::charge(pn, c.ns, now);
                    }
                    up = p.parent();
                }
            }
        }
        true
    }

    /// Applies a worker's pending charges (segments it finished since its last visit), each under
    /// its group's lock alone. The caller clears them after the visit.
    fn charge_pending(&self, pending: &[Charge]) {
        for c in pending {
            self.charge(c);
        }
    }

    /// Applies `pending` and raises the floor. With `parking`, that worker serves nothing from
    /// now on.
    pub(crate) fn charge_all(&self, pending: &[Charge], parking: Option<usize>) {
        if pending.is_empty() && parking.is_none() {
            return;
        }
        self.charge_pending(pending);
        if let Some(worker) = parking {
            self.served[worker].vtime.store(u64::MAX, Ordering::Relaxed);
        }
        self.update_floor(crate::clock::stamp());
    }

    /// The shard a pick should visit: the one whose first group, counting the groups waiting in
    /// its inbox, is lowest (`Shard::front_with_inbox`), the worker's own among equals. `None` if
    /// no shard holds a group or an inbox entry.
    fn shard_to_pick(&self, worker: usize) -> Option<&Shard> {
        let n = self.shards.len();
        let mine = worker & (n - 1);
        let floor = self.floor.load(Ordering::Relaxed);
        let mut best: Option<(u64, usize)> = None;
        for i in 0..n {
            let at = (mine + i) & (n - 1);
            let s = &self.shards[at];
            if s.len.load(Ordering::Relaxed) == 0 && s.inbox.is_empty() {
                continue;
            }
            let front = s.front_with_inbox(floor);
            if best.is_none_or(|(b, _)| front < b) {
                best = Some((front, at));
            }
        }
        best.map(|(_, at)| &self.shards[at])
    }

    /// Applies the worker's pending charges, then takes work from the listed group with the
    /// smallest virtual runtime: it visits the shard whose front is lowest (one shard lock) and
    /// takes that shard's first group. A long queue is shared out (`len / workers + 1` tasks, at
    /// most `max_batch`, what the worker's local queue can take), a short one (at most
    /// `SMALL_QUEUE`) is taken whole. The worker's local queue gets that one group's tasks, so
    /// that it serves groups in virtual-runtime order, not in queue order. (Putting several short
    /// groups' tasks in the local queue saved scheduler round trips for one-shot groups, but made
    /// backlogged groups share by task count: weights 1:2:4 came out 53:34:13.)
    ///
    /// **Extra groups.** When the picked group gives at most `EXTRA_MAX_TASKS` tasks, the same
    /// visit also takes up to `EXTRA_GROUPS` further groups from the front of the shard's
    /// rotation, each whole, if each has at most `EXTRA_MAX_TASKS` tasks queued and is *due*: its
    /// virtual runtime is at most a quantum of its own (`quantum / weight`) past the picked
    /// group's, so a pick would reach it within a quantum anyway. Their tasks go to `extras`,
    /// which the worker runs after its local queue, each charged to its own group by time like any
    /// task. Foreign wakes into many groups (a task per connection, each in its group) then cost
    /// one visit per several groups. A backlogged group is never an extra unless its queue is down
    /// to `EXTRA_MAX_TASKS`, and then only while it is due, so shares stay those of the weights.
    /// The first `leave` groups that would be extras stay in the rotation: the caller passes the
    /// number of other workers searching for work, each woken to take a group like them. (Taken
    /// as extras, two one-task groups that yield in turn kept one worker between them for
    /// hundreds of milliseconds while the other, woken at each listing, found nothing and parked.)
    ///
    /// A group whose queue this empties leaves the rotation; the listing protocol's re-check runs
    /// after the lock is released. Returns the group and its first task (`None` if another worker
    /// emptied the queue first); the rest of the batch goes to `batch`. `None` if no shard held a
    /// group.
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
        let stamp = crate::clock::stamp_of(now);
        self.charge_pending(pending);
        self.update_floor(stamp);
        // Another worker may empty the chosen shard first: then the next one (its published
        // length is 0 now, so it is not chosen again).
        let (shard, mut rotation, g) = (0..self.shards.len()).find_map(|_| {
            let Some(shard) = self.shard_to_pick(worker) else {
                return Some(None);
            };
            let mut rotation = lock(&shard.rotation);
            self.admit_inbox(shard, &mut rotation);
            fix_front(&mut rotation);
            match rotation.first() {
                Some((_, first)) => {
                    let g = first.clone();
                    Some(Some((shard, rotation, g)))
                }
                None => {
                    self.publish(shard, &rotation);
                    None
                }
            }
        })??;
        let workers = self.served.len();
        if g.node().is_some() {
            return Some(self.pick_in_tree(shard, rotation, g, (worker, max_batch), stamp, batch));
        }
        let mut gs = g.sched();
        g.end_wait(|| stamp);
        let taken = g.take_batch(
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
            self.publish_served(worker, &g, gs.vruntime, stamp);
        }
        let picked_vruntime = gs.vruntime;
        let unlisted = if left == 0 {
            self.unlist(&mut rotation, &g, &mut gs)
        } else {
            Unlisted::No
        };
        drop(gs);
        let mut extra_groups: FewGroups = Default::default();
        if first.is_some() && batch.len() < EXTRA_MAX_TASKS {
            let picked = (&*g, picked_vruntime);
            self.take_extras(
                &mut rotation,
                picked,
                leave,
                stamp,
                extras,
                &mut extra_groups,
            );
        }
        fix_front(&mut rotation);
        self.publish(shard, &rotation);
        drop(rotation);
        if unlisted == Unlisted::Yes && g.after_unlist() == Listing::Insert {
            self.list(&g, WaitFrom::Now);
        }
        for e in extra_groups.iter().flatten() {
            if e.after_unlist() == Listing::Insert {
                self.list(e, WaitFrom::Now);
            }
        }
        Some((g, first))
    }

    /// [`pick_and_take`](Self::pick_and_take) for a tree's root, the first group of `shard`
    /// (whose lock the caller holds): descends the tree to the own queue with the smallest
    /// virtual runtime and takes its batch (`tree`, step 3). Returns that group and its first
    /// task, or the root and `None` if the tree had no work (the root then leaves the rotation).
    /// Never inlined: a flat group's pick keeps its code, whatever the tree's path costs.
    #[inline(never)]
    fn pick_in_tree(
        &self,
        shard: &Shard,
        mut rotation: MutexGuard<'_, Rotation<GroupInner>>,
        root: Arc<GroupInner>,
        (worker, max_batch): (usize, usize),
        stamp: u64,
        batch: &mut Vec<Runnable>,
    ) -> (Arc<GroupInner>, Option<Runnable>) {
        let Some(node) = root.node() else {
            return (root, None);
        };
        let workers = self.served.len();
        // Groups whose listed flag this clears owe the listing protocol's re-check after the locks
        // (the picked one, if it emptied, is re-checked through `picked`). Mostly one or none: the
        // first few inline, no allocation.
        let mut cleared: FewGroups = Default::default();
        let mut cleared_more: Vec<Arc<GroupInner>> = Vec::new();
        let mut throttled = Throttled::new();
        let mut picked = None;
        {
            let mut st = lock_tree(&node.tree);
            let root_until = tree::exhausted(&st, node.slot, stamp);
            // The leaf this worker took a share of last: it has often emptied its queue since
            // (its other tasks taken without a pick), and leaves now rather than when a descent
            // reaches it.
            if let Some(leaf) = tree::emptied_served(&mut st, worker) {
                leaf.clear_listed();
                cleared[0] = Some(leaf);
            }
            while picked.is_none() && root_until.is_none() {
                let Some(leaf_slot) = tree::descend(&mut st, node.slot, stamp, &mut throttled)
                else {
                    break;
                };
                let Some(leaf) = st.nodes[leaf_slot].group.upgrade() else {
                    tree::deactivate_own(&mut st, leaf_slot);
                    continue;
                };
                // A share of the queue even when it is short, unlike a flat group's pick: the
                // leaf stays in its node's rotation, so a worker that descends the tree meanwhile
                // finds it by its virtual runtime. (Taken whole, a short queue left its sibling
                // the only choice there, and two workers in one tree served a node's two leaves
                // one each, whatever their weights.)
                let taken = leaf.take_batch(|len| (len / workers + 1).min(max_batch), batch);
                match taken {
                    Some((first, left)) => {
                        let (share, lag) =
                            tree::serve(&mut st, &node.tree, worker, leaf_slot, stamp);
                        if let Some(n) = leaf.node() {
                            n.share.store(share, Ordering::Relaxed);
                        }
                        leaf.end_wait(|| stamp);
                        if left == 0 {
                            // Its re-check runs on the picked group itself (below).
                            tree::deactivate_own(&mut st, leaf_slot);
                            leaf.clear_listed();
                        }
                        picked = Some((leaf, first, lag, left == 0));
                    }
                    None => {
                        tree::deactivate_own(&mut st, leaf_slot);
                        leaf.clear_listed();
                        match cleared.iter_mut().find(|c| c.is_none()) {
                            Some(free) => *free = Some(leaf),
                            None => cleared_more.push(leaf),
                        }
                    }
                }
            }
            if let Some(until) = root_until {
                // The root's cap is used up: it leaves the shard rotation (below) with its work
                // queued.
                tree::throttle(&mut st, node.slot, until, stamp, &mut throttled);
            }
            if root_until.is_some() || (picked.is_none() && st.nodes[node.slot].rotation.is_empty())
            {
                // The whole tree is empty or throttled: the root leaves the shard rotation. Its
                // listed flag is its own queue's, which the tree keeps.
                st.in_shard = false;
                let mut gs = root.sched();
                if gs.in_rotation {
                    rotation.remove(&rotation_key(&gs));
                    gs.in_rotation = false;
                    root.set_waiting(None);
                    self.listed.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        self.note_throttled(&node.tree, throttled);
        if let Some((_, _, lag, _)) = picked {
            root.end_wait(|| stamp);
            let vruntime = root.sched().vruntime;
            self.publish_served(worker, &root, vruntime, stamp);
            self.publish_lag(worker, lag, stamp);
        }
        fix_front(&mut rotation);
        self.publish(shard, &rotation);
        drop(rotation);
        for g in cleared.into_iter().flatten().chain(cleared_more) {
            if g.after_unlist() == Listing::Insert {
                self.list(&g, WaitFrom::Now);
            }
        }
        if let Some((leaf, _, _, true)) = &picked {
            if leaf.after_unlist() == Listing::Insert {
                self.list(leaf, WaitFrom::Now);
            }
        }
        match picked {
            Some((leaf, first, _, _)) => (leaf, Some(first)),
            None => (root, None),
        }
    }

    /// Records nodes of `tree` a decision throttled, for `unthrottle_due`.
    fn note_throttled(&self, tree: &Arc<Tree>, throttled: Throttled) {
        if throttled.is_empty() {
            return;
        }
        let mut list = lock(&self.throttled);
        for (slot, until) in throttled {
            list.push((tree.clone(), slot, until));
            self.next_unthrottle.fetch_min(until, Ordering::SeqCst);
        }
    }

    /// The stamp at which the first throttled node's quota returns, if any node is throttled
    /// (a hint, read lock-free: parking workers sleep no longer than this).
    pub(crate) fn next_unthrottle(&self) -> Option<u64> {
        match self.next_unthrottle.load(Ordering::SeqCst) {
            u64::MAX => None,
            at => Some(at),
        }
    }

    /// [`unthrottle_due`](Self::unthrottle_due) now, if some node is throttled: one load when
    /// none is (every worker that looks for work calls it).
    #[inline]
    pub(crate) fn unthrottle_if_due(&self) -> bool {
        if self.next_unthrottle.load(Ordering::Relaxed) == u64::MAX {
            return false;
        }
        self.unthrottle_due(crate::clock::stamp())
    }

    /// Puts back every throttled node whose quota returned by `now` (`cap`): it re-enters its
    /// parent's rotation if it has work, and a root is listed again. True if that listed a root:
    /// the caller makes sure a worker will look (`notify_work`). A node still in debt stays
    /// throttled until its next period.
    pub(crate) fn unthrottle_due(&self, now: u64) -> bool {
        if now < self.next_unthrottle.load(Ordering::Relaxed) {
            return false;
        }
        let due: Vec<(Arc<Tree>, usize, u64)> = {
            let mut list = lock(&self.throttled);
            let (due, rest): (Vec<_>, Vec<_>) = list.drain(..).partition(|(_, _, at)| *at <= now);
            *list = rest;
            let next = list.iter().map(|(_, _, at)| *at).min().unwrap_or(u64::MAX);
            self.next_unthrottle.store(next, Ordering::SeqCst);
            due
        };
        let mut listed = false;
        let fresh_since = now.saturating_sub(self.stale_after);
        for (tree, slot, _) in due {
            let mut again = Throttled::new();
            let to_list = {
                let mut st = lock_tree(&tree);
                if !st.nodes.contains(slot) {
                    continue;
                }
                if let Some(until) = tree::exhausted(&st, slot, now) {
                    again.push((slot, until));
                    None
                } else {
                    tree::unthrottle(&mut st, slot, now);
                    let is_root = st.nodes[slot].parent.is_none();
                    let activated = if is_root {
                        if st.nodes[slot].rotation.is_empty() || st.in_shard {
                            Activated::Done
                        } else {
                            st.in_shard = true;
                            Activated::ListRoot
                        }
                    } else {
                        tree::activate_up(&mut st, slot, fresh_since)
                    };
                    match activated {
                        Activated::ListRoot => st.nodes[slot].group.upgrade(),
                        Activated::Done => None,
                    }
                }
            };
            self.note_throttled(&tree, again);
            if let Some(g) = to_list {
                self.list_top(top_arc(&g), WaitFrom::Now);
                listed = true;
            }
        }
        listed
    }

    /// Sets the CPU cap of `g` (a tree's node: the caller made it one) to `quota` nanoseconds
    /// per period, 0 for none. Removing a cap (or raising one) takes effect at once: a throttled
    /// node comes back at the next `unthrottle_due`, which this makes due.
    pub(crate) fn set_cap(&self, g: &Arc<GroupInner>, quota: u64) {
        let Some(node) = g.node() else {
            return;
        };
        {
            let mut st = lock_tree(&node.tree);
            node.cap_quota.store(quota, Ordering::SeqCst);
            if let Some(n) = st.nodes.get_mut(node.slot) {
                n.capped = quota != 0;
            }
        }
        // A throttled node's return is re-checked now: a lower use or a higher quota lets it back.
        let mut list = lock(&self.throttled);
        for entry in list.iter_mut() {
            if Arc::ptr_eq(&entry.0, &node.tree) && entry.1 == node.slot {
                entry.2 = 0;
                self.next_unthrottle.store(0, Ordering::SeqCst);
            }
        }
    }

    /// Makes the top-level group `g` a tree's root (its first child is being built), under its
    /// shard's lock, so that no pick of the group runs meanwhile. A push that listed the group
    /// before may still be on its way to the shard's inbox: its own queue is then active in the
    /// tree, and the root is queued for the rotation once more (a second entry is dropped when it
    /// enters, see `admit_inbox`).
    pub(crate) fn make_root(&self, g: &Arc<GroupInner>) {
        if g.node().is_some() {
            return;
        }
        let shard = self.shard_of(g);
        let _rotation = lock(&shard.rotation);
        let tree = Tree::new(self.served.len());
        let mut st = lock_tree(&tree);
        let slot = st
            .nodes
            .insert(NodeState::new(Arc::downgrade(g), None, g.weight()));
        let clock = st.new_clock(slot, g.vtime_hint());
        let linked = g.set_node(Node::new(tree.clone(), clock, slot, None, 0, usize::MAX));
        if !linked {
            st.nodes.remove(slot);
            return;
        }
        let in_rotation = g.sched().in_rotation;
        let listed = g.is_listed();
        st.in_shard = in_rotation;
        if listed {
            let fresh_since = crate::clock::stamp().saturating_sub(self.stale_after);
            let activated = tree::activate_own(&mut st, slot, fresh_since);
            drop(st);
            if activated == Activated::ListRoot {
                self.list_top(g, WaitFrom::Now);
            }
        }
    }

    /// Links `child`, just built, under `parent` in its tree (making `parent` a root first if it
    /// is a flat group).
    pub(crate) fn attach_child(&self, parent: &Arc<GroupInner>, child: &Arc<GroupInner>) {
        if parent.node().is_none() {
            self.make_root(parent);
        }
        let Some(pnode) = parent.node() else {
            return;
        };
        let mut st = lock_tree(&pnode.tree);
        let slot = st.nodes.insert(NodeState::new(
            Arc::downgrade(child),
            Some(pnode.slot),
            child.weight(),
        ));
        // The child is just built: nothing changes its virtual runtime before it is linked.
        let clock = st.new_clock(slot, child.vtime_hint());
        let child_key = lock(&pnode.children).insert(Arc::downgrade(child));
        let linked = child.set_node(Node::new(
            pnode.tree.clone(),
            clock,
            slot,
            Some(parent.clone()),
            pnode.depth + 1,
            child_key,
        ));
        if !linked {
            st.nodes.remove(slot);
            lock(&pnode.children).remove(child_key);
        }
    }

    /// Takes `g`, whose queue the caller just found empty, out of its shard's rotation (the
    /// remover's half of the listing protocol: [`Unlisted::Yes`] leaves the caller to re-check the
    /// queue after releasing the lock, `GroupInner::after_unlist`).
    fn unlist(
        &self,
        rotation: &mut Rotation<GroupInner>,
        g: &GroupInner,
        gs: &mut GroupSched,
    ) -> Unlisted {
        if !gs.in_rotation {
            return Unlisted::No;
        }
        rotation.remove(&rotation_key(gs));
        gs.in_rotation = false;
        g.set_waiting(None);
        g.clear_listed();
        self.listed.fetch_sub(1, Ordering::SeqCst);
        Unlisted::Yes
    }

    /// The extra groups of a pick (see `pick_and_take`), the first `leave` of them left in the
    /// rotation: their tasks go to `extras`, and the groups it unlisted to `unlisted`, for the
    /// caller's re-check after the lock.
    fn take_extras(
        &self,
        rotation: &mut Rotation<GroupInner>,
        (picked, picked_vruntime): (&GroupInner, u128),
        leave: impl Fn() -> usize,
        now: u64,
        extras: &mut Vec<Runnable>,
        unlisted: &mut FewGroups,
    ) {
        // The furthest any group may be past the picked one: a weight-1 quantum, in the keys'
        // whole virtual nanoseconds (a key at most this is at most the exact horizon; a stale key
        // is lower still, and the check below reads the group's own virtual runtime).
        let horizon = virtual_ns(picked_vruntime + self.quantum_ns * SCALE);
        // Candidates by their queues' lock-free lengths; the take below checks the length again.
        let mut candidates: FewGroups = Default::default();
        let front = rotation
            .iter()
            .take_while(|((v, _), _)| *v <= horizon)
            .take(4 * EXTRA_GROUPS)
            .filter(|(_, g)| {
                g.id() != picked.id() && g.queued_hint() <= EXTRA_MAX_TASKS && g.node().is_none()
            })
            .map(|(_, g)| g.clone());
        for (slot, g) in candidates.iter_mut().zip(front) {
            *slot = Some(g);
        }
        let mut unlisted_n = 0;
        let mut to_leave: Option<usize> = None;
        for e in candidates.into_iter().flatten() {
            let mut gs = e.sched();
            let weight = effective_weight(&gs).max(1);
            let due = picked_vruntime + self.quantum_ns * SCALE / u128::from(weight);
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
            let taken = e.take_batch(small, extras);
            let Some((first, left)) = taken else { continue };
            // `take_batch` hands the first task back and the rest into `extras`: keep queue order.
            extras.insert(before, first);
            e.end_wait(|| now);
            if left == 0 && self.unlist(rotation, &e, &mut gs) == Unlisted::Yes {
                drop(gs);
                unlisted[unlisted_n] = Some(e);
                unlisted_n += 1;
            }
        }
    }
    /// The tree part of [`charge_and_check`](Self::charge_and_check), for a worker serving the
    /// tree group `node` that no top-level group is ahead of: is a group of the tree behind the
    /// served path (`tree::behind_on_path`), and are others of the tree listed? Publishes the
    /// path's share and lag. Never inlined: a flat group's quantum end keeps its code.
    #[inline(never)]
    fn check_tree_path(&self, node: &Node, worker: usize, stamp: u64) -> (bool, bool) {
        let mut throttled = Throttled::new();
        let check = {
            let mut st = lock_tree(&node.tree);
            let check = tree::behind_on_path(
                &mut st,
                &node.tree,
                (node.slot, worker),
                stamp,
                &mut throttled,
            );
            node.share.store(check.share, Ordering::Relaxed);
            self.publish_lag(worker, check.lag, stamp);
            check
        };
        self.note_throttled(&node.tree, throttled);
        (check.behind, check.others)
    }

    /// Applies a worker's charges at the end of its quantum (`g`, the group it was serving, among
    /// them) and decides what the worker does next: it switches if a shard's first group (after
    /// the shard's inbox is admitted and its front re-keyed) is another group behind `g`. Shards
    /// whose published front is not behind `g` and whose inbox is empty are not visited.
    pub(crate) fn charge_and_check(
        &self,
        pending: &[Charge],
        worker: usize,
        g: &GroupInner,
        now: Instant,
    ) -> Verdict {
        let stamp = crate::clock::stamp_of(now);
        self.charge_pending(pending);
        // The shards see a tree's root; the tree's own levels are checked below.
        let served = g;
        let g = g.top();
        let (vruntime, in_rotation) = {
            let gs = g.sched();
            (gs.vruntime, gs.in_rotation)
        };
        self.publish_served(worker, g, vruntime, stamp);
        let own = virtual_ns(vruntime);
        let mut behind = false;
        let floor = self.floor.load(Ordering::Relaxed);
        for shard in self.shards.iter() {
            if shard.front_with_inbox(floor) >= own {
                continue;
            }
            let mut rotation = lock(&shard.rotation);
            self.admit_inbox(shard, &mut rotation);
            fix_front(&mut rotation);
            self.publish(shard, &rotation);
            if let Some(((v, _), first)) = rotation.first() {
                behind |= first.id() != g.id() && *v < own;
            }
        }
        self.update_floor(stamp);
        let mut others_in_tree = false;
        if let (false, Some(node)) = (behind, served.node()) {
            (behind, others_in_tree) = self.check_tree_path(node, worker, stamp);
        }
        if behind {
            // The worker leaves `g`: if `g` stays in the rotation with tasks queued (a pick
            // took only part of its queue, so no new listing will start its wait), it waits
            // from now. Under its shard's lock, so no unlisting (which clears the stamp) races it.
            if in_rotation {
                let _rotation = lock(&self.shard_of(g).rotation);
                let gs = g.sched();
                if gs.in_rotation {
                    g.start_waiting(stamp);
                }
            }
            return Verdict::Switch;
        }
        Verdict::Stay {
            others_listed: others_in_tree
                || self.listed.load(Ordering::Relaxed) > usize::from(in_rotation),
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
        // A tree's group runs when its tree says so: through its queue and a pick. A task of a flat
        // group woken by a tree's task compares with the tree's root.
        if woken.node().is_some() {
            return false;
        }
        let serving = serving.top();
        let ahead_of = serving.vtime_hint();
        let vtime = woken.vtime_hint();
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

    /// Empties the rotation's shards, their inboxes and the served entries (shutdown's last
    /// step): they hold `Arc`s of groups, which hold the runtime's shared state, so leaving them
    /// would keep the whole runtime alive after it is dropped.
    pub(crate) fn clear(&self) {
        for s in self.served.iter() {
            s.vtime.store(u64::MAX, Ordering::Relaxed);
        }
        for shard in self.shards.iter() {
            let rotation = {
                let mut rotation = lock(&shard.rotation);
                shard.len.store(0, Ordering::Relaxed);
                shard.front.store(u64::MAX, Ordering::Relaxed);
                std::mem::take(&mut *rotation)
            };
            let mut inbox = Vec::new();
            shard.inbox.drain(|(g, _)| inbox.push(g));
            // Dropped outside the lock: the last `Arc` of a group runs its destructor.
            drop(rotation);
            drop(inbox);
        }
        self.front.store(u64::MAX, Ordering::Relaxed);
        self.listed.store(0, Ordering::SeqCst);
    }

    /// Tests: counts one more group as listed without queueing any, as a pusher does between its
    /// count and its inbox push (`list`), until the returned guard drops.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn listing_on_its_way(&self) -> ListingOnItsWay<'_> {
        self.listed.fetch_add(1, Ordering::SeqCst);
        ListingOnItsWay(self)
    }
}

/// See [`Scheduler::listing_on_its_way`].
#[cfg(all(test, not(loom)))]
pub(crate) struct ListingOnItsWay<'a>(&'a Scheduler);

#[cfg(all(test, not(loom)))]
impl Drop for ListingOnItsWay<'_> {
    fn drop(&mut self) {
        self.0.listed.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A runtime (which the group needs as its host), one of its groups, and a scheduler of four
    /// shards of its own in which that group is listed and waits in its shard's inbox.
    fn listed_in_a_scheduler() -> (crate::Runtime, crate::Group, Arc<Scheduler>) {
        let rt = crate::Runtime::builder().worker_threads(1).build().unwrap();
        let group = rt.group().build().unwrap();
        let s = Arc::new(Scheduler::new(4, Duration::from_millis(1)));
        assert_eq!(
            group.inner.after_push(),
            Listing::Insert,
            "a new group is not listed"
        );
        s.list(&group.inner, WaitFrom::Now);
        (rt, group, s)
    }

    /// A group a visit has moved from its shard's inbox into the rotation is listed, so a worker
    /// that sees it counted does not park; it must also find the shard that holds it (and wait
    /// at that shard's lock), or it looks again and again for as long as the visit lasts.
    #[test]
    fn a_group_a_visit_admits_stays_visible_to_the_other_workers() {
        let (_rt, group, s) = listed_in_a_scheduler();
        let g = &group.inner;
        let shard = s.shard_of(g);
        let mut rotation = lock(&shard.rotation);
        s.admit_inbox(shard, &mut rotation);
        assert_eq!(rotation.len(), 1);
        // What another worker sees while this visit holds the shard's lock.
        assert!(s.has_pickable());
        let seen = s.shard_to_pick(1).map(|s| s as *const Shard);
        assert_eq!(
            seen,
            Some(shard as *const Shard),
            "a pick finds no shard while the listed group sits in one"
        );
        drop(rotation);
        s.clear();
    }

    /// The same while the visit has taken the group from the inbox and not yet put it into the
    /// rotation: here the visit waits for the group's lock, which the test holds.
    #[test]
    fn a_group_on_its_way_from_the_inbox_stays_visible_to_the_other_workers() {
        let (_rt, group, s) = listed_in_a_scheduler();
        let g = group.inner.clone();
        let held = g.sched();
        let visit = std::thread::spawn({
            let (s, g) = (s.clone(), g.clone());
            move || {
                let shard = s.shard_of(&g);
                let mut rotation = lock(&shard.rotation);
                s.admit_inbox(shard, &mut rotation);
                rotation.len()
            }
        });
        let shard = s.shard_of(&g);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !shard.inbox.is_empty() {
            assert!(
                Instant::now() < deadline,
                "the visit never took the group from the inbox"
            );
            std::thread::yield_now();
        }
        assert!(s.has_pickable());
        let seen = s.shard_to_pick(1).map(|s| s as *const Shard);
        drop(held);
        assert_eq!(visit.join().unwrap(), 1);
        assert_eq!(
            seen,
            Some(shard as *const Shard),
            "a pick finds no shard while the listed group is on its way into one"
        );
        s.clear();
    }
}
