//! The worker count: `Builder::max_worker_threads` and its controller (cores added while polls
//! block and tasks wait, retired once unused, never past the maximum, none for CPU-bound work),
//! groups' shares while the count moves, and the setting's errors.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{eventually, spin, thread_cpu, watchdog};

fn adaptive(workers: usize, max: usize) -> rondo::Runtime {
    rondo::Runtime::builder()
        .worker_threads(workers)
        .max_worker_threads(max)
        .build()
        .unwrap()
}

/// `n` tasks that each block `block` in the operating system, then compute `compute`.
fn blocking_load(rt: &rondo::Runtime, n: usize, block: Duration, compute: Duration) -> Duration {
    rt.block_on(async move {
        let start = Instant::now();
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                rondo::spawn(async move {
                    std::thread::sleep(block);
                    spin(compute);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    })
}

// The controller tells a blocked thread through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn blocking_polls_add_cores_and_the_extra_cores_retire_within_seconds_after() {
    watchdog(60, || {
        let rt = adaptive(2, 16);
        let m = rt.metrics();
        assert_eq!((m.worker_cores, m.worker_cores_max), (2, 16));
        assert_eq!(m.worker_core_adds, 0);
        blocking_load(
            &rt,
            600,
            Duration::from_millis(1),
            Duration::from_micros(20),
        );
        let m = rt.metrics();
        assert!(
            m.worker_core_adds >= 1 && m.worker_cores_peak > 2,
            "no core was added under a blocking load: {m}"
        );
        assert!(m.worker_cores_added as usize >= m.worker_cores_peak - 2);
        let ended = Instant::now();
        assert!(
            eventually(5, || rt.metrics().worker_cores == 2),
            "the extra cores did not retire within 5 s: {}",
            rt.metrics()
        );
        let m = rt.metrics();
        assert!(m.worker_core_retires >= 1);
        assert_eq!(
            m.worker_cores_added,
            m.worker_cores_retired + m.worker_cores_shed
        );
        // Each decision shows with its reason.
        let text = m.to_string();
        assert!(
            text.contains("decisions for blocked polls") && text.contains("for idle ones"),
            "{text}"
        );
        let prometheus = m.to_prometheus();
        assert!(prometheus.contains("rondo_worker_core_adds_total"));
        assert!(prometheus.contains("rondo_worker_core_sheds_total"));
        eprintln!(
            "peak {} cores, back to 2 in {:?}",
            m.worker_cores_peak,
            ended.elapsed()
        );
        // The retired cores run again when blocking work returns.
        let adds = m.worker_core_adds;
        blocking_load(&rt, 300, Duration::from_millis(1), Duration::ZERO);
        assert!(rt.metrics().worker_core_adds > adds);
    });
}

// The controller tells a blocked thread through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn the_count_never_exceeds_max_worker_threads() {
    watchdog(60, || {
        let rt = adaptive(1, 5);
        blocking_load(&rt, 800, Duration::from_millis(1), Duration::from_micros(5));
        let m = rt.metrics();
        assert!(m.worker_cores_peak <= 5, "{m}");
        assert!(m.worker_cores <= 5);
        // It did grow, to the maximum (the load keeps every core blocked).
        assert_eq!(m.worker_cores_peak, 5, "{m}");
        assert_eq!(m.workers.len(), 5);
    });
}

#[test]
fn a_cpu_bound_load_adds_no_core() {
    watchdog(60, || {
        let rt = adaptive(2, 16);
        rt.block_on(async {
            let tasks: Vec<_> = (0..300)
                .map(|_| rondo::spawn(async { spin(Duration::from_millis(1)) }))
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let m = rt.metrics();
        assert_eq!(
            m.worker_core_adds, 0,
            "a core was added for CPU-bound work: {m}"
        );
        assert_eq!(m.worker_cores_peak, 2);
    });
}

/// Two groups on an adaptive runtime (2 to 32 cores), `n` tasks each with its weight, through two
/// phases of tasks that block 1 ms and compute 300 µs in turn, the extra cores retired between the
/// phases: the first group's share of the CPU time its tasks count.
fn share_while_cores_change(groups: [(u32, usize); 2]) -> f64 {
    let rt = adaptive(2, 32);
    let gs = groups.map(|(w, _)| rt.group().weight(w).build().unwrap());
    let cpu = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    for phase in 0..2 {
        let deadline = Instant::now() + Duration::from_millis(1200);
        let mut tasks = Vec::new();
        for ((g, (_, n)), total) in gs.iter().zip(groups).zip(&cpu) {
            for _ in 0..n {
                let total = total.clone();
                tasks.push(g.spawn(async move {
                    while Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                        let t = thread_cpu();
                        spin(Duration::from_micros(300));
                        total.fetch_add((thread_cpu() - t).as_nanos() as u64, Ordering::Relaxed);
                        rondo::yield_now().await;
                    }
                }));
            }
        }
        rt.block_on(async {
            for t in tasks {
                t.await.unwrap();
            }
        });
        let m = rt.metrics();
        assert!(m.worker_core_adds >= 1, "phase {phase}: no core added: {m}");
        if phase == 0 {
            assert!(
                eventually(5, || rt.metrics().worker_cores == 2),
                "extra cores did not retire: {}",
                rt.metrics()
            );
        }
    }
    let m = rt.metrics();
    assert!(m.worker_core_retires >= 1);
    let (a, b) = (
        cpu[0].load(Ordering::Relaxed) as f64,
        cpu[1].load(Ordering::Relaxed) as f64,
    );
    let share = a / (a + b);
    eprintln!(
        "share of the first group: {share:.3} (peak {} cores)",
        m.worker_cores_peak
    );
    share
}

/// Equal weights, 48 tasks against 16: each group's share stays within 5% of half (a share by
/// task count would be three quarters) while the controller adds cores and retires them between
/// the phases. With more busy worker threads than CPUs the operating system shares the CPUs by
/// thread; the controller sheds cores while the group with more tasks runs ahead on saturated
/// CPUs (`controller`, step 5).
// The controller tells a blocked thread through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn groups_keep_their_shares_while_cores_are_added_and_retired() {
    let share = watchdog(120, || share_while_cores_change([(1, 48), (1, 16)]));
    assert!(
        (share - 0.5).abs() <= 0.05,
        "equal weights, shares {share:.3} and {:.3}",
        1.0 - share
    );
}

/// Weights 2 and 1 and as many tasks each: the heavier group's share stays within 5% of two
/// thirds.
// The controller tells a blocked thread through `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn weighted_groups_keep_their_shares_while_cores_are_added_and_retired() {
    let share = watchdog(120, || share_while_cores_change([(2, 32), (1, 32)]));
    assert!(
        (share - 2.0 / 3.0).abs() <= 0.05,
        "weights 2 and 1, shares {share:.3} and {:.3}",
        1.0 - share
    );
}

#[test]
fn max_worker_threads_below_worker_threads_or_zero_is_an_error() {
    let err = rondo::Runtime::builder()
        .worker_threads(2)
        .max_worker_threads(0)
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("max_worker_threads must be at least worker_threads (2)")
            && text.contains("got 0"),
        "{text}"
    );
    let err = rondo::Runtime::builder()
        .worker_threads(4)
        .max_worker_threads(3)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("max_worker_threads"), "{err}");
    let err = rondo::Runtime::builder()
        .worker_threads(1)
        .max_worker_threads(rondo::runtime::MAX_WORKERS + 1)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("at most"), "{err}");
    // Equal is a fixed count, as the default.
    let rt = rondo::Runtime::builder()
        .worker_threads(2)
        .max_worker_threads(2)
        .build()
        .unwrap();
    let m = rt.metrics();
    assert_eq!(
        (m.worker_cores, m.worker_cores_max, m.worker_cores_peak),
        (2, 2, 2)
    );
    let rt = rondo::Runtime::builder().worker_threads(3).build().unwrap();
    assert_eq!(rt.metrics().worker_cores_max, 3);
}

/// An adaptive runtime counts all its worker threads, as tokio's `num_workers` does (every index
/// below it names a worker), and reports the active ones apart, while the count moves.
#[test]
fn worker_count_and_num_workers_count_every_worker_thread_and_worker_cores_the_active_ones() {
    watchdog(60, || {
        let rt = adaptive(2, 12);
        let m = rt.metrics();
        assert_eq!(rt.handle().worker_count(), 12);
        assert_eq!((m.num_workers(), m.workers.len()), (12, 12));
        assert_eq!((m.worker_cores, m.worker_cores_max), (2, 12));
        #[cfg(target_os = "linux")]
        {
            blocking_load(&rt, 300, Duration::from_millis(1), Duration::ZERO);
            let m = rt.metrics();
            assert!(m.worker_cores_peak > 2, "{m}");
            assert_eq!(m.num_workers(), 12);
            assert_eq!(rt.handle().worker_count(), 12);
        }
        // A fixed count: all three agree.
        let rt = rondo::Runtime::builder().worker_threads(3).build().unwrap();
        let m = rt.metrics();
        assert_eq!(
            (rt.handle().worker_count(), m.num_workers(), m.worker_cores),
            (3, 3, 3)
        );
    });
}

#[test]
fn a_runtime_with_dormant_cores_runs_timers_and_shuts_down() {
    watchdog(30, || {
        let rt = adaptive(1, 8);
        let t = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..32)
                .map(|i| {
                    rondo::spawn(async move {
                        rondo::time::sleep(Duration::from_millis(2 + i % 5)).await;
                        i
                    })
                })
                .collect();
            let mut sum = 0;
            for t in tasks {
                sum += t.await.unwrap();
            }
            assert_eq!(sum, (0..32u64).sum::<u64>());
        });
        assert!(t.elapsed() < Duration::from_secs(5));
        drop(rt);
    });
}

/// The default worker count follows a cgroup v2 quota that `RONDO_CGROUP_ROOT` supplies: half a
/// CPU at the root of the process's cgroup path, no limit in its own cgroup, gives one worker.
/// The runtime is built in a child process, so the variable reaches no other test.
#[cfg(target_os = "linux")]
#[test]
fn the_default_worker_count_follows_a_supplied_cgroup_quota() {
    const EXPECT: &str = "RONDO_TEST_EXPECT_WORKERS";
    if let Some(expect) = std::env::var_os(EXPECT) {
        let expect: usize = expect.to_str().unwrap().parse().unwrap();
        let rt = rondo::Runtime::builder().build().unwrap();
        assert_eq!(rt.handle().worker_count(), expect);
        assert_eq!(rt.metrics().worker_cores, expect);
        return;
    }
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        eprintln!("no cgroup v2 path: nothing to test");
        return;
    };
    let root = std::env::temp_dir().join(format!("rondo-cgroup-{}", std::process::id()));
    let own = root.join(path.trim().trim_start_matches('/'));
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(root.join("cpu.max"), "50000 100000\n").unwrap();
    if own != root {
        std::fs::write(own.join("cpu.max"), "max 100000\n").unwrap();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_default_worker_count_follows_a_supplied_cgroup_quota",
            "--nocapture",
        ])
        .env("RONDO_CGROUP_ROOT", &root)
        .env(EXPECT, "1")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        out.status.success(),
        "the child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

/// With the `tracing` feature, each decision of the controller is an event with its reason.
#[cfg(all(feature = "tracing", target_os = "linux"))]
#[test]
fn each_decision_is_traced_with_its_reason() {
    use std::sync::Mutex;

    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    /// The text of every event rondo records.
    #[derive(Clone, Default)]
    struct Events(Arc<Mutex<Vec<String>>>);
    struct Text(String);
    impl Visit for Text {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }
    impl<S: tracing::Subscriber> Layer<S> for Events {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if event.metadata().target() == "rondo" {
                let mut t = Text(String::new());
                event.record(&mut t);
                self.0.lock().unwrap().push(t.0);
            }
        }
    }

    let events = Events::default();
    // The monitor's thread records the decisions: a thread's default subscriber would miss them.
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(events.clone()))
        .unwrap();
    watchdog(60, || {
        let rt = adaptive(2, 16);
        blocking_load(&rt, 300, Duration::from_millis(1), Duration::ZERO);
        assert!(eventually(5, || rt.metrics().worker_cores == 2));
    });
    let events = events.0.lock().unwrap().clone();
    let has = |words: &[&str]| events.iter().any(|e| words.iter().all(|w| e.contains(w)));
    assert!(
        has(&["worker cores added", "reason=", "polls blocked", "from=2"]),
        "{events:#?}"
    );
    assert!(
        has(&[
            "worker cores retired",
            "reason=",
            "fewer cores awake",
            "to=2"
        ]),
        "{events:#?}"
    );
}
