//! More worker threads than CPUs: the controller sheds active cores down to the CPU count while
//! the groups' shares drift on saturated CPUs (the operating system shares the CPUs by thread),
//! and gives them back once the shares stay even; a count within the CPUs has no controller.
//!
//! The CPU count is pretended: the cgroup root is a directory of this test's whose `cpu.max`
//! allows 2 CPUs (fewer if the machine has fewer).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

use common::{eventually, spin, thread_cpu, watchdog};

/// Points the cgroup root at a directory whose `cpu.max` allows 2 CPUs, once per process.
fn pretend_two_cpus() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = std::env::temp_dir().join(format!("rondo-oversubscribed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpu.max"), "200000 100000\n").unwrap();
        // SAFETY: every test of this file calls this before it starts any thread that reads the
        // environment, and the standard library's environment functions take a lock; no C code
        // in this process reads the environment concurrently.
        unsafe { std::env::set_var("RONDO_CGROUP_ROOT", &dir) };
    });
}

/// The tests share the CPUs they measure: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime(workers: usize) -> rondo::Runtime {
    pretend_two_cpus();
    rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap()
}

/// A backlogged task: spins in 100 µs slices, yielding between, adding each slice's thread CPU
/// time to `total`, until `stop`.
async fn backlogged(total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = thread_cpu();
        spin(Duration::from_micros(100));
        total.fetch_add((thread_cpu() - t).as_nanos() as u64, Ordering::Relaxed);
        rondo::yield_now().await;
    }
}

/// One backlogged task in `heavy` against 16 in `light`, for `run` after a warm-up: the one
/// task's share of the CPU time the tasks count.
fn one_against_sixteen(
    rt: &rondo::Runtime,
    heavy: &rondo::Group,
    light: &rondo::Group,
    run: Duration,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let (h, l) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = vec![heavy.spawn(backlogged(h.clone(), stop.clone()))];
    for _ in 0..16 {
        tasks.push(light.spawn(backlogged(l.clone(), stop.clone())));
    }
    std::thread::sleep(Duration::from_millis(200));
    let (h0, l0) = (h.load(Ordering::Relaxed), l.load(Ordering::Relaxed));
    std::thread::sleep(run);
    let (h1, l1) = (h.load(Ordering::Relaxed), l.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    let (dh, dl) = ((h1 - h0) as f64, (l1 - l0) as f64);
    dh / (dh + dl)
}

/// A weight-4 group of one task against a weight-1 group of 16 (`one_against_sixteen`). The
/// groups end with it.
fn heavy_share(rt: &rondo::Runtime, run: Duration) -> f64 {
    let heavy = rt.group().weight(4).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    one_against_sixteen(rt, &heavy, &light, run)
}

/// Fixed 8 workers on 2 CPUs: the one task of the heavy group gets a whole CPU (its weight
/// entitles it to 1.6 of the 2, one task uses at most one), half of the CPU time, where sharing
/// by thread would give it an eighth; the cores come back to 8 once the load ends.
// The controller tells a saturated CPU through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn more_workers_than_cpus_keep_the_weights_and_get_their_cores_back() {
    let _serial = serial();
    watchdog(60, || {
        let rt = runtime(8);
        let m = rt.metrics();
        let cpus = m.worker_cpus;
        assert!((1..=2).contains(&cpus), "pretended 2 CPUs, read {cpus}");
        assert_eq!((m.worker_cores, m.worker_cores_max), (8, 8));
        if cpus < 2 {
            // A one-CPU machine: the heavy task's whole CPU is all of it; nothing to compare.
            return;
        }
        // Other processes on the machine take CPU time from some threads more than others: up
        // to three tries (sharing by thread gives an eighth in every one).
        let mut shares = Vec::new();
        for _ in 0..3 {
            let share = heavy_share(&rt, Duration::from_secs(1));
            shares.push(share);
            if (0.45..=0.55).contains(&share) {
                break;
            }
        }
        let m = rt.metrics();
        eprintln!("heavy shares {shares:.3?}: {m}");
        assert!(
            shares.iter().any(|s| (0.45..=0.55).contains(s)),
            "the one heavy task's share {shares:.3?}, expected 0.5 ± 10%: {m}"
        );
        assert!(m.worker_core_sheds >= 1 && m.worker_cores_shed >= 6, "{m}");
        // Never below the CPUs.
        assert!(m.worker_cores >= cpus, "{m}");
        assert!(
            eventually(10, || rt.metrics().worker_cores == 8),
            "the shed cores did not come back: {}",
            rt.metrics()
        );
        let m = rt.metrics();
        assert!(
            m.worker_core_restores >= 1 && m.worker_cores_restored >= 6,
            "{m}"
        );
        let text = m.to_prometheus();
        assert!(text.contains("rondo_worker_cpus 2"), "{text}");
        assert!(text.contains("# TYPE rondo_worker_core_restores_total counter"));
    });
}

/// [`heavy_share`] within one tenant tree: a weight-4 group of one task beside a weight-1 group
/// of 16, both children of one group under a top-level tenant. One top-level group is served, so
/// only the tree's own lag shows the drift.
fn heavy_share_in_a_tree(rt: &rondo::Runtime, run: Duration) -> f64 {
    let tenant = rt.group().name("tenant").build().unwrap();
    let mid = tenant.child().name("mid").weight(3).build().unwrap();
    let heavy = mid.child().name("heavy").weight(4).build().unwrap();
    let light = mid.child().name("light").weight(1).build().unwrap();
    one_against_sixteen(rt, &heavy, &light, run)
}

/// Fixed 8 workers on 2 CPUs, one tenant tree of unequal shares: the drift within the tree
/// sheds the cores down to the CPUs, so the heavy group's one task gets a whole CPU (half of the
/// CPU time the tasks count; its weight entitles it to 1.6 of the 2, one task uses at most one)
/// where sharing by thread would give it about an eighth.
// The controller tells a saturated CPU through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn a_tree_drifting_from_its_shares_sheds_cores() {
    let _serial = serial();
    watchdog(60, || {
        let rt = runtime(8);
        let cpus = rt.metrics().worker_cpus;
        if cpus < 2 {
            // A one-CPU machine: the heavy task's whole CPU is all of it; nothing to compare.
            return;
        }
        // Other processes on the machine take CPU time from some threads more than others: up
        // to three tries, and a bound that still tells a whole CPU from sharing by thread
        // (about an eighth, 0.08 to 0.13 measured, in every try).
        let bound = 0.35..=0.6;
        let mut shares = Vec::new();
        for _ in 0..3 {
            let share = heavy_share_in_a_tree(&rt, Duration::from_secs(1));
            shares.push(share);
            if bound.contains(&share) {
                break;
            }
        }
        let m = rt.metrics();
        eprintln!("heavy shares in a tree {shares:.3?}: {m}");
        assert!(m.worker_core_sheds >= 1 && m.worker_cores_shed >= 6, "{m}");
        assert!(
            shares.iter().any(|s| bound.contains(s)),
            "the one heavy task's share {shares:.3?}, expected 0.5 (0.35 to 0.6): {m}"
        );
        assert!(m.worker_cores >= cpus, "{m}");
    });
}

/// A count within the CPUs has no controller: the same load sheds nothing (and the one task
/// gets its whole CPU anyway: two threads on two CPUs).
#[test]
fn workers_within_the_cpus_shed_nothing() {
    let _serial = serial();
    watchdog(60, || {
        let rt = runtime(2);
        let share = heavy_share(&rt, Duration::from_millis(500));
        let m = rt.metrics();
        assert_eq!(m.worker_core_sheds, 0, "{m}");
        assert_eq!(m.worker_core_restores, 0, "{m}");
        assert_eq!(m.worker_cores, 2);
        eprintln!("heavy share at 2 workers {share:.3}");
    });
}

/// Blocking polls keep the threads a user asked for: 8 workers on 2 CPUs, 8 tasks that sleep in
/// the operating system in every poll beside a flood of another group, all finish about as fast
/// as 8 threads allow, and no core stays shed while polls block.
// The controller tells a blocked thread through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn blocking_polls_get_the_shed_cores_back() {
    let _serial = serial();
    watchdog(60, || {
        let rt = runtime(8);
        let flood = rt.group().build().unwrap();
        let sleepers = rt.group().weight(4).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let burned = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..16)
            .map(|_| flood.spawn(backlogged(burned.clone(), stop.clone())))
            .collect();
        // The flood alone: one group, even shares, nothing to shed.
        std::thread::sleep(Duration::from_millis(100));
        let start = std::time::Instant::now();
        let blocking: Vec<_> = (0..8)
            .map(|_| {
                sleepers.spawn(async {
                    for _ in 0..50 {
                        std::thread::sleep(Duration::from_millis(2));
                        rondo::yield_now().await;
                    }
                })
            })
            .collect();
        rt.block_on(async {
            for t in blocking {
                t.await.unwrap();
            }
        });
        let took = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        rt.block_on(async {
            for t in tasks {
                t.await.unwrap();
            }
        });
        let m = rt.metrics();
        eprintln!("8 sleepers x 50 x 2 ms took {took:?}: {m}");
        // Alone on 8 threads: 100 ms each, in parallel. On 2 they would take 400 ms.
        assert!(
            took < Duration::from_millis(350),
            "blocking polls ran on fewer threads than asked for: {took:?}, {m}"
        );
    });
}

/// One group's blocking load on 64 threads: the workers' entries for that one group, published
/// before and after polls that block for a millisecond, differ by what the group was charged
/// in between; that is no spread between groups, and nothing is shed.
#[test]
fn one_group_blocking_on_many_threads_sheds_nothing() {
    let _serial = serial();
    let rt = runtime(64);
    let m = watchdog(60, move || {
        for _ in 0..5 {
            rt.block_on(async {
                let tasks: Vec<_> = (0..2_000)
                    .map(|_| {
                        rondo::spawn(async {
                            std::thread::sleep(Duration::from_millis(1));
                            spin(Duration::from_micros(20));
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            });
        }
        rt.metrics()
    });
    assert_eq!(m.worker_core_sheds, 0, "{m}");
    assert_eq!(m.worker_cores, 64);
}
