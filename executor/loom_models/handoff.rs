//! loom models of the core hand-off's rendezvous, driving the runtime's own `Threads`
//! (`executor/worker/threads.rs`) with cores of their own: a handed-off core put in the waiting
//! list (`offer`), taken by a spare thread (`wait_for_core`) or taken back by the thread that handed
//! it off (`reclaim`), and shutdown waking the spares (`wake_spares`) and retiring the cores no
//! thread holds (`wait_retired`, `retire_waiting`).
//!
//! What they check: a core ends with exactly one thread, never lost and never held twice; a
//! hand-off that reports a spare notified, or asks for a thread that is then started, gets its core
//! run without the help of the thread that handed it off (that thread waits for its core to run,
//! so a broken promise shows as a deadlock, which loom reports); at shutdown every spare returns
//! and every core retires exactly once; two hand-offs with room for one more thread start one; a
//! hand-off placed while the thread started for an earlier one is on its way goes to that thread.
//!
//! What they leave out: starting an OS thread (a model runs a started thread's `wait_for_core` on
//! a loom thread, or treats the start as failed where it says so), a core's own preparation (a
//! count here), the thread count against `max_threads` (no model thread is counted as running, so
//! a model at the limit passes 0 and one below it passes 1), rescue's claim (`rescue.rs`)
//! and `core_lost`. loom's timed wait never times out, so the keep-alive runs on a clock of the
//! model's own: time passes when a thread moves the clock past the spare's deadline and then
//! wakes the spares, as waits that time out wake, so the timeout may fall anywhere after the spare
//! began to wait; the other models use a keep-alive that never ends or one that ends at once.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models::handoff`.
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::time::{Duration, Instant};

use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use crate::worker::threads::{HandedCore, Placed, Threads};

// Bounded: unbounded, the four-thread model has more interleavings than a run can visit.
use super::{FOREVER, model_bounded};

/// What happened to one core.
#[derive(Default)]
struct Marks {
    prepared: AtomicUsize,
    retired: AtomicUsize,
    dropped: AtomicUsize,
    /// Set by a thread that took the core from the waiting list (it runs the core's work).
    ran: Mutex<bool>,
    ran_changed: Condvar,
}

impl Marks {
    fn set_ran(&self) {
        *self.ran.lock().unwrap() = true;
        self.ran_changed.notify_all();
    }

    /// Waits until another thread took the core: what a handing-off thread whose future waits for
    /// its core's own work does.
    fn wait_ran(&self) {
        let mut ran = self.ran.lock().unwrap();
        while !*ran {
            ran = self.ran_changed.wait(ran).unwrap();
        }
    }

    fn count(c: &AtomicUsize) -> usize {
        c.load(Ordering::SeqCst)
    }
}

/// A model's core: its index and its marks.
struct TestCore {
    idx: usize,
    marks: Arc<Marks>,
}

impl TestCore {
    fn new(idx: usize) -> (Box<TestCore>, Arc<Marks>) {
        let marks = Arc::new(Marks::default());
        let core = Box::new(TestCore {
            idx,
            marks: marks.clone(),
        });
        (core, marks)
    }
}

impl HandedCore for TestCore {
    fn idx(&self) -> usize {
        self.idx
    }
    fn prepare(&mut self) {
        self.marks.prepared.fetch_add(1, Ordering::SeqCst);
    }
    fn retire(self: Box<Self>) {
        self.marks.retired.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for TestCore {
    fn drop(&mut self) {
        self.marks.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// A model's runtime: the rendezvous, the shutdown flag and the clock.
struct Rt {
    threads: Threads<TestCore>,
    shutdown: AtomicBool,
    base: Instant,
    /// Seconds the model's clock has moved since `base`.
    elapsed: AtomicU64,
}

impl Rt {
    fn new(cores: usize) -> Arc<Rt> {
        let threads = Threads::new();
        threads.open(cores);
        Arc::new(Rt {
            threads,
            shutdown: AtomicBool::new(false),
            base: Instant::now(),
            elapsed: AtomicU64::new(0),
        })
    }

    fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_secs(self.elapsed.load(Ordering::SeqCst))
    }

    /// Step 3: what `Threads::hand_off` does with a runtime core, at the given thread limit.
    fn hand_off(&self, core: Box<TestCore>, max_threads: usize) -> Result<Placed, Box<TestCore>> {
        self.threads.offer(core, max_threads, || self.is_shutdown())
    }

    /// A spare (or newly started) thread waiting for a core; one that gets a core marks it run.
    /// `started`: the thread was started for a `Placed::StartThread`, which counted it on its way.
    fn spare(&self, keep_alive: Duration, started: bool) -> Option<Box<TestCore>> {
        let got =
            self.threads
                .wait_for_core(|| self.is_shutdown(), keep_alive, || self.now(), started);
        if let Some(core) = &got {
            self.threads.running(core.idx);
            core.marks.set_ran();
        }
        got
    }

    /// Shutdown's first steps, as `Shared::begin_shutdown` takes them.
    fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.threads.wake_spares();
    }

    /// Moves the model's clock on by `by` and wakes the waiting spares, as their timed waits would
    /// time out.
    fn time_passes(&self, by: Duration) {
        self.elapsed.fetch_add(by.as_secs(), Ordering::SeqCst);
        self.threads.wake_spares();
    }

    fn spares_idle(&self) -> usize {
        self.threads.counts().1
    }
}

/// A spare thread (`started`: one started for a `Placed::StartThread`).
fn spawn_spare(
    rt: &Arc<Rt>,
    keep_alive: Duration,
    started: bool,
) -> thread::JoinHandle<Option<Box<TestCore>>> {
    let rt = rt.clone();
    thread::spawn(move || rt.spare(keep_alive, started))
}

/// Which outcome an execution reached, counted across a model's executions, so a test can check
/// that its race was explored both ways.
struct Seen([StdAtomicUsize; 3]);

impl Seen {
    const fn new() -> Self {
        Seen([
            StdAtomicUsize::new(0),
            StdAtomicUsize::new(0),
            StdAtomicUsize::new(0),
        ])
    }
    fn mark(&self, i: usize) {
        self.0[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn get(&self, i: usize) -> usize {
        self.0[i].load(std::sync::atomic::Ordering::Relaxed)
    }
}

const KEPT: usize = 0;
const RECLAIMED: usize = 1;
const TAKEN: usize = 2;

/// A core handed off at the thread limit while the only spare goes to wait: the hand-off is
/// accepted only if the spare is idle, and then the spare's `wait_for_core` races the handing-off
/// thread's `reclaim`. Exactly one thread ends up with the core. When the handing-off thread's
/// future waits for its core's own work (`depends`), the notified spare must take the core on its
/// own: a lost notification is a deadlock, and the reclaim then finds nothing.
#[test]
fn a_spare_and_the_reclaim_race_for_a_handed_off_core_and_exactly_one_gets_it() {
    for depends in [true, false] {
        static SEEN: [Seen; 2] = [Seen::new(), Seen::new()];
        let seen = &SEEN[depends as usize];
        model_bounded(move || {
            let rt = Rt::new(1);
            let (core, marks) = TestCore::new(0);
            let spare = spawn_spare(&rt, FOREVER, false);

            let mine = match rt.hand_off(core, 0) {
                // The spare was not idle yet: the core stays with this thread.
                Err(core) => {
                    seen.mark(KEPT);
                    Some(core)
                }
                Ok(Placed::SpareNotified) => {
                    if depends {
                        marks.wait_ran();
                    }
                    rt.threads.reclaim(0)
                }
                Ok(Placed::StartThread) => {
                    panic!("at the thread limit, with the only spare idle, a thread was asked for")
                }
            };
            rt.begin_shutdown();
            let theirs = spare.join().unwrap();

            assert!(
                mine.is_some() != theirs.is_some(),
                "the core must end with exactly one thread (mine: {}, the spare's: {})",
                mine.is_some(),
                theirs.is_some()
            );
            if theirs.is_some() {
                seen.mark(TAKEN);
            } else if Marks::count(&marks.prepared) == 1 {
                seen.mark(RECLAIMED);
            }
            assert!(
                rt.threads.reclaim(0).is_none(),
                "the core is also still waiting"
            );
            assert_eq!(
                rt.spares_idle(),
                0,
                "a spare that returned is still counted idle"
            );
            drop((mine, theirs));
            assert_eq!(Marks::count(&marks.dropped), 1);
        });
        assert!(seen.get(KEPT) > 0 && seen.get(TAKEN) > 0);
        if !depends {
            assert!(seen.get(RECLAIMED) > 0, "no execution reclaimed the core");
        }
    }
}

/// No spare is idle and the runtime is below its thread limit: the hand-off asks for a thread. The
/// started thread (a new runtime thread's first `wait_for_core`, with a keep-alive that ends at
/// once or never) takes the core, or the handing-off thread reclaims it first: exactly one. When
/// the handing-off thread waits for its core's work, the started thread runs it and the reclaim
/// finds nothing.
#[test]
fn with_no_spare_idle_a_hand_off_starts_a_thread_and_the_core_goes_to_it_or_back() {
    static SEEN: Seen = Seen::new();
    for keep_alive in [Duration::ZERO, FOREVER] {
        for depends in [false, true] {
            model_bounded(move || {
                let rt = Rt::new(1);
                let (core, marks) = TestCore::new(0);

                let placed = match rt.hand_off(core, 1) {
                    Ok(p) => p,
                    Err(_) => panic!("below the thread limit a hand-off was refused"),
                };
                assert_eq!(placed, Placed::StartThread, "no spare was idle to notify");
                let started = spawn_spare(&rt, keep_alive, true);
                if depends {
                    marks.wait_ran();
                }
                let mine = rt.threads.reclaim(0);
                rt.begin_shutdown();
                let theirs = started.join().unwrap();

                assert!(
                    mine.is_some() != theirs.is_some(),
                    "the core must end with exactly one thread (mine: {}, the started one's: {})",
                    mine.is_some(),
                    theirs.is_some()
                );
                if depends {
                    assert!(
                        mine.is_none(),
                        "the core ran elsewhere and was reclaimed too"
                    );
                }
                SEEN.mark(if mine.is_some() { RECLAIMED } else { TAKEN });
                assert_eq!(rt.spares_idle(), 0);
                drop((mine, theirs));
                assert_eq!(Marks::count(&marks.prepared), 1);
                assert_eq!(Marks::count(&marks.dropped), 1);
            });
        }
    }
    assert!(SEEN.get(RECLAIMED) > 0 && SEEN.get(TAKEN) > 0);
}

/// Shutdown (the flag and `wake_spares`, then `wait_retired` and the last `retire_waiting`, as
/// `Runtime` drop takes them) against a spare waiting for a core and a hand-off of the only core at
/// the thread limit. The spare always returns, and the core retires exactly once: by the spare
/// that took it, by the handing-off thread that kept or reclaimed it, or by the shutdown that found
/// it waiting. A handing-off thread whose future never finishes (`reclaims` false: blocked in user
/// code through the shutdown) leaves its core to the shutdown, even one placed after shutdown
/// began. A hand-off that asks for a thread (the spare left between the check and the placing) is
/// treated as a failed start: the core waits for the shutdown.
#[test]
fn shutdown_against_a_waiting_spare_and_a_hand_off_retires_the_core_exactly_once() {
    // Who retired the core: the shutdown, the handing-off thread, the spare.
    static SEEN: Seen = Seen::new();
    const BY_SHUTDOWN: usize = 0;
    const BY_HANDER: usize = 1;
    const BY_SPARE: usize = 2;
    for reclaims in [false, true] {
        model_bounded(move || {
            let rt = Rt::new(1);
            let (core, marks) = TestCore::new(0);

            let spare = {
                let rt = rt.clone();
                thread::spawn(move || {
                    // The worker loop of a thread that took a core ends at shutdown and retires it.
                    let core = rt.spare(FOREVER, false)?;
                    rt.threads.retire(core);
                    Some(())
                })
            };
            let hander = {
                let rt = rt.clone();
                thread::spawn(move || {
                    let placed = rt.hand_off(core, 0);
                    if let Ok(Placed::StartThread) = placed {
                        rt.threads.start_failed();
                    }
                    let core = match placed {
                        Err(core) => core,
                        Ok(_) if reclaims => rt.threads.reclaim(0)?,
                        Ok(_) => return None,
                    };
                    rt.threads.retire(core);
                    Some(())
                })
            };

            rt.begin_shutdown();
            assert!(rt.threads.wait_retired(None));
            rt.threads.retire_waiting();
            let by_spare = spare.join().unwrap().is_some();
            let by_hander = hander.join().unwrap().is_some();
            SEEN.mark(match (by_spare, by_hander) {
                (true, _) => BY_SPARE,
                (_, true) => BY_HANDER,
                _ => BY_SHUTDOWN,
            });

            assert_eq!(
                Marks::count(&marks.retired),
                1,
                "retired more than once or never"
            );
            assert_eq!(Marks::count(&marks.dropped), 1);
            assert_eq!(rt.spares_idle(), 0);
        });
    }
    assert!(
        (0..3).all(|i| SEEN.get(i) > 0),
        "an outcome was never reached"
    );
}

/// Two cores handed off at once, below the thread limit, to one or two spares already waiting: a
/// hand-off notifies a spare only while the idle spares outnumber the cores already waiting, and
/// otherwise asks for a thread, which the handing-off thread starts (a loom thread waiting for a
/// core). With `depends`, each handing-off thread then waits for its core to run elsewhere before
/// it reclaims: a spare notified for a core another spare takes, with no thread started for it,
/// shows as a deadlock. Each core is taken at most once, ends with exactly one thread, and none is
/// left waiting.
#[test]
fn two_hand_offs_and_one_or_two_spares_take_each_core_once() {
    // Executions in which a thread was started, and in which a core was reclaimed.
    static SEEN: Seen = Seen::new();
    const STARTED: usize = 0;
    for spares in [1, 2] {
        for depends in [false, true] {
            model_bounded(move || {
                let rt = Rt::new(2);
                let waiting: Vec<_> = (0..spares)
                    .map(|_| spawn_spare(&rt, FOREVER, false))
                    .collect();
                // The spares wait before the hand-offs (the race of a spare going idle with a
                // hand-off is the first model's), which also bounds the threads started to one.
                while rt.spares_idle() < spares {
                    thread::yield_now();
                }

                let hand = move |rt: &Arc<Rt>, idx: usize| {
                    let (core, marks) = TestCore::new(idx);
                    let (mine, started) = match rt.hand_off(core, 1) {
                        Ok(placed) => {
                            let started = (placed == Placed::StartThread)
                                .then(|| spawn_spare(rt, FOREVER, true));
                            if depends {
                                marks.wait_ran();
                            }
                            (rt.threads.reclaim(idx), started)
                        }
                        Err(_) => panic!("below the thread limit a hand-off was refused"),
                    };
                    (mine, started, marks)
                };
                let other = {
                    let rt = rt.clone();
                    thread::spawn(move || hand(&rt, 1))
                };
                let (mine0, started0, marks0) = hand(&rt, 0);
                let (mine1, started1, marks1) = other.join().unwrap();
                assert!(
                    started0.is_none() || started1.is_none(),
                    "two threads were started for two cores while a spare was idle"
                );
                if depends {
                    assert!(
                        mine0.is_none() && mine1.is_none(),
                        "a core ran and was reclaimed"
                    );
                }
                if started0.is_some() || started1.is_some() {
                    SEEN.mark(STARTED);
                }
                if mine0.is_some() || mine1.is_some() {
                    SEEN.mark(RECLAIMED);
                }

                rt.begin_shutdown();
                let mut held = vec![mine0, mine1];
                for t in waiting.into_iter().chain(started0).chain(started1) {
                    held.push(t.join().unwrap());
                }
                for idx in 0..2 {
                    let owners = held.iter().flatten().filter(|c| c.idx == idx).count();
                    assert_eq!(owners, 1, "core {idx} ends with {owners} threads");
                    assert!(
                        rt.threads.reclaim(idx).is_none(),
                        "core {idx} is also waiting"
                    );
                }
                assert_eq!(rt.spares_idle(), 0);
                drop(held);
                for marks in [&marks0, &marks1] {
                    assert_eq!(Marks::count(&marks.prepared), 1);
                    assert_eq!(Marks::count(&marks.dropped), 1);
                }
            });
        }
    }
    assert!(SEEN.get(STARTED) > 0 && SEEN.get(RECLAIMED) > 0);
}

/// A spare's keep-alive ends (the model's clock passes its deadline and the spares are woken, as
/// their timed waits would be, at any point) while the only core is handed off at the thread limit. A spare
/// leaves only when no core waits, so a hand-off that notified it gets its core run by it (the
/// handing-off thread waits for that: a spare leaving without the core it was woken for is a
/// deadlock). A hand-off that finds the spare gone keeps its core; one placed after the spare left
/// asks for a thread, which it does not start here: it reclaims the core.
#[test]
fn a_spare_whose_keep_alive_ends_still_takes_the_core_it_was_notified_for() {
    static SEEN: Seen = Seen::new();
    model_bounded(|| {
        let keep_alive = Duration::from_secs(1);
        let rt = Rt::new(1);
        let (core, marks) = TestCore::new(0);
        let spare = spawn_spare(&rt, keep_alive, false);
        // The spare's keep-alive starts before time passes (it would go on passing in a real run).
        while rt.spares_idle() == 0 {
            thread::yield_now();
        }
        let clock = {
            let rt = rt.clone();
            thread::spawn(move || rt.time_passes(keep_alive * 2))
        };

        let mine = match rt.hand_off(core, 0) {
            Err(core) => Some(core),
            Ok(Placed::SpareNotified) => {
                marks.wait_ran();
                let mine = rt.threads.reclaim(0);
                assert!(
                    mine.is_none(),
                    "the core ran on the spare and was reclaimed too"
                );
                mine
            }
            Ok(Placed::StartThread) => rt.threads.reclaim(0),
        };
        // The spare returns on its own: with the core, or once its keep-alive ended.
        let theirs = spare.join().unwrap();
        clock.join().unwrap();

        assert!(
            mine.is_some() != theirs.is_some(),
            "the core must end with exactly one thread"
        );
        SEEN.mark(if theirs.is_some() { TAKEN } else { KEPT });
        assert_eq!(rt.spares_idle(), 0);
        drop((mine, theirs));
        assert_eq!(Marks::count(&marks.dropped), 1);
    });
    assert!(SEEN.get(TAKEN) > 0 && SEEN.get(KEPT) > 0);
}

/// Two hand-offs at once with room for one more thread and no spare idle: exactly one of them may
/// start a thread, and the other is refused (its thread keeps its core). Before the check reserved
/// the thread it promised in the same hold of the lock, both could pass it and both start one,
/// one thread beyond `max_threads`. A reservation counts until the thread it asked for started.
#[test]
fn two_hand_offs_at_the_thread_limit_start_one_thread() {
    model_bounded(|| {
        let rt = Rt::new(2);
        // A model starts no thread, and no thread of it counts as running: the reservation of a
        // `StartThread` stands for the thread the runtime would start (which `spawn_thread` then
        // counts as running as it releases the reservation).
        let hand = |rt: &Rt, idx: usize| {
            let (core, marks) = TestCore::new(idx);
            (rt.hand_off(core, 1), marks)
        };
        let other = {
            let rt = rt.clone();
            thread::spawn(move || hand(&rt, 1))
        };
        let mine = hand(&rt, 0);
        let theirs = other.join().unwrap();
        let starts = [&mine.0, &theirs.0]
            .iter()
            .filter(|p| matches!(p, Ok(Placed::StartThread)))
            .count();
        assert_eq!(starts, 1, "{starts} threads started with room for one");
        assert_eq!(rt.threads.thread_counts(), (0, 1), "one thread is promised");
        rt.threads.started();
        assert_eq!(rt.threads.thread_counts(), (0, 0));
        let mut held = Vec::new();
        for (idx, (placed, marks)) in [mine, theirs].into_iter().enumerate() {
            match placed {
                Err(core) => {
                    assert_eq!(
                        Marks::count(&marks.prepared),
                        0,
                        "a refused core was prepared"
                    );
                    held.push(core);
                }
                Ok(_) => held.push(rt.threads.reclaim(idx).expect("the placed core waits")),
            }
        }
        drop(held);
    });
}

/// A core handed off and taken back before the thread started for it comes to wait (what a task
/// calling `block_in_place` once a poll does): a second hand-off, placed while that thread may
/// still be on its way, goes to it and starts no other thread. With `depends`, the handing-off
/// thread then waits for its core to run elsewhere: the started thread must take it, whether it
/// was already waiting or came later. Were a started thread not counted as a spare on its way,
/// each such hand-off would start a thread of its own, and idle spares would pile up.
#[test]
fn a_hand_off_while_a_started_thread_is_on_its_way_goes_to_that_thread() {
    static SEEN: Seen = Seen::new();
    for depends in [false, true] {
        model_bounded(move || {
            let rt = Rt::new(1);
            let (core, marks) = TestCore::new(0);
            let first = rt
                .hand_off(core, 1)
                .unwrap_or_else(|_| panic!("below the thread limit a hand-off was refused"));
            assert_eq!(first, Placed::StartThread, "no spare was idle to notify");
            // Taken back before the thread asked for has started (the poll returned at once).
            let core = rt
                .threads
                .reclaim(0)
                .expect("no thread was there to take it");
            let started = spawn_spare(&rt, FOREVER, true);
            rt.threads.started();

            let second = rt
                .hand_off(core, 1)
                .unwrap_or_else(|_| panic!("with a thread on its way a hand-off was refused"));
            assert_eq!(
                second,
                Placed::SpareNotified,
                "a second thread was asked for while the first was on its way"
            );
            if depends {
                marks.wait_ran();
            }
            let mine = rt.threads.reclaim(0);
            rt.begin_shutdown();
            let theirs = started.join().unwrap();

            assert!(
                mine.is_some() != theirs.is_some(),
                "the core must end with exactly one thread (mine: {}, the started one's: {})",
                mine.is_some(),
                theirs.is_some()
            );
            SEEN.mark(if mine.is_some() { RECLAIMED } else { TAKEN });
            assert_eq!(rt.spares_idle(), 0);
            drop((mine, theirs));
            assert_eq!(Marks::count(&marks.prepared), 2);
            assert_eq!(Marks::count(&marks.dropped), 1);
        });
    }
    assert!(SEEN.get(RECLAIMED) > 0 && SEEN.get(TAKEN) > 0);
}
