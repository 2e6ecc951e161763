//! The runtime's list of live groups, for shutdown (which must reach every queue and idle task)
//! and for the live-group count.
//!
//! Groups are held weakly: a group lives as long as its handles and tasks, and leaves the list when
//! it is dropped. The list is split into [`SHARDS`] shards, each a slab behind its own lock, and a
//! group lives in the shard it was created in. Each thread creates its groups in the shards in
//! turn, from a starting shard of its own, so threads that create and drop groups at once (a group
//! per connection) rarely meet at a lock, and nothing is runtime-wide: a group's id comes from its
//! shard's counter (`count * SHARDS + shard`: unique, not in creation order), and the live count is
//! the sum of the shards' lengths. Creating and dropping a group each take one shard's lock once;
//! only [`snapshot`](GroupList::snapshot) and [`live`](GroupList::live) (shutdown, metrics) take
//! them all, one after another.

use std::cell::Cell;
use std::sync::{Arc, Weak};

use slab::Slab;

use crate::shim::{Mutex, lock};

/// Shards of the list; a power of two.
const SHARDS: usize = 32;

/// The list; generic so that it needs nothing from the group type it holds (`GroupInner`).
pub(crate) struct GroupList<G> {
    shards: Box<[Mutex<Shard<G>>]>,
}

struct Shard<G> {
    groups: Slab<Weak<G>>,
    /// Groups this shard has created: the next id is `created * SHARDS + shard`.
    created: u64,
}

/// Where the next thread starts taking shards (stepped by a number prime to `SHARDS`, so the first
/// threads start far apart). A std atomic even under loom: it only spreads threads over shards, and
/// no protocol depends on its value.
static FIRST_SHARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// The shard this thread creates its next group in (`usize::MAX`: not chosen yet).
    static NEXT_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's next shard, advancing its turn.
fn next_shard() -> usize {
    NEXT_SHARD
        .try_with(|c| {
            let mut s = c.get();
            if s == usize::MAX {
                s = FIRST_SHARD.fetch_add(7, std::sync::atomic::Ordering::Relaxed);
            }
            c.set(s.wrapping_add(1));
            s % SHARDS
        })
        // Thread teardown: any shard does.
        .unwrap_or(0)
}

impl<G> GroupList<G> {
    pub(crate) fn new() -> Self {
        GroupList {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        groups: Slab::new(),
                        created: 0,
                    })
                })
                .collect(),
        }
    }

    /// Builds a group with `make(id, key)` under its shard's lock and lists it. The lock orders
    /// creation against `snapshot`: a group created after a snapshot took its shard's lock sees
    /// whatever the snapshot's caller wrote before taking it (shutdown's flag), and a group created
    /// before is in the snapshot.
    pub(crate) fn insert(&self, make: impl FnOnce(u64, usize) -> Arc<G>) -> Arc<G> {
        let shard = next_shard();
        let mut s = lock(&self.shards[shard]);
        let id = s.created * SHARDS as u64 + shard as u64;
        s.created += 1;
        let entry = s.groups.vacant_entry();
        let g = make(id, entry.key() * SHARDS + shard);
        entry.insert(Arc::downgrade(&g));
        g
    }

    /// Called by a group's destructor with the key `insert` gave it.
    pub(crate) fn remove(&self, key: usize) {
        lock(&self.shards[key % SHARDS])
            .groups
            .try_remove(key / SHARDS);
    }

    /// Every group alive now.
    pub(crate) fn snapshot(&self) -> Vec<Arc<G>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            all.extend(lock(shard).groups.iter().filter_map(|(_, w)| w.upgrade()));
        }
        all
    }

    /// Groups listed now (each shard's count in turn: a snapshot).
    pub(crate) fn live(&self) -> usize {
        self.shards.iter().map(|s| lock(s).groups.len()).sum()
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
        let mut ids: Vec<_> = made.iter().map(|g| g.0).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 100, "every group has its own id");
        let mut keys: Vec<_> = made.iter().map(|g| g.1).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 100, "every group has its own key");
        let removed = made.iter().filter(|g| g.0 % 3 == 0).count();
        for g in made.iter().filter(|g| g.0 % 3 == 0) {
            list.remove(g.1);
        }
        let mut left: Vec<_> = list.snapshot().iter().map(|g| g.0).collect();
        left.sort_unstable();
        let mut want: Vec<_> = made.iter().map(|g| g.0).filter(|id| id % 3 != 0).collect();
        want.sort_unstable();
        assert_eq!(left, want);
        assert_eq!(list.live(), 100 - removed);
        // New groups reuse the freed slots; every key still removes the right entry.
        let again: Vec<_> = (0..removed)
            .map(|_| list.insert(|id, key| Arc::new((id, key))))
            .collect();
        for g in made.iter().filter(|g| g.0 % 3 != 0).chain(&again) {
            list.remove(g.1);
        }
        assert!(list.snapshot().is_empty());
        assert_eq!(list.live(), 0);
    }
}
