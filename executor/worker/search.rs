//! Where a worker looks for its next task: its own queues first, then what other workers and
//! threads published, then other cores' local queues (steps 1 to 7 below; step 8 is `park`).
//!
//! # Where a worker looks for its next task (in order)
//! 1. Every `GLOBAL_INTERVAL` ticks and after every quantum end, the global queue of the group it
//!    serves, so tasks woken from outside are not starved by local ping-pong (short polls: the
//!    tick count comes first) or by a local queue of long polls (the quantum end comes first: 61
//!    polls of a millisecond would keep a woken task waiting for 61 ms).
//! 2. The LIFO slot, at most `LIFO_CAP` times in a row (a message-passing pair stays on one warm
//!    core without starving the local queue).
//! 3. The local queue (FIFO: the served group's tasks, and tasks of other groups pushed out of the
//!    LIFO slot, which were due when they were woken), then the extras: tasks of further groups
//!    that were due when the last scheduler visit took them along with the picked group
//!    (`Scheduler::pick_and_take`), or that the last visit to the lane took.
//! 4. While its quantum lasts, a batch of the served group's global queue, without a scheduler
//!    lock (`len / workers + 1`, at most half a local queue).
//! 5. The scheduler's lane: tasks woken from outside whose groups were idle at the floor
//!    (`fair::lane`), without a scheduler lock: the oldest, and this worker's share of the
//!    others (`lane length / workers`, at most `LANE_BATCH`) for its extras.
//! 6. The group scheduler: the listed group with the smallest virtual runtime (one shard of the
//!    rotation's lock); it takes a batch of that group's global queue (a short queue whole).
//! 7. Stealing half of another core's local queue (at most half the workers search at once).
//!
//! A dormant core (`idle`, step 6: beyond the active count the controller set) stops after
//! step 3 and parks.
//! 8. Parking (see `idle`). Due timers are fired first; one parked core, the keeper, sleeps
//!    until the earliest timer (see `time::driver`), the others until woken. With the `io`
//!    feature the keeper sleeps in the I/O reactor (see `reactor`), which runs this loop as a
//!    future with the same steps (`park_begin`, `park_step`, `park_end`).

use std::borrow::Cow;

use crate::fair::Picker;
use crate::shim::{Ordering, fence};
use crate::task::Runnable;

use super::core::Core;
use super::idle::{Search, Stopped};
use super::local::LOCAL_CAPACITY;
use super::publish::push_global;

/// Consecutive polls from the LIFO slot before it must yield to the local queue.
const LIFO_CAP: u32 = 3;
/// Most tasks a worker takes from the lane for its extras, besides the one it runs next.
const LANE_BATCH: usize = 8;
/// Every this many ticks, look at the served group's global queue first.
const GLOBAL_INTERVAL: u32 = 61;

impl Core {
    #[inline(always)]
    pub(super) fn next_task(&mut self) -> Option<Runnable> {
        self.tick = self.tick.wrapping_add(1);
        if std::mem::take(&mut self.global_due) | (self.tick % GLOBAL_INTERVAL == 0) {
            // A rescue sets `global_due` too, so this costs the hot path nothing.
            if let Some(g) = self.rescued_from.take() {
                self.resume_rescued(g);
            }
            let r = self.service.group().and_then(|g| {
                let r = g.pop();
                if r.is_some() {
                    g.end_wait(crate::clock::stamp);
                }
                r
            });
            if r.is_some() {
                return r;
            }
        }
        if let Some(r) = self.lifo.take() {
            if self.lifo_streak < LIFO_CAP {
                self.lifo_streak += 1;
                self.counts.lifo_hits += 1;
                return Some(r);
            }
            self.push_local(r);
        }
        self.lifo_streak = 0;
        if let Some(r) = self.pop_local() {
            return Some(r);
        }
        if let Some(r) = self.extras.pop_front() {
            return Some(r);
        }
        self.find_work()
    }

    fn find_work(&mut self) -> Option<Runnable> {
        // A dormant core runs out its own queues only, then parks (`idle`, step 6).
        if self.shared.idle().is_dormant(self.idx) {
            return None;
        }
        // A capped group whose quota returned is put back before the look at the rotation.
        if self.shared.scheduler().unthrottle_if_due() {
            self.shared.notify_work();
        }
        if let Some(r) = self.take_from_own_group() {
            return Some(r);
        }
        if let Some(r) = self.take_from_lane() {
            return Some(r);
        }
        // Not while a group is counted as listed that no pick can find yet: its pusher is between
        // the count and the inbox (`Scheduler::may_pick`).
        if self.shared.scheduler().has_pickable() {
            if let Some(r) = self.take_from_rotation() {
                return Some(r);
            }
        }
        if !self.searching {
            if self.shared.idle().try_search() == Search::Enough {
                return None;
            }
            self.searching = true;
        }
        self.steal()
    }

    /// While its quantum lasts, a worker takes its next batch straight from the global queue of
    /// the group it serves (lock-free), instead of asking the scheduler. The quantum end still
    /// decides whether it must switch (`quantum_end`), so this changes no share, only how often
    /// workers serving one busy group meet at its rotation shard's lock.
    fn take_from_own_group(&mut self) -> Option<Runnable> {
        // A group that is not listed has nothing queued (a push lists it), so its queue's lock is
        // not worth taking: the last group served is often one whose only task came from the lane.
        let listed = self.service.group().is_some_and(|g| g.is_listed());
        if !listed || !self.service.in_quantum(self.shared.config().quantum) {
            return None;
        }
        let workers = self.shared.cores().len();
        let mut batch = std::mem::take(&mut self.batch);
        let first = self.service.group().and_then(|g| {
            let first = g.pop_batch(
                |len| (len / workers + 1).min(LOCAL_CAPACITY / 2),
                &mut batch,
            );
            // Work taken without a pick: whatever waited since the group was listed was taken.
            if first.is_some() {
                g.end_wait(crate::clock::stamp);
            }
            first
        });
        for r in batch.drain(..) {
            self.push_local(r);
        }
        self.batch = batch;
        first
    }

    /// The lane's oldest task (see `fair::lane`), and this worker's share of the others for its
    /// extras; the time each waited counts for its group.
    #[inline]
    fn take_from_lane(&mut self) -> Option<Runnable> {
        let (first, since) = self.shared.scheduler().pop_lane()?;
        let now = crate::clock::stamp();
        self.took_from_lane(&first, now, since);
        // This worker's share of what else waits there, for its extras, so that the next few
        // lane tasks cost it no visit to the lane (where each pop meets the pushers) and are not
        // passed to another worker.
        let share = self.shared.scheduler().lane_len() / self.shared.cores().len();
        if share > 0 && self.extras.is_empty() {
            self.extras_since = now;
        }
        for _ in 0..share.min(LANE_BATCH) {
            let Some((r, since)) = self.shared.scheduler().pop_lane() else {
                break;
            };
            self.took_from_lane(&r, now, since);
            self.extras.push_back(r);
        }
        Some(first)
    }

    /// Counts a task taken from the lane; the time it waited there counts for its group.
    #[inline]
    fn took_from_lane(&mut self, r: &Runnable, now: u64, since: u64) {
        r.metadata().group.add_wait(now.saturating_sub(since));
        self.counts.lane_takes += 1;
    }

    /// The rotation's pick, a slow path (when the local queue, the extras and the lane are empty).
    /// Never inlined: inlined, it doubles the run loop's code and the loop then spends more
    /// instructions on every task (`benches/instructions.rs`).
    #[inline(never)]
    fn take_from_rotation(&mut self) -> Option<Runnable> {
        let stamp = crate::clock::stamp();
        let now = crate::clock::instant_of(stamp);
        let mut batch = std::mem::take(&mut self.batch);
        let mut extras = std::mem::take(&mut self.extras_batch);
        let shared = self.shared.clone();
        let found = loop {
            self.end_segment(stamp);
            let picked = shared.scheduler().pick_and_take(
                self.service.charges(),
                now,
                Picker {
                    worker: self.idx,
                    max_batch: LOCAL_CAPACITY / 2,
                    // Workers woken to take work and on their way: a group each is left for them.
                    leave: || {
                        let searching = shared.idle().counts().1;
                        searching.saturating_sub(usize::from(self.searching))
                    },
                },
                &mut batch,
                &mut extras,
            );
            self.service.settle();
            match picked {
                None => {
                    self.counts.empty_picks += 1;
                    break None;
                }
                Some((g, Some(first))) => {
                    self.counts.picks += 1;
                    self.reported_serving = true;
                    self.begin_segment(Cow::Owned(g), stamp);
                    break Some(first);
                }
                // Another worker emptied the group first; the scheduler unlisted it.
                Some((_, None)) => {
                    self.counts.empty_picks += 1;
                    continue;
                }
            }
        };
        for r in batch.drain(..) {
            self.push_local(r);
        }
        self.batch = batch;
        if self.extras.is_empty() && !extras.is_empty() {
            self.extras_since = stamp;
        }
        self.extras.extend(extras.drain(..));
        self.extras_batch = extras;
        found
    }

    fn steal(&mut self) -> Option<Runnable> {
        let n = self.shared.cores().len();
        if n == 1 {
            return None;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        let start = x as usize % n;
        for i in 0..n {
            let v = (start + i) % n;
            if v == self.idx {
                continue;
            }
            let push_back = |r: Runnable| {
                let g = r.metadata().group.clone();
                push_global(&g, r);
            };
            // SAFETY: this thread holds the core, so it owns the core's local queue.
            let stolen = unsafe {
                self.shared.cores()[v]
                    .local
                    .steal_half_into(&self.remote().local, push_back)
            };
            if let Some(r) = stolen {
                self.counts.steals += 1;
                return Some(r);
            }
        }
        None
    }

    pub(super) fn found_work(&mut self) {
        if std::mem::replace(&mut self.searching, false)
            && self.shared.idle().stop_searching() == Stopped::Last
        {
            // The last searcher found work: more may be queued, so wake one more (idle step 2).
            fence(Ordering::SeqCst);
            self.shared.notify_work();
        }
    }
}
