//! A group's place in a tenant tree: the data of nested groups (the rules live in `fair::tree`).
//!
//! A group built with [`Group::child`](crate::Group::child) is nested under its parent; the
//! top-level group of a tree is its *root*. Every group of a tree is a *node* of it, and each node
//! has a *rotation*: the entities under it that have queued work, ordered by virtual runtime. An
//! entity is a child node, or the node's *own* queue (tasks spawned into the group itself), which
//! competes as one more child of the default weight. A node with queued work anywhere below it is
//! *active*, and is in its parent's rotation (the root: in the scheduler's shard rotation), unless
//! a CPU cap throttles it.
//!
//! A tree's nodes live in one slab behind one lock, the tree's: a change that goes up or down the
//! tree (a group that becomes runnable activates its ancestors, a pick descends from the root)
//! holds it once, so nodes never disagree with one another. The lock is per tree, not per runtime:
//! flat groups never take it, and a tree's pick takes it once and descends in O(depth).
//!
//! Nodes keep their groups weakly: a group lives as long as its handles, its tasks and its
//! children. A group that drops leaves its slot in the tree's *dead* list, which the next holder of
//! the tree's lock empties (the drop itself never takes the tree's lock, so a group may drop while
//! the lock is held).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};

use slab::Slab;

use crate::shim::{
    AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, lock,
};

use super::inner::GroupInner;

/// A key in a node's rotation: the entity's virtual runtime in virtual nanoseconds when it was
/// (re-)keyed, then a sequence number that keeps keys unique and equal runtimes in entry order.
pub(crate) type Key = (u64, u64);

/// What a node's rotation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entity {
    /// The node's own queue.
    Own,
    /// A child node, by slot.
    Child(usize),
}

/// A tree group's virtual runtimes in virtual nanoseconds, written through its [`Node`] and read
/// by the tree's rules at its slot ([`TreeState::clock`]) without reaching the group: no upgrade
/// of its weak reference, no lock of its scheduling state. The tree keeps them in chunks of
/// [`CLOCKS_PER_CHUNK`] by slot (a group built costs no allocation of its own); a chunk lives as
/// long as the tree and the nodes that hold it.
#[derive(Debug, Default)]
pub(crate) struct VClock {
    /// The group's own queue in its node's frame: the service of the group's own tasks,
    /// unscaled (the own queue competes with the children as one more child of the default
    /// weight, 1). Only rises: charges add to it, an entry lifts it to the node's floor.
    pub(crate) own_vns: AtomicU64,
    /// A copy of the group's virtual runtime (its subtree's service ÷ its weight, in its
    /// parent's frame), stored with every change of it (`fair::vtime::set_vruntime`), as the
    /// group's hint is. Read for groups under a parent only (a root's runtime keys it in the
    /// scheduler's shard rotation).
    pub(crate) vns: AtomicU64,
    /// The next slot of the tree's dead list ([`NO_SLOT`] at its end) while this node's group
    /// has dropped and its slot is not freed yet; written and read under the dead list's lock.
    next_dead: AtomicUsize,
}

/// The end of a tree's dead list.
pub(crate) const NO_SLOT: usize = usize::MAX;

/// How many [`VClock`]s one chunk holds.
const CLOCKS_PER_CHUNK: usize = 64;

/// A chunk of [`VClock`]s, for the slots `k * CLOCKS_PER_CHUNK ..` of a tree.
type ClockChunk = [VClock; CLOCKS_PER_CHUNK];

/// A node's [`VClock`]: its chunk, kept alive, and its place in it.
pub(crate) struct ClockRef {
    chunk: Arc<ClockChunk>,
    index: usize,
}

impl std::ops::Deref for ClockRef {
    type Target = VClock;

    #[inline]
    fn deref(&self) -> &VClock {
        &self.chunk[self.index]
    }
}

/// A node's rotation: its entities by [`Key`]. A node that has held at most one entity at a time
/// (a leaf: its own queue alone) keeps it inline, so its activation allocates nothing and a
/// re-key is a store. A node with a few entities keeps them in a sorted array (a binary search
/// and a short move per change, on one or two cache lines' worth of searching); past
/// [`FEW_MAX`] they move into a B-tree, which the node keeps.
#[derive(Debug)]
pub(crate) enum NodeRotation {
    /// At most one entity.
    One(Option<(Key, Entity)>),
    /// Up to [`FEW_MAX`], in key order.
    Few(VecDeque<(Key, Entity)>),
    /// Any number.
    Many(BTreeMap<Key, Entity>),
}

/// The most entities a [`NodeRotation::Few`] holds.
const FEW_MAX: usize = 128;

impl Default for NodeRotation {
    fn default() -> Self {
        NodeRotation::One(None)
    }
}

impl NodeRotation {
    /// The entity with the smallest key, and its key.
    #[inline]
    pub(crate) fn first_key_value(&self) -> Option<(&Key, &Entity)> {
        match self {
            NodeRotation::One(one) => one.as_ref().map(|(k, e)| (k, e)),
            NodeRotation::Few(few) => few.front().map(|(k, e)| (k, e)),
            NodeRotation::Many(map) => map.first_key_value(),
        }
    }

    /// The entity, if it is the only one and kept inline: the choice at its node whatever the
    /// keys say.
    #[inline]
    pub(crate) fn only(&self) -> Option<Entity> {
        match self {
            NodeRotation::One(Some((_, e))) => Some(*e),
            _ => None,
        }
    }

    /// True if no entity is in the rotation.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            NodeRotation::One(one) => one.is_none(),
            NodeRotation::Few(few) => few.is_empty(),
            NodeRotation::Many(map) => map.is_empty(),
        }
    }

    /// The first entity and its key, and the second's key.
    #[inline]
    pub(crate) fn first_two(&self) -> Option<(Key, Entity, Option<Key>)> {
        match self {
            NodeRotation::One(one) => one.map(|(k, e)| (k, e, None)),
            NodeRotation::Few(few) => {
                let &(k, e) = few.front()?;
                Some((k, e, few.get(1).map(|&(k, _)| k)))
            }
            NodeRotation::Many(map) => {
                let mut it = map.iter();
                let (&k, &e) = it.next()?;
                Some((k, e, it.next().map(|(&k, _)| k)))
            }
        }
    }

    /// Adds `e` under `key`, a key not in the rotation.
    pub(crate) fn insert(&mut self, key: Key, e: Entity) {
        match self {
            NodeRotation::One(one @ None) => *one = Some((key, e)),
            NodeRotation::One(Some(first)) => {
                let first = *first;
                let mut few = VecDeque::with_capacity(4);
                few.push_back(first);
                *self = NodeRotation::Few(few);
                self.insert(key, e);
            }
            NodeRotation::Few(few) if few.len() < FEW_MAX => {
                let at = few.partition_point(|(k, _)| *k < key);
                few.insert(at, (key, e));
            }
            NodeRotation::Few(few) => {
                let mut map: BTreeMap<Key, Entity> = few.drain(..).collect();
                map.insert(key, e);
                *self = NodeRotation::Many(map);
            }
            NodeRotation::Many(map) => {
                map.insert(key, e);
            }
        }
    }

    /// Takes the entity at `key` out, if it is there.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<Entity> {
        match self {
            NodeRotation::One(one) => match one {
                Some((k, _)) if k == key => one.take().map(|(_, e)| e),
                _ => None,
            },
            NodeRotation::Few(few) => {
                let at = few.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
                few.remove(at).map(|(_, e)| e)
            }
            NodeRotation::Many(map) => map.remove(key),
        }
    }

    /// Moves the first entity, whose key is `old`, to `key` (not in the rotation); returns it,
    /// or `None` (and changes nothing) if the first key is not `old`.
    pub(crate) fn rekey_first(&mut self, old: &Key, key: Key) -> Option<Entity> {
        if self.first_key_value()?.0 != old {
            return None;
        }
        match self {
            NodeRotation::One(Some((k, e))) => {
                *k = key;
                Some(*e)
            }
            NodeRotation::One(None) => None,
            NodeRotation::Few(few) => {
                let (_, e) = few.pop_front()?;
                let at = few.partition_point(|(k, _)| *k < key);
                few.insert(at, (key, e));
                Some(e)
            }
            NodeRotation::Many(map) => {
                let (_, e) = map.pop_first()?;
                map.insert(key, e);
                Some(e)
            }
        }
    }
}

/// One node, under its tree's lock.
pub(crate) struct NodeState {
    /// The node's group.
    pub(crate) group: Weak<GroupInner>,
    /// The parent's slot; `None` for the root.
    pub(crate) parent: Option<usize>,
    /// The entities under this node with queued work (see the module docs).
    pub(crate) rotation: NodeRotation,
    /// The smallest virtual runtime (virtual nanoseconds) an entity entering the rotation is
    /// lifted to; only rises.
    pub(crate) floor: u64,
    /// The own queue's key while it is in the rotation.
    pub(crate) own_key: Option<Key>,
    /// This node's key in its parent's rotation while it is in it (the root: `in_shard`).
    pub(crate) in_parent: Option<Key>,
    /// A CPU cap holds the node out of its parent's rotation until its next period.
    pub(crate) throttled: bool,
    /// The node's group has a CPU cap (a copy of `Node::cap_quota != 0`, so that a descent
    /// reads the cap of capped nodes only).
    pub(crate) capped: bool,
    /// The total weight of the entities in `rotation` (the own queue counts the default weight,
    /// 1; a child, its `entered_weight`): the denominator of a share at this level.
    pub(crate) active_weight: u64,
    /// The weight this node counts in its parent's `active_weight` while it is in its parent's
    /// rotation: its effective weight when it entered.
    pub(crate) entered_weight: u64,
}

impl NodeState {
    /// A node of `group` under `parent`, out of every rotation, of weight `weight`.
    pub(crate) fn new(group: Weak<GroupInner>, parent: Option<usize>, weight: u32) -> NodeState {
        NodeState {
            group,
            parent,
            rotation: NodeRotation::default(),
            floor: 0,
            own_key: None,
            in_parent: None,
            throttled: false,
            capped: false,
            active_weight: 0,
            entered_weight: u64::from(weight),
        }
    }
}

/// A tree's nodes, and what its workers serve (under the tree's lock).
pub(crate) struct TreeState {
    pub(crate) nodes: Slab<NodeState>,
    /// The next key's sequence number.
    pub(crate) seq: u64,
    /// True while the root is in the scheduler's shard rotation or on its way there.
    pub(crate) in_shard: bool,
    /// Per worker: the node whose own queue it took work from at its last pick in this tree, and
    /// the clock stamp when that was last confirmed (the floors count it as active).
    pub(crate) served: Vec<Option<(usize, u64)>>,
    /// The clock stamp and `Tree::charged` when the tree's share of the workers was last measured
    /// (`fair::tree::tree_share`), and that share, in fixed point ([`SHARE_ONE`]: all of them).
    pub(crate) measured: (u64, u64),
    pub(crate) tree_share: u32,
    /// The nodes' virtual runtimes, by slot (see [`VClock`]).
    clocks: Vec<Arc<ClockChunk>>,
}

impl TreeState {
    /// The next sequence number for a key.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The virtual runtimes of the node at `slot`, which [`TreeState::new_clock`] gave it.
    #[inline]
    pub(crate) fn clock(&self, slot: usize) -> &VClock {
        &self.clocks[slot / CLOCKS_PER_CHUNK][slot % CLOCKS_PER_CHUNK]
    }

    /// The clock for a node just inserted at `slot`, whose group's virtual runtime is `vns`: its
    /// own queue at 0, a copy of `vns`. The slot's last node, if any, dropped (its slot was
    /// freed after its `Node`), so nothing else writes that clock.
    pub(crate) fn new_clock(&mut self, slot: usize, vns: u64) -> ClockRef {
        let (chunk, index) = (slot / CLOCKS_PER_CHUNK, slot % CLOCKS_PER_CHUNK);
        while self.clocks.len() <= chunk {
            self.clocks
                .push(Arc::new(std::array::from_fn(|_| VClock::default())));
        }
        let clock = &self.clocks[chunk][index];
        clock.own_vns.store(0, Ordering::Relaxed);
        clock.vns.store(vns, Ordering::Relaxed);
        ClockRef {
            chunk: self.clocks[chunk].clone(),
            index,
        }
    }
}

/// A tree: its lock and its dead list.
pub(crate) struct Tree {
    state: Mutex<TreeState>,
    /// Slots of groups that dropped, freed by the next holder of `state`'s lock: the first, and
    /// each links the next through its clock (`VClock::next_dead`), so that a burst of drops
    /// allocates nothing.
    dead: Mutex<usize>,
    /// The service charged to the tree's groups, in nanoseconds (`Scheduler::charge`, without
    /// the tree's lock).
    pub(crate) charged: AtomicU64,
}

impl Tree {
    /// A tree for a runtime of `workers` workers, with no node yet.
    pub(crate) fn new(workers: usize) -> Arc<Tree> {
        Arc::new(Tree {
            state: Mutex::new(TreeState {
                nodes: Slab::new(),
                seq: 0,
                in_shard: false,
                served: vec![None; workers],
                measured: (0, 0),
                tree_share: SHARE_ONE,
                clocks: Vec::new(),
            }),
            dead: Mutex::new(NO_SLOT),
            charged: AtomicU64::new(0),
        })
    }

    /// Locks the tree's nodes. The caller frees dead slots first (`fair::tree`).
    pub(crate) fn lock(&self) -> MutexGuard<'_, TreeState> {
        lock(&self.state)
    }

    /// Frees the slots of the groups that dropped since the last call, with `free`, in `st`
    /// (held by the caller).
    pub(crate) fn free_dead(
        &self,
        st: &mut TreeState,
        mut free: impl FnMut(&mut TreeState, usize),
    ) {
        // The links were written under the dead list's lock before the slots that lead to them
        // were published; nothing writes them again until the slots are freed.
        let mut slot = std::mem::replace(&mut *lock(&self.dead), NO_SLOT);
        while slot != NO_SLOT {
            let next = st.clock(slot).next_dead.load(Ordering::Relaxed);
            free(st, slot);
            slot = next;
        }
    }

    /// Puts `slot`, whose clock is `clock`, at the front of the dead list.
    fn bury(&self, slot: usize, clock: &VClock) {
        let mut dead = lock(&self.dead);
        clock.next_dead.store(*dead, Ordering::Relaxed);
        *dead = slot;
    }
}

/// A nested group's (or a tree root's) link to its tree, fixed when it gets one.
pub(crate) struct Node {
    pub(crate) tree: Arc<Tree>,
    /// The group's slot in the tree.
    pub(crate) slot: usize,
    /// The parent group (kept alive by its children); `None` for the root.
    pub(crate) parent: Option<Arc<GroupInner>>,
    /// 0 for the root, 1 for its children, and so on.
    pub(crate) depth: usize,
    /// The group's live children, for walks (cancel, `wait_idle`, listings). Weak: a child keeps
    /// its parent alive, not the other way round.
    pub(crate) children: Mutex<Slab<Weak<GroupInner>>>,
    /// This group's key in its parent's `children`.
    pub(crate) child_key: usize,
    /// The group's virtual runtimes (its tree's `TreeState::clock` at `slot`).
    pub(crate) clock: ClockRef,
    /// The CPU cap (`GroupBuilder::cpu_limit`): nanoseconds of service per period, 0 for none.
    pub(crate) cap_quota: AtomicU64,
    /// The cap's accounting (`fair::cap`).
    pub(crate) cap: Mutex<CapState>,
    /// The share of the tree the path from the root to this group's own queue is entitled to,
    /// in fixed point ([`SHARE_ONE`] is the whole tree), as of the last pick of the own queue or
    /// quantum end on it (`fair::tree::path_share`): the scale of the time slice a worker gives
    /// the group's tasks (`fair::segment`).
    pub(crate) share: AtomicU32,
}

/// [`Node::share`] of a path entitled to the whole tree.
pub(crate) const SHARE_ONE: u32 = 1 << 16;

/// A capped node's accounting for the current period.
#[derive(Debug, Default)]
pub(crate) struct CapState {
    /// The period the counts are for (`stamp / period`).
    pub(crate) period: u64,
    /// Service charged to the subtree in `period`, with what earlier periods overshot.
    pub(crate) used: u64,
    /// Total nanoseconds the node was throttled, and since when it is (0: it is not).
    pub(crate) throttled_ns: u64,
    pub(crate) throttled_since: u64,
}

impl Node {
    /// A node of `tree` at `slot`, under `parent` at `depth`, `child_key` in its parent's
    /// children, whose virtual runtimes are `clock` (`TreeState::new_clock`).
    pub(crate) fn new(
        tree: Arc<Tree>,
        clock: ClockRef,
        slot: usize,
        parent: Option<Arc<GroupInner>>,
        depth: usize,
        child_key: usize,
    ) -> Node {
        Node {
            tree,
            slot,
            parent,
            depth,
            children: Default::default(),
            child_key,
            clock,
            cap_quota: AtomicU64::new(0),
            cap: Mutex::new(CapState::default()),
            share: AtomicU32::new(SHARE_ONE),
        }
    }
}

impl Node {
    /// The time the node spent throttled by its CPU cap, up to the stamp `now`.
    pub(crate) fn throttled_ns(&self, now: u64) -> u64 {
        let cs = lock(&self.cap);
        let current = match cs.throttled_since {
            0 => 0,
            since => now.saturating_sub(since),
        };
        cs.throttled_ns + current
    }

    /// The live children (a snapshot).
    pub(crate) fn children(&self) -> Vec<Arc<GroupInner>> {
        lock(&self.children)
            .iter()
            .filter_map(|(_, c)| c.upgrade())
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.tree.bury(self.slot, &self.clock);
        if let Some(p) = &self.parent {
            if let Some(pn) = p.node() {
                let mut children = lock(&pn.children);
                if children.contains(self.child_key) {
                    children.remove(self.child_key);
                }
            }
        }
    }
}

/// A group's [`Node`] slot (see [`SetOnce`]).
pub(crate) type NodeSlot = SetOnce<Node>;

/// A boxed value set at most once and never removed, one pointer wide (a `OnceLock<Box<T>>`
/// would add a word, and take a group over its 512 bytes). Lock-free: a set is one
/// compare-and-swap, a get one load (loom model: `loom_models::runtime::set_once_*`).
pub(crate) struct SetOnce<T>(AtomicPtr<T>);

impl<T> Default for SetOnce<T> {
    fn default() -> Self {
        SetOnce(AtomicPtr::new(std::ptr::null_mut()))
    }
}

impl<T> SetOnce<T> {
    /// The value, if one was set.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Box::into_raw` in `set`, was published with
        // Release (read above with Acquire), and is freed only by `drop`, which has `&mut self`:
        // it lives as long as `&self`.
        unsafe { p.as_ref() }
    }

    /// Sets the value; gives it back if one was set already.
    pub(crate) fn set(&self, value: Box<T>) -> Result<(), Box<T>> {
        let p = Box::into_raw(value);
        match self
            .0
            .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            // SAFETY: `p` came from `Box::into_raw` just above and was not published.
            Err(_) => Err(unsafe { Box::from_raw(p) }),
        }
    }
}

impl<T> Drop for SetOnce<T> {
    fn drop(&mut self) {
        // Under loom, `get_mut` is `with_mut`; a load is as good with `&mut self`.
        let p = self.0.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: set from `Box::into_raw` in `set`; `&mut self` means no reference from
            // `get` is alive, and the pointer is never freed elsewhere.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Slots buried in any order come back once each, at the next free, whatever their chunk.
    #[test]
    fn dead_list_frees_each_buried_slot_once() {
        let tree = Tree::new(1);
        let mut clocks = Vec::new();
        {
            let mut st = tree.lock();
            for _ in 0..200 {
                let slot = st.nodes.insert(NodeState::new(Weak::new(), None, 1));
                clocks.push((slot, st.new_clock(slot, 0)));
            }
        }
        let mut freed = Vec::new();
        let mut take = |tree: &Tree| {
            let mut st = tree.lock();
            tree.free_dead(&mut st, |st, slot| {
                st.nodes.remove(slot);
                freed.push(slot);
            });
            std::mem::take(&mut freed)
        };
        assert!(take(&tree).is_empty());
        let buried: Vec<usize> = [3, 150, 0, 64, 199, 65].into();
        for &slot in &buried {
            tree.bury(slot, &clocks[slot].1);
        }
        let mut got = take(&tree);
        got.sort_unstable();
        let mut want = buried.clone();
        want.sort_unstable();
        assert_eq!(got, want);
        assert!(take(&tree).is_empty());
        tree.bury(7, &clocks[7].1);
        assert_eq!(take(&tree), [7]);
        assert_eq!(tree.lock().nodes.len(), 200 - buried.len() - 1);
    }

    /// Every operation of a rotation, through its three forms, against a B-tree.
    #[test]
    fn node_rotation_keeps_key_order_in_every_form() {
        let mut rotation = NodeRotation::default();
        let mut model: BTreeMap<Key, Entity> = BTreeMap::new();
        // A fixed pseudo-random sequence: inserts, removes of present and absent keys, re-keys.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut seq = 0;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Grow past `FEW_MAX` in the middle of the run, then shrink.
            let grow = if (4_000..8_000).contains(&step) { 6 } else { 3 };
            match x % 10 {
                op if op < grow => {
                    seq += 1;
                    let key = ((x >> 8) % 64, seq);
                    let e = Entity::Child((x >> 20) as usize % 1000);
                    rotation.insert(key, e);
                    model.insert(key, e);
                }
                op if op < 8 => {
                    let present = model.keys().nth((x >> 8) as usize % model.len().max(1));
                    let key = present.copied().unwrap_or((x % 64, 0));
                    assert_eq!(rotation.remove(&key), model.remove(&key));
                    assert_eq!(rotation.remove(&(65, 0)), None);
                }
                _ => {
                    seq += 1;
                    let new = ((x >> 8) % 128, seq);
                    let first = model.first_key_value().map(|(k, _)| *k);
                    assert_eq!(rotation.rekey_first(&(99, 0), new), None);
                    if let Some(old) = first {
                        let e = model.remove(&old).unwrap();
                        model.insert(new, e);
                        assert_eq!(rotation.rekey_first(&old, new), Some(e));
                    }
                }
            }
            let mut it = model.iter();
            let first = it.next().map(|(k, e)| (*k, *e));
            let second = it.next().map(|(k, _)| *k);
            assert_eq!(rotation.first_key_value().map(|(k, e)| (*k, *e)), first);
            assert_eq!(rotation.first_two(), first.map(|(k, e)| (k, e, second)));
            assert_eq!(rotation.is_empty(), model.is_empty());
            if let NodeRotation::One(Some(_)) = rotation {
                assert_eq!(rotation.only(), first.map(|(_, e)| e));
            }
        }
        assert!(matches!(rotation, NodeRotation::Many(_)));
    }
}
