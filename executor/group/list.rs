//! The runtime's list of live groups, for shutdown (which must reach every queue and idle task)
//! and for the live-group count.
//!
//! Groups are held weakly: a group lives as long as its handles and tasks, and leaves the list when
//! it is dropped. The list is split into [`SHARDS`] shards, each a slab behind its own lock, and a
//! group lives in the shard its id picks: consecutive groups land in different shards, so threads
//! that create and drop groups at once (a group per connection) rarely meet at a lock, and no lock
//! is runtime-wide. Creating and dropping a group each take one shard's lock once; only
//! [`snapshot`](GroupList::snapshot) (shutdown, metrics) takes them all, one after another.

use std::sync::{Arc, Weak};

use slab::Slab;

use crate::shim::{AtomicU64, AtomicUsize, Mutex, Ordering, lock};

/// Shards of the list; a power of two.
const SHARDS: usize = 32;

/// The list; generic so that it needs nothing from the group type it holds (`GroupInner`).
pub(crate) struct GroupList<G> {
    shards: Box<[Mutex<Slab<Weak<G>>>]>,
    live: AtomicUsize,
    next_id: AtomicU64,
}

impl<G> GroupList<G> {
    pub(crate) fn new() -> Self {
        GroupList {
            shards: (0..SHARDS).map(|_| Mutex::new(Slab::new())).collect(),
            live: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        }
    }

    /// Builds a group with `make(id, key)` under its shard's lock and lists it. The lock orders
    /// creation against `snapshot`: a group created after a snapshot took its shard's lock sees
    /// whatever the snapshot's caller wrote before taking it (shutdown's flag), and a group created
    /// before is in the snapshot.
    pub(crate) fn insert(&self, make: impl FnOnce(u64, usize) -> Arc<G>) -> Arc<G> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let shard = id as usize % SHARDS;
        let mut groups = lock(&self.shards[shard]);
        let entry = groups.vacant_entry();
        let g = make(id, entry.key() * SHARDS + shard);
        entry.insert(Arc::downgrade(&g));
        self.live.fetch_add(1, Ordering::Relaxed);
        g
    }

    /// Called by a group's destructor with the key `insert` gave it.
    pub(crate) fn remove(&self, key: usize) {
        lock(&self.shards[key % SHARDS]).try_remove(key / SHARDS);
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every group alive now.
    pub(crate) fn snapshot(&self) -> Vec<Arc<G>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            all.extend(lock(shard).iter().filter_map(|(_, w)| w.upgrade()));
        }
        all
    }

    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Keys find their groups again across shards, removal frees exactly the removed group's
    /// entry, and freed slots are reused without mixing shards up.
    #[test]
    fn keys_survive_sharding_and_reuse() {
        let list = GroupList::<(u64, usize)>::new();
        let made: Vec<_> = (0..100)
            .map(|_| list.insert(|id, key| Arc::new((id, key))))
            .collect();
        assert_eq!(list.live(), 100);
        let mut keys: Vec<_> = made.iter().map(|g| g.1).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 100, "every group has its own key");
        for g in made.iter().filter(|g| g.0 % 3 == 0) {
            list.remove(g.1);
        }
        let mut left: Vec<_> = list.snapshot().iter().map(|g| g.0).collect();
        left.sort_unstable();
        let want: Vec<_> = (0..100).filter(|id| id % 3 != 0).collect();
        assert_eq!(left, want);
        assert_eq!(list.live(), 66);
        // New groups reuse the freed slots; every key still removes the right entry.
        let again: Vec<_> = (0..34)
            .map(|_| list.insert(|id, key| Arc::new((id, key))))
            .collect();
        for g in made.iter().filter(|g| g.0 % 3 != 0).chain(&again) {
            list.remove(g.1);
        }
        assert!(list.snapshot().is_empty());
        assert_eq!(list.live(), 0);
    }
}
