//! What blocking closures cost their groups, and which closures the pool admits to run.
//!
//! # Charging
//! A pool thread reads its own CPU clock (`fair::segment::thread_cpu_ns`, a system call) as it
//! starts a closure and as the closure returns (or unwinds), and charges the difference to the
//! closure's group: to its virtual runtime, as a worker's service is charged (through the
//! runtime's [`Charger`]), and to its metrics' `busy`, before the closure's task completes (so
//! the next closure its awaiter spawns is admitted with it counted). The pool's own work between
//! closures (searching, admission, waking) is charged to no group. A closure that waits (sleeps,
//! I/O) burns almost no CPU, so it is charged almost nothing.
//!
//! # Admission
//! A job popped by a pool thread runs at once if its group is *admitted*: its virtual runtime, plus
//! what its closures already running will be charged, is at most its *lead* ([`LEAD`] per worker
//! of the runtime, of its own service: divided by its weight) ahead of the *reference*, the smallest virtual runtime among the groups that
//! compete for the CPU now. What a running closure will be charged is estimated as the moving
//! average of what the group's last closures burned ([`INITIAL_ESTIMATE`] before its first
//! returns): so a group whose closures compute has few in flight near its share, and a group whose
//! closures wait (estimated near zero) has as many as it likes. Otherwise the job is *held*:
//! set aside, and the thread goes on with the next job. So a group cannot buy CPU time with more
//! closures in flight: however many it queues, once its virtual runtime is ahead of the groups the
//! workers serve, its closures wait until those groups catch up, as its tasks would wait in the
//! rotation.
//!
//! The reference is recomputed by a *scan*, at most every [`SCAN_EVERY`] (and [`SCAN_PER_GROUP`]
//! more per live group, so that a runtime with a group per connection spends a few percent of a
//! core on scans at most), by whichever pool thread finds it due (a thread taking a job, or the
//! one waiting thread that wakes every `SCAN_EVERY` while jobs are held, see the pool's docs):
//! 1. If no job is held, and the pool's closures burned less than a tenth of `SCAN_EVERY` since
//!    the last scan, and those in flight are estimated to burn less, every group is admitted (the
//!    reference is `u64::MAX`): closures that wait rather than compute are never held, and cost
//!    no scan (groups with no closure in flight leave the table of flights then). While nothing
//!    is policed so, an admission that puts a group's closures in flight above its lead makes the
//!    next one scan (at most every tenth of `SCAN_EVERY`), so a burst of closures is policed from
//!    its start.
//! 2. Otherwise the scan reads the virtual runtime of every live group of the runtime. A group
//!    *competes* if its virtual runtime rose within the last [`QUIET_SCANS`] scans (a worker or a
//!    pool thread charged it), it has a held job, or closures in flight that will burn a tenth of
//!    `SCAN_EVERY` or more.
//! 3. A group that starts competing counts from the reference of the previous scan if it is behind
//!    it (an idle group banks no credit against the pool, as it banks none in the rotation).
//! 4. The reference is the smallest of the competing groups' virtual runtimes; for the group that
//!    has it, the smallest of the others' (so a group behind the others runs as many closures as
//!    fit in its lag, and a group alone is never held: nothing is held for good). Held jobs whose
//!    groups are now admitted go back to the queue of jobs, in the order they were held.
//!
//! The admission check reads two hints (the reference, the group's virtual runtime) and the
//! group's closures in flight, under the lock of the table of flights (taken again as a closure
//! returns and ends); holding and releasing take the pool's lock of held jobs. A closure already
//! running is never stopped: how far a group gets ahead is bounded by its lead plus the error of
//! the estimate of its closures in flight.
//!
//! Threads are never refused for a group: admission decides which closure a thread runs next,
//! not whether there is a thread, so closures that wait (and are charged nothing, so are never
//! ahead) always get threads up to the pool's limit.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::group::GroupInner;
use crate::shim::{AtomicBool, AtomicU64, Mutex, Ordering, TryLockError, lock};

/// Charges a group `ns` of CPU time to its virtual runtime (the runtime layer binds it to its
/// group scheduler's `charge`).
pub(crate) type Charger = fn(&Arc<GroupInner>, u64);

/// How far (in nanoseconds of its own service) a group may be ahead of the reference and still
/// have its closures admitted, per worker of the runtime: the workers serve the other groups with
/// one thread each, so a group level with them needs about as many closures in flight to get its
/// share of the processors (the system shares them by thread), and the lead must admit them.
pub(crate) const LEAD: Duration = Duration::from_millis(2);
/// What a group's closure is assumed to burn until one of them returned.
const INITIAL_ESTIMATE: u64 = 1_000_000;
/// Least time between two scans.
pub(crate) const SCAN_EVERY: Duration = Duration::from_millis(1);
/// Time between two scans added per live group, so that scanning costs at most a few percent of
/// one core however many groups live (a group costs a few tens of nanoseconds to scan).
const SCAN_PER_GROUP: Duration = Duration::from_micros(1);
/// Scans after which a group whose virtual runtime did not rise stops competing: at least 20 ms
/// (scans are at least `SCAN_EVERY` apart), as long as the group scheduler keeps the group a
/// preempted worker serves active, so that a group whose workers the system preempts for a while
/// keeps its place.
const QUIET_SCANS: u32 = 20;

/// What the last scans saw of a group.
struct Seen {
    /// Its virtual runtime (virtual nanoseconds) at the last scan.
    vns: u64,
    /// Scans since it last rose (`QUIET_SCANS` and above: not competing).
    quiet: u32,
    /// Where it counts from since it started competing (see the module docs, step 3).
    lift: u64,
    /// The scan that last saw it alive.
    scan: u64,
}

#[derive(Default)]
struct Scans {
    seen: HashMap<u64, Seen>,
    count: u64,
}

/// The pool's charging and admission state (see the module docs).
pub(crate) struct Share {
    charger: OnceLock<Charger>,
    /// [`LEAD`] times the runtime's workers, in nanoseconds.
    lead: AtomicU64,
    /// The reference in virtual nanoseconds; `u64::MAX` admits every group.
    reference: AtomicU64,
    /// The id of the group whose virtual runtime is the reference, and the next smallest
    /// competing one (that group's own reference).
    lowest: AtomicU64,
    next: AtomicU64,
    /// The clock stamp (`clock::stamp`) from which the next scan is due, and that of the last.
    next_scan: AtomicU64,
    last_scan: AtomicU64,
    /// CPU nanoseconds the pool's closures burned since the last scan.
    burned: AtomicU64,
    /// True while jobs are held (a hint for the waiting threads and the scan).
    holding: AtomicBool,
    /// True while a waiting pool thread rescans for held jobs (the pool's *timer*).
    timer: AtomicBool,
    scans: Mutex<Scans>,
    /// Per group (by id): its closures admitted and not yet ended, and what one burns (see the
    /// module docs).
    flights: Mutex<HashMap<u64, Flight>>,
}

/// A group's closures in flight (see the module docs).
struct Flight {
    running: u32,
    /// CPU nanoseconds one of its closures burns: a moving average of the last few.
    estimate: u64,
}

impl Share {
    pub(crate) fn new() -> Self {
        Share {
            charger: OnceLock::new(),
            lead: AtomicU64::new(crate::clock::nanos(LEAD)),
            reference: AtomicU64::new(u64::MAX),
            lowest: AtomicU64::new(u64::MAX),
            next: AtomicU64::new(u64::MAX),
            next_scan: AtomicU64::new(0),
            last_scan: AtomicU64::new(0),
            burned: AtomicU64::new(0),
            holding: AtomicBool::new(false),
            timer: AtomicBool::new(false),
            flights: Mutex::new(HashMap::new()),
            scans: Mutex::new(Scans::default()),
        }
    }

    /// Sets how CPU time is charged to virtual runtimes (once; later calls are ignored).
    /// Also sets the runtime's worker count (see [`LEAD`]).
    pub(crate) fn set_charger(&self, charger: Charger, workers: usize) {
        let _ = self.charger.set(charger);
        let lead = crate::clock::nanos(LEAD).saturating_mul(workers.max(1) as u64);
        self.lead.store(lead, Ordering::Relaxed);
    }

    /// Charges `ns` of a closure's CPU time to `group`: its virtual runtime and its metrics.
    /// (Under loom no thread CPU clock is read, so nothing calls it there.)
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn charge(&self, group: &Arc<GroupInner>, ns: u64) {
        if ns > 0 {
            if let Some(charge) = self.charger.get() {
                charge(group, ns);
            }
            group.record_service(0, ns);
        }
        self.burned.fetch_add(ns, Ordering::Relaxed);
        if let Some(f) = lock(&self.flights).get_mut(&group.id()) {
            f.estimate = (f.estimate * 3 + ns) / 4;
        }
    }

    /// True if a job of `group` may run now (see the module docs); if so, counts it in flight
    /// until [`finished`](Self::finished).
    pub(crate) fn admit(&self, group: &GroupInner) -> bool {
        let reference = self.reference_of(group);
        let mut flights = lock(&self.flights);
        let f = flights.entry(group.id()).or_insert(Flight {
            running: 0,
            estimate: INITIAL_ESTIMATE,
        });
        if reference != u64::MAX {
            let weight = u64::from(group.weight_hint().max(1));
            let pending = u64::from(f.running).saturating_mul(f.estimate) / weight;
            let at = group.vtime_hint().saturating_add(pending);
            if at > reference.saturating_add(self.lead_of(group)) {
                return false;
            }
        }
        f.running += 1;
        if self.reference.load(Ordering::Relaxed) == u64::MAX
            && u64::from(f.running).saturating_mul(f.estimate) >= self.lead.load(Ordering::Relaxed)
        {
            // Nothing was policed, and this group's closures in flight will burn more than its
            // lead: the next admission scans (at most every tenth of `SCAN_EVERY`).
            let soon =
                self.last_scan.load(Ordering::Relaxed) + crate::clock::nanos(SCAN_EVERY) / 10;
            self.next_scan.fetch_min(soon, Ordering::Relaxed);
        }
        true
    }

    /// True if `group` would be admitted now, its closures in flight not counted (a held job's
    /// release: it is admitted, and counted, again when a thread takes it).
    pub(crate) fn is_behind(&self, group: &GroupInner) -> bool {
        let reference = self.reference_of(group);
        reference == u64::MAX || group.vtime_hint() <= reference.saturating_add(self.lead_of(group))
    }

    /// The reference `group` is compared with: the smallest virtual runtime of the other
    /// competing groups (see the module docs, step 4).
    fn reference_of(&self, group: &GroupInner) -> u64 {
        if self.lowest.load(Ordering::Relaxed) == group.id() {
            self.next.load(Ordering::Relaxed)
        } else {
            self.reference.load(Ordering::Relaxed)
        }
    }

    /// A job `admit` counted has ended (run, or dropped unrun).
    pub(crate) fn finished(&self, group: &GroupInner) {
        let mut flights = lock(&self.flights);
        if let Some(f) = flights.get_mut(&group.id()) {
            f.running = f.running.saturating_sub(1);
        }
    }

    /// True if a scan is due at the stamp `now`.
    #[inline]
    pub(crate) fn scan_due(&self, now: u64) -> bool {
        now >= self.next_scan.load(Ordering::Relaxed)
    }

    /// Marks that jobs are held (or none is any more).
    pub(crate) fn set_holding(&self, on: bool) {
        // SeqCst with the timer's flag and the pool's queue of waiting threads: a thread that
        // goes to wait sees the holding, or the holder's claim finds that thread (see the pool's
        // docs, *Admission*).
        self.holding.store(on, Ordering::SeqCst);
    }

    /// True while jobs are held.
    pub(crate) fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// Makes the caller the waiting thread that rescans for held jobs, if none is; true if it now
    /// is (see the pool's docs, *Admission*).
    pub(crate) fn take_timer(&self) -> bool {
        !self.timer.load(Ordering::SeqCst)
            && self
                .timer
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// The rescanning thread gives its role up.
    pub(crate) fn drop_timer(&self) {
        self.timer.store(false, Ordering::SeqCst);
    }

    /// True while a waiting thread rescans for held jobs.
    pub(crate) fn has_timer(&self) -> bool {
        self.timer.load(Ordering::SeqCst)
    }

    /// Recomputes the reference (see the module docs, *Admission*) if no other thread is at it.
    /// `any` is a live group of the runtime (the list of groups is reached through it); `held`
    /// the ids of the groups with held jobs, sorted.
    pub(crate) fn scan(&self, now: u64, any: &GroupInner, held: &[u64]) {
        let mut scans = match self.scans.try_lock() {
            Ok(s) => s,
            Err(TryLockError::WouldBlock) => return,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        self.next_scan
            .store(now + crate::clock::nanos(SCAN_EVERY), Ordering::Relaxed);
        self.last_scan.store(now, Ordering::Relaxed);
        let burned = self.burned.swap(0, Ordering::Relaxed);
        // Groups whose closures in flight will burn a tenth of `SCAN_EVERY` or more, and what all
        // will burn.
        let threshold = crate::clock::nanos(SCAN_EVERY) / 10;
        let (mut in_flight, mut pending) = (Vec::new(), 0u64);
        for (id, f) in lock(&self.flights).iter() {
            let p = u64::from(f.running).saturating_mul(f.estimate);
            pending = pending.saturating_add(p);
            if p >= threshold {
                in_flight.push(*id);
            }
        }
        in_flight.sort_unstable();
        if held.is_empty() && burned < threshold && pending < threshold {
            self.reference.store(u64::MAX, Ordering::Relaxed);
            self.next.store(u64::MAX, Ordering::Relaxed);
            // Groups with nothing in flight leave the table (a group per connection would
            // otherwise leave an entry each); their estimates start again from the initial one.
            lock(&self.flights).retain(|_, f| f.running > 0);
            return;
        }
        let previous = self.reference.load(Ordering::Relaxed);
        scans.count += 1;
        let scan = scans.count;
        let groups = crate::group::Host::groups(any.host()).snapshot();
        // The two smallest competing virtual runtimes, and whose the smallest is.
        let (mut reference, mut lowest, mut next) = (u64::MAX, u64::MAX, u64::MAX);
        for g in &groups {
            let vns = g.vtime_hint();
            let seen = scans.seen.entry(g.id()).or_insert(Seen {
                vns,
                quiet: QUIET_SCANS,
                lift: 0,
                scan,
            });
            seen.scan = scan;
            if seen.vns != vns
                || held.binary_search(&g.id()).is_ok()
                || in_flight.binary_search(&g.id()).is_ok()
            {
                if seen.quiet >= QUIET_SCANS {
                    seen.lift = if previous == u64::MAX { 0 } else { previous };
                }
                seen.quiet = 0;
            } else {
                seen.quiet = seen.quiet.saturating_add(1);
            }
            seen.vns = vns;
            if seen.quiet < QUIET_SCANS {
                let v = vns.max(seen.lift);
                if v < reference {
                    (next, reference, lowest) = (reference, v, g.id());
                } else if v < next {
                    next = v;
                }
            }
        }
        scans.seen.retain(|_, s| s.scan == scan);
        lock(&self.flights).retain(|id, f| f.running > 0 || scans.seen.contains_key(id));
        self.next.store(next, Ordering::Relaxed);
        self.lowest.store(lowest, Ordering::Relaxed);
        self.reference.store(reference, Ordering::Relaxed);
        let every = SCAN_EVERY.max(SCAN_PER_GROUP.saturating_mul(groups.len() as u32));
        self.next_scan
            .store(now + crate::clock::nanos(every), Ordering::Relaxed);
        drop(scans);
        // The snapshot's references are dropped outside the lock: a group may be freed here.
        drop(groups);
    }
}

impl Share {
    /// The lead of `group`'s own service (see [`LEAD`]), in virtual nanoseconds.
    fn lead_of(&self, group: &GroupInner) -> u64 {
        self.lead.load(Ordering::Relaxed) / u64::from(group.weight_hint().max(1))
    }
}
