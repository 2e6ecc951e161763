//! The rendezvous of a runtime's threads and cores: how a core moves from one thread to another.
//! The runtime's part (starting threads, their body, the rescue) is in `runner`; starting and
//! stopping them all, in `lifecycle`.
//!
//! # The core hand-off protocol
//! 1. A thread that runs a core polls a task, with the core lent to the poll (`lease`, `lent`).
//! 2. The task calls `block_on`. The thread takes the core back, marks itself *blocked*
//!    (shutdown will not wait for it), and gives the core to `runner::hand_off`.
//! 3. `hand_off` ends the core's service segment, moves its LIFO task to its local queue (idle
//!    workers may steal it from there), and puts the core in the *waiting* list. If a spare thread
//!    is idle or on its way to wait (started for an earlier core, or rescued and staying) and not
//!    already counted for another waiting core, it takes the core (an idle one is woken);
//!    otherwise a new thread is started (up to `Config::max_threads`), counted on its way from
//!    then on.
//! 4. The spare (or new) thread takes the core from the waiting list, or, if the core was taken
//!    back meanwhile (step 6), waits there as an idle spare for the next one, and runs the worker
//!    loop with it. The core keeps its index, local queue, parker and charges: to the rest of the
//!    runtime nothing changed but the thread.
//! 5. The blocked thread waits for its future on its own, running no other task.
//! 6. When the future is done, the thread takes its core back if no thread took it yet
//!    ([`Threads::reclaim`]); the task's poll then continues and returns normally.
//! 7. Otherwise the poll continues without a core; when it returns, the worker loop finds the lent
//!    slot empty and ends, and the thread becomes a spare if no other spare is free (idle or on
//!    its way with no waiting core left to it), or exits: a spare waits for a core to be handed
//!    off, and exits after `spare_keep_alive` without one.
//!
//! # Rescue (the stall monitor, `monitor`)
//! A core lent to a poll that has run longer than `Config::stall_threshold` while work waits is
//! *claimed* by the monitor (`lent`), like a hand-off the stuck thread never asked for:
//! the rescue (`runner`, with [`Threads::claim_for_rescue`]) ends the core's segment, moves its LIFO task to its local queue and gives
//! the core to a spare or a new thread (step 3 on). The stuck thread is not marked blocked: its
//! poll is a task's poll like any other, so shutdown waits for it (at most its timeout) and every
//! poll is over when `Runtime` drop returns. The stuck poll continues without a core; when it
//! returns, its thread finds the lent slot empty (step 7) and becomes a spare if none is idle, or
//! exits. At most `Config::max_rescue_threads` rescued threads may still be stuck at once; beyond
//! that the monitor waits for one to return.
//!
//! At shutdown every core retires (its thread drops what only it can reach), cores still waiting
//! for a thread are retired by the shutting-down thread, spares exit, and every thread that is not
//! blocked in user code is joined.
//!
//! # The rendezvous and the runtime's part
//! `Threads` is generic over the core it passes between threads ([`HandedCore`]): the rendezvous
//! (the waiting list and the count of idle spares, the spare's wait with its keep-alive, the
//! reclaim, and the retirement of cores at shutdown) is one impl that needs only a core's index,
//! its preparation and its retirement, so the loom models (`loom_models/handoff.rs`) run this very
//! code with cores of their own. Placing a core does not start a thread: it says whether a spare
//! was notified or a thread must be started ([`Placed`]), and the runtime's part (`runner`) starts
//! it. That part also holds the threads' body and the rescue, whose checks and claim happen under
//! one hold of the lock ([`Threads::claim_for_rescue`]).
//!
//! # The thread limit
//! The check that a core can be taken (an idle spare, or fewer than `max_threads` threads) and the
//! thread it promises are one step: a hand-off or rescue that passes the check *reserves* a thread
//! (`starting`) in the same hold of the lock, and the reservation counts against the limit until
//! the core goes to a spare (placing it releases the reservation) or the thread it asked for has
//! started or failed to start (whoever starts it releases the reservation:
//! [`Threads::start_thread`]). Two hand-offs at `max_threads − 1` once both passed the check and
//! both started a thread.

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

#[cfg(loom)]
use loom::thread::{ThreadId, current as current_thread};
#[cfg(not(loom))]
use std::thread::{ThreadId, current as current_thread};

use crate::group::GroupInner;
use crate::shim::{AtomicBool, Condvar, Mutex, Ordering, lock};

/// What the rendezvous needs of a core: the runtime's `Core` (`handover`), or a loom model's own.
pub(crate) trait HandedCore {
    /// The core's index, by which the thread that handed it off takes it back.
    fn idx(&self) -> usize;
    /// Step 3, before the core joins the waiting list (no lock held).
    fn prepare(&mut self);
    /// Ends the core for good (shutdown).
    fn retire(self: Box<Self>);
}

/// Who takes a core just put in the waiting list (step 3).
#[must_use = "`StartThread`: no spare was woken, so the caller must start a thread"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    /// A spare takes it: an idle one, which was notified, or one on its way to wait.
    SpareNotified,
    /// No spare is free for it: the caller starts a thread (if that fails the core stays waiting
    /// for the next spare, and its local queue is stealable meanwhile).
    StartThread,
}

/// The threads of a runtime and the cores waiting for one (see the module docs).
pub(crate) struct Threads<C> {
    state: Mutex<State<C>>,
    /// Spares wait here for a core.
    spare: Condvar,
    /// Shutdown waits here for the cores to retire.
    retired: Condvar,
    /// `start` waits here for every worker's first park.
    first_parks: Condvar,
}

struct State<C> {
    /// Cores handed off and not yet taken by a thread (boxed: a core moves between threads as one
    /// pointer).
    #[allow(clippy::vec_box)]
    waiting: Vec<Box<C>>,
    /// Spare threads waiting on `spare`.
    idle_spares: usize,
    /// Threads on their way to `spare`: started for a core (`Placed::StartThread`) and rescued
    /// threads staying as spares (`core_lost`), counted until they wait. A core placed meanwhile
    /// goes to them like to an idle spare: a core taken back before its new thread arrived leaves
    /// that thread to the next hand-off instead of a second thread, and two rescued threads
    /// returning at once keep one.
    spares_coming: usize,
    /// Cores not yet retired.
    live_cores: usize,
    /// Cores that have not reached their first park yet (`start` waits for none to be left).
    before_first_park: usize,
    /// Every thread started and not yet joined.
    records: Vec<Record>,
    /// Threads started and not yet exited.
    running: usize,
    /// Threads promised to cores by a check that passed and not yet started, or released (see the
    /// module docs, *The thread limit*).
    starting: usize,
    /// For each core, the thread running it (a rescue counts it in `rescued`).
    runners: Vec<Option<ThreadId>>,
    /// Threads whose core a rescue claimed and whose poll has not returned yet.
    rescued: Vec<ThreadId>,
    /// The group of each such thread's stuck poll, kept by the rescue until the poll returns and
    /// the thread takes it (`take_stuck_group`): the polled task may drop its own hold on the
    /// group during that poll, and the thread still reports to the group after it.
    stuck_groups: Vec<(ThreadId, Arc<GroupInner>)>,
    /// Rescues since the runtime started.
    rescues: u64,
    /// Threads started without a core of their own (spares, for hand-offs and rescues): they are
    /// named on from the worker count, so every runtime thread has a name of its own.
    spares_started: usize,
    /// The stall monitor's thread, joined at shutdown.
    monitor: Option<thread::JoinHandle<()>>,
}

struct Record {
    handle: thread::JoinHandle<()>,
    blocked: Arc<AtomicBool>,
}

/// The rendezvous itself: how a core waits for a thread, is taken, taken back or retired. The
/// runtime calls these with its `Core`s, the loom models (`loom_models/handoff.rs`) with cores of
/// their own.
impl<C: HandedCore> Threads<C> {
    /// No cores yet ([`open`](Self::open) counts them), no threads.
    #[allow(clippy::new_without_default)]
    pub(crate) fn new() -> Self {
        Threads {
            state: Mutex::new(State {
                waiting: Vec::new(),
                idle_spares: 0,
                spares_coming: 0,
                live_cores: 0,
                before_first_park: 0,
                records: Vec::new(),
                running: 0,
                starting: 0,
                runners: Vec::new(),
                rescued: Vec::new(),
                stuck_groups: Vec::new(),
                rescues: 0,
                spares_started: 0,
                monitor: None,
            }),
            spare: Condvar::new(),
            retired: Condvar::new(),
            first_parks: Condvar::new(),
        }
    }

    /// Counts `n` live cores, with indices `0..n`, before any of them is handed off.
    pub(crate) fn open(&self, n: usize) {
        let mut st = lock(&self.state);
        st.live_cores = n;
        st.before_first_park = n;
        st.runners = (0..n).map(|_| None).collect();
    }

    /// Step 3 of the hand-off protocol, for a core the calling thread owns: gives it back if no
    /// spare is idle and `max_threads` threads run or are promised (the caller must not wait then,
    /// since every thread may be waiting on work only this core would run); otherwise reserves a
    /// thread and [`place`](Self::place)s it. After [`Placed::StartThread`] the caller starts a
    /// thread and releases the reservation (see the module docs, *The thread limit*).
    pub(crate) fn offer(
        &self,
        core: Box<C>,
        max_threads: usize,
        is_shutdown: impl Fn() -> bool,
    ) -> Result<Placed, Box<C>> {
        if !reserve(&mut lock(&self.state), max_threads) {
            return Err(core);
        }
        Ok(self.place(core, is_shutdown))
    }

    /// Steps 3 and 4 for a core this thread owns and no thread runs, with a thread reserved for it
    /// ([`offer`](Self::offer), rescue): prepares it, puts it in the waiting list and leaves it to
    /// a spare that is idle (woken for it) or on its way, if one is not yet counted for another
    /// waiting core (releasing the reservation), or says to start a thread, which counts as on its
    /// way from this same hold of the lock (so a hand-off placed before it arrives goes to it).
    pub(crate) fn place(&self, mut core: Box<C>, is_shutdown: impl Fn() -> bool) -> Placed {
        core.prepare();
        let mut st = lock(&self.state);
        let to_spare = spares_free(&st) > 0;
        st.waiting.push(core);
        if is_shutdown() {
            // Placed just as shutdown began: the shutting-down thread retires it.
            self.retired.notify_all();
        }
        if to_spare {
            st.starting -= 1;
            // A spare on its way finds the core when it comes to wait; an idle one needs waking.
            self.spare.notify_one();
            Placed::SpareNotified
        } else {
            // The thread the caller starts; its first `wait_for_core` passes `coming` (if it
            // cannot start, the caller releases the count: `spawn_thread`).
            st.spares_coming += 1;
            Placed::StartThread
        }
    }

    /// After [`Placed::StartThread`], once the thread reserved for the core was started (and is
    /// counted as running by whoever started it) or could not start (the core waits for the next
    /// spare): releases the reservation. The runtime's own starts release it in
    /// [`start_thread`](Self::start_thread), under the lock that counts the thread running; the loom models, which start no thread,
    /// call this.
    #[cfg(all(test, loom))]
    pub(crate) fn started(&self) {
        lock(&self.state).starting -= 1;
    }

    /// After [`Placed::StartThread`], when the thread could not start (the loom models' stand-in
    /// for a failed `spawn_thread`): releases the reservation and the count of the thread as on
    /// its way, so the next core placed asks for a thread again.
    #[cfg(all(test, loom))]
    pub(crate) fn start_failed(&self) {
        let mut st = lock(&self.state);
        st.starting -= 1;
        st.spares_coming -= 1;
    }

    /// Threads running and threads promised (for the loom models).
    #[cfg(all(test, loom))]
    pub(crate) fn thread_counts(&self) -> (usize, usize) {
        let st = lock(&self.state);
        (st.running, st.starting)
    }

    /// Step 6 of the hand-off protocol: takes core `idx` back if no thread took it yet.
    pub(crate) fn reclaim(&self, idx: usize) -> Option<Box<C>> {
        let mut st = lock(&self.state);
        let pos = st.waiting.iter().position(|c| c.idx() == idx)?;
        Some(st.waiting.swap_remove(pos))
    }

    /// Step 4: a spare thread waits for a core; `None` at shutdown or once `keep_alive` has passed
    /// on `now`'s clock (`Instant::now`; a loom model's own, since loom's timed wait never times
    /// out: the model advances its clock and wakes the spares). A keep-alive too long for an
    /// `Instant` never ends. `coming`: the thread was counted in `spares_coming` (a thread started
    /// for [`Placed::StartThread`], on its first wait; a rescued thread after `core_lost`).
    pub(crate) fn wait_for_core(
        &self,
        is_shutdown: impl Fn() -> bool,
        keep_alive: Duration,
        now: impl Fn() -> Instant,
        coming: bool,
    ) -> Option<Box<C>> {
        let deadline = now().checked_add(keep_alive);
        let mut st = lock(&self.state);
        st.idle_spares += 1;
        if coming {
            st.spares_coming -= 1;
        }
        let got = loop {
            if is_shutdown() {
                break None;
            }
            if let Some(core) = st.waiting.pop() {
                break Some(core);
            }
            let Some(deadline) = deadline else {
                st = match self.spare.wait(st) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                continue;
            };
            let t = now();
            if t >= deadline {
                break None;
            }
            st = match self.spare.wait_timeout(st, deadline - t) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        };
        st.idle_spares -= 1;
        got
    }

    /// Step 7: the calling thread's poll returned and its core is gone (handed off or rescued).
    /// Returns whether the thread stays as a spare: only if no other spare is idle or on its way
    /// with no waiting core left to it (a thread started for a waiting core takes that core), so
    /// neither rescue threads nor hand-off threads outlast their need. A thread is counted as a
    /// spare only from here: the core's next hand-off can come while this poll is still
    /// returning (the task it woke runs on the core's new thread) and start a thread, and without
    /// this check each such race would leave one more idle spare. A staying thread is counted in
    /// `spares_coming` until it waits (`wait_for_core(.., true)`).
    pub(crate) fn core_lost(&self, blocked: &AtomicBool) -> bool {
        let me = current_thread().id();
        let mut st = lock(&self.state);
        blocked.store(false, Ordering::SeqCst);
        if let Some(pos) = st.rescued.iter().position(|&t| t == me) {
            st.rescued.swap_remove(pos);
        }
        let stay = spares_free(&st) == 0;
        if stay {
            st.spares_coming += 1;
        }
        // Normally taken already, right after the poll; dropped outside the lock.
        let kept = take_kept(&mut st.stuck_groups, me);
        drop(st);
        drop(kept);
        stay
    }

    /// For the calling thread, whose poll a rescue took the core from and has now returned: the
    /// group of that poll, which the rescue kept alive for it (see `rescue`).
    pub(crate) fn take_stuck_group(&self) -> Option<Arc<GroupInner>> {
        take_kept(&mut lock(&self.state).stuck_groups, current_thread().id())
    }

    /// Records the calling thread as the one that now runs core `idx` (for a rescue to count it).
    pub(crate) fn running(&self, idx: usize) {
        let mut st = lock(&self.state);
        st.runners[idx] = Some(current_thread().id());
    }

    /// Wakes every spare (shutdown: they exit).
    pub(crate) fn wake_spares(&self) {
        let _st = lock(&self.state);
        self.spare.notify_all();
    }

    /// A core came to its first park (`Core::park_begin`), with the park counted and published,
    /// or retired without one.
    pub(crate) fn reached_first_park(&self) {
        let mut st = lock(&self.state);
        st.before_first_park = st.before_first_park.saturating_sub(1);
        if st.before_first_park == 0 {
            self.first_parks.notify_all();
        }
    }

    /// A core ends for good (shutdown).
    pub(crate) fn retire(&self, core: Box<C>) {
        core.retire();
        self.count_retired();
    }

    /// Counts a core retired without passing through [`retire`](Self::retire) (one never
    /// created, at a failed start).
    pub(crate) fn count_retired(&self) {
        let mut st = lock(&self.state);
        st.live_cores -= 1;
        if st.live_cores == 0 {
            self.retired.notify_all();
        }
    }

    /// Shutdown: retires the cores waiting for a thread (no thread holds them).
    pub(crate) fn retire_waiting(&self) {
        let waiting = std::mem::take(&mut lock(&self.state).waiting);
        for core in waiting {
            self.retire(core);
        }
    }

    /// Shutdown: retires the cores no thread holds, then waits until every core retired or
    /// `deadline` passes. True if all did.
    pub(crate) fn wait_retired(&self, deadline: Option<Instant>) -> bool {
        loop {
            self.retire_waiting();
            let st = lock(&self.state);
            if st.live_cores == 0 {
                return true;
            }
            if !st.waiting.is_empty() {
                continue;
            }
            match deadline {
                None => {
                    let st = match self.retired.wait(st) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                    if st.live_cores == 0 {
                        return true;
                    }
                }
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    let (st, _) = match self.retired.wait_timeout(st, d - now) {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                    if st.live_cores == 0 {
                        return true;
                    }
                }
            }
        }
    }

    /// (threads started and not yet exited, spares waiting for a core, rescues so far).
    pub(crate) fn counts(&self) -> (usize, usize, u64) {
        let st = lock(&self.state);
        (st.running, st.idle_spares, st.rescues)
    }

    /// The rescue's claim of core `idx` (see the module docs, *Rescue*), under one hold of the
    /// lock: nothing unless the runtime still runs (`is_shutdown`), fewer than
    /// `max_rescue_threads` rescued threads are stuck and a thread can take the core; then
    /// `claim()` takes the core from its poll, a thread is reserved for it, and the group
    /// `stuck_group` returns is kept for the stuck thread until its poll returns
    /// ([`take_stuck_group`](Self::take_stuck_group)). The caller [`place`](Self::place)s the
    /// core claimed.
    pub(crate) fn claim_for_rescue(
        &self,
        idx: usize,
        max_rescue_threads: usize,
        max_threads: usize,
        is_shutdown: impl Fn() -> bool,
        claim: impl FnOnce() -> Option<Box<C>>,
        stuck_group: impl FnOnce(&mut C) -> Option<Arc<GroupInner>>,
    ) -> Option<Box<C>> {
        let mut st = lock(&self.state);
        if is_shutdown()
            || st.rescued.len() >= max_rescue_threads
            || !can_take_another(&st, max_threads)
        {
            return None;
        }
        // Claimed under the lock, so the stuck thread, once its poll returns and it finds
        // the core gone, sees itself counted as rescued (`core_lost` takes the lock).
        let mut core = claim()?;
        // The check above passed in this same hold: reserve the thread it promised.
        st.starting += 1;
        // Kept for the stuck thread, which takes it once its poll returns; stored in this same
        // hold, so that thread, which learns of the claim only after it, finds it.
        let group = stuck_group(&mut core);
        if let Some(id) = st.runners[idx].take() {
            st.rescued.push(id);
            if let Some(g) = group {
                st.stuck_groups.push((id, g));
            }
        }
        st.rescues += 1;
        Some(core)
    }

    /// Starts a runtime thread with `spawn`, which gets the thread's index among the runtime's
    /// threads: `first_idx`, the index of the core it starts with, or the next after the workers'
    /// for a spare. `reserved`: the thread was reserved by a hand-off or rescue, and the
    /// reservation is released here, in the hold of the lock that counts the thread running (see
    /// the module docs, *The thread limit*).
    pub(crate) fn start_thread(
        &self,
        first_idx: Option<usize>,
        workers: usize,
        reserved: bool,
        blocked: Arc<AtomicBool>,
        spawn: impl FnOnce(usize) -> io::Result<thread::JoinHandle<()>>,
    ) -> io::Result<()> {
        let mut st = lock(&self.state);
        let index = match first_idx {
            Some(idx) => idx,
            None => {
                st.spares_started += 1;
                workers + st.spares_started - 1
            }
        };
        let spawned = spawn(index);
        st.starting -= usize::from(reserved);
        let handle = match spawned {
            Ok(h) => h,
            Err(e) => {
                // `place` counted the reserved thread on its way: it will not come.
                st.spares_coming -= usize::from(reserved);
                return Err(e);
            }
        };
        st.running += 1;
        st.records.push(Record { handle, blocked });
        Ok(())
    }

    /// A thread [`start_thread`](Self::start_thread) started exits.
    pub(crate) fn exited(&self) {
        lock(&self.state).running -= 1;
    }

    /// Keeps the stall monitor's thread, for [`stop_monitor`](Self::take_monitor) to join.
    pub(crate) fn set_monitor(&self, monitor: thread::JoinHandle<()>) {
        lock(&self.state).monitor = Some(monitor);
    }

    /// Waits until every core of the runtime came to its first park (or retired without one):
    /// see [`reached_first_park`](Self::reached_first_park).
    pub(crate) fn wait_for_first_parks(&self) {
        let mut st = lock(&self.state);
        while st.before_first_park > 0 {
            st = match self.first_parks.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }

    /// The stall monitor's thread, once (shutdown).
    pub(crate) fn take_monitor(&self) -> Option<thread::JoinHandle<()>> {
        lock(&self.state).monitor.take()
    }

    /// Shutdown's last wait: joins every thread except this one and those blocked in user code
    /// (a nested `block_on` whose future may never finish), waiting at most until `deadline`.
    pub(crate) fn join(&self, deadline: Option<Instant>) {
        let records = std::mem::take(&mut lock(&self.state).records);
        let me = thread::current().id();
        for r in records {
            if r.handle.thread().id() == me || r.blocked.load(Ordering::SeqCst) {
                continue;
            }
            match deadline {
                None => {
                    let _ = r.handle.join();
                }
                Some(d) => {
                    while !r.handle.is_finished() && Instant::now() < d {
                        thread::sleep(std::time::Duration::from_millis(1));
                    }
                    if r.handle.is_finished() {
                        let _ = r.handle.join();
                    }
                }
            }
        }
    }
}

/// Spares idle or on their way that no waiting core is left to (each waiting core has one of
/// them, or a thread being started for it, which counts as on its way).
fn spares_free<C>(st: &State<C>) -> usize {
    (st.idle_spares + st.spares_coming).saturating_sub(st.waiting.len())
}

/// Whether a spare, or a thread still to be started, can take one more core: promised threads
/// count against the limit.
fn can_take_another<C>(st: &State<C>, max_threads: usize) -> bool {
    spares_free(st) > 0 || st.running + st.starting < max_threads
}

/// The check of [`Threads::offer`] and the reservation it makes when it passes (see the module
/// docs, *The thread limit*).
fn reserve<C>(st: &mut State<C>, max_threads: usize) -> bool {
    let ok = can_take_another(st, max_threads);
    if ok {
        st.starting += 1;
    }
    ok
}

/// Takes the group kept for thread `me` out of `kept`, if any.
fn take_kept(kept: &mut Vec<(ThreadId, Arc<GroupInner>)>, me: ThreadId) -> Option<Arc<GroupInner>> {
    let pos = kept.iter().position(|(t, _)| *t == me)?;
    Some(kept.swap_remove(pos).1)
}
