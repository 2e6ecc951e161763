//! Tenant trees: how a pick descends a tree of nested groups, and how work activates its
//! ancestors (the data lives in `group::tree`).
//!
//! # Shares
//! Within a node, entities share by weight exactly as top-level groups share in the scheduler's
//! rotation: each has a virtual runtime (a child: its subtree's service ÷ its weight; the node's
//! own queue: the service of the node's own tasks ÷ the default weight, 1), and a pick takes the
//! entity with the smallest. A charge raises the virtual runtime of the served group and of every
//! ancestor (`Scheduler::charge`), so a group's share is its weight over its active siblings'
//! total, times its parent's share, at any depth. The root is one group in the scheduler's
//! rotation, keyed by its virtual runtime like a flat group: a tree costs the flat groups nothing.
//!
//! # Protocol (all under the tree's lock)
//! 1. **Activation.** A push that flips a tree group's listed flag (`Listing::Insert`) inserts the
//!    group's own queue into its node's rotation, then the node into its parent's, and so on up
//!    until an ancestor that was already in its parent's rotation (or is throttled). If the root
//!    becomes active and is not in the shard rotation, the caller lists it there (after the lock;
//!    the root cannot be unlisted meanwhile: only a pick unlists it, and a pick needs it in the
//!    rotation first).
//! 2. **Entry.** An entity enters a rotation at `max(own, floor)`: the node's floor is the smallest
//!    virtual runtime among its active entities and the entities the workers serve (`served`), so
//!    an idle entity banks no credit, while one whose tasks all sit in a worker's local queue
//!    keeps the credit it is owed (as the scheduler's floor does for top-level groups).
//! 3. **Pick.** Under the root's shard lock, a pick descends from the root, taking at each node
//!    the entity with the smallest virtual runtime (keys are lazy, as in the shard rotation: a
//!    charge raises a virtual runtime without the tree's lock, and `fix_front` re-keys the first
//!    entities before each choice), until it reaches an own queue: it takes its batch there. A
//!    pick that empties the queue deactivates it: the own entity leaves its rotation, then each
//!    ancestor left empty leaves its parent's, and the group's listed flag is cleared; the listing
//!    protocol's re-check (`GroupInner::after_unlist`) runs after the locks. A pick that finds the
//!    whole tree empty takes the root out of the shard rotation.
//! 4. **Quantum end.** A worker serving a tree group switches if, at some level of its path, an
//!    entity other than the path's is behind the path's (or a cap throttles a node on the path).
//! 5. **Slice.** A pick of an own queue (step 3), and a quantum end that stays with it (step 4),
//!    compute the path's share of the tree (`path_share`: the product over the levels of the
//!    path's entity's weight over its node's active weight, which each node keeps as entities
//!    enter and leave its rotation), times the tree's share of the workers (`tree_share`: the
//!    service charged to the tree over the last 10 ms or more, over that time the workers had),
//!    and store it in the group's `Node::share`. A worker that begins a segment on the group ends
//!    its quantum after the quantum scaled by that share, at least a sixteenth of the quantum and
//!    50 µs (`fair::segment`): an entity behind in a node waits about a slice of whoever runs
//!    before it, and small shares run in short slices, so their lag over any window is small
//!    next to the service the window owes them. Flat groups keep the whole quantum.
//! 6. **Lag.** The same pick and quantum end also measure the path's *lag* (`path_lag`): at each
//!    node of the path, how far the path's entity and the nearest other entity of the node's
//!    rotation are apart, scaled to the root's frame (a lag in a node with a small share of the
//!    tree weighs as the tree's service that owes it), the largest over the path. The worker
//!    publishes it with its served entry (`Scheduler::spread_hint`): the worker-count
//!    controller of a runtime with more workers than CPUs sheds cores while a tree drifts from
//!    its shares, as it does while top-level groups spread.
//!
//! A worker may take a group's tasks without a pick (`take_from_own_group`), so an own entity can
//! stay in its rotation with an empty queue. The worker's next pick in the tree takes the own
//! queue it served out first if it reads empty (`emptied_served`); any other pick that reaches
//! an empty one deactivates it and descends again.

use std::sync::Arc;

use crate::group::GroupInner;
use crate::group::inner::effective_weight;
use crate::group::tree::{Entity, Key, NodeState, SHARE_ONE, Tree, TreeState};
use crate::shim::{MutexGuard, Ordering};

use super::cap;
use super::vtime::{from_virtual_ns, set_vruntime, virtual_ns};

/// The most stale keys one choice re-keys at a node's front.
const FIX_FRONT_MAX: usize = 64;
/// The most descents one pick tries (each failed one removed a stale entity).
const MAX_DESCENTS: usize = 16;

/// What an activation leaves its caller to do.
#[must_use = "`Activated::ListRoot` leaves the caller to list the tree's root in the shard \
              rotation, or the tree's work is stranded"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activated {
    /// The root became active and was out of the shard rotation: list it (`Scheduler::list`).
    ListRoot,
    /// Nothing more: the work is reachable from the root, which is in the shard rotation or on
    /// its way there, or a throttled node holds it until its next period.
    Done,
}

/// Locks `tree` and frees the slots of the groups that dropped since its last holder.
pub(crate) fn lock_tree(tree: &Tree) -> MutexGuard<'_, TreeState> {
    let mut st = tree.lock();
    tree.free_dead(&mut st, free_slot);
    st
}

/// The group of `slot`, if it is alive.
fn group_of(st: &TreeState, slot: usize) -> Option<Arc<GroupInner>> {
    st.nodes.get(slot).and_then(|n| n.group.upgrade())
}

/// The virtual runtime of entity `e` under node `n`, in virtual nanoseconds, from the tree's
/// copy (`VClock`): no lock, no reference count; `None` if its slot was freed. A group that
/// dropped since the lock was taken still reads its last value; the descent that reaches it
/// finds its queue empty (its tasks kept it alive) and takes it out.
fn vruntime_of(st: &TreeState, n: usize, e: Entity) -> Option<u64> {
    let slot = match e {
        Entity::Own => n,
        Entity::Child(c) => c,
    };
    if !st.nodes.contains(slot) {
        return None;
    }
    let clock = st.clock(slot);
    Some(match e {
        Entity::Own => clock.own_vns.load(Ordering::Relaxed),
        Entity::Child(_) => clock.vns.load(Ordering::Relaxed),
    })
}

/// Records `key` as the key of entity `e` under `n` (or clears it).
fn set_key(st: &mut TreeState, n: usize, e: Entity, key: Option<Key>) {
    match e {
        Entity::Own => st.nodes[n].own_key = key,
        Entity::Child(c) => {
            if let Some(child) = st.nodes.get_mut(c) {
                child.in_parent = key;
            }
        }
    }
}

/// The weight entity `e` counts in its node's `active_weight` (see `NodeState`).
fn weight_in_rotation(st: &TreeState, e: Entity) -> u64 {
    match e {
        Entity::Own => 1,
        Entity::Child(c) => st.nodes.get(c).map_or(0, |c| c.entered_weight),
    }
}

/// Takes the entity at `key` out of `n`'s rotation, and its weight out of `n`'s active weight.
fn leave_rotation(st: &mut TreeState, n: usize, key: &Key) {
    if let Some(e) = st.nodes[n].rotation.remove(key) {
        let w = weight_in_rotation(st, e);
        let node = &mut st.nodes[n];
        node.active_weight = node.active_weight.saturating_sub(w);
    }
}

/// Re-keys the first entities of `n`'s rotation whose keys a charge left behind, and removes
/// entities whose group dropped, until the first key is current (see `scheduler::fix_front`).
fn fix_front(st: &mut TreeState, n: usize) {
    for _ in 0..FIX_FRONT_MAX {
        let Some((&key, &e)) = st.nodes[n].rotation.first_key_value() else {
            return;
        };
        let current = vruntime_of(st, n, e);
        match current {
            Some(v) if v <= key.0 => return,
            _ => {}
        }
        match current {
            Some(v) => {
                // Re-keyed: the same entity, the same active weight.
                let new = (v, st.next_seq());
                st.nodes[n].rotation.rekey_first(&key, new);
                set_key(st, n, e, Some(new));
            }
            None => {
                leave_rotation(st, n, &key);
                set_key(st, n, e, None);
            }
        }
    }
}

/// The entity of `leaf`'s path directly under `n`: `Own` if `leaf` is `n`, the child of `n` above
/// `leaf` if `n` is an ancestor, `None` if `leaf` is not in `n`'s subtree.
fn path_entity(st: &TreeState, n: usize, leaf: usize) -> Option<Entity> {
    if leaf == n {
        return Some(Entity::Own);
    }
    let mut x = leaf;
    loop {
        let p = st.nodes.get(x)?.parent?;
        if p == n {
            return Some(Entity::Child(x));
        }
        x = p;
    }
}

/// Raises `n`'s floor to the smallest virtual runtime among its active entities and the entities
/// fresh `served` entries stand in (see the module docs, step 2), and returns it.
fn floor_of(st: &mut TreeState, n: usize, fresh_since: u64) -> u64 {
    fix_front(st, n);
    let mut lowest = st.nodes[n].rotation.first_key_value().map(|(k, _)| k.0);
    for i in 0..st.served.len() {
        let Some((leaf, at)) = st.served[i] else {
            continue;
        };
        if at < fresh_since {
            continue;
        }
        if let Some(e) = path_entity(st, n, leaf) {
            if let Some(v) = vruntime_of(st, n, e) {
                lowest = Some(lowest.map_or(v, |l| l.min(v)));
            }
        }
    }
    let node = &mut st.nodes[n];
    if let Some(l) = lowest {
        node.floor = node.floor.max(l);
    }
    node.floor
}

/// Inserts entity `e` into `n`'s rotation at `max(own, floor)`. The own queue's runtime is the
/// tree's clock alone; a child's is its group's (lifted under the group's lock).
fn enter(st: &mut TreeState, n: usize, e: Entity, fresh_since: u64) {
    let floor = floor_of(st, n, fresh_since);
    let (vns, weight) = match e {
        Entity::Own => (
            st.clock(n)
                .own_vns
                .fetch_max(floor, Ordering::Relaxed)
                .max(floor),
            1,
        ),
        Entity::Child(c) => {
            let Some(g) = group_of(st, c) else {
                return;
            };
            let mut gs = g.sched();
            let lifted = gs.vruntime.max(from_virtual_ns(floor));
            set_vruntime(&g, &mut gs, lifted);
            let weight = u64::from(effective_weight(&gs));
            drop(gs);
            st.nodes[c].entered_weight = weight;
            (virtual_ns(lifted), weight)
        }
    };
    let key = (vns, st.next_seq());
    st.nodes[n].rotation.insert(key, e);
    st.nodes[n].active_weight += weight;
    set_key(st, n, e, Some(key));
}

/// Step 1 for the group at `slot`, whose listed flag its caller flipped.
pub(crate) fn activate_own(st: &mut TreeState, slot: usize, fresh_since: u64) -> Activated {
    if !st.nodes.contains(slot) || st.nodes[slot].own_key.is_some() {
        return Activated::Done;
    }
    enter(st, slot, Entity::Own, fresh_since);
    activate_up(st, slot, fresh_since)
}

/// Puts `n` (active) into its parent's rotation, and so on up (step 1).
pub(crate) fn activate_up(st: &mut TreeState, mut n: usize, fresh_since: u64) -> Activated {
    loop {
        let node = &st.nodes[n];
        if node.throttled || node.rotation.is_empty() {
            return Activated::Done;
        }
        match node.parent {
            None => {
                if st.in_shard {
                    return Activated::Done;
                }
                st.in_shard = true;
                return Activated::ListRoot;
            }
            Some(p) => {
                if node.in_parent.is_some() {
                    return Activated::Done;
                }
                enter(st, p, Entity::Child(n), fresh_since);
                n = p;
            }
        }
    }
}

/// Takes `n`'s own queue out of its rotation, then every ancestor left empty out of its parent's
/// (step 3). The root stays in the shard rotation: the next pick that finds the tree empty takes
/// it out.
pub(crate) fn deactivate_own(st: &mut TreeState, n: usize) {
    if let Some(node) = st.nodes.get_mut(n) {
        if let Some(key) = node.own_key.take() {
            leave_rotation(st, n, &key);
        }
        deactivate_up(st, n);
    }
}

/// Takes `n`, if its rotation is empty, out of its parent's rotation, and so on up.
pub(crate) fn deactivate_up(st: &mut TreeState, mut n: usize) {
    loop {
        let Some(node) = st.nodes.get_mut(n) else {
            return;
        };
        if !node.rotation.is_empty() {
            return;
        }
        let (Some(p), Some(key)) = (node.parent, node.in_parent.take()) else {
            return;
        };
        if st.nodes.contains(p) {
            leave_rotation(st, p, &key);
        }
        n = p;
    }
}

/// If the own queue `worker` last took work from (`served`) is in its rotation with nothing
/// queued (a snapshot: a push that slipped in is listed again by the caller's re-check), takes
/// it out as a pick that finds it empty does (step 3), and returns its group, whose listed flag
/// the caller clears.
pub(crate) fn emptied_served(st: &mut TreeState, worker: usize) -> Option<Arc<GroupInner>> {
    let (leaf, _) = (*st.served.get(worker)?)?;
    st.nodes.get(leaf)?.own_key?;
    let g = group_of(st, leaf)?;
    if g.queued_hint() != 0 {
        return None;
    }
    deactivate_own(st, leaf);
    Some(g)
}

/// Nodes a decision throttled, with the stamp at which each may return.
pub(crate) type Throttled = Vec<(usize, u64)>;

/// If the capped node `n` has used its quota: the stamp from which it has not.
pub(crate) fn exhausted(st: &TreeState, n: usize, now: u64) -> Option<u64> {
    if !st.nodes.get(n)?.capped {
        return None;
    }
    let g = group_of(st, n)?;
    cap::exhausted_until(g.node()?, now)
}

/// Takes `n` out of its parent's rotation (or keeps it out) whatever it holds: its cap throttles
/// it until `until`, which `throttled` records for the caller. The root has no parent's rotation:
/// its caller takes it out of the shard rotation (`Scheduler::pick_in_tree`).
pub(crate) fn throttle(
    st: &mut TreeState,
    n: usize,
    until: u64,
    now: u64,
    throttled: &mut Throttled,
) {
    let node = &mut st.nodes[n];
    if node.throttled {
        return;
    }
    node.throttled = true;
    if let (Some(p), Some(key)) = (node.parent, node.in_parent.take()) {
        leave_rotation(st, p, &key);
        deactivate_up(st, p);
    }
    if let Some(g) = group_of(st, n) {
        trace_event!(
            DEBUG,
            group = g.name(),
            group_id = g.id(),
            for_ns = until.saturating_sub(now),
            "group throttled by its cpu cap"
        );
        if let Some(node) = g.node() {
            cap::mark_throttled(node, now);
        }
    }
    throttled.push((n, until));
}

/// The cap of `n` left room at `now`: `n` is no longer throttled. The caller puts it back into
/// its parent's rotation if it has work (`activate_up`).
pub(crate) fn unthrottle(st: &mut TreeState, n: usize, now: u64) {
    if let Some(node) = st.nodes.get_mut(n) {
        node.throttled = false;
    }
    if let Some(g) = group_of(st, n) {
        trace_event!(
            DEBUG,
            group = g.name(),
            group_id = g.id(),
            "group unthrottled"
        );
        if let Some(node) = g.node() {
            cap::mark_unthrottled(node, now);
        }
    }
}

/// Frees the slot of a group that dropped: out of its parent's rotation and the served entries.
fn free_slot(st: &mut TreeState, slot: usize) {
    if !st.nodes.contains(slot) {
        return;
    }
    let node: NodeState = st.nodes.remove(slot);
    if let (Some(p), Some(key)) = (node.parent, node.in_parent) {
        if let Some(parent) = st.nodes.get_mut(p) {
            if parent.rotation.remove(&key).is_some() {
                parent.active_weight = parent.active_weight.saturating_sub(node.entered_weight);
            }
        }
        deactivate_up(st, p);
    }
    for s in st.served.iter_mut() {
        if matches!(s, Some((x, _)) if *x == slot) {
            *s = None;
        }
    }
}

/// Step 3's descent from the root: the slot of the own queue with the smallest virtual runtime
/// down the tree, or `None` if the tree is empty. An entity found inconsistent on the way (a node
/// in its parent's rotation with an empty one of its own) is taken out, and the descent restarts.
///
/// A capped node that used its quota is throttled on the way (recorded in `throttled`).
pub(crate) fn descend(
    st: &mut TreeState,
    root: usize,
    now: u64,
    throttled: &mut Throttled,
) -> Option<usize> {
    'descents: for _ in 0..MAX_DESCENTS {
        let mut n = root;
        loop {
            if !st.nodes.contains(n) {
                return None;
            }
            // A lone entity is the choice whatever its key says: a stale key stays a lower bound,
            // re-keyed once another entity is compared with it.
            if st.nodes[n].rotation.only().is_none() {
                fix_front(st, n);
            }
            match st.nodes[n].rotation.first_key_value().map(|(_, e)| *e) {
                Some(Entity::Own) => return Some(n),
                Some(Entity::Child(c)) => {
                    if let Some(until) = exhausted(st, c, now) {
                        throttle(st, c, until, now, throttled);
                        continue 'descents;
                    }
                    n = c;
                }
                None if n == root => return None,
                None => {
                    deactivate_up(st, n);
                    continue 'descents;
                }
            }
        }
    }
    None
}

/// Step 4: is an entity other than the path's behind it at some level of the path from the served
/// `leaf` to the root, or is a node on the path throttled? Refreshes `worker`'s served entry.
/// Also says whether any entity other than the path's is active (others wait in the tree), and
/// the path's share (`path_share`), which scales the worker's next slice if it stays, and its
/// lag (`path_lag`, step 6).
///
/// A capped node on the path that used its quota counts as behind; below the root it is
/// throttled here (recorded in `throttled`), the root by the pick that follows.
pub(crate) fn behind_on_path(
    st: &mut TreeState,
    tree: &Tree,
    (leaf, worker): (usize, usize),
    now: u64,
    throttled: &mut Throttled,
) -> PathCheck {
    match check_path(st, tree, (leaf, worker), now, throttled) {
        Ok((behind, others, share, lag)) => PathCheck {
            behind,
            others,
            share,
            lag,
        },
        Err(others) => PathCheck {
            behind: true,
            others,
            share: SHARE_ONE,
            lag: 0,
        },
    }
}

/// What [`behind_on_path`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathCheck {
    /// Another entity is behind the path's at some level, or a node on it is throttled.
    pub(crate) behind: bool,
    /// Another entity than the path's is active somewhere on it.
    pub(crate) others: bool,
    /// The slice's scale (`path_share` times `tree_share`).
    pub(crate) share: u32,
    /// The path's lag (`path_lag`); 0 if another entity is behind or a node is throttled (the
    /// pick that follows measures it).
    pub(crate) lag: u64,
}

/// [`behind_on_path`]: behind, others, share, lag (measured on the way up as `path_lag` does,
/// from the values the check reads anyway; 0 if behind); `Err(others)` if a node on the path is
/// throttled.
fn check_path(
    st: &mut TreeState,
    tree: &Tree,
    (leaf, worker): (usize, usize),
    now: u64,
    throttled: &mut Throttled,
) -> Result<(bool, bool, u32, u64), bool> {
    if !st.nodes.contains(leaf) {
        return Ok((false, false, SHARE_ONE, 0));
    }
    if let Some(entry) = st.served.get_mut(worker) {
        *entry = Some((leaf, now));
    }
    let mut others = false;
    let (mut n, mut mine) = (leaf, Entity::Own);
    let mut walk = LagWalk::new(st, leaf);
    loop {
        if st.nodes[n].throttled {
            return Err(others);
        }
        if let Some(until) = exhausted(st, n, now) {
            if st.nodes[n].parent.is_some() {
                throttle(st, n, until, now, throttled);
            }
            return Err(others);
        }
        if st.nodes[n].rotation.only() != Some(mine) {
            fix_front(st, n);
        }
        if let Some(((first_key, _), first, second)) = st.nodes[n].rotation.first_two() {
            if first != mine {
                others = true;
                if let Some(v) = vruntime_of(st, n, mine) {
                    if first_key < v {
                        return Ok((true, true, SHARE_ONE, 0));
                    }
                    walk.count(st, n, first_key - v);
                }
            } else if let Some((second_key, _)) = second {
                others = true;
                walk.count(st, n, second_key.saturating_sub(first_key));
            }
        }
        match st.nodes[n].parent.filter(|p| st.nodes.contains(*p)) {
            Some(p) => {
                walk.up(st, n, p);
                mine = Entity::Child(n);
                n = p;
            }
            None => {
                let share = path_share(st, leaf);
                let share = scale(share, tree_share(st, tree, now));
                return Ok((false, others, share, walk.finish(st, n)));
            }
        }
    }
}

/// Records that `worker` took work from the own queue of `leaf` at `now` (step 2's `served`),
/// and returns the path's share (`path_share`) and its lag (`path_lag`).
pub(crate) fn serve(
    st: &mut TreeState,
    tree: &Tree,
    worker: usize,
    leaf: usize,
    now: u64,
) -> (u32, u64) {
    if let Some(entry) = st.served.get_mut(worker) {
        *entry = Some((leaf, now));
    }
    let share = scale(path_share(st, leaf), tree_share(st, tree, now));
    (share, path_lag(st, leaf))
}

/// The lag between the entity of `leaf`'s path under `n` (`mine`) and the other entity of `n`'s
/// rotation nearest the front, in `n`'s frame (virtual nanoseconds): how far the first other
/// entity is behind `mine`, or `mine` behind the second. The first key is exact after
/// `fix_front`; the second may be stale (lower), which only makes the lag smaller.
fn lag_at(st: &mut TreeState, n: usize, mine: Entity) -> u64 {
    if st.nodes[n].rotation.only() == Some(mine) {
        return 0;
    }
    fix_front(st, n);
    let Some(((first, _), e, second)) = st.nodes[n].rotation.first_two() else {
        return 0;
    };
    if e == mine {
        return second.map_or(0, |(second, _)| second.saturating_sub(first));
    }
    vruntime_of(st, n, mine).map_or(0, |v| v.abs_diff(first))
}

/// Step 6: the largest lag between two active entities of one node on the path from the root to
/// `leaf`'s own queue (`lag_at`), in the root's virtual nanoseconds: the lag the tree's service
/// would make up at the shares of that node, over the root's weight. Entities of a node with a
/// small share of the tree advance slowly in its frame, so a lag there weighs as much as the
/// tree's service that owes it: the scale of the top-level groups' spread, which the
/// worker-count controller compares with a few quanta (`Scheduler::spread_hint`). O(depth).
///
/// A lag `l` at a node `k` with active weight `W` and share `s` of the tree is `l * W / s` of
/// the tree's service. Going up from the leaf, the largest so far is kept times the current
/// node's share: `l * W` at `k` itself, scaled by the parent's active weight over the node's
/// weight one level up; the root's share is the whole tree.
pub(crate) fn path_lag(st: &mut TreeState, leaf: usize) -> u64 {
    if !st.nodes.contains(leaf) {
        return 0;
    }
    let (mut n, mut mine) = (leaf, Entity::Own);
    let mut walk = LagWalk::new(st, leaf);
    loop {
        let here = lag_at(st, n, mine);
        walk.count(st, n, here);
        match st.nodes[n].parent.filter(|p| st.nodes.contains(*p)) {
            Some(p) => {
                walk.up(st, n, p);
                mine = Entity::Child(n);
                n = p;
            }
            None => return walk.finish(st, n),
        }
    }
}

/// [`path_lag`]'s walk up a path: the largest lag so far, times the current node's share of
/// the tree, and the weight the path's entity counts in the current node.
struct LagWalk {
    lag: u128,
    weight: u64,
    entered: bool,
}

impl LagWalk {
    /// At `leaf`, whose own queue is the path's entity.
    fn new(st: &TreeState, leaf: usize) -> LagWalk {
        LagWalk {
            lag: 0,
            weight: 1,
            entered: st.nodes[leaf].own_key.is_some(),
        }
    }

    /// The active weight of `n`, counting the path's entity even when it is out of the rotation
    /// (as `path_share` does).
    fn total(&self, st: &TreeState, n: usize) -> u64 {
        let active = st.nodes[n].active_weight;
        if self.entered {
            active.max(self.weight)
        } else {
            active + self.weight
        }
        .max(1)
    }

    /// Counts a lag of `lag` virtual nanoseconds in `n`'s frame, at `n`.
    fn count(&mut self, st: &TreeState, n: usize, lag: u64) {
        let here = u128::from(lag) * u128::from(self.total(st, n));
        self.lag = self.lag.max(here);
    }

    /// Goes up from `n` to its parent `p`.
    fn up(&mut self, st: &TreeState, n: usize, p: usize) {
        let node = &st.nodes[n];
        self.weight = node.entered_weight.max(1);
        self.entered = node.in_parent.is_some();
        let total = self.total(st, p);
        self.lag = self.lag.saturating_mul(u128::from(total)) / u128::from(self.weight);
    }

    /// The lag in the root's virtual nanoseconds, at the root `n`.
    fn finish(&self, st: &TreeState, n: usize) -> u64 {
        let root_weight = st.nodes[n].entered_weight.max(1);
        u64::try_from(self.lag / u128::from(root_weight)).unwrap_or(u64::MAX)
    }
}

/// The least stretch (nanoseconds) over which a tree's share of the workers is measured.
const MEASURE_EVERY: u64 = 10_000_000;

/// The share of the runtime's workers the tree's groups got over the last measured stretch of at
/// least [`MEASURE_EVERY`] (step 5), in fixed point: the service charged to the tree over the
/// stretch's length times the workers. Measured, not computed from the weights of the top-level
/// groups, which live in the scheduler's shards: a tree alone on the runtime has all of it.
pub(crate) fn tree_share(st: &mut TreeState, tree: &Tree, now: u64) -> u32 {
    let (at, charged) = st.measured;
    let elapsed = now.saturating_sub(at);
    if elapsed >= MEASURE_EVERY {
        let total = tree.charged.load(Ordering::Relaxed);
        let capacity = u128::from(elapsed) * st.served.len().max(1) as u128;
        let served = u128::from(total.saturating_sub(charged)) * u128::from(SHARE_ONE);
        st.tree_share = (served / capacity).clamp(1, u128::from(SHARE_ONE)) as u32;
        st.measured = (now, total);
    }
    st.tree_share
}

/// The product of two shares in fixed point.
fn scale(a: u32, b: u32) -> u32 {
    (u64::from(a) * u64::from(b) / u64::from(SHARE_ONE)) as u32
}

/// Below this share ([`SHARE_ONE`] is the whole tree), a path's exact share no longer matters:
/// the slice it scales is at its least (`fair::segment`).
const SHARE_LEAST: u64 = (SHARE_ONE / 16) as u64;

/// The share of the tree the path from the root down to `leaf`'s own queue is entitled to while
/// the active entities stay busy (step 5): the product, over the levels of the path, of the
/// path's entity's weight over the active weight of its node (the entity counted even when it
/// is out of the rotation: its queue was just emptied by a pick, or its cap throttles it). In
/// fixed point, [`SHARE_ONE`] is the whole tree; O(depth), and it stops early once the share is
/// below what any slice distinguishes.
pub(crate) fn path_share(st: &TreeState, leaf: usize) -> u32 {
    let mut share = u64::from(SHARE_ONE);
    let Some(mut node) = st.nodes.get(leaf) else {
        return SHARE_ONE;
    };
    let (mut weight, mut entered) = (1, node.own_key.is_some());
    loop {
        let total = if entered {
            node.active_weight.max(weight)
        } else {
            node.active_weight + weight
        };
        share = share * weight / total.max(1);
        if share < SHARE_LEAST {
            return share as u32;
        }
        let Some(parent) = node.parent.and_then(|p| st.nodes.get(p)) else {
            return share as u32;
        };
        (weight, entered) = (node.entered_weight.max(1), node.in_parent.is_some());
        node = parent;
    }
}
