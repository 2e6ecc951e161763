//! The runtime's list of live groups, for shutdown (which must reach every queue and idle task)
//! and for the live-group count.
//!
//! Groups are held weakly: a group lives as long as its handles and tasks, and leaves the list when
//! it is dropped. Creating and dropping a group each take the list's lock once.

use std::sync::{Arc, Weak};

use slab::Slab;

use crate::shim::{AtomicU64, AtomicUsize, Mutex, Ordering, lock};

/// The list; generic so that it needs nothing from the group type it holds (`GroupInner`).
pub(crate) struct GroupList<G> {
    groups: Mutex<Slab<Weak<G>>>,
    live: AtomicUsize,
    next_id: AtomicU64,
}

impl<G> GroupList<G> {
    pub(crate) fn new() -> Self {
        GroupList {
            groups: Mutex::new(Slab::new()),
            live: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        }
    }

    /// Builds a group with `make(id, key)` under the list's lock and lists it. The lock orders
    /// creation against `snapshot`: a group created after a snapshot sees whatever the snapshot's
    /// caller wrote before taking it (shutdown's flag).
    pub(crate) fn insert(&self, make: impl FnOnce(u64, usize) -> Arc<G>) -> Arc<G> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut groups = lock(&self.groups);
        let entry = groups.vacant_entry();
        let g = make(id, entry.key());
        entry.insert(Arc::downgrade(&g));
        self.live.fetch_add(1, Ordering::Relaxed);
        g
    }

    /// Called by a group's destructor.
    pub(crate) fn remove(&self, key: usize) {
        lock(&self.groups).try_remove(key);
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every group alive now.
    pub(crate) fn snapshot(&self) -> Vec<Arc<G>> {
        lock(&self.groups)
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}
