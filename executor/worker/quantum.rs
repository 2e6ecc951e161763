//! The end of a quantum: charging the served group, and staying with it or switching.
//!
//! # Service segments and the quantum
//! See `fair::segment`. When the quantum ends and another listed group is behind the served one,
//! or a task waits in the scheduler's lane, the worker spills its LIFO slot and local queue back
//! to their groups' global queues and picks again: no local structure holds a worker on one group
//! for more than a quantum while another group waits. Extras left at a quantum end go back to
//! their groups' queues first, so the check sees those groups: a task of the served group that
//! yields again and again keeps the local queue from ever emptying, and the extras behind it
//! would otherwise wait for as long as it runs. When it stays and other groups are active,
//! it moves the older half of its local queue to the group's global queue, so other workers see
//! the group's surplus and can serve it when it is behind (fairness is global, not per worker).
//!
//! A dormant core (`idle`, step 7) switches at every quantum end: its local work goes back to the
//! global queues, where the active cores find it.
//!
//! A core a rescue took from a stuck poll starts on its new thread with that poll's quantum end
//! (`resume_rescued`, run from step 1 of `search`, which the rescue makes due): the poll held the core for
//! the stall threshold, many quanta, with no timer fired and no switch.

use std::borrow::Cow;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use crate::fair::Verdict;
use crate::group::GroupInner;
use crate::task::Runnable;

use super::core::{Core, served_or_now};
use super::publish::{spill, spill_as};

impl Core {
    #[inline(never)]
    pub(super) fn quantum_end(&mut self, now: u64) {
        self.global_due = true;
        // The real clock for timers (`now` may come from the cheaper segment clock, which a
        // deadline must never run ahead of).
        self.fire_due_timers(Instant::now());
        self.service.restart_quantum(now);
        self.publish_counts();
        let Some(g) = self.service.group().cloned() else {
            return;
        };
        self.end_segment(now);
        self.reported_serving = true;
        // Extras (groups a pick took along, or lane tasks) run after the local queue, which a
        // task that yields again and again never leaves empty: back to their groups' queues, so
        // the check below sees those groups and switches to them when they are behind.
        self.return_extras();
        let shared = self.shared.clone();
        if shared.scheduler().unthrottle_if_due() {
            shared.notify_work();
        }
        let verdict = shared.scheduler().charge_and_check(
            self.service.charges(),
            self.idx,
            &g,
            crate::clock::instant_of(now),
        );
        self.service.settle();
        // A task in the lane belongs to a group that was idle at the floor, which a pick would
        // choose about as soon as a group behind this one: switch for it as for that group. (Run
        // beside this group's local work instead, a group's task would queue behind that work
        // once it yields.)
        let verdict = match verdict {
            // A dormant core hands its local work back and goes on to park (`idle`, step 7).
            _ if shared.idle().is_dormant(self.idx) => Verdict::Switch,
            Verdict::Stay { .. } if shared.scheduler().lane_has_work() => Verdict::Switch,
            v => v,
        };
        let others_active = match verdict {
            Verdict::Switch => true,
            Verdict::Stay { others_listed } => {
                others_listed || shared.others_serve_other_groups(self.idx, &g)
            }
        };
        // The segment starts after the charge and the check, as a pick's does: their time is no
        // group's service (charged to the group that stays, it would tilt the shares against the
        // groups that run many short slices in a row).
        let now = crate::clock::stamp();
        self.begin_segment(Cow::Owned(g), now);
        let mut batch: Vec<Runnable> = Vec::new();
        match verdict {
            Verdict::Switch => {
                // Another group is behind this one: hand all local work back and end the segment,
                // so `next_task` finds nothing local, does not take from this group's queue, and
                // asks the scheduler, which picks the group that is behind.
                batch.extend(self.lifo.take());
                while let Some(r) = self.pop_local() {
                    batch.push(r);
                }
                self.end_segment(now);
                // The segment just begun may have brought the quantum's end forward to `g`'s
                // slice (`fair::segment`): the group picked next gets its own.
                self.service.restart_quantum(now);
            }
            Verdict::Stay { .. } if others_active => {
                // Other workers serve other groups and only see this group's global queue: expose
                // the older half of the local backlog there, so a group with more runnable tasks
                // than one worker can run gets the other workers' time its weight entitles it to.
                // A group with a single runnable task keeps it (half of one is none). The next
                // pick must not take the spilled tasks straight back from the global queue, so it
                // skips the look that follows a quantum end; the local queue halves at every
                // quantum end meanwhile, so what waits in the global queue is reached soon. The
                // group does not wait for them (this worker still serves it) until this worker
                // leaves it (`Scheduler::charge_and_check`).
                self.global_due = false;
                for _ in 0..self.remote().local.len() / 2 {
                    match self.pop_local() {
                        Some(r) => batch.push(r),
                        None => break,
                    }
                }
                if !batch.is_empty() {
                    let served = self.service.group().map_or(ptr::null(), Arc::as_ptr);
                    spill_as(batch, |g| served_or_now(g, served));
                }
                return;
            }
            Verdict::Stay { .. } => {}
        }
        if !batch.is_empty() {
            spill(batch);
        }
    }

    /// The first thing the thread that took over a rescued core does: what the stuck poll's
    /// return would have done, a quantum end for its group `g`. The poll held the core for at
    /// least the stall threshold, ten quanta, with no timer fired and no switch: without this,
    /// the thread ran the core's local queue first, and when those tasks block too (a tenant
    /// whose every task blocks), each thread that took the core over blocked in the next one, so
    /// due timers never fired and no other group was served until the stall ended.
    #[cold]
    #[inline(never)]
    pub(super) fn resume_rescued(&mut self, g: Arc<GroupInner>) {
        let now = crate::clock::stamp();
        self.end_segment(now);
        self.begin_segment(Cow::Owned(g), now);
        self.quantum_end(now);
    }
}
