//! Fairness invariants with generous bounds (the figures are measured in `benches/fairness.rs`).
//!
//! These tests measure CPU shares by spinning, so they run one at a time (`SERIAL`) in their own
//! test binary: sharing two cores with other tests' runtimes would make the OS, not rondo, decide
//! the shares.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{spin, watchdog};

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn a_small_group_behind_a_flood_finishes_long_before_the_flood() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let rt = two_workers();
        let flood = rt.group().name("flood").build().unwrap();
        let small = rt.group().name("small").build().unwrap();
        let flood_done = Arc::new(AtomicUsize::new(0));
        let flood_handles: Vec<_> = (0..4000)
            .map(|_| {
                let d = flood_done.clone();
                flood.spawn(async move {
                    spin(Duration::from_micros(50));
                    d.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(5));
        let small_handles: Vec<_> = (0..50)
            .map(|_| small.spawn(async { spin(Duration::from_micros(50)) }))
            .collect();
        rt.block_on(async {
            for h in small_handles {
                h.await.unwrap();
            }
        });
        let at_small_done = flood_done.load(Ordering::SeqCst);
        rt.block_on(async {
            for h in flood_handles {
                h.await.unwrap();
            }
        });
        // FIFO would finish the small group after all 4000; a fair split within a few quanta.
        assert!(
            at_small_done < 3000,
            "the small group waited for {at_small_done} of 4000 flood tasks"
        );
    });
}

/// Spins in `chunk` slices, yielding in between, adding the time spun to `total`, until `stop`.
async fn backlogged(chunk: Duration, total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        // CPU time, as rondo charges it: wall time would count the slices the system preempted.
        let t = common::thread_cpu();
        spin(chunk);
        total.fetch_add(
            (common::thread_cpu() - t).as_nanos() as u64,
            Ordering::Relaxed,
        );
        rondo::yield_now().await;
    }
}

/// The shares these tests expect are computed for two workers (a group with n tasks can use at
/// most n workers), so they do not follow `RONDO_TEST_WORKERS`.
fn two_workers() -> rondo::Runtime {
    rondo::Runtime::builder().worker_threads(2).build().unwrap()
}

/// Spawns `n` backlogged tasks of `chunk` slices into `g`; they add the time they spin to `total`.
fn spawn_backlogged(
    g: &rondo::Group,
    n: usize,
    chunk: Duration,
    total: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
) -> Vec<rondo::JoinHandle<()>> {
    (0..n)
        .map(|_| g.spawn(backlogged(chunk, total.clone(), stop.clone())))
        .collect()
}

/// Sets `stop` and waits for every task in `hs`.
fn stop_all(rt: &rondo::Runtime, stop: &AtomicBool, hs: Vec<rondo::JoinHandle<()>>) {
    stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for h in hs {
            h.await.unwrap();
        }
    });
}

#[test]
fn weights_and_task_counts_shape_cpu_shares() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        // Weight 1 with long polls and many tasks vs weight 4 with short polls and one task per
        // worker: time is charged, not polls or tasks.
        let light = rt.group().weight(1).build().unwrap();
        let heavy = rt.group().weight(4).build().unwrap();
        let (lt, ht) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut hs = spawn_backlogged(&light, 100, Duration::from_micros(200), &lt, &stop);
        hs.extend(spawn_backlogged(
            &heavy,
            2,
            Duration::from_micros(20),
            &ht,
            &stop,
        ));
        std::thread::sleep(Duration::from_millis(400));
        stop_all(&rt, &stop, hs);
        let (l, h) = (
            lt.load(Ordering::SeqCst) as f64,
            ht.load(Ordering::SeqCst) as f64,
        );
        // Ideal is 4× (3.8–4.0× measured, also with two CPU hogs on the same two cores); FIFO by
        // count would give the light group ~50× the heavy one's polls. With two tasks, the heavy
        // group is often out of the rotation while a worker serves it; when the floor ignored
        // served groups it lost its credit on every return and got 2.3–2.6×.
        assert!(h > 3.0 * l, "heavy group got {h} ns vs light {l} ns");
    });
}

/// A group that sat idle while another ran alone banks no credit: when it returns, the two share
/// the workers, instead of the returning group running alone until it has "caught up".
#[test]
fn an_idle_group_banks_no_credit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = rt.group().name("busy").build().unwrap();
        let returning = rt.group().name("returning").build().unwrap();
        // The returning group runs once, then idles while `busy` runs alone for 300 ms.
        rt.block_on(returning.spawn(async { spin(Duration::from_micros(50)) }))
            .unwrap();
        let (bt, rt_total) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let chunk = Duration::from_micros(50);
        let mut hs = spawn_backlogged(&busy, 4, chunk, &bt, &stop);
        std::thread::sleep(Duration::from_millis(300));
        let busy_before = bt.load(Ordering::SeqCst);
        hs.extend(spawn_backlogged(&returning, 4, chunk, &rt_total, &stop));
        std::thread::sleep(Duration::from_millis(150));
        stop_all(&rt, &stop, hs);
        let b = (bt.load(Ordering::SeqCst) - busy_before) as f64;
        let r = rt_total.load(Ordering::SeqCst) as f64;
        // Ideal is 50 : 50. With the 300 ms banked, `busy` would get next to nothing.
        assert!(
            b > 0.3 * (b + r),
            "after the idle group returned, the busy group got {b} ns against {r} ns"
        );
    });
}

/// Work that reaches a group from another group's task (a spawn or a wake on a worker) runs beside
/// the waking group on that worker, but does not bring back credit it banked while idle: it gets
/// its share among the backlogged groups, not a worker of its own.
#[test]
fn a_group_reached_from_another_group_banks_no_credit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let sender = rt.group().name("sender").build().unwrap();
        let served = rt.group().name("served").build().unwrap();
        let x = rt.group().name("x").build().unwrap();
        let y = rt.group().name("y").build().unwrap();
        // `served` runs once, then idles while `x` and `y` run.
        rt.block_on(served.spawn(async { spin(Duration::from_micros(50)) }))
            .unwrap();
        let (st, xt, yt) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let chunk = Duration::from_micros(50);
        let mut hs = spawn_backlogged(&x, 4, chunk, &xt, &stop);
        hs.extend(spawn_backlogged(&y, 4, chunk, &yt, &stop));
        std::thread::sleep(Duration::from_millis(300));
        let before = xt.load(Ordering::SeqCst) + yt.load(Ordering::SeqCst);
        // A task of `sender` starts a task of `served`: on its worker, beside `sender`.
        let (s2, t2, stop2) = (served.clone(), st.clone(), stop.clone());
        let started = rt
            .block_on(sender.spawn(async move { vec![s2.spawn(backlogged(chunk, t2, stop2))] }))
            .unwrap();
        hs.extend(started);
        std::thread::sleep(Duration::from_millis(400));
        stop_all(&rt, &stop, hs);
        let others = (xt.load(Ordering::SeqCst) + yt.load(Ordering::SeqCst) - before) as f64;
        let s = st.load(Ordering::SeqCst) as f64;
        // Ideal is a third (its one task could use half). With the time banked while idle,
        // `served` would keep the worker it started on to itself: half.
        assert!(
            s < 0.43 * (others + s) && s > 0.2 * (others + s),
            "the group started from another group's task got {s} ns, the two others {others} ns"
        );
    });
}

/// One worker, two equal groups `a` and `b` whose tasks add the time they spin to `ta` and `tb`,
/// and a `gate` group for a task that holds the worker in one poll (for the two tests below).
struct OneWorker {
    rt: rondo::Runtime,
    gate: rondo::Group,
    a: rondo::Group,
    b: rondo::Group,
    stop: Arc<AtomicBool>,
    ta: Arc<AtomicU64>,
    tb: Arc<AtomicU64>,
}

impl OneWorker {
    fn new() -> Self {
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::from_secs(5))
            .build()
            .unwrap();
        OneWorker {
            gate: rt.group().name("gate").build().unwrap(),
            a: rt.group().name("a").build().unwrap(),
            b: rt.group().name("b").build().unwrap(),
            rt,
            stop: Arc::new(AtomicBool::new(false)),
            ta: Arc::new(AtomicU64::new(0)),
            tb: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Holds the only worker in one poll for 30 ms; returns once that poll has begun.
    fn hold_worker(&self) -> rondo::JoinHandle<()> {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let held = self.gate.spawn(async move {
            entered_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(30));
        });
        entered_rx.recv().unwrap();
        held
    }

    /// Lets `held` end, runs 300 ms more, stops `hs` and checks that `b` got a fair part of the
    /// time.
    fn assert_b_shares(self, held: rondo::JoinHandle<()>, hs: Vec<rondo::JoinHandle<()>>) {
        self.rt.block_on(held).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        stop_all(&self.rt, &self.stop, hs);
        let (sa, sb) = (
            self.ta.load(Ordering::SeqCst),
            self.tb.load(Ordering::SeqCst),
        );
        let share = sb as f64 / (sa + sb) as f64;
        assert!(
            (0.25..=0.75).contains(&share),
            "equal groups on one worker: b got {:.1}% of the time (a {sa} ns, b {sb} ns)",
            share * 100.0
        );
    }
}

/// Two groups queued at once with one task each: a pick takes one and the other along as an extra
/// group (due, one task). When the picked group's task yields again and again, its continuation
/// goes to the local queue, which the worker serves before its extras; the extra group must still
/// get its share, not wait until some third group happens to be listed.
#[test]
fn a_group_taken_along_with_a_pick_is_not_starved_by_the_picked_groups_yields() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let w = OneWorker::new();
        // Both groups' tasks are queued while the worker is held, so one visit to the scheduler
        // finds both.
        let held = w.hold_worker();
        let chunk = Duration::from_micros(100);
        let mut hs = spawn_backlogged(&w.a, 1, chunk, &w.ta, &w.stop);
        hs.extend(spawn_backlogged(&w.b, 1, chunk, &w.tb, &w.stop));
        w.assert_b_shares(held, hs);
    });
}

/// The same for the lane: tasks woken from outside into idle groups wait there, and a worker takes
/// the oldest with its share of the rest for its extras. When the oldest yields again and again,
/// the others must still get their share.
#[test]
fn lane_tasks_taken_along_are_not_starved_by_the_first_ones_yields() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let w = OneWorker::new();
        // Each task first waits for a message (so its wake from this thread takes the lane),
        // then spins and yields until stopped.
        let waiting = |g: &rondo::Group, total: &Arc<AtomicU64>| {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            let (total, stop) = (total.clone(), w.stop.clone());
            let h = g.spawn(async move {
                rx.await.unwrap();
                backlogged(Duration::from_micros(100), total, stop).await;
            });
            (tx, h)
        };
        let (go_a, ha) = waiting(&w.a, &w.ta);
        let (go_b, hb) = waiting(&w.b, &w.tb);
        // Let both reach their first `Pending`.
        std::thread::sleep(Duration::from_millis(50));
        // Both are woken while the worker is held, so both wait in the lane when it looks there
        // next.
        let held = w.hold_worker();
        go_a.send(()).unwrap();
        go_b.send(()).unwrap();
        w.assert_b_shares(held, vec![ha, hb]);
    });
}

/// Two one-task groups on two workers keep a worker each. A pick leaves a group in the rotation
/// for each other worker searching: taken along as an extra while the second worker, woken by
/// that group's listing, is on its way to the scheduler, the group would leave that worker
/// nothing to find, and one worker could serve both groups for hundreds of milliseconds.
#[test]
fn two_one_task_groups_on_two_workers_keep_a_worker_each() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        for round in 0..16 {
            let rt = two_workers();
            let (a, b) = (rt.group().build().unwrap(), rt.group().build().unwrap());
            let stop = Arc::new(AtomicBool::new(false));
            let total = Arc::new(AtomicU64::new(0));
            let chunk = Duration::from_micros(50);
            let mut hs = spawn_backlogged(&a, 1, chunk, &total, &stop);
            hs.extend(spawn_backlogged(&b, 1, chunk, &total, &stop));
            std::thread::sleep(Duration::from_millis(10));
            let (a0, b0, t0) = (a.metrics().wait, b.metrics().wait, Instant::now());
            std::thread::sleep(Duration::from_millis(100));
            let (a1, b1, window) = (a.metrics().wait, b.metrics().wait, t0.elapsed());
            let m = rt.metrics();
            stop_all(&rt, &stop, hs);
            let (wa, wb) = ((a1 - a0).as_secs_f64(), (b1 - b0).as_secs_f64());
            let w = window.as_secs_f64();
            assert!(
                wa < 0.1 * w && wb < 0.1 * w,
                "round {round}: a waited {:.0}% and b {:.0}% of {window:?} with a worker each \
                 (about 0%)\n{m}",
                wa / w * 100.0,
                wb / w * 100.0
            );
        }
    });
}

/// `GroupMetrics::wait` is the time a group had queued work that no worker serving it took: on
/// one worker, two equal backlogged groups each wait about half the time, a weight-1 group beside
/// a weight-9 one about 90%, and the weight-9 one only while the other is served (about 10%). With
/// two workers, two one-task groups each keep a worker and never wait.
///
/// It guards the two ways the count can go wrong: the waiting of groups with a task or two taken
/// as a pick's extras (their tasks wait behind the picked group's yields for a whole quantum,
/// which is waiting), and a group its worker keeps serving while it exposes half of its local
/// backlog (which is not).
#[test]
fn group_wait_counts_the_time_no_worker_serves_the_group() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    /// Two groups of `tasks` backlogged tasks each, weighted `wa`:`wb`, on `workers` workers:
    /// the fraction of a 400 ms window each group reported as waiting.
    fn waits(workers: usize, tasks: usize, wa: u32, wb: u32) -> (f64, f64) {
        let rt = rondo::Runtime::builder()
            .worker_threads(workers)
            .build()
            .unwrap();
        let a = rt.group().weight(wa).build().unwrap();
        let b = rt.group().weight(wb).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (ta, tb) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let chunk = Duration::from_micros(50);
        let mut hs = spawn_backlogged(&a, tasks, chunk, &ta, &stop);
        hs.extend(spawn_backlogged(&b, tasks, chunk, &tb, &stop));
        std::thread::sleep(Duration::from_millis(50));
        let (a0, b0, t0) = (a.metrics().wait, b.metrics().wait, Instant::now());
        std::thread::sleep(Duration::from_millis(400));
        let (a1, b1, window) = (a.metrics().wait, b.metrics().wait, t0.elapsed());
        stop_all(&rt, &stop, hs);
        let w = window.as_secs_f64();
        ((a1 - a0).as_secs_f64() / w, (b1 - b0).as_secs_f64() / w)
    }
    watchdog(120, || {
        for tasks in [1, 2, 100] {
            let (a, b) = waits(1, tasks, 1, 1);
            assert!(
                (0.25..=0.75).contains(&a) && (0.25..=0.75).contains(&b),
                "{tasks} tasks each, equal weights, one worker: a waited {:.0}%, b {:.0}% \
                 (about 50% each)",
                a * 100.0,
                b * 100.0
            );
        }
        let (a, b) = waits(1, 100, 1, 9);
        assert!(
            a > 0.7 && b < 0.25,
            "weights 1:9, one worker: a waited {:.0}% (about 90%), b {:.0}% (about 10%)",
            a * 100.0,
            b * 100.0
        );
        let (a, b) = waits(2, 1, 1, 1);
        assert!(
            a < 0.15 && b < 0.15,
            "a worker each: a waited {:.0}%, b {:.0}% (about 0%)",
            a * 100.0,
            b * 100.0
        );
    });
}

/// Spins until the calling thread has burned `d` of CPU time: a poll of `d` of CPU however often
/// the system preempts the thread.
fn cpu_spin(d: Duration) {
    let start = common::thread_cpu();
    while common::thread_cpu() - start < d {
        std::hint::spin_loop();
    }
}

/// Polls of 1 ms of CPU with a yield between, until `stop`; each adds the CPU it burned to
/// `total`.
async fn millisecond_polls(total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = common::thread_cpu();
        cpu_spin(Duration::from_millis(1));
        total.fetch_add(
            (common::thread_cpu() - t).as_nanos() as u64,
            Ordering::Relaxed,
        );
        rondo::yield_now().await;
    }
}

/// A weight-1 group with one task against a weight-10 group with eight, all in 1 ms polls with a
/// yield between, on `workers` workers: the weight-1 group's share of the CPU both groups' tasks
/// count over `window` (after a 50 ms start). Its one task could use a whole worker, more than its
/// 1/11 of the runtime at any worker count here, so 1/11 is its share.
fn one_task_share(workers: usize, window: Duration) -> f64 {
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let light = rt.group().name("light").weight(1).build().unwrap();
    let flood = rt.group().name("flood").weight(10).build().unwrap();
    let (lt, ft) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut hs: Vec<_> = (0..8)
        .map(|_| flood.spawn(millisecond_polls(ft.clone(), stop.clone())))
        .collect();
    hs.push(light.spawn(millisecond_polls(lt.clone(), stop.clone())));
    std::thread::sleep(Duration::from_millis(50));
    let (l0, f0) = (lt.load(Ordering::SeqCst), ft.load(Ordering::SeqCst));
    std::thread::sleep(window);
    let (l1, f1) = (lt.load(Ordering::SeqCst), ft.load(Ordering::SeqCst));
    stop_all(&rt, &stop, hs);
    let (l, f) = ((l1 - l0) as f64, (f1 - f0) as f64);
    l / (l + f)
}

/// Checks a weight-1 group's share against eight tasks of a weight-10 group (see
/// `one_task_share`): 1/11 + 0.03 at most (a third of its share, several quanta per 100 ms), and at
/// least 1/11 - 0.03 while each worker can have a core. With more workers than cores, the system
/// may leave the thread whose local queue holds the one task unscheduled for several of its time
/// slices while every other worker is busy with the other group (none idle, so none steals it);
/// the lower bound is then 0.03 (measured: 0.047–0.094 at 8 workers on 2 shared cores).
fn check_one_task_share(workers: usize, share: f64, what: &str) {
    let expected = 1.0 / 11.0;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let low = if workers <= cores {
        expected - 0.03
    } else {
        0.03
    };
    assert!(
        (low..=expected + 0.03).contains(&share),
        "{workers} workers on {cores} cores: the weight-1 group's one task got {share:.3} of the \
         CPU{what}, expected {expected:.3} (from {low:.3} to {:.3})",
        expected + 0.03
    );
}

/// A group with a single task, which yields between polls, gets its weight's share and no more:
/// a weight-1 group's one task against eight tasks of a weight-10 group get 1/11 of the CPU at 1,
/// 2, 4 and 8 workers (shares are of CPU time, which is what rondo charges).
#[test]
fn a_one_task_group_gets_its_weights_share_at_any_worker_count() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        for workers in [1, 2, 4, 8] {
            let share = one_task_share(workers, Duration::from_secs(1));
            check_one_task_share(workers, share, "");
        }
    });
}

/// A weight-1 group whose one task, `cycles` times, waits by yielding (short polls) for 20 ms and
/// then computes `burst` polls of 1 ms of CPU with a yield between, against a weight-10 group with
/// eight tasks in 1 ms polls, on `workers` workers: the weight-1 group's share of the CPU both
/// groups' tasks count while it computes. Yielding, it is charged for its worker time as it goes,
/// so it enters each burst at its share.
fn share_after_short_polls(workers: usize, cycles: u32, burst: u32) -> f64 {
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let light = rt.group().name("light").weight(1).build().unwrap();
    let flood = rt.group().name("flood").weight(10).build().unwrap();
    let (lt, ft) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let (ft, stop, counting) = (ft.clone(), stop.clone(), counting.clone());
            flood.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let t = common::thread_cpu();
                    cpu_spin(Duration::from_millis(1));
                    if counting.load(Ordering::Relaxed) {
                        let ns = (common::thread_cpu() - t).as_nanos() as u64;
                        ft.fetch_add(ns, Ordering::Relaxed);
                    }
                    rondo::yield_now().await;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    let worker = {
        let (lt, counting) = (lt.clone(), counting.clone());
        light.spawn(async move {
            for _ in 0..cycles {
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(20) {
                    rondo::yield_now().await;
                }
                counting.store(true, Ordering::SeqCst);
                for _ in 0..burst {
                    let t = common::thread_cpu();
                    cpu_spin(Duration::from_millis(1));
                    let ns = (common::thread_cpu() - t).as_nanos() as u64;
                    lt.fetch_add(ns, Ordering::Relaxed);
                    rondo::yield_now().await;
                }
                counting.store(false, Ordering::SeqCst);
            }
        })
    };
    rt.block_on(async { worker.await.unwrap() });
    stop_all(&rt, &stop, hs);
    let (l, f) = (
        lt.load(Ordering::SeqCst) as f64,
        ft.load(Ordering::SeqCst) as f64,
    );
    l / (l + f)
}

/// A task whose polls turn from short to long is switched within a few polls once its quantum is
/// over: a worker reads the clock after every poll while polls are long, and at least every fourth
/// while they are short (`fair::segment`). With an interval adapted to the mean length of the
/// polls (up to 256 short ones), the first long polls ran unmeasured: a weight-1 group's one task
/// that had waited by yielding then kept a worker to itself through its bursts of 1 ms polls
/// against a weight-10 group's eight (0.70–0.75 of the CPU at 1 worker, about 0.5 at 2, where its
/// share is 1/11).
#[test]
fn a_task_whose_polls_grow_long_is_switched_at_its_quantum_end() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        for workers in [1, 2, 4, 8] {
            let share = share_after_short_polls(workers, 5, 20);
            check_one_task_share(workers, share, " in its bursts of long polls");
        }
    });
}
