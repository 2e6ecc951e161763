//! A hierarchical timing wheel: one shard's timers, keyed by tick.
//!
//! Seven levels of 64 slots. A slot of level `L` spans `64^L` ticks, so level 0 holds the next 64
//! ticks one per slot and level 6 spans `2^42` ticks (about 18 years at the driver's tick). An
//! entry sits in the slot of the highest level at which its tick and the wheel's `elapsed` tick
//! differ; when `elapsed` reaches the start of a slot of level `L > 0`, the slot's entries are
//! re-placed (cascaded) into lower levels. Each level keeps a bitmap of its occupied slots, so the
//! next expiration is found with a rotate and a count of trailing zeros per level.
//!
//! Every operation is O(1) but `process`, which is O(1) per entry it fires or cascades: arming and
//! cancelling cost the same with a thousand or a million live timers.
//!
//! # Cascading level 2 ahead of time
//! A level-2 slot holds every timer of a 537 ms window, hundreds of thousands under a load of long
//! timeouts, and cascading it at once would hold up every timer due meanwhile for milliseconds.
//! So in the second half of each window, passes move the next level-2 slot's entries into the
//! level-1 slots the window has passed: such a slot, behind `elapsed`'s index, stands for the
//! level's next turn, which is the next window (`cascade_ahead`). What is left for the cascade at
//! the boundary is about the entries of the next window's last level-1 slots. Since level 1 then
//! holds entries of a window whose level-2 slot starts earlier, the bound for the next pass is the
//! minimum over every level's earliest slot, not only the earliest slot's.
//!
//! # Entries, keys and slots
//! Entries live in a slab; a key names one timer for the whole life of its owner, never a reused
//! slot. A slot is an array of keys ([`Keys`]), and each entry records its index there, so
//! cancelling is a swap-remove in O(1). Arrays rather than linked lists because of cascading: a
//! slot of level 1 holds every timer of 64 ticks, and re-placing thousands of entries by following
//! a list is a chain of dependent cache misses, where reading keys from an array lets the
//! processor fetch many entries at once. The array grows in chunks that double in size, never by
//! copying, so arming into a slot of a million timers costs what arming into an empty one does.
//! A fired entry leaves its slot but stays in the slab until its owner removes it.
//!
//! # Slack
//! An entry has an earliest tick `at` (its deadline, never fired before) and a latest tick
//! `latest` (`at` plus its slack window). The wheel places it by `latest`, so the driver wakes no
//! sooner than the latest entry allows; entries with a window also sit in `slack`, ordered by
//! `at`, and every `process` fires those whose `at` has passed. So when the driver wakes for one
//! timer, every timer whose window contains that moment fires in the same wakeup.

use std::collections::BTreeSet;
use std::task::Waker;

use slab::Slab;

const LEVELS: usize = 7;
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// The ticks one turn of the top level spans.
const TOP_SPAN: u64 = 1 << (SLOT_BITS * LEVELS as u32);

/// Where an entry is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    /// At index `pos` of slot `slot` of level `level`.
    Slot { level: u8, slot: u8, pos: u32 },
    /// Fired: in no slot, waiting for its owner to remove it.
    Fired,
}

struct Entry {
    at: u64,
    latest: u64,
    waker: Option<Waker>,
    place: Place,
}

/// What [`Wheel::poll`] found.
#[derive(Debug)]
pub(crate) enum Polled {
    /// The entry fired.
    Fired,
    /// Still waiting, and it will wake the waker it was polled with.
    Waiting,
    /// Still waiting, with another waker: the caller clones the new one outside the lock (a
    /// waker's clone is its owner's code) and hands it over with [`Wheel::set_waker`].
    Stale,
}

/// See the module docs.
pub(crate) struct Wheel {
    entries: Slab<Entry>,
    /// The keys in each slot, level by level (`level * SLOTS + slot`). Empty until the first
    /// timer is placed: most shards of a runtime (the foreign ones, and every one of a runtime
    /// that never sleeps) never hold one.
    slots: Box<[Keys]>,
    /// Per level, a bit per non-empty slot.
    occupied: [u64; LEVELS],
    /// Per slot of levels 1 and up, a lower bound of the latest ticks of its entries (`u64::MAX`
    /// when empty): the earliest entry linked there, or one cancelled since. Spares
    /// [`next_deadline`](Self::next_deadline) a scan of a slot that may hold thousands of entries.
    /// Indexed like `slots`, less the level-0 ones.
    floors: Box<[u64]>,
    /// Ticks up to and including this one have been processed.
    elapsed: u64,
    /// Placed entries with a slack window, by earliest tick.
    slack: BTreeSet<(u64, u32)>,
    /// What one `process` fires, with each entry's earliest tick, sorted before the wakers are
    /// handed out (kept to reuse its allocation).
    firing: Vec<(u64, Waker)>,
    /// [`cascade_ahead`](Self::cascade_ahead)'s progress.
    ahead: Ahead,
}

impl Default for Wheel {
    fn default() -> Self {
        Self::new()
    }
}

impl Wheel {
    pub(crate) fn new() -> Self {
        Wheel {
            entries: Slab::new(),
            slots: Box::default(),
            occupied: [0; LEVELS],
            floors: Box::default(),
            elapsed: 0,
            slack: BTreeSet::new(),
            firing: Vec::new(),
            ahead: Ahead {
                window: u64::MAX,
                pos: 0,
                last: 0,
                sweep: 0,
            },
        }
    }

    /// The last tick processed.
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Entries alive (placed, or fired and not yet removed).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds a timer that fires at a tick in `at..=latest` (see the module docs) and wakes `waker`.
    /// Returns its key.
    pub(crate) fn insert(&mut self, at: u64, latest: u64, waker: Waker) -> usize {
        let key = self.entries.insert(Entry {
            at,
            latest: latest.max(at),
            waker: Some(waker),
            place: Place::Fired,
        });
        assert!(
            key < u32::MAX as usize,
            "more than 4 billion live timers in one shard"
        );
        self.link(key as u32);
        key
    }

    /// Moves timer `key` to fire at a tick in `at..=latest`, fired or not. Panics on a key that is
    /// not alive (the caller owns its key).
    pub(crate) fn reset(&mut self, key: usize, at: u64, latest: u64) {
        let k = key as u32;
        self.unlink(k);
        let e = &mut self.entries[key];
        e.at = at;
        e.latest = latest.max(at);
        self.link(k);
    }

    /// Removes timer `key`; returns its waker, for the caller to drop outside any lock.
    ///
    /// The slab keeps its room while any timer lives: a shard that held many timers at once is
    /// likely to again, and reused room spares the page faults of fresh memory. Keys are stable,
    /// so room below a live entry could not be given back anyway. The removal that empties a
    /// large slab gives all of it back: a burst of a million timeouts, cancelled, leaves no
    /// memory behind.
    pub(crate) fn remove(&mut self, key: usize) -> Option<Waker> {
        self.unlink(key as u32);
        let waker = self.entries.remove(key).waker;
        if self.entries.is_empty() && self.entries.capacity() > KEPT_ENTRIES {
            self.release_room();
        }
        waker
    }

    #[cold]
    #[inline(never)]
    fn release_room(&mut self) {
        self.entries = Slab::new();
        if self.firing.capacity() > KEPT_ENTRIES {
            self.firing = Vec::new();
        }
    }

    /// Whether timer `key` fired; if not, makes `waker` the one it wakes.
    pub(crate) fn poll(&self, key: usize, waker: &Waker) -> Polled {
        let e = &self.entries[key];
        if e.place == Place::Fired {
            return Polled::Fired;
        }
        match &e.waker {
            Some(w) if w.will_wake(waker) => Polled::Waiting,
            _ => Polled::Stale,
        }
    }

    /// Gives timer `key` the waker to wake, after [`poll`](Self::poll) found its own stale:
    /// `Ok` with the replaced one, for the caller to drop outside any lock, or `Err` with
    /// `waker` back if the timer fired meanwhile.
    pub(crate) fn set_waker(&mut self, key: usize, waker: Waker) -> Result<Option<Waker>, Waker> {
        let e = &mut self.entries[key];
        if e.place == Place::Fired {
            return Err(waker);
        }
        Ok(e.waker.replace(waker))
    }

    /// Takes the wakers of the timers not fired whose earliest tick is at most `tick`, for the
    /// caller to wake outside any lock; the timers stay armed, and their owners give them a waker
    /// again when they poll (`Polled::Stale`). For `advance` on a paused clock only: it visits
    /// every entry.
    pub(crate) fn take_wakers_until(&mut self, tick: u64, out: &mut Vec<Waker>) {
        out.extend(
            self.entries
                .iter_mut()
                .filter(|(_, e)| e.place != Place::Fired && e.at <= tick)
                .filter_map(|(_, e)| e.waker.take()),
        );
    }

    /// Whether timer `key` fired.
    pub(crate) fn is_fired(&self, key: usize) -> bool {
        self.entries[key].place == Place::Fired
    }

    /// Fires every timer whose latest tick is at most `now`, and every timer with a slack window
    /// whose earliest tick is; pushes their wakers to `out` in the order of their deadlines (a
    /// late pass fires a higher level's slot whole, whose keys are in no particular order).
    /// Returns how many fired.
    pub(crate) fn process(&mut self, now: u64, out: &mut Vec<Waker>) -> usize {
        let mut firing = std::mem::take(&mut self.firing);
        let mut fired = 0;
        while let Some(&(at, k)) = self.slack.first() {
            if at > now {
                break;
            }
            self.unlink(k);
            self.fire(k, &mut firing);
            fired += 1;
        }
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let index = level * SLOTS + slot;
            let mut keys = std::mem::take(&mut self.slots[index]);
            self.occupied[level] &= !(1 << slot);
            if level > 0 {
                self.floors[index - SLOTS] = u64::MAX;
            }
            for run in keys.slices().flat_map(|s| s.chunks(GATHER)) {
                // Read every entry of the run before changing any: the reads do not depend on each
                // other, so the processor overlaps their cache misses (a cascaded slot's entries
                // are scattered through the slab, one miss each).
                let mut latest = [0u64; GATHER];
                for (l, &k) in latest.iter_mut().zip(run) {
                    *l = self.entries[k as usize].latest;
                }
                for (&k, &l) in run.iter().zip(&latest) {
                    let e = &mut self.entries[k as usize];
                    e.place = Place::Fired;
                    if l > e.at {
                        self.slack.remove(&(e.at, k));
                    }
                    if l <= now {
                        self.fire(k, &mut firing);
                        fired += 1;
                    } else {
                        self.link(k);
                    }
                }
            }
            // Give the slot its allocation back unless a cascade refilled it meanwhile.
            keys.clear();
            if self.slots[index].is_empty() {
                self.slots[index] = keys;
            }
        }
        self.elapsed = self.elapsed.max(now);
        self.cascade_ahead();
        // Stable: timers with the same earliest tick keep the order they were found in.
        firing.sort_by_key(|(at, _)| *at);
        out.extend(firing.drain(..).map(|(_, w)| w));
        self.firing = firing;
        fired
    }

    /// A lower bound of the earliest latest tick of a placed entry, or `None` if nothing is
    /// placed: the tick at which [`process`](Self::process) must next run. The minimum over the
    /// levels of each one's earliest slot: a level-0 slot is one tick; a higher one's bound is its
    /// floor (exact unless its earliest entry was cancelled, and then early, never late:
    /// processing at that tick cascades the slot, after which the bound is exact again). Every
    /// level counts, not only the one whose slot starts first: after
    /// [`cascade_ahead`](Self::cascade_ahead), level 1 holds some of the next level-2 window's
    /// entries while the rest wait in a level-2 slot that starts earlier.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        (0..LEVELS)
            .filter_map(|level| {
                let (slot, start) = self.level_next(level)?;
                Some(if level == 0 {
                    start
                } else {
                    self.floors[(level - 1) * SLOTS + slot].max(start)
                })
            })
            .min()
    }

    /// The earliest `at` among placed entries with a slack window.
    pub(crate) fn first_slack(&self) -> Option<u64> {
        self.slack.first().map(|&(at, _)| at)
    }

    /// Takes every waker out (shutdown): the entries stay, so their owners can still remove them.
    pub(crate) fn take_wakers(&mut self, out: &mut Vec<Waker>) {
        out.extend(self.entries.iter_mut().filter_map(|(_, e)| e.waker.take()));
    }

    fn fire(&mut self, k: u32, firing: &mut Vec<(u64, Waker)>) {
        let e = &mut self.entries[k as usize];
        e.place = Place::Fired;
        if let Some(w) = e.waker.take() {
            firing.push((e.at, w));
        }
    }

    /// The earliest occupied slot: (level, slot, start tick). On a tie the lower level's.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        let mut best: Option<(usize, usize, u64)> = None;
        for level in 0..LEVELS {
            if let Some((slot, start)) = self.level_next(level) {
                if best.is_none_or(|(_, _, b)| start < b) {
                    best = Some((level, slot, start));
                }
            }
        }
        best
    }

    /// The earliest occupied slot of `level`: (slot, start tick). A slot whose index is below
    /// `elapsed`'s at that level comes round in the level's next turn.
    fn level_next(&self, level: usize) -> Option<(usize, u64)> {
        let occupied = self.occupied[level];
        if occupied == 0 {
            return None;
        }
        let shift = SLOT_BITS * level as u32;
        let now_slot = ((self.elapsed >> shift) & SLOT_MASK) as u32;
        let slot = (occupied.rotate_right(now_slot).trailing_zeros() + now_slot) % 64;
        let width = 1u64 << shift;
        let span = width << SLOT_BITS;
        let mut start = (self.elapsed & !(span - 1)) + u64::from(slot) * width;
        if slot < now_slot {
            start += span;
        }
        Some((slot as usize, start))
    }

    /// Moves part of the next level-2 slot into level 1 ahead of time, so that the cascade when its
    /// window begins (which every timer due meanwhile waits for) has little left to do: a level-2
    /// slot holds every timer of 4,096 ticks (537 ms), hundreds of thousands under a load of long
    /// timeouts. An entry moves only into a level-1 slot the current window has passed (an index
    /// below `elapsed`'s, which stands for the next window: `level_next`); the others stay, for a
    /// later sweep or the cascade. From the `AHEAD_FROM`th level-1 slot of a window on, each pass
    /// looks at keys in proportion to the ticks since the last pass, at a rate that reads the
    /// array about twice by the window's end; a sweep that reached the end starts again once the
    /// window has passed another level-1 slot. So by the end the slot holds about the entries of
    /// the next window's last level-1 slots.
    #[inline(never)]
    fn cascade_ahead(&mut self) {
        const SHIFT2: u32 = 2 * SLOT_BITS;
        let p1 = (self.elapsed >> SLOT_BITS) & SLOT_MASK;
        let window = self.elapsed >> SHIFT2;
        // The last window of a level-3 turn: the next level-2 slot's timers are in level 3.
        if p1 < AHEAD_FROM || window & SLOT_MASK == SLOT_MASK {
            return;
        }
        let slot = ((window + 1) & SLOT_MASK) as usize;
        if self.occupied[2] & (1 << slot) == 0 {
            return;
        }
        let index = 2 * SLOTS + slot;
        if self.ahead.window != window {
            self.ahead = Ahead {
                window,
                pos: 0,
                last: (window << SHIFT2) + (AHEAD_FROM << SLOT_BITS),
                sweep: p1,
            };
        }
        let Ahead {
            mut pos,
            last,
            mut sweep,
            ..
        } = self.ahead;
        let end = (window + 1) << SHIFT2;
        let since = self.elapsed.saturating_sub(last).max(1);
        let len = self.slots[index].len as u64;
        let mut budget = (2 * len * since).div_ceil(end - self.elapsed) as usize;
        while budget > 0 {
            if pos >= self.slots[index].len {
                if sweep == p1 {
                    break;
                }
                (pos, sweep) = (0, p1);
                continue;
            }
            budget -= 1;
            let k = self.slots[index].get(pos);
            let e = &self.entries[k as usize];
            let to = ((e.latest >> SLOT_BITS) & SLOT_MASK) as usize;
            if to as u64 >= p1 {
                pos += 1;
                continue;
            }
            let latest = e.latest;
            // The key moved into `pos` by the removal is looked at next.
            self.detach(2, slot, pos as u32);
            self.put(k, latest, 1, to);
        }
        self.ahead = Ahead {
            window,
            pos,
            last: self.elapsed,
            sweep,
        };
    }

    /// Places entry `k` (in no slot) by its latest tick.
    fn link(&mut self, k: u32) {
        let elapsed = self.elapsed;
        let e = &mut self.entries[k as usize];
        if e.latest > e.at {
            self.slack.insert((e.at, k));
        }
        // Due now if its latest tick passed; never past the end of the top level's current turn,
        // so that no slot index wraps (an entry beyond it is re-placed when that end is reached).
        let mut when = e.latest.max(elapsed);
        let turn_end = elapsed | (TOP_SPAN - 1);
        if when > turn_end {
            when = if turn_end > elapsed {
                turn_end
            } else {
                elapsed + 1
            };
        }
        let level = level_for(elapsed, when);
        let slot = ((when >> (SLOT_BITS * level as u32)) & SLOT_MASK) as usize;
        let latest = e.latest;
        if self.slots.is_empty() {
            self.slots = all_slots();
            self.floors = vec![u64::MAX; (LEVELS - 1) * SLOTS].into_boxed_slice();
        }
        self.put(k, latest, level, slot);
    }

    /// Puts entry `k`, whose latest tick is `latest`, into `slot` of `level` (the slots exist):
    /// lowers that slot's floor above level 0, records the entry's place and marks the slot
    /// occupied. Inlined: it is the end of [`link`](Self::link), on the arm path.
    #[inline(always)]
    fn put(&mut self, k: u32, latest: u64, level: usize, slot: usize) {
        let index = level * SLOTS + slot;
        if level > 0 {
            let floor = &mut self.floors[index - SLOTS];
            *floor = (*floor).min(latest);
        }
        let pos = self.slots[index].push(k);
        self.entries[k as usize].place = Place::Slot {
            level: level as u8,
            slot: slot as u8,
            pos,
        };
        self.occupied[level] |= 1 << slot;
    }

    /// Takes entry `k` out of its slot, if it is in one.
    fn unlink(&mut self, k: u32) {
        let e = &mut self.entries[k as usize];
        let Place::Slot { level, slot, pos } = e.place else {
            return;
        };
        e.place = Place::Fired;
        if e.latest > e.at {
            let at = e.at;
            self.slack.remove(&(at, k));
        }
        self.detach(level as usize, slot as usize, pos);
    }

    /// Removes the key at `pos` of a slot's array (its entry's `place` is the caller's), keeping
    /// the index of the key moved into the hole, and the slot's bit and floor when it empties.
    fn detach(&mut self, level: usize, slot: usize, pos: u32) {
        let keys = &mut self.slots[level * SLOTS + slot];
        if let Some(moved) = keys.swap_remove(pos) {
            if let Place::Slot { pos: p, .. } = &mut self.entries[moved as usize].place {
                *p = pos;
            }
        } else if keys.is_empty() {
            self.occupied[level] &= !(1 << slot);
            if level > 0 {
                self.floors[(level - 1) * SLOTS + slot] = u64::MAX;
            }
        }
    }
}

/// Every level's slots, empty: a wheel's first placement allocates them.
#[cold]
fn all_slots() -> Box<[Keys]> {
    (0..LEVELS * SLOTS).map(|_| Keys::default()).collect()
}

/// The level-1 index of `elapsed` from which a pass moves part of the next level-2 slot into level
/// 1 ahead of time (`Wheel::cascade_ahead`): the later, the more of the slot's entries have a
/// level-1 slot already passed to go to.
const AHEAD_FROM: u64 = 32;

/// [`Wheel::cascade_ahead`]'s progress through the next level-2 slot.
struct Ahead {
    /// The level-2 window (`elapsed >> 12`) it works for.
    window: u64,
    /// How far into the slot's array the current sweep has looked.
    pos: usize,
    /// The tick of its last pass.
    last: u64,
    /// The level-1 index of `elapsed` when the current sweep began.
    sweep: u64,
}

/// Keys in the first chunk of a slot's array; each later chunk is twice the one before.
const FIRST_CHUNK: usize = 32;
/// Entries a cascade reads ahead before it re-places them (see `process`).
const GATHER: usize = 16;
/// Chunks an emptied slot keeps for its next timers (`FIRST_CHUNK * (2^KEPT_CHUNKS - 1)` keys);
/// the others are freed.
const KEPT_CHUNKS: usize = 5;

/// An emptied slab with room for more entries than this gives its room back (see
/// [`Wheel::remove`]).
const KEPT_ENTRIES: usize = 4096;

/// Chunk and index in it of position `pos`: chunk `c` holds `FIRST_CHUNK << c` keys, from position
/// `FIRST_CHUNK * (2^c - 1)`.
#[inline]
fn chunk_of(pos: usize) -> (usize, usize) {
    let p = pos + FIRST_CHUNK;
    let top = p.ilog2();
    ((top - FIRST_CHUNK.ilog2()) as usize, p - (1 << top))
}

/// A slot's keys: an array grown chunk by chunk (see the module docs). Chunks double in size, so a
/// slot that holds a handful of timers (most of level 0's) costs a small allocation, not a page to
/// fault in on a cascade's critical path, and a slot of a million needs 15 of them.
#[derive(Default)]
struct Keys {
    // Boxed: growing the outer vector moves pointers, never the keys.
    chunks: Vec<Box<[u32]>>,
    len: usize,
}

impl Keys {
    /// Appends `k`; returns its index.
    #[inline]
    fn push(&mut self, k: u32) -> u32 {
        let (c, i) = chunk_of(self.len);
        if c == self.chunks.len() {
            self.grow();
        }
        self.chunks[c][i] = k;
        self.len += 1;
        // A wheel holds fewer than 2^32 entries (`insert` checks).
        (self.len - 1) as u32
    }

    /// Adds the next chunk (out of line: arming and cascading need one rarely).
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let c = self.chunks.len();
        self.chunks
            .push(vec![0; FIRST_CHUNK << c].into_boxed_slice());
    }

    /// Removes the key at `pos` by moving the last key there; returns the moved key, if one moved.
    fn swap_remove(&mut self, pos: u32) -> Option<u32> {
        let pos = pos as usize;
        debug_assert!(pos < self.len);
        self.len -= 1;
        let (c, i) = chunk_of(self.len);
        let last = self.chunks[c][i];
        if pos == self.len {
            return None;
        }
        let (c, i) = chunk_of(pos);
        self.chunks[c][i] = last;
        Some(last)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key at `pos`.
    fn get(&self, pos: usize) -> u32 {
        debug_assert!(pos < self.len);
        let (c, i) = chunk_of(pos);
        self.chunks[c][i]
    }

    /// The keys, chunk by chunk, in order.
    fn slices(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let len = self.len;
        self.chunks.iter().enumerate().map_while(move |(c, keys)| {
            let start = FIRST_CHUNK * ((1 << c) - 1);
            (start < len).then(|| &keys[..(len - start).min(keys.len())])
        })
    }

    /// Empties the array, keeping a few chunks for reuse.
    fn clear(&mut self) {
        self.len = 0;
        self.chunks.truncate(KEPT_CHUNKS);
    }
}

/// The level of an entry due at `when` (at least `elapsed`): the highest 6-bit digit in which the
/// two differ.
fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = (elapsed ^ when) | SLOT_MASK;
    let significant = 63 - masked.leading_zeros();
    ((significant / SLOT_BITS) as usize).min(LEVELS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn waker() -> Waker {
        Waker::from(Arc::new(Flag(Default::default())))
    }

    /// A waker that runs `f` when woken.
    fn waker_fn(f: impl Fn() + Send + Sync + 'static) -> Waker {
        struct F<T>(T);
        impl<T: Fn() + Send + Sync + 'static> Wake for F<T> {
            fn wake(self: Arc<Self>) {
                (self.0)()
            }
        }
        Waker::from(Arc::new(F(f)))
    }

    /// A small deterministic generator, so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random inserts, resets, removals and advances against a plain map: every entry fires in
    /// the first `process` whose `now` reaches its latest tick, or a later slack-eligible one, and
    /// never before its earliest tick.
    #[test]
    fn matches_a_reference_model() {
        for seed in 1..40u64 {
            let mut rng = Rng(seed * 0x9E37_79B9_7F4A_7C15);
            let mut wheel = Wheel::new();
            // key -> (at, latest)
            let mut live: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
            let mut now = 0u64;
            let mut out = Vec::new();
            for _ in 0..3000 {
                match rng.next() % 10 {
                    0..=4 => {
                        let span =
                            [70u64, 5_000, 300_000, 20_000_000, 1 << 45][rng.next() as usize % 5];
                        let at = now + rng.next() % span;
                        let slack = if rng.next() % 3 == 0 {
                            rng.next() % 200
                        } else {
                            0
                        };
                        let key = wheel.insert(at, at + slack, waker());
                        live.insert(key, (at, at + slack));
                    }
                    5 => {
                        if let Some((&k, _)) =
                            live.iter().nth(rng.next() as usize % live.len().max(1))
                        {
                            let at = now + rng.next() % 10_000;
                            wheel.reset(k, at, at);
                            live.insert(k, (at, at));
                        }
                    }
                    6 => {
                        if let Some((&k, _)) =
                            live.iter().nth(rng.next() as usize % live.len().max(1))
                        {
                            wheel.remove(k);
                            live.remove(&k);
                        }
                    }
                    _ => {
                        let step = [1u64, 63, 64, 4096, 300_000, 1 << 30][rng.next() as usize % 6];
                        now += rng.next() % step;
                        let before: Vec<usize> = live
                            .keys()
                            .copied()
                            .filter(|&k| !wheel.is_fired(k))
                            .collect();
                        wheel.process(now, &mut out);
                        // The bound for the next pass: after `now`, and never past a placed
                        // entry's latest tick (the slot floors are early, never late).
                        let earliest = before
                            .iter()
                            .filter(|&&k| !wheel.is_fired(k))
                            .map(|k| live[k].1)
                            .min();
                        match (wheel.next_deadline(), earliest) {
                            (Some(n), Some(e)) => assert!(
                                n > now && n <= e,
                                "seed {seed}: next {n} now {now} earliest {e}"
                            ),
                            (None, None) => {}
                            other => panic!("seed {seed}: {other:?}"),
                        }
                        for k in before {
                            let (at, latest) = live[&k];
                            if wheel.is_fired(k) {
                                assert!(at <= now, "seed {seed}: fired early: at {at} now {now}");
                                wheel.remove(k);
                                live.remove(&k);
                            } else {
                                assert!(
                                    latest > now,
                                    "seed {seed}: missed: latest {latest} now {now}"
                                );
                            }
                        }
                    }
                }
            }
            assert_eq!(wheel.len(), live.len());
        }
    }

    /// Passes in the second half of a level-2 window move the next window's entries into the
    /// level-1 slots already passed: by the window's end its level-2 slot holds only those due in
    /// its last level-1 slots, and every entry still fires at its tick, with the bound for the
    /// next pass never past the earliest one.
    #[test]
    fn the_next_level_2_slot_is_cascaded_ahead_and_fires_on_time() {
        let mut wheel = Wheel::new();
        let mut rng = Rng(0x5EED);
        let window = 1u64 << (2 * SLOT_BITS);
        let mut live: BTreeMap<usize, u64> = (0..5000)
            .map(|_| {
                let t = window + rng.next() % window;
                (wheel.insert(t, t, waker()), t)
            })
            .collect();
        let mut out = Vec::new();
        for now in 1..4 * window {
            wheel.process(now, &mut out);
            // Cancel and move entries while some are moved ahead and others wait in level 2.
            if now > window / 2 && now < 2 * window && now % 97 == 0 && live.len() > 1 {
                let keys: Vec<usize> = live.keys().copied().collect();
                let gone = keys[rng.next() as usize % keys.len()];
                wheel.remove(gone);
                live.remove(&gone);
                let moved = keys[rng.next() as usize % keys.len()];
                if moved != gone {
                    let t = now + 1 + rng.next() % (2 * window);
                    wheel.reset(moved, t, t);
                    live.insert(moved, t);
                }
            }
            if now == window - 1 {
                let left = wheel.slots[2 * SLOTS + 1].len;
                assert!(left < 5000 / 16, "{left} entries left for the cascade");
            }
            live.retain(|&k, &mut t| {
                if wheel.is_fired(k) {
                    assert_eq!(t, now, "fired at {now}, due at {t}");
                    wheel.remove(k);
                    false
                } else {
                    assert!(t > now, "missed: due at {t}, now {now}");
                    true
                }
            });
            match (wheel.next_deadline(), live.values().min()) {
                (Some(n), Some(&e)) => assert!(n > now && n <= e, "next {n} now {now} due {e}"),
                (None, None) => {}
                other => panic!("{other:?} at {now}"),
            }
        }
        assert!(live.is_empty());
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn next_deadline_is_the_earliest_latest_tick() {
        let mut rng = Rng(77);
        let mut wheel = Wheel::new();
        let mut out = Vec::new();
        let mut now = 0;
        for _ in 0..2000 {
            let at = now + rng.next() % 1_000_000;
            wheel.insert(at, at, waker());
            now += rng.next() % 5000;
            wheel.process(now, &mut out);
            let next = wheel.next_deadline();
            let min = wheel
                .entries
                .iter()
                .filter(|(_, e)| e.place != Place::Fired)
                .map(|(_, e)| e.latest)
                .min();
            match (next, min) {
                (Some(n), Some(m)) => assert!(n == m && n > now, "next {n} min {m} now {now}"),
                (None, None) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    /// A level-1 slot's floor outlives a cancelled earliest entry: the bound is then early, and
    /// processing at it cascades the slot, after which the bound is exact again.
    #[test]
    fn cancelling_a_slots_earliest_entry_leaves_an_early_bound_that_processing_repairs() {
        let mut wheel = Wheel::new();
        let mut out = Vec::new();
        // Both in the level-1 slot of ticks 64 to 127.
        let first = wheel.insert(100, 100, waker());
        let second = wheel.insert(120, 120, waker());
        assert_eq!(wheel.next_deadline(), Some(100));
        wheel.remove(first);
        assert_eq!(wheel.next_deadline(), Some(100));
        assert_eq!(wheel.process(100, &mut out), 0);
        assert_eq!(wheel.next_deadline(), Some(120));
        assert_eq!(wheel.process(120, &mut out), 1);
        assert!(wheel.is_fired(second));
        // An emptied slot forgets its floor.
        let third = wheel.insert(300, 300, waker());
        wheel.remove(third);
        assert_eq!(wheel.next_deadline(), None);
        let fourth = wheel.insert(310, 310, waker());
        assert_eq!(wheel.next_deadline(), Some(310));
        wheel.remove(fourth);
    }

    /// A slab keeps its room while a timer lives, and the removal that empties it gives it back.
    #[test]
    fn an_emptied_slab_gives_its_room_back() {
        let mut wheel = Wheel::new();
        let n = KEPT_ENTRIES as u64 * 4;
        let keys: Vec<usize> = (0..n)
            .map(|i| wheel.insert(100 + i % 5000, 100 + i % 5000, waker()))
            .collect();
        let last = *keys.last().unwrap();
        for &k in &keys[..keys.len() - 1] {
            wheel.remove(k);
        }
        assert!(wheel.entries.capacity() >= n as usize);
        wheel.remove(last);
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.entries.capacity(), 0);
        // A small slab keeps its room, emptied or not.
        let keys: Vec<usize> = (0..100)
            .map(|i| wheel.insert(100 + i, 100 + i, waker()))
            .collect();
        for k in keys {
            wheel.remove(k);
        }
        assert!(wheel.entries.capacity() >= 100);
        // The wheel still works.
        let k = wheel.insert(200, 200, waker());
        let mut out = Vec::new();
        assert_eq!(wheel.process(200, &mut out), 1);
        wheel.remove(k);
    }

    /// Positions map onto chunks that double in size, with no gap and no overlap.
    #[test]
    fn slot_positions_fill_doubling_chunks_in_order() {
        let mut keys = Keys::default();
        for k in 0..5000u32 {
            assert_eq!(keys.push(k), k);
        }
        let sizes: Vec<usize> = keys.chunks.iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [32, 64, 128, 256, 512, 1024, 2048, 4096]);
        let all: Vec<u32> = keys.slices().flatten().copied().collect();
        assert_eq!(all, (0..5000).collect::<Vec<_>>());
        assert_eq!(keys.swap_remove(31), Some(4999));
        assert_eq!(keys.swap_remove(4998), None);
        assert_eq!(chunk_of(31), (0, 31));
        assert_eq!(chunk_of(32), (1, 0));
        assert_eq!(chunk_of(95), (1, 63));
        assert_eq!(chunk_of(96), (2, 0));
        keys.clear();
        assert_eq!(keys.chunks.len(), KEPT_CHUNKS);
        assert!(keys.slices().next().is_none());
    }

    /// Cancelling swaps the slot's last key into the hole: the moved entry's index must follow,
    /// or a later cancel removes the wrong key. Entries over several chunks of one slot,
    /// cancelled in a scrambled order; the others still fire, and only they.
    #[test]
    fn cancelling_from_a_crowded_slot_keeps_the_others() {
        let mut wheel = Wheel::new();
        let keys: Vec<usize> = (0..1300).map(|_| wheel.insert(10, 10, waker())).collect();
        let mut rng = Rng(5);
        let mut cancelled = std::collections::BTreeSet::new();
        while cancelled.len() < 1220 {
            let k = keys[rng.next() as usize % keys.len()];
            if cancelled.insert(k) {
                wheel.remove(k);
            }
        }
        let mut out = Vec::new();
        assert_eq!(wheel.process(10, &mut out), 80);
        for &k in keys.iter().filter(|k| !cancelled.contains(k)) {
            assert!(wheel.is_fired(k));
        }
        assert_eq!(wheel.len(), 80);
        // The emptied slot's array serves again.
        let k = wheel.insert(20, 20, waker());
        assert_eq!(wheel.process(20, &mut out), 1);
        assert!(wheel.is_fired(k));
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn a_late_pass_fires_in_deadline_order() {
        let mut wheel = Wheel::new();
        let fired = Arc::new(std::sync::Mutex::new(Vec::new()));
        // Far enough ahead to sit in one level-1 slot, armed in a scrambled order.
        for k in [7u64, 3, 9, 1, 5] {
            let fired = fired.clone();
            wheel.insert(
                100 + k,
                100 + k,
                waker_fn(move || fired.lock().unwrap().push(k)),
            );
        }
        let mut out = Vec::new();
        assert_eq!(wheel.process(200, &mut out), 5);
        out.into_iter().for_each(Waker::wake);
        assert_eq!(*fired.lock().unwrap(), [1, 3, 5, 7, 9]);
    }

    #[test]
    fn overlapping_windows_fire_together() {
        let mut wheel = Wheel::new();
        let mut out = Vec::new();
        // Windows [100, 180], [150, 250], [170, 400]: they all contain 180.
        let a = wheel.insert(100, 180, waker());
        let b = wheel.insert(150, 250, waker());
        let c = wheel.insert(170, 400, waker());
        // The driver wakes at the first latest tick, and everything whose window has begun fires.
        assert_eq!(wheel.next_deadline(), Some(180));
        assert_eq!(wheel.process(180, &mut out), 3);
        assert!(wheel.is_fired(a) && wheel.is_fired(b) && wheel.is_fired(c));
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn far_future_entries_are_re_placed_not_fired() {
        let mut wheel = Wheel::new();
        let mut out = Vec::new();
        let k = wheel.insert(u64::MAX / 2, u64::MAX / 2, waker());
        let mut now = 0u64;
        for _ in 0..8 {
            now += TOP_SPAN - 1;
            wheel.process(now, &mut out);
            assert!(!wheel.is_fired(k));
        }
        assert_eq!(wheel.process(u64::MAX / 2, &mut out), 1);
    }
}
