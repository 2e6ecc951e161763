//! The rotation: the groups with queued tasks, in the order the scheduler serves them (virtual
//! runtime, then the order they entered).
//!
//! A group enters at `max(own virtual runtime, floor)`, and the floor only rises, so the groups
//! that enter at the floor (every group that was idle, which is most listings) arrive with keys in
//! order. Those go to the back of a FIFO, the *run*, in O(1); the others (a group entering ahead
//! of the floor, or re-keyed by a charge while listed) go into a B-tree, in O(log n): at the
//! run's back they would put every later group at the floor out of order. The first group is the
//! smaller of the two fronts. With one ordered structure alone, each of 10,000 groups listed in a
//! burst would enter a tree of thousands at the same virtual runtime, a search per listing.
//!
//! A group that leaves from inside the run (a visit re-keys it after charges, or a pick took it as
//! an extra) leaves an empty slot, found by binary search (the run is sorted); empty slots at the
//! front are dropped at once, so the run's front is always a group. The scheduler keeps one rotation per
//! shard; everything here happens under that shard's lock.

use std::collections::{BTreeMap, VecDeque};
use std::iter::Peekable;
use std::sync::Arc;

/// A group's place: its virtual runtime in whole virtual nanoseconds, then the rotation's entry
/// count when it entered (unique, so no two groups share a key, and groups at the same virtual
/// runtime are served in the order they entered).
pub(crate) type Key = (u64, u64);

/// An emptied run keeps its room up to this many entries (a few pages).
const RUN_ROOM_KEPT: usize = 4096;

pub(crate) struct Rotation<G> {
    /// Entries whose keys arrived in order; `None` where a group left from inside.
    run: VecDeque<(Key, Option<Arc<G>>)>,
    /// Entries that arrived out of order.
    tree: BTreeMap<Key, Arc<G>>,
    /// Groups in the run and the tree.
    len: usize,
    /// The next key's entry count.
    entered: u64,
}

impl<G> Default for Rotation<G> {
    fn default() -> Self {
        Rotation {
            run: VecDeque::new(),
            tree: BTreeMap::new(),
            len: 0,
            entered: 0,
        }
    }
}

impl<G> Rotation<G> {
    /// A fresh key for a group entering at `vns` virtual nanoseconds, for [`insert`](Self::insert):
    /// the caller records it with the group first (its lock is held while it reads the virtual
    /// runtime).
    pub(crate) fn key(&mut self, vns: u64) -> Key {
        self.entered += 1;
        (vns, self.entered)
    }

    /// Adds `g` under `key`, a key from [`key`](Self::key) not used before; `at_floor` says its
    /// virtual runtime is the floor (the run takes it if the key is in order all the same).
    pub(crate) fn insert(&mut self, key: Key, g: Arc<G>, at_floor: bool) {
        if at_floor && self.run.back().is_none_or(|(last, _)| *last <= key) {
            self.run.push_back((key, Some(g)));
        } else {
            self.tree.insert(key, g);
        }
        self.len += 1;
    }

    /// Takes out the group under `key`, if there is one.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<Arc<G>> {
        // The front first: a pick takes the group it found there.
        let g = if self.run.front().is_some_and(|(k, _)| k == key) {
            self.run.pop_front()?.1?
        } else if let Some(g) = self.tree.remove(key) {
            g
        } else {
            let i = self.run.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
            self.run[i].1.take()?
        };
        self.len -= 1;
        while matches!(self.run.front(), Some((_, None))) {
            self.run.pop_front();
        }
        if self.len == 0 {
            // Only empty slots can be left: drop them, so the run's back starts over too, and
            // give back the room a burst of listings took.
            if self.run.capacity() > RUN_ROOM_KEPT {
                self.run = VecDeque::new();
            } else {
                self.run.clear();
            }
        }
        Some(g)
    }

    /// The group served first, with its key.
    pub(crate) fn first(&self) -> Option<(&Key, &Arc<G>)> {
        let run = self.run.front().and_then(|(k, g)| Some((k, g.as_ref()?)));
        let tree = self.tree.first_key_value();
        match (run, tree) {
            (Some(r), Some(t)) => Some(if r.0 <= t.0 { r } else { t }),
            (r, t) => r.or(t),
        }
    }

    /// Every group, in the order they are served.
    pub(crate) fn iter(&self) -> Iter<'_, G> {
        Iter {
            run: self.run.iter().peekable(),
            tree: self.tree.iter().peekable(),
        }
    }

    /// Groups in the rotation.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

type RunIter<'a, G> = std::collections::vec_deque::Iter<'a, (Key, Option<Arc<G>>)>;

/// See [`Rotation::iter`]: the run and the tree, merged.
pub(crate) struct Iter<'a, G> {
    run: Peekable<RunIter<'a, G>>,
    tree: Peekable<std::collections::btree_map::Iter<'a, Key, Arc<G>>>,
}

impl<'a, G> Iterator for Iter<'a, G> {
    type Item = (&'a Key, &'a Arc<G>);

    fn next(&mut self) -> Option<Self::Item> {
        while matches!(self.run.peek(), Some((_, None))) {
            self.run.next();
        }
        let from_run = match (self.run.peek(), self.tree.peek()) {
            (Some((rk, _)), Some((tk, _))) => rk <= *tk,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if from_run {
            let (k, g) = self.run.next()?;
            Some((k, g.as_ref()?))
        } else {
            self.tree.next()
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn firsts(r: &Rotation<u32>) -> Vec<u32> {
        r.iter().map(|(_, g)| **g).collect()
    }

    /// Keys in order go to the run, others to the tree; either way the groups come out by key, and
    /// removals from inside the run leave nothing visible behind.
    #[test]
    fn serves_by_key_whichever_structure_holds_a_group() {
        let mut r = Rotation::default();
        let mut keys = Vec::new();
        for (vns, g) in [(10, 1), (10, 2), (20, 3), (5, 4), (15, 5), (20, 6), (1, 7)] {
            let k = r.key(vns);
            r.insert(k, Arc::new(g), vns != 15);
            keys.push((k, g));
        }
        assert_eq!(r.len(), 7);
        assert_eq!(firsts(&r), [7, 4, 1, 2, 5, 3, 6]);
        assert_eq!(r.first().map(|(_, g)| **g), Some(7));
        // From inside the run (2), from the tree (5), the run's front (1).
        for g in [2, 5, 1] {
            let k = keys.iter().find(|(_, x)| *x == g).unwrap().0;
            assert_eq!(r.remove(&k).map(|g| *g), Some(g));
            assert_eq!(r.remove(&k), None, "removed twice");
        }
        assert_eq!(firsts(&r), [7, 4, 3, 6]);
        assert_eq!(r.len(), 4);
        for g in [7, 4] {
            let k = keys.iter().find(|(_, x)| *x == g).unwrap().0;
            r.remove(&k);
        }
        assert_eq!(r.first().map(|(_, g)| **g), Some(3));
        for g in [3, 6] {
            let k = keys.iter().find(|(_, x)| *x == g).unwrap().0;
            r.remove(&k);
        }
        assert_eq!(r.len(), 0);
        assert!(r.first().is_none());
        assert_eq!(r.iter().count(), 0);
        // Emptied, the run takes keys from the start again.
        let k = r.key(0);
        r.insert(k, Arc::new(8), true);
        assert_eq!(firsts(&r), [8]);
    }

    /// Random inserts and removals agree with a plain ordered map.
    #[test]
    fn agrees_with_an_ordered_map() {
        let mut r = Rotation::default();
        let mut model = BTreeMap::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut floor = 0;
        for i in 0..20_000u32 {
            if rand() % 3 != 0 || model.is_empty() {
                // Mostly at a rising floor, sometimes ahead of it or behind.
                floor += rand() % 3;
                let vns = match rand() % 4 {
                    0 => floor + rand() % 50,
                    1 => floor.saturating_sub(rand() % 50),
                    _ => floor,
                };
                let k = r.key(vns);
                r.insert(k, Arc::new(i), rand() % 5 != 0);
                model.insert(k, i);
            } else {
                let nth = (rand() as usize) % model.len().min(8);
                let k = *model.keys().nth(nth).unwrap();
                assert_eq!(r.remove(&k).map(|g| *g), model.remove(&k));
            }
            assert_eq!(r.len(), model.len());
            assert_eq!(
                r.first().map(|(k, g)| (*k, **g)),
                model.first_key_value().map(|(k, g)| (*k, *g))
            );
        }
        let all: Vec<_> = r.iter().map(|(k, g)| (*k, **g)).collect();
        let want: Vec<_> = model.iter().map(|(k, g)| (*k, *g)).collect();
        assert_eq!(all, want);
    }
}
