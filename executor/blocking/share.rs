//! What blocking closures cost their groups, and which closures the pool admits to run.
//!
//! # Charging
//! A pool thread reads its own CPU clock (`fair::segment::thread_cpu_ns`, a system call) once per
//! closure, as the closure returns (or unwinds), and charges the CPU time burned since its last
//! reading to the closure's group: to its virtual runtime, as a worker's service is charged
//! (through the runtime's [`Charger`]), and to its metrics' `busy`. Between two closures a thread
//! only searches for the next job or waits (which burns nothing), so one reading per closure is
//! enough; a thread's first closure is measured from the thread's start. A closure that waits
//! (sleeps, I/O) burns almost no CPU, so it is charged almost nothing.
//!
//! # Admission
//! A job popped by a pool thread runs at once if its group is *admitted*: its virtual runtime is at
//! most [`LEAD`] of its own service (`LEAD / weight`) ahead of the *reference*, the smallest
//! virtual runtime among the groups that compete for the CPU now. Otherwise the job is *held*:
//! set aside, and the thread goes on with the next job. So a group cannot buy CPU time with more
//! closures in flight: however many it queues, once its virtual runtime is ahead of the groups the
//! workers serve, its closures wait until those groups catch up, as its tasks would wait in the
//! rotation.
//!
//! The reference is recomputed by a *scan*, at most every [`SCAN_EVERY`] (and [`SCAN_PER_GROUP`]
//! more per live group, so that a runtime with a group per connection spends a few percent of a
//! core on scans at most), by whichever pool thread finds it due (a thread taking a job, or a
//! thread waiting while jobs are held, which waits at most `SCAN_EVERY`):
//! 1. If no job is held and the pool's closures burned less than a tenth of `SCAN_EVERY` since
//!    the last scan, every group is admitted (the reference is `u64::MAX`): closures that wait
//!    rather than compute are never held, and cost no scan.
//! 2. Otherwise the scan reads the virtual runtime of every live group of the runtime. A group
//!    *competes* if its virtual runtime rose within the last [`QUIET_SCANS`] scans (a worker or a
//!    pool thread charged it) or it has a held job.
//! 3. A group that starts competing counts from the reference of the previous scan if it is behind
//!    it (an idle group banks no credit against the pool, as it banks none in the rotation).
//! 4. The reference is the smallest of the competing groups' virtual runtimes (so the group
//!    furthest behind is always admitted: nothing is held for good), and held jobs whose groups are
//!    now admitted go back to the queue of jobs, in the order they were held.
//!
//! The admission check itself reads two hints (the reference, the group's virtual runtime) and
//! takes no lock; holding and releasing take the pool's lock of held jobs. A closure already
//! running is never stopped: a group's lead is bounded by [`LEAD`] plus what its closures in
//! flight burn before they return and are charged.
//!
//! Threads are never refused for a group: admission decides which closure a thread runs next,
//! not whether there is a thread, so closures that wait (and are charged nothing, so are never
//! ahead) always get threads up to the pool's limit.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::group::GroupInner;
use crate::shim::{AtomicBool, AtomicU64, Mutex, Ordering, TryLockError};

/// Charges a group `ns` of CPU time to its virtual runtime (the runtime layer binds it to its
/// group scheduler's `charge`).
pub(crate) type Charger = fn(&Arc<GroupInner>, u64);

/// How far (in nanoseconds of its own service) a group may be ahead of the reference and still
/// have its closures admitted.
pub(crate) const LEAD: Duration = Duration::from_millis(2);
/// Least time between two scans.
pub(crate) const SCAN_EVERY: Duration = Duration::from_millis(1);
/// Time between two scans added per live group, so that scanning costs at most a few percent of
/// one core however many groups live (a group costs a few tens of nanoseconds to scan).
const SCAN_PER_GROUP: Duration = Duration::from_micros(1);
/// Scans after which a group whose virtual runtime did not rise stops competing.
const QUIET_SCANS: u32 = 4;

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
    /// The reference in virtual nanoseconds; `u64::MAX` admits every group.
    reference: AtomicU64,
    /// The clock stamp (`clock::stamp`) from which the next scan is due.
    next_scan: AtomicU64,
    /// CPU nanoseconds the pool's closures burned since the last scan.
    burned: AtomicU64,
    /// True while jobs are held (a hint for the waiting threads and the scan).
    holding: AtomicBool,
    scans: Mutex<Scans>,
}

impl Share {
    pub(crate) fn new() -> Self {
        Share {
            charger: OnceLock::new(),
            reference: AtomicU64::new(u64::MAX),
            next_scan: AtomicU64::new(0),
            burned: AtomicU64::new(0),
            holding: AtomicBool::new(false),
            scans: Mutex::new(Scans::default()),
        }
    }

    /// Sets how CPU time is charged to virtual runtimes (once; later calls are ignored).
    pub(crate) fn set_charger(&self, charger: Charger) {
        let _ = self.charger.set(charger);
    }

    /// Charges `ns` of a closure's CPU time to `group`: its virtual runtime and its metrics.
    pub(crate) fn charge(&self, group: &Arc<GroupInner>, ns: u64) {
        if ns == 0 {
            return;
        }
        if let Some(charge) = self.charger.get() {
            charge(group, ns);
        }
        group.record_service(0, ns);
        self.burned.fetch_add(ns, Ordering::Relaxed);
    }

    /// True if a job of `group` may run now (no lock; see the module docs).
    #[inline]
    pub(crate) fn admits(&self, group: &GroupInner) -> bool {
        let reference = self.reference.load(Ordering::Relaxed);
        reference == u64::MAX || group.vtime_hint() <= reference.saturating_add(lead_of(group))
    }

    /// True if a scan is due at the stamp `now`.
    #[inline]
    pub(crate) fn scan_due(&self, now: u64) -> bool {
        now >= self.next_scan.load(Ordering::Relaxed)
    }

    /// Marks that jobs are held (or none is any more).
    pub(crate) fn set_holding(&self, on: bool) {
        self.holding.store(on, Ordering::Relaxed);
    }

    /// True while jobs are held.
    pub(crate) fn holding(&self) -> bool {
        self.holding.load(Ordering::Relaxed)
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
        let burned = self.burned.swap(0, Ordering::Relaxed);
        if held.is_empty() && burned < crate::clock::nanos(SCAN_EVERY) / 10 {
            self.reference.store(u64::MAX, Ordering::Relaxed);
            return;
        }
        let previous = self.reference.load(Ordering::Relaxed);
        scans.count += 1;
        let scan = scans.count;
        let groups = crate::group::Host::groups(any.host()).snapshot();
        let mut reference = u64::MAX;
        for g in &groups {
            let vns = g.vtime_hint();
            let seen = scans.seen.entry(g.id()).or_insert(Seen {
                vns,
                quiet: QUIET_SCANS,
                lift: 0,
                scan,
            });
            seen.scan = scan;
            if seen.vns != vns || held.binary_search(&g.id()).is_ok() {
                if seen.quiet >= QUIET_SCANS {
                    seen.lift = if previous == u64::MAX { 0 } else { previous };
                }
                seen.quiet = 0;
            } else {
                seen.quiet = seen.quiet.saturating_add(1);
            }
            seen.vns = vns;
            if seen.quiet < QUIET_SCANS {
                reference = reference.min(vns.max(seen.lift));
            }
        }
        scans.seen.retain(|_, s| s.scan == scan);
        self.reference.store(reference, Ordering::Relaxed);
        let every = SCAN_EVERY.max(SCAN_PER_GROUP.saturating_mul(groups.len() as u32));
        self.next_scan
            .store(now + crate::clock::nanos(every), Ordering::Relaxed);
        drop(scans);
        // The snapshot's references are dropped outside the lock: a group may be freed here.
        drop(groups);
    }
}

/// [`LEAD`] of `group`'s own service, in virtual nanoseconds.
fn lead_of(group: &GroupInner) -> u64 {
    crate::clock::nanos(LEAD) / u64::from(group.weight_hint().max(1))
}
