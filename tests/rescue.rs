//! Starvation rescue: a worker stuck in one poll while tasks wait behind it has its core taken over
//! by another thread (see `Builder::stall_threshold`).

// A blocking task returns the handle of the task it spawned before it blocked, to await it after.
#![allow(clippy::async_yields_async)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{builder, eventually, hold_a_worker, spin, spinner, watchdog};

const SLEEP: Duration = Duration::from_millis(300);

/// Keeps the largest value `now` ever reached.
fn record_max(max: &AtomicUsize, now: usize) {
    max.fetch_max(now, Ordering::SeqCst);
}

/// Spawns `n` small tasks from outside the runtime (task `i` returns `i`) and returns the sum of
/// their outputs once all are done.
fn sum_of_small_tasks(rt: &rondo::Runtime, n: usize) -> usize {
    let small: Vec<_> = (0..n).map(|i| rt.spawn(async move { i })).collect();
    rt.block_on(async {
        let mut sum = 0;
        for h in small {
            sum += h.await.unwrap();
        }
        sum
    })
}

/// Four busy threads per core, so that every other thread (workers, the monitor) waits for a CPU
/// for milliseconds at a time; stopped and joined when dropped.
#[cfg(target_os = "linux")]
struct Hogs {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

#[cfg(target_os = "linux")]
impl Hogs {
    fn start() -> Hogs {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..4 * cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Hogs { stop, threads }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.threads.drain(..) {
            h.join().unwrap();
        }
    }
}

/// Spawns `n` tasks that each block their worker for `d`.
fn spawn_sleepers(rt: &rondo::Runtime, n: usize, d: Duration) -> Vec<rondo::JoinHandle<()>> {
    (0..n)
        .map(|_| rt.spawn(async move { std::thread::sleep(d) }))
        .collect()
}

#[test]
fn every_worker_blocked_other_tasks_still_finish() {
    watchdog(30, || {
        let rt = builder(2).build().unwrap();
        let workers = rt.handle().worker_count();
        let start = Instant::now();
        // Twice as many sleepers as workers: the threads that rescue the first cores block too.
        let sleepers = spawn_sleepers(&rt, 2 * workers, SLEEP);
        std::thread::sleep(Duration::from_millis(20));
        let sum = sum_of_small_tasks(&rt, 1000);
        let small_done = start.elapsed();
        assert_eq!(sum, 999 * 1000 / 2);
        // Without rescue the small tasks wait for the sleeps (300 ms, 600 ms for the second wave).
        assert!(
            small_done < Duration::from_millis(250),
            "small tasks took {small_done:?} behind {} blocked workers",
            workers
        );
        for h in sleepers {
            rt.block_on(h).unwrap();
        }
        let m = rt.metrics();
        assert!(m.rescues >= 1, "{m}");
    });
}

#[test]
fn a_task_in_the_lifo_slot_behind_a_blocked_poll_still_runs() {
    for workers in [1, 2] {
        watchdog(30, move || {
            let rt = builder(workers).build().unwrap();
            let start = Instant::now();
            let ran_at = rt.block_on(async move {
                let blocker = rondo::spawn(async {
                    // Spawned from the task: it goes to this worker's LIFO slot, which no other
                    // worker can steal.
                    let quick = rondo::spawn(async { Instant::now() });
                    std::thread::sleep(Duration::from_millis(500));
                    quick
                });
                blocker.await.unwrap().await.unwrap()
            });
            let waited = ran_at - start;
            assert!(
                waited < Duration::from_millis(350),
                "the LIFO task ran {waited:?} after the start, behind a 500 ms poll"
            );
            assert!(rt.metrics().rescues >= 1);
        });
    }
}

/// A worker that takes work for several groups in one visit keeps all but the first task where
/// only it reaches them: tasks taken from the lane in one batch, and the extra groups of a pick.
/// A poll that blocks in front of them must get its core rescued, as for a task in its LIFO slot.
/// Nine idle groups get a task each from outside while the only worker is held in a poll, so that
/// it takes all nine in one visit; the first blocks for a second.
#[test]
fn lane_tasks_taken_in_one_batch_behind_a_blocked_poll_still_run() {
    behind_a_blocked_poll_with_nine_groups(true);
}

/// As above, with new tasks, which take their groups' queues and the rotation: one pick takes the
/// first group and eight more as extras.
#[test]
fn extra_groups_of_a_pick_behind_a_blocked_poll_still_run() {
    behind_a_blocked_poll_with_nine_groups(false);
}

/// See the two tests above: with `woken`, the tasks wait first and are woken from outside (the
/// lane); otherwise they are spawned from outside (the rotation).
fn behind_a_blocked_poll_with_nine_groups(woken: bool) {
    watchdog(30, move || {
        let rt = builder(1)
            .stall_threshold(Duration::from_millis(100))
            .build()
            .unwrap();
        let groups: Vec<_> = (0..9).map(|_| rt.group().build().unwrap()).collect();
        let task = |i: usize, rx: Option<futures::channel::oneshot::Receiver<()>>| async move {
            if let Some(rx) = rx {
                rx.await.unwrap();
            }
            if i == 0 {
                std::thread::sleep(Duration::from_secs(1));
            }
            Instant::now()
        };
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        if woken {
            let ready = Arc::new(AtomicUsize::new(0));
            for (i, g) in groups.iter().enumerate() {
                let (tx, rx) = futures::channel::oneshot::channel::<()>();
                senders.push(tx);
                let ready = ready.clone();
                let run = task(i, Some(rx));
                handles.push(g.spawn(async move {
                    ready.fetch_add(1, Ordering::SeqCst);
                    run.await
                }));
            }
            assert!(eventually(10, || ready.load(Ordering::SeqCst) == 9));
        }
        let (release, holder) = hold_a_worker(&rt);
        let start = Instant::now();
        if woken {
            std::thread::spawn(move || {
                for tx in senders {
                    tx.send(()).unwrap();
                }
            })
            .join()
            .unwrap();
        } else {
            for (i, g) in groups.iter().enumerate() {
                handles.push(g.spawn(task(i, None)));
            }
        }
        release.store(true, Ordering::SeqCst);
        let ran_at: Vec<Instant> = handles
            .into_iter()
            .map(|h| rt.block_on(h).unwrap())
            .collect();
        rt.block_on(holder).unwrap();
        let last = ran_at[1..].iter().max().unwrap().duration_since(start);
        assert!(
            last < Duration::from_millis(700),
            "the last of eight tasks ran {last:?} after they were queued, behind a poll blocked \
             for 1 s"
        );
        assert!(rt.metrics().rescues >= 1);
    });
}

#[test]
fn a_stuck_poll_with_nothing_waiting_is_left_alone() {
    watchdog(30, || {
        let rt = builder(2).build().unwrap();
        rt.block_on(rt.spawn(async {
            std::thread::sleep(Duration::from_millis(100));
        }))
        .unwrap();
        let m = rt.metrics();
        assert_eq!(m.rescues, 0, "{m}");
        assert_eq!(m.threads, m.workers.len(), "{m}");
    });
}

/// A thread that waits for a CPU is not stuck: when more threads are busy than there are cores,
/// the operating system preempts a worker in the middle of a poll for milliseconds, and a rescue
/// thread would only wait for the same CPUs. Here a poll spins among four busy threads per core,
/// for 100 ms with nothing waiting (the operating system lets the worker run at first, as it had
/// slept: this dilutes that start), then 60 ms with a task waiting in the LIFO slot behind it: the
/// worker runs about a fifth of that time, and the monitor leaves it alone (it rescued it before
/// it asked the operating system).
#[cfg(target_os = "linux")]
#[test]
fn a_poll_preempted_by_the_operating_system_is_not_rescued() {
    watchdog(60, || {
        let hogs = Hogs::start();
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        rt.block_on(rt.spawn(async {
            spin(Duration::from_millis(100));
            let waiting = rondo::spawn(async {});
            spin(Duration::from_millis(60));
            waiting.await.unwrap();
        }))
        .unwrap();
        drop(hogs);
        let m = rt.metrics();
        assert_eq!(m.rescues, 0, "{m}");
    });
}

/// The monitor's own thread waits for CPUs too. Here short polls (20 µs spins, with tasks waiting
/// behind them) run among four busy threads per core, so the monitor's first look at a poll that
/// its worker's preemption stretched often comes after the poll's threshold. With no window to
/// measure, it rescues only a thread the operating system shows blocked, and looks again at the
/// others (rescuing without asking would rescue dozens of polls here, none of which blocks or
/// even runs long).
#[cfg(target_os = "linux")]
#[test]
fn short_polls_stretched_by_preemption_are_not_rescued_when_the_monitor_looks_late() {
    watchdog(60, || {
        let hogs = Hogs::start();
        let rt = rondo::Runtime::builder()
            .worker_threads(2)
            .stall_threshold(Duration::from_millis(1))
            .build()
            .unwrap();
        for _ in 0..3 {
            let tasks: Vec<_> = (0..2_000)
                .map(|_| rt.spawn(async { spin(Duration::from_micros(20)) }))
                .collect();
            rt.block_on(async {
                for t in tasks {
                    t.await.unwrap();
                }
            });
        }
        drop(hogs);
        let m = rt.metrics();
        // Without the look at the poll's thread there were 3 to 18 rescues here. One is
        // tolerated: CI saw one in many runs. Its cause is not confirmed; the likely one is a poll
        // that really blocked for a moment in the kernel (a page fault waiting for the memory-map
        // lock of a thread the busy ones preempted), and a blocked thread is rescued by design.
        assert!(m.rescues <= 1, "{m}");
    });
}

/// A group stays listed after a worker took its last task, until the worker's next pick: a long
/// poll of that task, with nothing else queued, is no stall behind which work waits.
///
/// Each next task is spawned only once the worker has parked. Otherwise it could arrive while the
/// worker, preempted by the operating system right after the previous task completed, still shows
/// that long poll's lease: a poll past the threshold with work waiting, which the monitor rightly
/// rescues (CI saw it once, on a loaded machine).
#[test]
fn a_long_poll_of_the_only_task_is_not_rescued() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        for _ in 0..10 {
            let parks = rt.metrics().workers[0].parks;
            rt.block_on(rt.spawn(async { spin(Duration::from_millis(20)) }))
                .unwrap();
            assert!(eventually(10, || rt.metrics().workers[0].parks > parks));
        }
        let m = rt.metrics();
        assert_eq!(m.rescues, 0, "{m}");
    });
}

#[test]
fn rescued_threads_are_bounded_by_max_rescue_threads() {
    watchdog(60, || {
        let rt = builder(2).max_rescue_threads(1).build().unwrap();
        let workers = rt.handle().worker_count();
        let sleepers = spawn_sleepers(&rt, 3 * workers, Duration::from_millis(100));
        let small: Vec<_> = (0..100).map(|_| rt.spawn(async {})).collect();
        let max_threads = AtomicUsize::new(0);
        let mut done = false;
        while !done {
            record_max(&max_threads, rt.metrics().threads);
            done = sleepers.iter().all(|h| h.is_finished());
            std::thread::sleep(Duration::from_millis(2));
        }
        for h in sleepers.into_iter().chain(small) {
            rt.block_on(h).unwrap();
        }
        let m = rt.metrics();
        assert!(m.rescues >= 1, "{m}");
        // The workers, one thread stuck after a rescue, and one spare kept from an earlier one.
        let max = max_threads.load(Ordering::SeqCst);
        assert!(
            max <= workers + 2,
            "{max} threads with {workers} workers: {m}"
        );
    });
}

#[test]
fn rescued_threads_retire_once_the_stall_is_over() {
    watchdog(60, || {
        let rt = builder(2).build().unwrap();
        let workers = rt.handle().worker_count();
        let sleepers = spawn_sleepers(&rt, 2 * workers, Duration::from_millis(200));
        let small: Vec<_> = (0..100).map(|_| rt.spawn(async {})).collect();
        let max_threads = AtomicUsize::new(0);
        while !sleepers.iter().all(|h| h.is_finished()) {
            record_max(&max_threads, rt.metrics().threads);
            std::thread::sleep(Duration::from_millis(2));
        }
        for h in sleepers.into_iter().chain(small) {
            rt.block_on(h).unwrap();
        }
        assert!(
            max_threads.load(Ordering::SeqCst) > workers,
            "no thread was added: {}",
            rt.metrics()
        );
        // Rescued threads exit when their poll returns, except one kept as a spare.
        assert!(
            eventually(5, || rt.metrics().threads <= workers + 1),
            "{}",
            rt.metrics()
        );
        let m = rt.metrics();
        assert!(m.spare_threads <= 1, "{m}");
        assert!(m.rescues >= 1, "{m}");
        // The runtime still works with the rescued cores on their new threads.
        let n: usize = rt.block_on(async {
            let hs: Vec<_> = (0..100).map(|i| rondo::spawn(async move { i })).collect();
            let mut n = 0;
            for h in hs {
                n += h.await.unwrap();
            }
            n
        });
        assert_eq!(n, 4950);
    });
}

#[test]
fn dropping_the_runtime_waits_for_a_stuck_poll_and_the_rescue_ran_the_rest() {
    watchdog(30, || {
        let rt = builder(2).thread_name("stuckdrop").build().unwrap();
        let (tx, rx) = mpsc::channel();
        let finished = Arc::new(AtomicUsize::new(0));
        let f = finished.clone();
        let quick = Arc::new(AtomicUsize::new(0));
        let q = quick.clone();
        let stuck = rt.spawn(async move {
            // Queued behind the stuck poll in this worker's LIFO slot: the rescue runs it.
            drop(rondo::spawn(async move {
                q.fetch_add(1, Ordering::SeqCst);
            }));
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(600));
            f.fetch_add(1, Ordering::SeqCst);
        });
        rx.recv().unwrap();
        assert!(eventually(5, || quick.load(Ordering::SeqCst) == 1));
        assert_eq!(finished.load(Ordering::SeqCst), 0);
        drop(rt);
        // Every task's poll is over when the drop returns, the stuck one included.
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        assert!(stuck.is_finished());
    });
}

#[test]
fn shutdown_timeout_with_a_stuck_poll_returns() {
    watchdog(30, || {
        let rt = builder(1).build().unwrap();
        let (tx, rx) = mpsc::channel();
        drop(rt.spawn(async move {
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(1_500));
        }));
        rx.recv().unwrap();
        let start = Instant::now();
        rt.shutdown_timeout(Duration::from_millis(300));
        // Left to its thread after the timeout, as without rescue.
        assert!(start.elapsed() < Duration::from_millis(1_000));
    });
}

/// Light load: one request at a time, a few milliseconds apart, each served by one worker that
/// wakes from idleness and parks again within far less than half the stall threshold. On Linux
/// the monitor sleeps on a kernel timer that the first waking worker arms and the last parking
/// one disarms, so it never wakes for such a request (elsewhere it ticks through a grace period
/// instead). A stall right after is still rescued.
#[cfg(target_os = "linux")]
#[test]
fn the_monitor_sleeps_through_light_load() {
    watchdog(30, || {
        let rt = builder(2).build().unwrap();
        // Let the workers park and the monitor go to sleep.
        std::thread::sleep(Duration::from_millis(100));
        const REQUESTS: u64 = 40;
        let before = rt.metrics().monitor_wakeups;
        for _ in 0..REQUESTS {
            std::thread::sleep(Duration::from_millis(15));
            rt.block_on(rt.spawn(async { std::hint::black_box(1) }))
                .unwrap();
        }
        let woke = rt.metrics().monitor_wakeups - before;
        // Ticking through each 15 ms gap wakes it every half threshold (2.5 ms) at most: six
        // times per request or more. Sleeping through the gaps, it wakes only for a request that
        // outlasts half a threshold, which happens when the machine is busy enough to keep the
        // woken worker off a CPU that long (other tests of this file spin on every CPU): about
        // twice per request at worst.
        assert!(
            woke <= 3 * REQUESTS,
            "the monitor woke {woke} times for {REQUESTS} light requests"
        );
        // A blocked poll right after a light request is still rescued.
        assert_a_stall_is_rescued(&rt);
    });
}

/// A task blocks its worker for 400 ms right after spawning another: the other runs well before
/// the block ends, on a rescued core.
fn assert_a_stall_is_rescued(rt: &rondo::Runtime) {
    let start = Instant::now();
    let ran_at = rt.block_on(async {
        let blocker = rondo::spawn(async {
            let quick = rondo::spawn(async { Instant::now() });
            std::thread::sleep(Duration::from_millis(400));
            quick
        });
        blocker.await.unwrap().await.unwrap()
    });
    assert!(ran_at - start < Duration::from_millis(300));
}

#[test]
fn an_idle_runtimes_monitor_does_not_wake() {
    watchdog(30, || {
        let rt = builder(2).build().unwrap();
        rt.block_on(async {
            let hs: Vec<_> = (0..1000).map(|i| rondo::spawn(async move { i })).collect();
            for h in hs {
                h.await.unwrap();
            }
        });
        // Let the workers park and the monitor notice.
        std::thread::sleep(Duration::from_millis(100));
        let before = rt.metrics().monitor_wakeups;
        std::thread::sleep(Duration::from_millis(500));
        let woke = rt.metrics().monitor_wakeups - before;
        // A monitor ticking every threshold would wake 100 times or more here.
        assert!(
            woke <= 3,
            "the monitor woke {woke} times in 500 ms of idleness"
        );
        // And it wakes again with the workers: a stall right after idleness is rescued.
        assert_a_stall_is_rescued(&rt);
    });
}

#[test]
fn zero_stall_options_are_rejected() {
    let err = rondo::Runtime::builder()
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("stall_threshold"), "{err}");
    let err = rondo::Runtime::builder()
        .max_rescue_threads(0)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("max_rescue_threads"), "{err}");
}

#[test]
fn rescues_show_in_the_metrics_table_and_prometheus_text() {
    watchdog(30, || {
        let rt = builder(1).build().unwrap();
        rt.block_on(async {
            let blocker = rondo::spawn(async {
                let quick = rondo::spawn(async {});
                std::thread::sleep(Duration::from_millis(100));
                quick
            });
            blocker.await.unwrap().await.unwrap();
        });
        let m = rt.metrics();
        assert!(m.rescues >= 1);
        assert!(m.to_string().contains(&format!("rescues {}", m.rescues)));
        let text = m.to_prometheus();
        assert!(text.contains("# TYPE rondo_rescues_total counter"));
        assert!(text.contains(&format!("rondo_rescues_total {}", m.rescues)));
        assert!(text.contains("rondo_monitor_wakeups_total"));
    });
}

#[test]
fn a_group_keeps_its_accounting_through_a_rescue() {
    watchdog(30, || {
        let rt = builder(1).build().unwrap();
        let g = rt.group().build().unwrap();
        let g2 = g.clone();
        rt.block_on(async move {
            let blocker = g2.spawn(async {
                let quick = rondo::spawn(async {});
                std::thread::sleep(Duration::from_millis(100));
                quick
            });
            blocker.await.unwrap().await.unwrap();
        });
        assert!(rt.metrics().rescues >= 1);
        // Both tasks' polls are counted once each, the stuck one included (the rescue thread's
        // segment is flushed when its core parks).
        assert!(
            eventually(5, || g.metrics().polls == 2),
            "{:?}",
            g.metrics()
        );
        // And once each for the workers: the stuck poll by the core it began on.
        let worker_polls = || rt.metrics().workers.iter().map(|w| w.polls).sum::<u64>();
        assert!(eventually(5, || worker_polls() == 2), "{}", worker_polls());
        let m = g.metrics();
        // The stuck poll is charged until the rescue (at least the threshold), not for its 100 ms.
        assert!(m.busy >= Duration::from_millis(4), "{m:?}");
        assert!(m.busy < Duration::from_millis(60), "{m:?}");
    });
}

/// Blocking tasks queued together cost one detection, not one per task: the threads that take the
/// rescued cores run the queued sleepers next and block too, and a poll that begins on a core just
/// rescued is stalled after a fraction of the threshold (probation), so the small tasks behind them
/// wait about one threshold. Before probation they waited two: 200 ms and more here.
#[test]
fn a_batch_of_blocking_tasks_costs_one_detection() {
    const THRESHOLD: Duration = Duration::from_millis(100);
    watchdog(60, || {
        let rt = builder(2).stall_threshold(THRESHOLD).build().unwrap();
        let workers = rt.handle().worker_count();
        let sleepers =
            common::spawn_blocking_sleepers(&rt, 2 * workers, Duration::from_millis(600), workers);
        let start = Instant::now();
        let sum = sum_of_small_tasks(&rt, 100);
        let took = start.elapsed();
        assert_eq!(sum, 4950);
        assert!(
            took < THRESHOLD * 2 - Duration::from_millis(10),
            "the small tasks waited {took:?} behind {} blocked workers (threshold {THRESHOLD:?}): \
             a second detection",
            workers
        );
        for h in sleepers {
            rt.block_on(h).unwrap();
        }
        let m = rt.metrics();
        assert!(m.rescues >= workers as u64, "{m}");
    });
}

/// A poll that begins on a rescued core late in its probation is stalled after the short
/// threshold too: the monitor looks every short threshold until the probation ends. Here the
/// thread that takes the rescued core runs short polls for most of a threshold, while the monitor's
/// regular tick grows to half a threshold, then a poll that blocks with a task behind it, right
/// after one of the monitor's ticks. The task waits about two short thresholds. It waited more
/// than a whole threshold when the monitor first saw the blocked poll at its next regular tick:
/// the probation was over by then.
#[test]
fn a_poll_that_blocks_late_in_a_probation_is_stalled_after_the_short_threshold() {
    const THRESHOLD: Duration = Duration::from_millis(150);
    watchdog(60, || {
        let rt = builder(1).stall_threshold(THRESHOLD).build().unwrap();
        let handle = rt.handle().clone();
        let waited = rt
            .block_on(rt.spawn(async move {
                // In the LIFO slot behind the stuck poll: the rescue thread runs it first.
                let late = rondo::spawn(async move {
                    let start = Instant::now();
                    let ticks = || handle.metrics().monitor_wakeups;
                    let mut seen = ticks();
                    loop {
                        spin(Duration::from_millis(1));
                        rondo::yield_now().await;
                        let now = ticks();
                        if now != seen && start.elapsed() >= THRESHOLD * 7 / 10 {
                            break;
                        }
                        seen = now;
                    }
                    let spawned = Instant::now();
                    let behind = rondo::spawn(async move { spawned.elapsed() });
                    std::thread::sleep(Duration::from_millis(400));
                    behind.await.unwrap()
                });
                std::thread::sleep(Duration::from_millis(400));
                late.await.unwrap()
            }))
            .unwrap();
        assert!(
            waited < THRESHOLD / 2,
            "a task waited {waited:?} behind a poll that blocked in its core's probation \
             (threshold {THRESHOLD:?}: the probation's is {:?})",
            THRESHOLD / 32
        );
        assert!(rt.metrics().rescues >= 2, "{}", rt.metrics());
    });
}

/// Weighted groups keep their shares through a stall: with every worker stuck in a blocking poll,
/// the rescue thread that takes a core over serves two spinning groups weighted 1:3 by weight, as
/// the workers did before the stall (without rescue, neither group would run at all).
#[test]
fn weighted_groups_keep_their_shares_through_a_stall() {
    use std::sync::atomic::AtomicU64;
    const STUCK: Duration = Duration::from_millis(900);
    watchdog(60, || {
        let rt = builder(2).build().unwrap();
        let workers = rt.handle().worker_count();
        let light = rt.group().name("light").weight(1).build().unwrap();
        let heavy = rt.group().name("heavy").weight(3).build().unwrap();
        let stuck = rt.group().name("stuck").build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (lt, ht) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut hs = Vec::new();
        for _ in 0..2 * workers {
            hs.push(light.spawn(spinner(lt.clone(), stop.clone())));
            hs.push(heavy.spawn(spinner(ht.clone(), stop.clone())));
        }
        std::thread::sleep(Duration::from_millis(100));
        // One blocking poll per worker.
        let (started_tx, started_rx) = mpsc::channel();
        let blockers: Vec<_> = (0..workers)
            .map(|_| {
                let started_tx = started_tx.clone();
                stuck.spawn(async move {
                    started_tx.send(Instant::now()).unwrap();
                    std::thread::sleep(STUCK);
                })
            })
            .collect();
        let first = (0..workers)
            .map(|_| started_rx.recv().unwrap())
            .min()
            .unwrap();
        // The window starts once every worker is stuck and rescued (a few thresholds), and ends
        // well before the first stuck poll returns.
        std::thread::sleep(Duration::from_millis(50));
        let (l0, h0) = (lt.load(Ordering::SeqCst), ht.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(400));
        let (l1, h1) = (lt.load(Ordering::SeqCst), ht.load(Ordering::SeqCst));
        let in_stall = first.elapsed() < STUCK;
        let rescues = rt.metrics().rescues;
        stop.store(true, Ordering::SeqCst);
        rt.block_on(async {
            for h in hs.into_iter().chain(blockers) {
                h.await.unwrap();
            }
        });
        assert!(
            in_stall,
            "the window outlasted the stuck polls; the test proves nothing"
        );
        // Once one core is rescued its thread serves the groups; the other stuck cores have
        // nothing of their own waiting and are left alone (see the monitor's docs).
        assert!(rescues >= 1, "no rescue with all {workers} workers stuck");
        let (l, h) = ((l1 - l0) as f64, (h1 - h0) as f64);
        // The spinners kept at least one core: without rescue both would be about zero.
        assert!(
            l + h > 0.5 * 400e6,
            "the spinners got {:.1} ms of the 400 ms window",
            (l + h) / 1e6
        );
        // Ideal 3.0. The spinners measure wall time, as the groups are charged.
        let ratio = h / l;
        assert!(
            (1.8..=5.0).contains(&ratio),
            "heavy:light was {ratio:.2} during the stall (light {:.1} ms, heavy {:.1} ms)",
            l / 1e6,
            h / 1e6
        );
    });
}

/// A runtime built with the defaults rescues: `stall_threshold` defaults to
/// `DEFAULT_STALL_THRESHOLD` (5 ms), so a task queued behind a poll that blocks its only worker
/// for 300 ms runs long before the poll returns.
#[test]
fn a_runtime_with_the_defaults_rescues_a_stuck_worker() {
    watchdog(30, || {
        assert_eq!(
            rondo::runtime::DEFAULT_STALL_THRESHOLD,
            Duration::from_millis(5)
        );
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let blocker = rt.spawn(async move {
            started_tx.send(()).unwrap();
            std::thread::sleep(SLEEP);
        });
        started_rx.recv().unwrap();
        let start = Instant::now();
        rt.block_on(rt.spawn(async {})).unwrap();
        let waited = start.elapsed();
        assert!(
            waited < SLEEP / 2,
            "a task behind the stuck poll waited {waited:?}"
        );
        assert!(rt.metrics().rescues >= 1);
        rt.block_on(blocker).unwrap();
    });
}

/// A tenant whose every task blocks its thread, with more such tasks than the workers and the
/// rescue threads together, does not stall another tenant's timers. The thread that takes a rescued
/// core over first does what the stuck poll's return would have done, a quantum end: due timers
/// fire, and the tenant behind in the rotation is served before the core's other blocking tasks.
///
/// Before, that thread ran the core's local queue first; its next task blocked too, and so did
/// each thread after it, so no timer fired and the sleeping tenant's `sleep(2 ms)` lasted the whole
/// 800 ms window (one completion per task, when the blocking stopped). Now about 600 complete.
#[test]
fn a_tenant_blocking_every_thread_does_not_stall_another_tenants_timers() {
    use std::sync::Mutex;
    watchdog(60, || {
        let rt = builder(2).build().unwrap();
        let blocking = rt.group().name("blocking").build().unwrap();
        let sleeping = rt.group().name("sleeping").build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for _ in 0..32 {
            let stop = stop.clone();
            hs.push(blocking.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(30));
                    rondo::yield_now().await;
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(50));
        let slept = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..4 {
            let (stop, slept) = (stop.clone(), slept.clone());
            hs.push(sleeping.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    rondo::time::sleep(Duration::from_millis(2)).await;
                    slept.lock().unwrap().push(t.elapsed());
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(800));
        stop.store(true, Ordering::SeqCst);
        for h in hs {
            rt.block_on(h).unwrap();
        }
        let mut slept = slept.lock().unwrap().clone();
        slept.sort();
        let (n, p50) = (slept.len(), slept[slept.len() / 2]);
        assert!(
            n >= 40 && p50 < Duration::from_millis(100),
            "the sleeping tenant completed {n} sleeps of 2 ms in 800 ms (p50 {p50:?}) while the \
             other tenant's tasks blocked every thread"
        );
        assert!(rt.metrics().rescues >= 1);
    });
}

/// A cancelled task's destructor that blocks is watched like a poll that blocks: the stall
/// monitor hands the core's queues to another thread, which runs the other tasks meanwhile.
#[test]
fn a_cancelled_tasks_blocking_destructor_is_rescued() {
    watchdog(30, || {
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::from_millis(5))
            .build()
            .unwrap();
        let other_ran = Arc::new(AtomicBool::new(false));
        let seen_by_destructor = Arc::new(AtomicBool::new(false));
        let (o, s) = (other_ran.clone(), seen_by_destructor.clone());
        let guard = common::OnDrop(move || {
            // Blocks its thread until the other task ran (at most 5 s).
            let end = Instant::now() + Duration::from_secs(5);
            while !o.load(Ordering::SeqCst) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
            s.store(o.load(Ordering::SeqCst), Ordering::SeqCst);
        });
        let (_keep, never) = futures::channel::oneshot::channel::<()>();
        let h = rt.spawn(async move {
            let _guard = guard;
            let _ = never.await;
        });
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        let o = other_ran.clone();
        let other = rt.spawn(async move { o.store(true, Ordering::SeqCst) });
        rt.block_on(other).unwrap();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
        assert!(
            seen_by_destructor.load(Ordering::SeqCst),
            "the other task waited for the blocking destructor"
        );
    });
}
