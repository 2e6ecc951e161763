//! The blocking pool and `block_in_place` (issue 9, blocking part): results and panics, the thread
//! limit, the keep-alive, concurrent spawners, cancellation, shutdown, and a worker that blocks in
//! place without stalling the runtime or leaving its group.
//!
//! Multi-worker tests follow `RONDO_TEST_WORKERS` (see `common::rt`).

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use common::{builder, eventually, rt, watchdog};

/// Threads of this process whose name starts with `prefix` (Linux truncates names to 15 bytes).
fn threads_named(prefix: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .count()
}

/// Runs `n` blocking closures that wait for one another, so the pool needs `n` threads at once
/// (they are started one after another: see the ramp-up in `blocking/pool.rs`), and waits for them.
fn run_at_once(rt: &rondo::Runtime, n: usize) {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let b = barrier.clone();
            rt.spawn_blocking(move || {
                b.wait();
            })
        })
        .collect();
    for h in handles {
        rt.block_on(h).unwrap();
    }
}

/// Keeps the largest value `now` ever reached.
fn record_max(max: &AtomicUsize, now: usize) {
    max.fetch_max(now, Ordering::SeqCst);
}

#[test]
fn spawn_blocking_returns_its_value_everywhere() {
    watchdog(30, || {
        let rt = builder(2).thread_name("sbv").build().unwrap();
        // From a task: the closure runs on a pool thread, not a worker.
        let name = rt.block_on(async {
            rondo::spawn(async {
                rondo::spawn_blocking(|| std::thread::current().name().unwrap().to_string())
                    .await
                    .unwrap()
            })
            .await
            .unwrap()
        });
        assert_eq!(name, "sbv-blocking");
        // Inside block_on, from the runtime, from a handle on a foreign thread.
        assert_eq!(
            rt.block_on(async { rondo::spawn_blocking(|| 1).await.unwrap() }),
            1
        );
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 2)).unwrap(), 2);
        let h = rt.handle().clone();
        let v = std::thread::spawn(move || h.block_on(h.spawn_blocking(|| 3)).unwrap())
            .join()
            .unwrap();
        assert_eq!(v, 3);
        // Outside any runtime: the global runtime's pool.
        let h = rondo::spawn_blocking(|| std::thread::current().name().unwrap().to_string());
        assert_eq!(rondo::block_on(h).unwrap(), "rondo-global-blocking");
    });
}

#[test]
fn a_blocking_closure_runs_with_its_runtime_and_group_current() {
    watchdog(30, || {
        let rt = rt(2);
        let g = rt.group().name("files").build().unwrap();
        let (name, inner) = rt
            .block_on(g.spawn(async {
                rondo::spawn_blocking(|| {
                    let name = rondo::current_group().map(|g| g.name().to_string());
                    // The runtime is entered: a task spawned here joins the group, and the closure
                    // may block on it.
                    let h = rondo::Handle::current();
                    let inner = h.block_on(rondo::spawn(async {
                        rondo::current_group().map(|g| g.name().to_string())
                    }));
                    (name, inner.unwrap())
                })
                .await
                .unwrap()
            }))
            .unwrap();
        assert_eq!(name.as_deref(), Some("files"));
        assert_eq!(inner.as_deref(), Some("files"));
        let m = g.metrics();
        // The task, its blocking closure and the task spawned inside it.
        assert_eq!((m.spawned, m.completed, m.unfinished), (3, 3, 0));
    });
}

#[test]
fn a_panicking_closure_resolves_as_a_panic_and_reaches_the_hook() {
    watchdog(30, || {
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let rt = builder(2)
            .max_blocking_threads(1)
            .on_task_panic(move |p| {
                assert_eq!(p.message(), Some("blocking boom"));
                s.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap();
        let err = rt
            .block_on(rt.spawn_blocking(|| -> u8 { panic!("blocking boom") }))
            .unwrap_err();
        assert!(err.is_panic());
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        // The pool's only thread survived the panic.
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 5)).unwrap(), 5);
        assert_eq!(rt.handle().blocking_threads(), 1);
    });
}

/// A value whose destructor panics (unless the thread is already unwinding).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a destructor panicked");
        }
    }
}

child_test! {
    /// A detached blocking closure's output whose destructor panics is reported to the panic hook
    /// once, and the pool keeps serving. In a child: an uncaught destructor panic aborts the
    /// process.
    fn a_panicking_destructor_of_a_detached_blocking_output_is_reported_once() {
        let (rt, reported) = common::counting_runtime(1);
        drop(rt.spawn_blocking(|| {
            std::thread::sleep(Duration::from_millis(20));
            PanicsOnDrop
        }));
        assert!(
            eventually(5, || reported.load(Ordering::SeqCst) == 1),
            "the destructor's panic should be reported to on_task_panic"
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(reported.load(Ordering::SeqCst), 1, "reported once");
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 5)).unwrap(), 5, "the pool must survive");
    }
}

/// Recursion that keeps 1 KiB of stack per level.
fn deep(n: u32) -> u32 {
    let buf = [n as u8; 1024];
    let r = if n == 0 { 0 } else { deep(n - 1) };
    std::hint::black_box(&buf);
    r + buf[0] as u32
}

child_test! {
    /// Workers and blocking threads get `thread_stack_size`: about 9 MiB of recursion, more than
    /// a default thread has, runs in a task and in a blocking closure. In a child: a stack
    /// overflow aborts the process.
    fn workers_and_blocking_threads_get_the_thread_stack_size() {
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .thread_stack_size(64 << 20)
            .build()
            .unwrap();
        let expected: u32 = (0..=8 * 1024u32).map(|k| k % 256).sum();
        assert_eq!(rt.block_on(rt.spawn(async { deep(8 * 1024) })).unwrap(), expected);
        assert_eq!(rt.block_on(rt.spawn_blocking(|| deep(8 * 1024))).unwrap(), expected);
    }
}

#[test]
fn at_most_max_blocking_threads_closures_run_at_once() {
    watchdog(60, || {
        let rt = builder(2).max_blocking_threads(2).build().unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..10)
            .map(|i| {
                let (running, max) = (running.clone(), max.clone());
                rt.spawn_blocking(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    record_max(&max, now);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                })
            })
            .collect();
        let sum: i32 = rt.block_on(async {
            let mut sum = 0;
            for h in handles {
                sum += h.await.unwrap();
            }
            sum
        });
        assert_eq!(sum, 45);
        assert!(max.load(Ordering::SeqCst) <= 2, "{max:?} ran at once");
        assert!(rt.handle().blocking_threads() <= 2);
    });
}

#[test]
fn idle_blocking_threads_exit_after_the_keep_alive() {
    watchdog(60, || {
        let rt = builder(2)
            .thread_name("keepalv")
            .blocking_keep_alive(Duration::from_millis(100))
            .build()
            .unwrap();
        run_at_once(&rt, 8);
        assert_eq!(threads_named("keepalv-blockin"), 8);
        assert_eq!(rt.handle().blocking_threads(), 8);
        assert!(eventually(10, || threads_named("keepalv-blockin") == 0));
        assert_eq!(rt.handle().blocking_threads(), 0);
        // The pool starts threads again on demand.
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 9)).unwrap(), 9);
    });
}

#[test]
fn a_thread_reused_within_the_keep_alive_stays() {
    watchdog(60, || {
        let rt = builder(1)
            .blocking_keep_alive(Duration::from_secs(5))
            .build()
            .unwrap();
        for i in 0..200 {
            assert_eq!(rt.block_on(rt.spawn_blocking(move || i)).unwrap(), i);
        }
        // One closure at a time: the thread that ran the last one counts as searching before the
        // awaiting task is woken, so the next spawn finds it instead of starting a thread.
        assert_eq!(rt.handle().blocking_threads(), 1);
    });
}

#[test]
fn a_keep_alive_longer_than_an_instant_reaches_keeps_the_thread_for_good() {
    for keep_alive in [Duration::MAX, Duration::from_secs(u64::MAX)] {
        watchdog(20, move || {
            let rt = rondo::Runtime::builder()
                .worker_threads(1)
                .blocking_keep_alive(keep_alive)
                .build()
                .unwrap();
            assert_eq!(rt.block_on(rt.spawn_blocking(|| 1)).unwrap(), 1);
            // The thread is back waiting (it would have panicked computing its deadline by now).
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(rt.handle().blocking_threads(), 1);
            assert_eq!(rt.block_on(rt.spawn_blocking(|| 2)).unwrap(), 2);
            assert_eq!(rt.handle().blocking_threads(), 1, "{keep_alive:?}");
            // Shutdown still wakes the waiting thread, which exits.
            drop(rt);
        });
    }
}

#[test]
fn pool_threads_run_the_thread_hooks() {
    watchdog(30, || {
        let names = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let stopped = Arc::new(AtomicUsize::new(0));
        let (n, s) = (names.clone(), stopped.clone());
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .thread_name("hooked")
            .on_thread_start(move || {
                let name = std::thread::current().name().unwrap_or("").to_string();
                assert!(rondo::Handle::try_current().is_some(), "{name}: no runtime");
                n.lock().unwrap().push(name);
            })
            .on_thread_stop(move || {
                s.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap();
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 3)).unwrap(), 3);
        drop(rt);
        let mut names = names.lock().unwrap().clone();
        names.sort();
        assert_eq!(names, ["hooked-0", "hooked-blocking"]);
        assert_eq!(stopped.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_panicking_thread_hook_does_not_take_a_pool_thread() {
    watchdog(30, || {
        let rt = builder(1)
            .max_blocking_threads(1)
            .blocking_keep_alive(Duration::from_millis(20))
            .on_thread_start(|| panic!("start hook"))
            .on_thread_stop(|| panic!("stop hook"))
            .build()
            .unwrap();
        for i in 0..3 {
            assert_eq!(rt.block_on(rt.spawn_blocking(move || i)).unwrap(), i);
            // The thread leaves after its keep-alive, running the stop hook, and the next closure
            // starts another.
            assert!(eventually(10, || rt.handle().blocking_threads() == 0));
        }
    });
}

#[test]
fn sixteen_threads_spawn_blocking_concurrently() {
    watchdog(120, || {
        let rt = builder(2).max_blocking_threads(8).build().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(16));
        let spawners: Vec<_> = (0..16)
            .map(|_| {
                let (h, ran, start) = (rt.handle().clone(), ran.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let handles: Vec<_> = (0..2_000)
                        .map(|i| {
                            let ran = ran.clone();
                            h.spawn_blocking(move || {
                                ran.fetch_add(1, Ordering::Relaxed);
                                i
                            })
                        })
                        .collect();
                    let mut sum = 0u64;
                    for j in handles {
                        sum += h.block_on(j).unwrap();
                    }
                    sum
                })
            })
            .collect();
        for s in spawners {
            assert_eq!(s.join().unwrap(), (0..2_000).sum::<u64>());
        }
        assert_eq!(ran.load(Ordering::SeqCst), 32_000);
        assert!(rt.handle().blocking_threads() <= 8);
    });
}

/// Short closures spawned faster than threads wake are served by a few threads that keep up, not
/// by a thread woken (or started) for each closure (which would climb to the pool's 512-thread
/// limit here, one futex wake per spawn).
#[test]
fn a_flood_of_short_closures_does_not_wake_a_thread_each() {
    watchdog(120, || {
        let rt = rt(2);
        let start = Arc::new(Barrier::new(16));
        let spawners: Vec<_> = (0..16)
            .map(|_| {
                let (h, start) = (rt.handle().clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let handles: Vec<_> = (0..2_000).map(|_| h.spawn_blocking(|| ())).collect();
                    for j in handles {
                        h.block_on(j).unwrap();
                    }
                })
            })
            .collect();
        for s in spawners {
            s.join().unwrap();
        }
        // A generous bound (a preempted thread may make the pool add one); the default limit is 512.
        let n = rt.handle().blocking_threads();
        assert!(n <= 64, "{n} pool threads for 32,000 empty closures");
    });
}

#[test]
fn abort_before_a_thread_takes_it_skips_the_closure() {
    watchdog(30, || {
        let rt = builder(2).max_blocking_threads(1).build().unwrap();
        let (release, wait) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let first = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            wait.recv().unwrap();
        });
        started.recv().unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let second = rt.spawn_blocking(move || r.store(true, Ordering::SeqCst));
        second.abort();
        release.send(()).unwrap();
        rt.block_on(first).unwrap();
        assert!(rt.block_on(second).unwrap_err().is_cancelled());
        // The pool's thread has moved past the aborted closure.
        rt.block_on(rt.spawn_blocking(|| ())).unwrap();
        assert!(!ran.load(Ordering::SeqCst));
    });
}

#[test]
fn drop_waits_for_running_closures_and_cancels_queued_ones() {
    watchdog(30, || {
        let rt = builder(2)
            .thread_name("dropwait")
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let finished = Arc::new(AtomicBool::new(false));
        let queued_ran = Arc::new(AtomicBool::new(false));
        let (started_tx, started) = mpsc::channel::<()>();
        let f = finished.clone();
        let running = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            f.store(true, Ordering::SeqCst);
            7
        });
        started.recv().unwrap();
        let q = queued_ran.clone();
        let queued = rt.spawn_blocking(move || q.store(true, Ordering::SeqCst));
        drop(rt);
        assert!(
            finished.load(Ordering::SeqCst),
            "drop returned before the closure ended"
        );
        assert!(!queued_ran.load(Ordering::SeqCst));
        assert_eq!(futures::executor::block_on(running).unwrap(), 7);
        assert!(
            futures::executor::block_on(queued)
                .unwrap_err()
                .is_cancelled()
        );
        // Every pool thread was joined.
        assert_eq!(threads_named("dropwait-blocki"), 0);
    });
}

#[test]
fn shutdown_timeout_leaves_a_long_closure_to_its_thread() {
    watchdog(30, || {
        let rt = builder(2).thread_name("shuttime").build().unwrap();
        let (started_tx, started) = mpsc::channel::<()>();
        let h = rt.spawn_blocking(move || {
            started_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(1_500));
        });
        started.recv().unwrap();
        let t = Instant::now();
        rt.shutdown_timeout(Duration::from_millis(50));
        assert!(
            t.elapsed() < Duration::from_millis(1_000),
            "{:?}",
            t.elapsed()
        );
        // The closure finishes on its own, and its thread exits.
        futures::executor::block_on(h).unwrap();
        assert!(eventually(10, || threads_named("shuttime-blocki") == 0));
        assert!(eventually(10, || threads_named("shuttime") == 0));
    });
}

#[test]
fn spawning_after_shutdown_is_cancelled() {
    watchdog(30, || {
        let rt = rt(2);
        let h = rt.handle().clone();
        drop(rt);
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let j = h.spawn_blocking(move || r.store(true, Ordering::SeqCst));
        assert!(futures::executor::block_on(j).unwrap_err().is_cancelled());
        assert!(!ran.load(Ordering::SeqCst));
    });
}

#[test]
fn no_pool_thread_outlives_the_runtime() {
    watchdog(60, || {
        let rt = builder(2).thread_name("noleak").build().unwrap();
        run_at_once(&rt, 6);
        assert_eq!(threads_named("noleak-blocking"), 6);
        drop(rt);
        // Every thread was joined; a joined thread's /proc entry can outlive the join by a moment
        // (the kernel wakes the joiner before it reaps the task), which a loaded CI machine saw.
        assert!(
            eventually(5, || threads_named("noleak") == 0),
            "{} threads left",
            threads_named("noleak")
        );
    });
}

#[test]
fn block_in_place_keeps_the_group_and_is_not_charged() {
    watchdog(30, || {
        let rt = rt(2);
        let g = rt.group().name("tenant").build().unwrap();
        let (before, inside, after, same_thread) = rt
            .block_on(g.spawn(async {
                let name = || rondo::current_group().map(|g| g.name().to_string());
                let before = name();
                let me = std::thread::current().id();
                let (inside, there) = rondo::block_in_place(|| {
                    std::thread::sleep(Duration::from_millis(150));
                    (name(), std::thread::current().id())
                });
                (before, inside, name(), me == there)
            }))
            .unwrap();
        assert_eq!(before.as_deref(), Some("tenant"));
        assert_eq!(inside, before);
        assert_eq!(after, before);
        assert!(
            same_thread,
            "block_in_place runs its closure on the calling thread"
        );
        // Metrics are flushed at segment ends; give the worker a moment to park.
        assert!(eventually(5, || g.metrics().polls >= 1));
        let m = g.metrics();
        assert_eq!((m.spawned, m.completed, m.unfinished), (1, 1, 0));
        // The 150 ms the closure slept are charged to no group (see `rondo::block_in_place`).
        assert!(m.busy < Duration::from_millis(100), "busy {:?}", m.busy);
    });
}

#[test]
fn block_in_place_twice_in_one_poll_and_outside_a_task() {
    watchdog(30, || {
        assert_eq!(rondo::block_in_place(|| 1), 1);
        let rt = rt(2);
        let v = rt.block_on(async {
            // Inside block_on but not a task: no core to hand over.
            let a = rondo::block_in_place(|| 10);
            let b = rondo::spawn(async {
                let x = rondo::block_in_place(|| {
                    std::thread::sleep(Duration::from_millis(5));
                    1
                });
                let y = rondo::block_in_place(|| 2);
                rondo::yield_now().await;
                x + y + rondo::block_in_place(|| 3)
            })
            .await
            .unwrap();
            a + b
        });
        assert_eq!(v, 16);
    });
}

/// `block_in_place` in a task of the global runtime (spawned under `rondo::block_on` outside any
/// runtime) hands that runtime's core over like any other.
#[test]
fn block_in_place_works_on_the_global_runtime() {
    watchdog(30, || {
        let v = rondo::block_on(async {
            let a = rondo::block_in_place(|| 10);
            let b = rondo::spawn(async {
                let x = rondo::block_in_place(|| {
                    std::thread::sleep(Duration::from_millis(5));
                    1
                });
                rondo::yield_now().await;
                x + rondo::block_in_place(|| 2)
            })
            .await
            .unwrap();
            a + b
        });
        assert_eq!(v, 13);
    });
}

/// The first `block_in_place` of a poll hands the core over and the thread takes it back only
/// when the poll returns, so later calls in the same poll have nothing to hand over: one hand-off
/// per poll, however many calls. (Taking the core back after each closure handed it over again at
/// every call: about 30 hand-offs here.) Work the rest of the poll spawns still runs.
#[test]
fn block_in_place_hands_the_core_over_once_per_poll() {
    for workers in [1, 2, 4] {
        watchdog(30, move || {
            let rt = rt(workers);
            let before = rt.metrics().hand_offs;
            let sum = rt.block_on(async {
                rondo::spawn(async {
                    let mut sum = 0;
                    for i in 0..10 {
                        sum += rondo::block_in_place(|| i);
                        sum += rondo::block_in_place(|| 100);
                        let after = rondo::spawn(async { 1000 });
                        sum += rondo::block_in_place(|| 10_000);
                        sum += after.await.unwrap();
                    }
                    sum
                })
                .await
                .unwrap()
            });
            assert_eq!(sum, 45 + 10 * 11_100);
            let hand_offs = rt.metrics().hand_offs - before;
            // 10 polls hand over (the last `await` of each iteration may not even suspend, then
            // the next iteration's calls find the core already away).
            assert!(
                (1..=10).contains(&hand_offs),
                "{workers} workers: {hand_offs} hand-offs for 30 calls in at most 10 polls"
            );
        });
    }
}

#[test]
fn a_panic_in_block_in_place_fails_only_its_task() {
    watchdog(30, || {
        let rt = rt(2);
        let err = rt
            .block_on(rondo::spawn(async {
                rondo::block_in_place(|| -> u8 { panic!("in place") })
            }))
            .unwrap_err();
        assert!(err.is_panic());
        // Every worker still runs tasks.
        let n = rt.handle().worker_count() * 4;
        let hs: Vec<_> = (0..n).map(|i| rt.spawn(async move { i })).collect();
        let sum: usize = rt.block_on(async {
            let mut s = 0;
            for h in hs {
                s += h.await.unwrap();
            }
            s
        });
        assert_eq!(sum, (0..n).sum());
    });
}

#[test]
fn every_worker_blocking_in_place_does_not_stall_other_tasks() {
    watchdog(60, || {
        let rt = rt(2);
        let workers = rt.handle().worker_count();
        let blocking = Arc::new(AtomicUsize::new(0));
        let slept = Arc::new(AtomicUsize::new(0));
        let sleepers: Vec<_> = (0..workers)
            .map(|_| {
                let (blocking, slept) = (blocking.clone(), slept.clone());
                rt.spawn(async move {
                    rondo::block_in_place(|| {
                        blocking.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(200));
                        slept.fetch_add(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        // Each worker's task got its own thread: all of them sleep at once.
        assert!(eventually(10, || blocking.load(Ordering::SeqCst) == workers));
        let t = Instant::now();
        let small: Vec<_> = (0..1_000u64).map(|i| rt.spawn(async move { i })).collect();
        let sum: u64 = rt.block_on(async {
            let mut s = 0;
            for h in small {
                s += h.await.unwrap();
            }
            s
        });
        let took = t.elapsed();
        let done_sleeping = slept.load(Ordering::SeqCst);
        assert_eq!(sum, (0..1_000).sum::<u64>());
        assert_eq!(
            done_sleeping, 0,
            "the small tasks waited for the blocked workers ({took:?})"
        );
        for h in sleepers {
            rt.block_on(h).unwrap();
        }
    });
}

#[test]
fn shutdown_does_not_wait_for_a_task_blocked_in_place_past_its_timeout() {
    watchdog(30, || {
        let rt = rt(2);
        let (started_tx, started) = mpsc::channel::<()>();
        let _h = rt.spawn(async move {
            rondo::block_in_place(|| {
                started_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(1_500));
            })
        });
        started.recv().unwrap();
        let t = Instant::now();
        rt.shutdown_timeout(Duration::from_millis(50));
        assert!(
            t.elapsed() < Duration::from_millis(1_000),
            "{:?}",
            t.elapsed()
        );
    });
}

#[test]
fn zero_blocking_settings_are_rejected() {
    let err = rondo::Runtime::builder()
        .max_blocking_threads(0)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "max_blocking_threads must be at least 1 (got 0)"
    );
    let err = rondo::Runtime::builder()
        .blocking_keep_alive(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "blocking_keep_alive must be more than zero (got 0 s)"
    );
    // The smallest allowed values work.
    let rt = rondo::Runtime::builder()
        .max_blocking_threads(1)
        .blocking_keep_alive(Duration::from_nanos(1))
        .build()
        .unwrap();
    assert_eq!(rt.block_on(rt.spawn_blocking(|| 4)).unwrap(), 4);
}

/// Threads started to take over a core (here by `block_in_place`, as rescues do) are named on
/// from the worker count: every thread of the runtime has a name of its own.
#[test]
fn threads_that_take_over_a_core_get_names_of_their_own() {
    watchdog(60, || {
        // One worker whatever `RONDO_TEST_WORKERS` says: the names are counted from it.
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .thread_name("own")
            .build()
            .unwrap();
        fn name() -> String {
            std::thread::current().name().unwrap_or("").to_string()
        }
        // Each level blocks in place, so its core goes to a new thread, and spawns the next level,
        // which the new thread runs.
        fn level(depth: usize, names: mpsc::Sender<String>) {
            let _ = names.send(name());
            if depth == 0 {
                return;
            }
            rondo::block_in_place(|| {
                let (tx, rx) = mpsc::channel();
                let next = names.clone();
                rondo::spawn(async move {
                    level(depth - 1, next);
                    let _ = tx.send(());
                });
                rx.recv().unwrap();
            });
        }
        let (tx, rx) = mpsc::channel();
        rt.block_on(rt.spawn(async move { level(2, tx) })).unwrap();
        let names: Vec<String> = rx.try_iter().collect();
        assert_eq!(names, ["own-0", "own-1", "own-2"], "thread names");
    });
}

/// Spawns `B`, which sets a flag, then runs `wait` (which blocks this thread until the flag is
/// set or five seconds pass) inside a nested `block_on`'s first poll, on a runtime with one
/// worker. True if `B` ran meanwhile.
fn nested_first_poll_lets_others_run(rt: &rondo::Runtime, in_place: bool) -> bool {
    fn wait_for(flag: &AtomicBool) -> bool {
        let start = Instant::now();
        while !flag.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(2));
        }
        flag.load(Ordering::SeqCst)
    }
    let ran = Arc::new(AtomicBool::new(false));
    rt.block_on(rt.spawn(async move {
        let r = ran.clone();
        rondo::spawn(async move { r.store(true, Ordering::SeqCst) });
        rondo::block_on(async move {
            if in_place {
                rondo::block_in_place(|| wait_for(&ran))
            } else {
                wait_for(&ran)
            }
        })
    }))
    .unwrap()
}

/// A nested `block_on` whose future blocks before its first `Pending` is rescued like any
/// blocking poll: its worker's queued task runs on another thread meanwhile.
#[test]
fn blocking_in_a_nested_block_ons_first_poll_is_rescued() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::from_millis(20))
            .build()
            .unwrap();
        assert!(
            nested_first_poll_lets_others_run(&rt, false),
            "the queued task did not run while the nested block_on's first poll blocked"
        );
    });
}

/// `block_in_place` inside a nested `block_on`'s first poll hands the worker over.
#[test]
fn block_in_place_in_a_nested_block_ons_first_poll_hands_the_worker_over() {
    watchdog(60, || {
        // No rescue: the hand-off alone must let the queued task run.
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::MAX)
            .build()
            .unwrap();
        assert!(
            nested_first_poll_lets_others_run(&rt, true),
            "the queued task did not run while block_in_place blocked"
        );
    });
}

/// A `block_on` of runtime B inside a task of runtime A: B's future is polled with A's worker
/// held aside, so its timers arm in B's wheels and A's shutdown does not touch them.
#[test]
fn another_runtimes_block_on_inside_a_task_keeps_its_timers_in_its_own_runtime() {
    watchdog(60, || {
        let a = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let b = Arc::new(rondo::Runtime::builder().worker_threads(1).build().unwrap());
        let (tx, rx) = mpsc::channel();
        let bb = b.clone();
        a.spawn(async move {
            let slept = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                bb.block_on(rondo::time::sleep(Duration::from_millis(300)))
            }));
            let _ = tx.send(slept.is_ok());
        });
        // Let the sleep be armed, then shut A down around the waiting block_on.
        std::thread::sleep(Duration::from_millis(100));
        a.shutdown_timeout(Duration::from_millis(10));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Ok(true),
            "B's sleep was cut short by A's shutdown"
        );
    });
}

/// A task that calls `block_in_place` once a poll, many polls in a row, on a one-worker runtime:
/// each call hands the core over and takes it back when the poll returns, mostly before the thread
/// started for it (or the spare woken for it) arrives. A thread on its way to wait as a spare
/// counts as one, so the next hand-off goes to it instead of starting another, and a thread whose
/// core went to another while its poll returned stays as a spare only if no other spare is free:
/// the runtime's threads stay within the worker, the thread blocked in place and one spare, under
/// any load, and at any moment within one more, the thread whose poll is still returning.
#[test]
fn repeated_block_in_place_does_not_pile_up_spare_threads() {
    watchdog(60, || {
        const CALLS: usize = 3_000;
        const WORKERS: usize = 1;
        // Spares exit only after their keep-alive (10 s), far longer than this test.
        let rt = rondo::Runtime::builder()
            .worker_threads(WORKERS)
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        let most = rt
            .block_on(rt.spawn(async move {
                let mut most = 0;
                for i in 0..CALLS {
                    rondo::block_in_place(|| std::hint::black_box(i));
                    rondo::yield_now().await;
                    most = most.max(handle.metrics().threads);
                }
                most
            }))
            .unwrap();
        let m = rt.metrics();
        assert!(
            m.hand_offs >= CALLS as u64 / 2,
            "block_in_place handed the core over only {} times in {CALLS} polls",
            m.hand_offs
        );
        assert!(
            most <= WORKERS + 3 && m.threads <= WORKERS + 2,
            "{CALLS} calls of block_in_place left {} runtime threads ({} spare; at most {most} \
             at once) for {WORKERS} worker",
            m.threads,
            m.spare_threads
        );
    });
}
