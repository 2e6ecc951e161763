//! The core runtime's guarantees (issue 2): spawning, joining, cancellation, panics, nested
//! `block_on`, shutdown, isolation, wakeups and starvation protection; destructors that panic,
//! block or spawn, the current runtime, and large futures. The cases whose failure would abort
//! the process or hang it run in a child process (`child_test!`, `common/child.rs`).

#[macro_use]
mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{DropCount, eventually, rt, watchdog};
use futures::channel::{mpsc, oneshot};
use futures::{SinkExt, StreamExt};

#[test]
fn spawn_and_join_100_000_tasks() {
    watchdog(60, || {
        let rt = rt(2);
        let sum = rt.block_on(async {
            let handles: Vec<_> = (0..100_000u64)
                .map(|i| rondo::spawn(async move { i }))
                .collect();
            let mut sum = 0u64;
            for h in handles {
                sum += h.await.unwrap();
            }
            sum
        });
        assert_eq!(sum, 100_000 * 99_999 / 2);
    });
}

#[test]
fn nested_spawn_three_levels() {
    watchdog(30, || {
        let rt = rt(2);
        let total = rt.block_on(async {
            let outer: Vec<_> = (0..10u64)
                .map(|i| {
                    rondo::spawn(async move {
                        let mid: Vec<_> = (0..10u64)
                            .map(|j| {
                                rondo::spawn(async move {
                                    rondo::spawn(async move { i * 100 + j }).await.unwrap()
                                })
                            })
                            .collect();
                        let mut s = 0;
                        for h in mid {
                            s += h.await.unwrap();
                        }
                        s
                    })
                })
                .collect();
            let mut s = 0;
            for h in outer {
                s += h.await.unwrap();
            }
            s
        });
        let expected: u64 = (0..10u64)
            .flat_map(|i| (0..10u64).map(move |j| i * 100 + j))
            .sum();
        assert_eq!(total, expected);
    });
}

#[test]
fn global_runtime_spawn_and_block_on() {
    watchdog(30, || {
        let h = rondo::spawn(async { 40 + 2 });
        assert_eq!(rondo::block_on(h).unwrap(), 42);
    });
}

#[test]
fn abort_of_a_queued_task_drops_it_unpolled() {
    watchdog(30, || {
        let rt = rt(1);
        let release = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        // Occupy the only worker.
        let blocker = rt.spawn(async move {
            while !r.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        });
        let ran = Arc::new(AtomicBool::new(false));
        let drops = DropCount::new();
        let (ran2, guard) = (ran.clone(), drops.guard());
        let queued = rt.spawn(async move {
            let _g = guard;
            ran2.store(true, Ordering::SeqCst);
        });
        queued.abort();
        release.store(true, Ordering::SeqCst);
        rt.block_on(blocker).unwrap();
        let err = rt.block_on(queued).unwrap_err();
        assert!(err.is_cancelled());
        assert!(!err.is_panic());
        assert!(
            !ran.load(Ordering::SeqCst),
            "an aborted queued task must not run"
        );
        assert_eq!(drops.get(), 1);
    });
}

#[test]
fn abort_of_a_running_task_drops_it_on_a_worker_at_its_next_suspension() {
    watchdog(30, || {
        let rt = rondo::Runtime::builder()
            .worker_threads(2)
            .thread_name("abort-worker")
            .build()
            .unwrap();
        let (started_tx, started_rx) = oneshot::channel::<()>();
        let dropped_on = Arc::new(Mutex::new(None::<String>));
        struct NoteThread(Arc<Mutex<Option<String>>>);
        impl Drop for NoteThread {
            fn drop(&mut self) {
                let name = std::thread::current().name().unwrap_or("?").to_string();
                *self.0.lock().unwrap() = Some(name);
            }
        }
        let note = NoteThread(dropped_on.clone());
        let h = rt.spawn(async move {
            let _note = note;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        rt.block_on(started_rx).unwrap();
        h.abort();
        let err = rt.block_on(h).unwrap_err();
        assert!(err.is_cancelled());
        let name = dropped_on
            .lock()
            .unwrap()
            .clone()
            .expect("future was dropped");
        assert!(
            name.starts_with("abort-worker-"),
            "the future must be dropped by a worker, not inline on the aborting thread (was {name})"
        );
    });
}

#[test]
fn abort_after_completion_keeps_the_output() {
    watchdog(30, || {
        let rt = rt(2);
        let h = rt.spawn(async { 5 });
        assert!(eventually(10, || h.is_finished()));
        h.abort();
        assert_eq!(rt.block_on(h).unwrap(), 5);
    });
}

#[test]
fn panics_are_isolated_reported_and_carry_the_payload() {
    watchdog(30, || {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s = seen.clone();
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .on_task_panic(move |p| {
                s.lock().unwrap().push(format!(
                    "{}:{}",
                    p.group_name(),
                    p.message().unwrap_or("?")
                ));
            })
            .build()
            .unwrap();
        let err = rt
            .block_on(rt.spawn(async { panic!("first") }))
            .unwrap_err();
        assert!(err.is_panic());
        assert!(!err.is_cancelled());
        assert_eq!(err.to_string(), "task panicked: first");
        let payload = err.into_panic();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"first"));

        // A detached task's panic reaches the hook too.
        drop(rt.spawn(async { panic!("{}", String::from("detached")) }));
        assert!(eventually(10, || seen.lock().unwrap().len() == 2));

        // The single worker survived both panics.
        let sum = rt.block_on(async {
            let hs: Vec<_> = (0..100).map(|i| rondo::spawn(async move { i })).collect();
            let mut s = 0;
            for h in hs {
                s += h.await.unwrap();
            }
            s
        });
        assert_eq!(sum, 4950);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec!["default:first".to_string(), "default:detached".to_string()]
        );
    });
}

#[test]
fn a_panic_in_block_on_propagates_to_the_caller() {
    let rt = rt(1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async { panic!("in block_on") })
    }));
    let p = r.unwrap_err();
    assert_eq!(p.downcast_ref::<&str>(), Some(&"in block_on"));
    // The runtime is still usable.
    assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
}

#[test]
fn nested_block_on_on_a_single_worker_runs_queued_tasks_instead_of_deadlocking() {
    watchdog(30, || {
        let rt = rt(1);
        let v = rt.block_on(rt.spawn(async {
            // The only worker blocks here; the child can only run if the worker keeps serving
            // its queue while it waits.
            rondo::block_on(async {
                let a = rondo::spawn(async { 20 });
                let b = rondo::spawn(async {
                    rondo::yield_now().await;
                    22
                });
                a.await.unwrap() + b.await.unwrap()
            })
        }));
        assert_eq!(v.unwrap(), 42);
    });
}

#[test]
fn nested_block_on_waits_for_a_foreign_wake() {
    watchdog(30, || {
        let rt = rt(1);
        let (tx, rx) = oneshot::channel::<u32>();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(9).unwrap();
        });
        let v = rt.block_on(rt.spawn(async move { rondo::block_on(rx).unwrap() }));
        assert_eq!(v.unwrap(), 9);
    });
}

/// `B.block_on` inside a task of runtime A: its future belongs to B (spawns and `Handle::current()`
/// go to B), while the tasks of A that A's worker runs meanwhile still see A.
#[test]
fn nested_block_on_of_another_runtime_keeps_each_runtime_current() {
    watchdog(30, || {
        /// The current thread's name; it must start with `prefix`.
        fn on(prefix: &str) -> String {
            let name = std::thread::current().name().unwrap_or("").to_string();
            assert!(name.starts_with(prefix), "ran on {name:?}, not on {prefix}");
            name
        }
        let a = rondo::Builder::new()
            .worker_threads(1)
            .thread_name("rt-a")
            .build()
            .unwrap();
        let b = rondo::Builder::new()
            .worker_threads(1)
            .thread_name("rt-b")
            .build()
            .unwrap();
        let b_handle = b.handle().clone();
        let h = a.spawn(async move {
            // Queued on A's only worker, which can run it only while this task waits below.
            let probe = rondo::spawn(async {
                rondo::Handle::current()
                    .spawn(async move { on("rt-a") })
                    .await
                    .unwrap()
            });
            let (spawned, via_current) = b_handle.block_on(async {
                let x = rondo::spawn(async move { on("rt-b") }).await.unwrap();
                let y = rondo::Handle::current().spawn(async move { on("rt-b") });
                (x, y.await.unwrap())
            });
            let inner = probe.await.unwrap();
            (spawned, via_current, inner)
        });
        let (spawned, via_current, inner) = a.block_on(h).unwrap();
        assert!(spawned.starts_with("rt-b") && via_current.starts_with("rt-b"));
        assert!(
            inner.starts_with("rt-a"),
            "a task of A saw B as current: {inner}"
        );
    });
}

#[test]
fn shutdown_drops_every_future_exactly_once_including_never_polled_ones() {
    watchdog(60, || {
        let drops = DropCount::new();
        let polled = Arc::new(AtomicUsize::new(0));
        // No rescue: the stall monitor would give the occupied worker's core to another thread,
        // which would run the queued tasks before the drop (it did under ThreadSanitizer on a
        // loaded machine, where spawning them outlasted the default threshold).
        let rt = common::builder(1)
            .stall_threshold(Duration::from_secs(600))
            .build()
            .unwrap();
        // Tasks that were polled and now wait forever.
        let (started_tx, mut started_rx) = mpsc::unbounded::<()>();
        let mut handles = Vec::new();
        for _ in 0..50 {
            let (g, tx) = (drops.guard(), started_tx.clone());
            handles.push(rt.spawn(async move {
                let _g = g;
                tx.unbounded_send(()).unwrap();
                std::future::pending::<()>().await;
            }));
        }
        rt.block_on(async {
            for _ in 0..50 {
                started_rx.next().await.unwrap();
            }
        });
        // Occupy the worker until the drop has begun (not for a fixed time, which a slow machine
        // can exceed while spawning), then queue tasks it will never get to poll.
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        rt.spawn(async move {
            let _ = release_rx.recv();
        });
        for _ in 0..1000 {
            let (g, p) = (drops.guard(), polled.clone());
            handles.push(rt.spawn(async move {
                let _g = g;
                p.fetch_add(1, Ordering::SeqCst);
            }));
        }
        // A spawn resolves cancelled at once only after shutdown began: that releases the worker.
        let handle = rt.handle().clone();
        let releaser = std::thread::spawn(move || {
            loop {
                let probe = handle.spawn(async {});
                if probe.is_finished() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = release_tx.send(());
        });
        drop(rt);
        releaser.join().unwrap();
        assert_eq!(
            polled.load(Ordering::SeqCst),
            0,
            "queued tasks must not run after shutdown began"
        );
        assert_eq!(drops.get(), 1050, "every future dropped exactly once");
        for h in handles {
            assert!(h.is_finished());
            assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
        }
        assert_eq!(drops.get(), 1050);
    });
}

#[test]
fn spawning_after_shutdown_returns_a_cancelled_handle() {
    let rt = rt(1);
    let handle = rt.handle().clone();
    drop(rt);
    let drops = DropCount::new();
    let g = drops.guard();
    let h = handle.spawn(async move {
        let _g = g;
    });
    assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_waker_that_fires_after_shutdown_is_harmless() {
    watchdog(30, || {
        let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
        let rt = rt(2);
        let s = slot.clone();
        let h = rt.spawn(std::future::poll_fn(move |cx: &mut Context<'_>| {
            *s.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        }));
        assert!(eventually(10, || slot.lock().unwrap().is_some()));
        drop(rt);
        let w = slot.lock().unwrap().take().unwrap();
        w.wake_by_ref();
        w.wake();
        assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
    });
}

#[test]
fn shutdown_timeout_returns_even_if_a_task_blocks_its_worker() {
    let rt = rt(1);
    rt.spawn(async {
        std::thread::sleep(Duration::from_secs(3));
    });
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    rt.shutdown_timeout(Duration::from_millis(100));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "shutdown_timeout waited {:?}",
        t.elapsed()
    );
}

#[test]
fn two_runtimes_are_isolated() {
    watchdog(30, || {
        let a = rondo::Runtime::builder()
            .worker_threads(2)
            .thread_name("iso-a")
            .build()
            .unwrap();
        let b = rondo::Runtime::builder()
            .worker_threads(1)
            .thread_name("iso-b")
            .build()
            .unwrap();
        // Block every worker of A.
        let release = Arc::new(AtomicBool::new(false));
        let blockers: Vec<_> = (0..2)
            .map(|_| {
                let r = release.clone();
                a.spawn(async move {
                    while !r.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        // B still runs its own tasks, on its own threads, and its spawns stay on B.
        let names = b.block_on(async {
            let hs: Vec<_> = (0..100)
                .map(|_| {
                    rondo::spawn(async {
                        rondo::spawn(async { std::thread::current().name().unwrap().to_string() })
                            .await
                            .unwrap()
                    })
                })
                .collect();
            let mut v = Vec::new();
            for h in hs {
                v.push(h.await.unwrap());
            }
            v
        });
        assert!(names.iter().all(|n| n == "iso-b-0"), "{names:?}");
        release.store(true, Ordering::SeqCst);
        for h in blockers {
            a.block_on(h).unwrap();
        }
        let an = a.block_on(a.spawn(async { std::thread::current().name().unwrap().to_string() }));
        assert!(an.unwrap().starts_with("iso-a-"));
    });
}

#[test]
fn one_hundred_thousand_wakes_from_foreign_threads_lose_none() {
    watchdog(120, || {
        let rt = rt(2);
        for _round in 0..100 {
            let mut senders = Vec::with_capacity(1000);
            let mut handles = Vec::with_capacity(1000);
            for i in 0..1000u32 {
                let (tx, rx) = oneshot::channel::<u32>();
                senders.push((i, tx));
                handles.push(rt.spawn(async move { rx.await.unwrap() }));
            }
            // Two foreign threads complete the channels, racing the tasks' first polls.
            let second = senders.split_off(500);
            let t1 = std::thread::spawn(move || {
                for (i, tx) in senders {
                    tx.send(i).unwrap();
                }
            });
            let t2 = std::thread::spawn(move || {
                for (i, tx) in second {
                    tx.send(i).unwrap();
                }
            });
            t1.join().unwrap();
            t2.join().unwrap();
            let sum: u64 = rt.block_on(async {
                let mut s = 0u64;
                for h in handles {
                    s += u64::from(h.await.unwrap());
                }
                s
            });
            assert_eq!(sum, 999 * 1000 / 2);
        }
    });
}

#[test]
fn repeated_self_wakes_from_a_foreign_thread_lose_none() {
    // One task is woken 100,000 times in a row by a foreign thread, each wake racing its park.
    struct Counter {
        produced: AtomicUsize,
        waker: Mutex<Option<Waker>>,
    }
    struct Consume {
        c: Arc<Counter>,
        consumed: usize,
    }
    impl Future for Consume {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            loop {
                if self.consumed == 100_000 {
                    return Poll::Ready(());
                }
                if self.c.produced.load(Ordering::SeqCst) > self.consumed {
                    self.consumed += 1;
                    continue;
                }
                *self.c.waker.lock().unwrap() = Some(cx.waker().clone());
                if self.c.produced.load(Ordering::SeqCst) > self.consumed {
                    continue;
                }
                return Poll::Pending;
            }
        }
    }
    watchdog(120, || {
        let rt = rt(2);
        let c = Arc::new(Counter {
            produced: AtomicUsize::new(0),
            waker: Mutex::new(None),
        });
        let h = rt.spawn(Consume {
            c: c.clone(),
            consumed: 0,
        });
        for _ in 0..100_000 {
            c.produced.fetch_add(1, Ordering::SeqCst);
            if let Some(w) = c.waker.lock().unwrap().take() {
                w.wake();
            }
        }
        rt.block_on(h).unwrap();
    });
}

#[test]
fn a_yield_goes_to_the_back_not_the_lifo_slot() {
    watchdog(30, || {
        let rt = rt(1);
        let log = Arc::new(Mutex::new(Vec::<&'static str>::new()));
        let l = log.clone();
        rt.block_on(rt.spawn(async move {
            l.lock().unwrap().push("a1");
            let l2 = l.clone();
            let b = rondo::spawn(async move { l2.lock().unwrap().push("b") });
            rondo::yield_now().await;
            l.lock().unwrap().push("a2");
            b.await.unwrap();
        }))
        .unwrap();
        assert_eq!(*log.lock().unwrap(), vec!["a1", "b", "a2"]);
    });
}

#[test]
fn a_ping_pong_pair_does_not_starve_the_local_queue() {
    watchdog(30, || {
        let rt = rt(1);
        let stop = Arc::new(AtomicBool::new(false));
        rt.block_on(rt.spawn({
            let stop = stop.clone();
            async move {
                // Queued first: it only runs if the LIFO slot yields to the local queue.
                let s = stop.clone();
                let other = rondo::spawn(async move {
                    for _ in 0..100 {
                        rondo::yield_now().await;
                    }
                    s.store(true, Ordering::SeqCst);
                });
                let (mut tx1, mut rx1) = mpsc::channel::<u32>(1);
                let (mut tx2, mut rx2) = mpsc::channel::<u32>(1);
                let s1 = stop.clone();
                let p1 = rondo::spawn(async move {
                    let mut n = 0u32;
                    while !s1.load(Ordering::SeqCst) {
                        tx1.send(n).await.unwrap();
                        n = rx2.next().await.unwrap();
                    }
                });
                let s2 = stop.clone();
                let p2 = rondo::spawn(async move {
                    while !s2.load(Ordering::SeqCst) {
                        let n = rx1.next().await.unwrap();
                        if tx2.send(n + 1).await.is_err() {
                            break;
                        }
                    }
                });
                other.await.unwrap();
                p1.await.unwrap();
                p2.abort();
                let _ = p2.await;
            }
        }))
        .unwrap();
        assert!(stop.load(Ordering::SeqCst));
    });
}

#[test]
fn an_always_ready_loop_cannot_monopolise_a_worker() {
    watchdog(30, || {
        let rt = rt(1);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let busy = rt.spawn(async move {
            let mut n = 0u64;
            while !s.load(Ordering::SeqCst) {
                rondo::task::consume_budget().await;
                n += 1;
            }
            n
        });
        let s = stop.clone();
        let setter = rt.spawn(async move { s.store(true, Ordering::SeqCst) });
        rt.block_on(setter).unwrap();
        assert!(rt.block_on(busy).unwrap() >= rondo::task::BUDGET as u64);
    });
}

#[test]
fn dropping_a_join_handle_detaches_the_task() {
    watchdog(30, || {
        let rt = rt(2);
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        drop(rt.spawn(async move {
            rondo::yield_now().await;
            d.store(true, Ordering::SeqCst);
        }));
        assert!(eventually(10, || done.load(Ordering::SeqCst)));
    });
}

#[test]
fn handle_current_outside_and_inside() {
    assert!(rondo::Handle::try_current().is_none());
    let p = std::panic::catch_unwind(rondo::Handle::current).unwrap_err();
    let msg = p
        .downcast_ref::<&str>()
        .copied()
        .map(String::from)
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap();
    assert!(msg.contains("outside a rondo runtime"), "{msg}");
    let rt = rt(1);
    rt.block_on(async {
        assert!(rondo::Handle::try_current().is_some());
        let inner = rondo::spawn(async { rondo::Handle::try_current().is_some() })
            .await
            .unwrap();
        assert!(inner);
    });
}

#[test]
fn shutdown_timeout_of_duration_max_waits_as_long_as_it_takes() {
    for timeout in [Duration::MAX, Duration::from_secs(u64::MAX)] {
        watchdog(30, move || {
            let drops = DropCount::new();
            let rt = rt(1);
            let g = drops.guard();
            rt.spawn(async move {
                let _g = g;
                std::future::pending::<()>().await;
            });
            // A running blocking closure is waited for, however long it takes.
            let finished = Arc::new(AtomicBool::new(false));
            let f = finished.clone();
            let (started_tx, started) = std::sync::mpsc::channel();
            rt.spawn_blocking(move || {
                started_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                f.store(true, Ordering::SeqCst);
            });
            started.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                rt.shutdown_timeout(timeout)
            }));
            assert!(r.is_ok(), "shutdown_timeout({timeout:?}) panicked");
            assert_eq!(drops.get(), 1, "the pending task's future must be dropped");
            assert!(
                finished.load(Ordering::SeqCst),
                "the blocking closure was not waited for"
            );
        });
    }
}

#[test]
fn a_thread_stack_size_too_large_is_rejected_with_a_clear_error() {
    for size in [usize::MAX, usize::MAX / 4096] {
        let err = rondo::Runtime::builder()
            .worker_threads(1)
            .thread_stack_size(size)
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("thread_stack_size")
                && err.contains("between")
                && err.contains(&size.to_string()),
            "{err}"
        );
    }
}

#[test]
fn builder_rejects_invalid_settings_with_clear_errors() {
    let cases: Vec<(rondo::Builder, &str)> = vec![
        (
            rondo::Builder::new().worker_threads(0),
            "worker_threads must be at least 1",
        ),
        (
            rondo::Builder::new().worker_threads(rondo::runtime::MAX_WORKERS + 1),
            "worker_threads must be at most",
        ),
        (
            rondo::Builder::new().thread_name(""),
            "thread_name must be non-empty",
        ),
        (rondo::Builder::new().thread_name("a\0b"), "no NUL"),
        (
            rondo::Builder::new().quantum(Duration::from_micros(1)),
            "quantum must be between",
        ),
        (
            rondo::Builder::new().quantum(Duration::from_secs(1)),
            "quantum must be between",
        ),
    ];
    for (b, want) in cases {
        let err = b.build().unwrap_err();
        assert!(
            err.to_string().contains(want),
            "{err} should mention {want:?}"
        );
    }
    assert!(rondo::Builder::new().worker_threads(1).build().is_ok());
    let io = rondo::Runtime::new();
    assert!(io.is_ok());
}

#[test]
fn dropping_a_runtime_while_a_worker_waits_in_a_nested_block_on_does_not_hang() {
    watchdog(30, || {
        let rt = rt(1);
        let (started_tx, started_rx) = oneshot::channel::<()>();
        let outer = rt.spawn(async move {
            // The only worker blocks here on a task that never finishes by itself.
            let never = rondo::spawn(std::future::pending::<()>());
            started_tx.send(()).unwrap();
            rondo::block_on(never)
        });
        rt.block_on(started_rx).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(rt);
        let r = futures::executor::block_on(outer);
        // The outer task was either cancelled, or finished with the inner task's cancellation.
        match r {
            Err(e) => assert!(e.is_cancelled()),
            Ok(inner) => assert!(inner.unwrap_err().is_cancelled()),
        }
    });
}

struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("destructor panicked");
        }
    }
}

#[test]
fn a_panicking_destructor_does_not_take_down_a_worker() {
    watchdog(30, || {
        let rt = rt(1);
        // A local dropped as the task returns panics inside its last poll: a task panic.
        let local = rt.spawn(async {
            let _p = PanicOnDrop;
            1
        });
        assert!(rt.block_on(local).unwrap_err().is_panic());
        // A future that completes and then panics when the runtime drops it: the output stands.
        struct ReadyThenPanicOnDrop;
        impl Future for ReadyThenPanicOnDrop {
            type Output = u32;
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u32> {
                Poll::Ready(1)
            }
        }
        impl Drop for ReadyThenPanicOnDrop {
            fn drop(&mut self) {
                panic!("destructor panicked after completion");
            }
        }
        assert_eq!(rt.block_on(rt.spawn(ReadyThenPanicOnDrop)).unwrap(), 1);
        // Aborted while idle: the worker drops it, and the destructor panics there.
        let (started_tx, started_rx) = oneshot::channel::<()>();
        let idle = rt.spawn(async move {
            let _p = PanicOnDrop;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        rt.block_on(started_rx).unwrap();
        idle.abort();
        assert!(rt.block_on(idle).unwrap_err().is_cancelled());
        // The single worker is still alive.
        assert_eq!(rt.block_on(rt.spawn(async { 7 })).unwrap(), 7);
        // And shutdown survives a panicking destructor too.
        let (started_tx, started_rx) = oneshot::channel::<()>();
        rt.spawn(async move {
            let _p = PanicOnDrop;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        rt.block_on(started_rx).unwrap();
        drop(rt);
    });
}

/// A task spawned from outside the runtime while every worker is busy with long polls of tasks of
/// its own group (each yielding to the back of its worker's local queue) runs after a few of those
/// polls: a worker looks at the group's global queue after every quantum end, not only every 61
/// picks, which with 1 ms polls kept such a task (an HTTP request woken by the reactor's thread,
/// say) waiting for tens of milliseconds. Counted in polls, so a slow machine does not matter.
#[test]
fn a_task_woken_from_outside_waits_a_few_long_polls_not_sixty_one() {
    for workers in [1, 2] {
        watchdog(120, move || {
            let rt = common::builder(workers)
                .quantum(Duration::from_micros(100))
                .build()
                .unwrap();
            let workers = rt.handle().worker_count();
            let polls = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let spinners: Vec<_> = (0..8 * workers)
                .map(|_| {
                    let (polls, stop) = (polls.clone(), stop.clone());
                    rt.spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            // Longer than the quantum: every poll ends one.
                            common::spin(Duration::from_micros(300));
                            polls.fetch_add(1, Ordering::SeqCst);
                            rondo::yield_now().await;
                        }
                    })
                })
                .collect();
            // Let the spinners fill the local queues.
            assert!(eventually(10, || polls.load(Ordering::SeqCst) >= 64 * workers));
            let mut waits = Vec::new();
            for _ in 0..10 {
                let before = polls.load(Ordering::SeqCst);
                let p = polls.clone();
                let after = rt.block_on(rt.spawn(async move { p.load(Ordering::SeqCst) }));
                waits.push(after.unwrap() - before);
            }
            stop.store(true, Ordering::Relaxed);
            for s in spinners {
                rt.block_on(s).unwrap();
            }
            // Each worker finishes the poll it is in, then looks at the global queue; a few
            // polls more for a worker count the OS time-slices on two cores.
            let bound = 4 * workers + 4;
            assert!(
                waits.iter().all(|&w| w <= bound),
                "{workers} workers: spinner polls between a spawn from outside and its first \
                 poll: {waits:?} (at most {bound} expected)"
            );
        });
    }
}

/// What a task's destructor saw when the runtime's shutdown dropped it.
#[derive(Debug, Default)]
struct SeenInDrop {
    runtime: bool,
    group: Option<String>,
}

struct RecordOnDrop(Arc<Mutex<Option<SeenInDrop>>>, Arc<AtomicBool>);

impl Drop for RecordOnDrop {
    fn drop(&mut self) {
        let ran = self.1.clone();
        // Cleanup code that spawns: it belongs to the runtime shutting down, which refuses it.
        drop(rondo::spawn(
            async move { ran.store(true, Ordering::SeqCst) },
        ));
        *self.0.lock().unwrap() = Some(SeenInDrop {
            runtime: rondo::Handle::try_current().is_some(),
            group: rondo::current_group().map(|g| g.name().to_string()),
        });
    }
}

#[test]
fn a_task_dropped_by_shutdown_runs_its_destructor_in_its_runtime_and_group() {
    watchdog(30, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let group = rt.group().name("owner").build().unwrap();
            let seen = Arc::new(Mutex::new(None));
            let spawned_ran = Arc::new(AtomicBool::new(false));
            let probe = RecordOnDrop(seen.clone(), spawned_ran.clone());
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            group.spawn(async move {
                let _probe = probe;
                started_tx.send(()).unwrap();
                std::future::pending::<()>().await
            });
            started_rx.recv().unwrap();
            // Called from plain code (no runtime current): the destructor must not see the
            // caller's context (none, so `rondo::spawn` would start the global runtime and run
            // the cleanup there, after its runtime is gone).
            drop(rt);
            std::thread::sleep(Duration::from_millis(50));
            let seen = seen
                .lock()
                .unwrap()
                .take()
                .expect("the task was not dropped");
            assert!(
                seen.runtime,
                "{workers} workers: no runtime current in the destructor"
            );
            assert_eq!(seen.group.as_deref(), Some("owner"), "{workers} workers");
            assert!(
                !spawned_ran.load(Ordering::SeqCst),
                "{workers} workers: a spawn from the destructor ran on another runtime"
            );
        }
    });
}

/// A destructor that waits for a timer through `block_on` (say, a graceful close with a
/// deadline), and records how the wait ended.
struct SleepOnDrop(Arc<AtomicUsize>);

impl Drop for SleepOnDrop {
    fn drop(&mut self) {
        // The runtime is shutting down: the sleep fails with the runtime's clear panic (or, on
        // another runtime, completes); either way the drop must end.
        let _ = std::panic::catch_unwind(|| {
            rondo::block_on(rondo::time::sleep(Duration::from_millis(1)));
        });
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_does_not_hang_on_a_destructor_that_waits_for_a_timer() {
    watchdog(60, || {
        for round in 0..20 {
            let tasks = 1 + round % 4;
            let rt = rt(2);
            let dropped = Arc::new(AtomicUsize::new(0));
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            for _ in 0..tasks {
                let (probe, started) = (SleepOnDrop(dropped.clone()), started_tx.clone());
                rt.spawn(async move {
                    let _probe = probe;
                    started.send(()).unwrap();
                    std::future::pending::<()>().await
                });
            }
            for _ in 0..tasks {
                started_rx.recv().unwrap();
            }
            drop(rt);
            assert_eq!(dropped.load(Ordering::SeqCst), tasks, "round {round}");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Nested `block_on`
// ---------------------------------------------------------------------------------------------

/// Task A blocks on a message from B, then answers; B sends to A, then blocks on A's answer: one
/// nested `block_on` waits under the other's frame, and both must finish.
fn nested_block_ons_waiting_on_each_other(workers: usize) {
    let rt = rt(workers);
    let (to_a, rx_a) = oneshot::channel::<u32>();
    let (to_b, rx_b) = oneshot::channel::<u32>();
    let a = rt.spawn(async move {
        let v = rondo::block_on(rx_a).unwrap();
        to_b.send(v + 1).unwrap();
        v
    });
    let b = rt.spawn(async move {
        to_a.send(1).unwrap();
        rondo::block_on(rx_b).unwrap()
    });
    assert_eq!(rt.block_on(a).unwrap(), 1);
    assert_eq!(rt.block_on(b).unwrap(), 2);
}

child_test! {
    fn nested_block_ons_waiting_on_each_other_complete_with_1_worker() {
        nested_block_ons_waiting_on_each_other(1);
    }
}

child_test! {
    fn nested_block_ons_waiting_on_each_other_complete_with_2_workers() {
        nested_block_ons_waiting_on_each_other(2);
    }
}

/// Each level spawns the next and waits for it with a nested `block_on`.
fn recurse(depth: u32) -> u32 {
    if depth == 0 {
        return 0;
    }
    rondo::block_on(rondo::spawn(async move { recurse(depth - 1) })).unwrap() + 1
}

child_test! {
    120;
    /// A task whose nested `block_on`s recurse 5,000 levels deep completes: the levels are not
    /// all stacked on one thread.
    fn a_nested_block_on_recursion_5000_levels_deep_completes() {
        for workers in [1, 2] {
            let rt = rt(workers);
            let h = rt.spawn(async { recurse(5_000) });
            assert_eq!(rt.block_on(h).unwrap(), 5_000);
        }
    }
}

/// Sixteen tasks, each recursing 50 levels deep through nested `block_on`s.
fn sixteen_recursions_50_levels_deep(workers: usize) {
    let rt = rt(workers);
    let hs: Vec<_> = (0..16).map(|_| rt.spawn(async { recurse(50) })).collect();
    for h in hs {
        assert_eq!(rt.block_on(h).unwrap(), 50);
    }
}

child_test! {
    fn sixteen_nested_block_on_recursions_50_levels_deep_complete_with_1_worker() {
        sixteen_recursions_50_levels_deep(1);
    }
}

child_test! {
    fn sixteen_nested_block_on_recursions_50_levels_deep_complete_with_2_workers() {
        sixteen_recursions_50_levels_deep(2);
    }
}

/// The nested `block_on` runs the awaited task inline when it has not started and sits in this
/// core's queues: no other thread takes part.
#[test]
fn nested_block_on_runs_an_unstarted_local_child_inline() {
    let rt = rt(1);
    let h = rt.spawn(async {
        let me = std::thread::current().id();
        let child = rondo::spawn(async { std::thread::current().id() });
        let ran_on = rondo::block_on(child).unwrap();
        (me, ran_on, std::thread::current().id())
    });
    let (me, child, after) = rt.block_on(h).unwrap();
    assert_eq!(me, child, "the child ran inline on the waiting thread");
    assert_eq!(me, after);
}

/// A nested `block_on` that must wait hands its core over: the other tasks keep running on the
/// single worker's core while this thread waits.
#[test]
fn nested_block_on_hands_the_core_over_while_it_waits() {
    watchdog(30, || {
        let rt = rt(1);
        let (tx, rx) = oneshot::channel::<u32>();
        let waiter = rt.spawn(async move { rondo::block_on(rx).unwrap() });
        std::thread::sleep(Duration::from_millis(20));
        // Runs on the core while the waiter's thread blocks.
        let sender = rt.spawn(async move { tx.send(9).unwrap() });
        rt.block_on(sender).unwrap();
        assert_eq!(rt.block_on(waiter).unwrap(), 9);
    });
}

/// A nested `block_on` whose future panics while it holds its worker's core (before any hand-off)
/// gives the core back as it unwinds: the task in the core's LIFO slot still runs, later tasks
/// run, and the runtime drops.
#[test]
fn a_nested_block_on_that_panics_keeps_its_worker() {
    watchdog(30, || {
        let rt = rt(2);
        let seven = rt.block_on(rt.spawn(async {
            // Lands in this worker's LIFO slot.
            let child = rondo::spawn(async { 7 });
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rondo::block_on(async { panic!("a panic in a nested block_on") })
            }));
            assert!(r.is_err());
            child.await
        }));
        assert_eq!(seven.unwrap().unwrap(), 7);
        // Uncaught in the task: its handle gets the panic, and the worker goes on.
        let one = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let h = one.spawn(async { rondo::block_on(async { panic!("uncaught") }) });
        assert!(one.block_on(h).unwrap_err().is_panic());
        assert_eq!(one.block_on(one.spawn(async { 3 })).unwrap(), 3);
        drop(one);
        drop(rt);
    });
}

// ---------------------------------------------------------------------------------------------
// Destructors that panic, block or spawn
// ---------------------------------------------------------------------------------------------

/// A value whose destructor always panics, even during an unwind (which aborts the process).
struct AlwaysPanicsOnDrop(&'static str);

impl Drop for AlwaysPanicsOnDrop {
    fn drop(&mut self) {
        panic!("{}", self.0);
    }
}

child_test! {
    60;
    /// Detached tasks' outputs whose destructors panic, and panic payloads whose destructors
    /// panic, dropped by the runtime with one worker and with two: each output's panic is
    /// reported to the panic hook exactly once, and the workers keep serving. In a child: a
    /// destructor panic the runtime does not catch aborts the process.
    fn panicking_destructors_of_detached_outputs_and_payloads_are_reported() {
        for workers in [1, 2] {
            let (rt, reported) = common::counting_runtime(workers);
            // Half complete at their first poll, half after a yield.
            for i in 0..10 {
                drop(rt.spawn(async move {
                    if i % 2 == 0 {
                        rondo::yield_now().await;
                    }
                    AlwaysPanicsOnDrop("output destructor")
                }));
            }
            assert!(
                eventually(10, || reported.load(Ordering::SeqCst) == 10),
                "each output's destructor panic is reported once: {} reports",
                reported.load(Ordering::SeqCst)
            );
            for i in 0..10 {
                drop(rt.spawn(async move {
                    if i % 2 == 0 {
                        rondo::yield_now().await;
                    }
                    std::panic::panic_any(AlwaysPanicsOnDrop("payload destructor"));
                }));
            }
            assert!(eventually(10, || reported.load(Ordering::SeqCst) >= 20));
            assert_eq!(
                rt.block_on(rt.spawn(async { 5 })).unwrap(),
                5,
                "the workers survive"
            );
        }
    }
}

/// Dropping a `JoinHandle` whose finished task's output panics in its destructor does not raise
/// that panic in the dropping thread; it goes to the panic hook instead.
#[test]
fn dropping_a_handle_to_a_panicking_output_does_not_panic_the_caller() {
    let (rt, seen) = common::counting_runtime(1);
    let h = rt.spawn(async { AlwaysPanicsOnDrop("output") });
    while !h.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(h)));
    assert!(
        r.is_ok(),
        "dropping the handle raised the destructor's panic"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
}

/// An aborted task's future is dropped by a worker as a poll would end it: with the core lent and
/// the task's group current. So a `block_on` in its destructor does not park the worker while it
/// keeps its core (the runtime, and dropping it, would freeze), and a spawn there goes to the
/// task's group, not the default one.
#[test]
fn a_cancelled_tasks_destructor_may_block_on_and_spawns_into_its_group() {
    watchdog(30, || {
        let rt = rt(1);
        let group = rt.group().name("tenant").build().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let guard = common::OnDrop(move || {
            let name = rondo::block_on(rondo::spawn(async {
                rondo::current_group().unwrap().name().to_string()
            }));
            s.lock().unwrap().push(name.unwrap());
        });
        let (_keep, never) = oneshot::channel::<()>();
        let h = group.spawn(async move {
            let _guard = guard;
            let _ = never.await;
        });
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
        assert_eq!(*seen.lock().unwrap(), vec![String::from("tenant")]);
        // The runtime still runs tasks, and drops.
        assert_eq!(rt.block_on(rt.spawn(async { 7 })).unwrap(), 7);
        drop(rt);
    });
}

/// A future refused by a dropped runtime is dropped by `rondo::spawn` with no thread-local
/// borrowed, so its destructor may call `block_on`.
#[test]
fn a_refused_futures_destructor_may_call_block_on() {
    struct BlockOnInDrop(Arc<AtomicBool>);
    impl Drop for BlockOnInDrop {
        fn drop(&mut self) {
            rondo::block_on(async {});
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let rt = rt(1);
    let handle = rt.handle().clone();
    drop(rt);
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let mut spawned = None;
    handle.block_on(async {
        let guard = BlockOnInDrop(d);
        spawned = Some(rondo::spawn(async move {
            let _g = guard;
        }));
    });
    let h = spawned.unwrap();
    assert!(dropped.load(Ordering::SeqCst));
    assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
}

// ---------------------------------------------------------------------------------------------
// Join handles and abort
// ---------------------------------------------------------------------------------------------

/// A `JoinHandle` of a finished task is ready at its first poll, and polled again after it
/// returned `Ready` it panics with a clear message instead of claiming the task was cancelled.
#[test]
fn a_join_handle_polled_after_ready_panics_clearly() {
    let rt = rt(1);
    let mut h = rt.spawn(async { 3 });
    assert!(eventually(10, || h.is_finished()));
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut h).poll(&mut cx) {
        Poll::Ready(r) => assert_eq!(r.unwrap(), 3),
        Poll::Pending => panic!("a finished task's handle must be ready"),
    }
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Pin::new(&mut h).poll(&mut cx)
    }));
    let msg = common::panic_text(again.expect_err("a second poll must panic"));
    assert!(msg.contains("polled after it returned Ready"), "{msg}");
}

/// A waker that counts nothing: what matters is who holds it (`Arc::strong_count`).
struct Held;

impl std::task::Wake for Held {
    fn wake(self: Arc<Self>) {}
}

/// A `JoinHandle` polled `Pending` and then dropped (a `select` or `timeout` that gave up on it)
/// releases its waker: the unfinished task does not keep it, nor the polling task and group it
/// belongs to.
#[test]
fn a_join_handle_dropped_after_pending_releases_its_waker() {
    watchdog(30, || {
        let rt = rt(2);
        let (tx, rx) = oneshot::channel::<()>();
        let mut h = rt.spawn(rx);
        let w = Arc::new(Held);
        let waker = Waker::from(w.clone());
        assert!(
            Pin::new(&mut h)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(waker);
        drop(h);
        assert_eq!(
            Arc::strong_count(&w),
            1,
            "the unfinished task still holds the dropped handle's waker"
        );
        // The detached task still runs to its end.
        let g = rt.group().build().unwrap();
        let probe = g.spawn(async {});
        rt.block_on(probe).unwrap();
        tx.send(()).unwrap();
    });
}

child_test! {
    /// `abort` after completion keeps the output and wakes no other task, not even the one that
    /// took the finished task's registry slot.
    fn abort_after_completion_wakes_no_other_task() {
        let rt = rt(1);
        let g = rt.group().name("slots").build().unwrap();
        // A completed task whose handle is kept: its registry slot is free for the next task.
        // It waits once, so it takes a registry slot, and frees it when it completes.
        let finished = g.spawn(async {
            rondo::yield_now().await;
            2
        });
        assert!(eventually(10, || finished.is_finished()));
        // A task that is polled once, then waits with no waker stored anywhere: only a
        // spurious wake can poll it again.
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        let idle = g.spawn(std::future::poll_fn(move |_cx: &mut Context<'_>| {
            p.fetch_add(1, Ordering::SeqCst);
            Poll::<()>::Pending
        }));
        assert!(eventually(10, || polls.load(Ordering::SeqCst) == 1));
        finished.abort();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "aborting a completed task woke an unrelated one"
        );
        assert_eq!(rt.block_on(finished).unwrap(), 2, "the output is kept");
        idle.abort();
        assert!(rt.block_on(idle).unwrap_err().is_cancelled());
    }
}

// ---------------------------------------------------------------------------------------------
// The current runtime
// ---------------------------------------------------------------------------------------------

/// `Runtime::enter` makes `rondo::spawn` from plain code target the chosen runtime.
#[test]
fn enter_selects_the_runtime_for_plain_spawns() {
    let rt = rondo::Runtime::builder()
        .worker_threads(1)
        .thread_name("entered")
        .build()
        .unwrap();
    {
        let _g = rt.enter();
        let h = rondo::spawn(async { std::thread::current().name().map(String::from) });
        assert_eq!(rondo::block_on(h).unwrap().as_deref(), Some("entered-0"));
        assert!(rondo::Handle::try_current().is_some());
    }
    assert!(rondo::Handle::try_current().is_none());
}

/// Enter guards dropped out of order panic (the first runtime would otherwise stay current after
/// both guards are gone), and guards dropped in order leave no runtime current.
#[test]
fn enter_guards_dropped_out_of_order_panic() {
    watchdog(30, || {
        let a = rt(1);
        let b = rt(1);
        // On a thread of its own: what is current after the misuse is not specified.
        let (ha, hb) = (a.handle().clone(), b.handle().clone());
        let misuse = std::thread::spawn(move || {
            let ga = ha.enter();
            let gb = hb.enter();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(ga)));
            std::mem::forget(gb);
            common::panic_text(r.unwrap_err())
        });
        let msg = misuse.join().unwrap();
        assert!(msg.contains("reverse order"), "{msg}");
        let ga = a.enter();
        let gb = b.enter();
        drop(gb);
        drop(ga);
        assert!(rondo::Handle::try_current().is_none());
    });
}

/// Inside a task the runtime polling it stays current under another runtime's enter guard, as
/// `Handle::enter` documents: `Handle::current` and `rondo::spawn` name the task's runtime.
#[test]
fn inside_a_task_the_polling_runtime_stays_current_under_an_enter_guard() {
    watchdog(30, || {
        let a = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let b = rondo::Runtime::builder().worker_threads(3).build().unwrap();
        let hb = b.handle().clone();
        let seen = a
            .block_on(a.spawn(async move {
                let (current, spawned) = {
                    let _g = hb.enter();
                    let current = rondo::Handle::current().worker_count();
                    let spawned = rondo::spawn(async { rondo::Handle::current().worker_count() });
                    (current, spawned)
                };
                (current, spawned.await.unwrap())
            }))
            .unwrap();
        assert_eq!(seen, (1, 1));
    });
}

/// On thread exit, wakes the stored task and spawns a task through the handle and through
/// `rondo::spawn`.
struct OnThreadExit {
    waker: Option<Waker>,
    handle: Option<rondo::Handle>,
    spawned: Option<mpsc::UnboundedSender<&'static str>>,
}

impl Drop for OnThreadExit {
    fn drop(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
        if let (Some(h), Some(tx)) = (self.handle.take(), self.spawned.take()) {
            let t = tx.clone();
            drop(h.spawn(async move {
                let _ = t.unbounded_send("handle");
            }));
            drop(rondo::spawn(async move {
                let _ = tx.unbounded_send("global");
            }));
        }
    }
}

thread_local! {
    static ON_EXIT: std::cell::RefCell<Option<OnThreadExit>> = const { std::cell::RefCell::new(None) };
}

child_test! {
    /// A thread-local destructor that runs after rondo's own thread-locals on that thread were
    /// destroyed may wake a task and spawn, through a handle and through `rondo::spawn`: the task
    /// completes and both spawned tasks run. In a child: a failure here aborts the process.
    fn waking_and_spawning_from_a_thread_local_destructor_runs_the_tasks() {
        let rt = rt(2);
        let (waker_tx, waker_rx) = std::sync::mpsc::channel();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        // A task that parks its waker and completes once woken.
        let task = rt.spawn(std::future::poll_fn(move |cx: &mut Context<'_>| {
            if w.load(Ordering::SeqCst) > 0 {
                return Poll::Ready(());
            }
            w.fetch_add(1, Ordering::SeqCst);
            waker_tx.send(cx.waker().clone()).unwrap();
            Poll::Pending
        }));
        let waker = waker_rx.recv().unwrap();
        let (spawned_tx, mut spawned_rx) = mpsc::unbounded();
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let h = handle.clone();
            ON_EXIT.with(|s| {
                *s.borrow_mut() = Some(OnThreadExit {
                    waker: Some(waker),
                    handle: Some(handle),
                    spawned: Some(spawned_tx),
                })
            });
            // Touch the runtime's own thread-locals after ours: thread-local destructors run in
            // reverse order, so the runtime's are gone when ours runs.
            h.block_on(async {});
            assert!(rondo::Handle::try_current().is_none());
        })
        .join()
        .unwrap();
        rt.block_on(task).unwrap();
        let mut seen: Vec<&str> = rt.block_on(async {
            vec![spawned_rx.next().await.unwrap(), spawned_rx.next().await.unwrap()]
        });
        seen.sort();
        assert_eq!(seen, ["global", "handle"]);
    }
}

// ---------------------------------------------------------------------------------------------
// Large futures
// ---------------------------------------------------------------------------------------------

/// A future that keeps 1 MiB of state across a suspension point.
async fn big_future() -> u64 {
    let buf = [1u8; 1 << 20];
    rondo::yield_now().await;
    buf.iter().map(|&b| u64::from(b)).sum::<u64>()
}

child_test! {
    /// In a child: a stack overflow aborts the process.
    fn a_1_mib_future_can_be_spawned_from_a_task() {
        let rt = rt(2);
        let h = rt.spawn(async { rondo::spawn(big_future()).await.unwrap() });
        assert_eq!(rt.block_on(h).unwrap(), 1 << 20);
    }
}

child_test! {
    /// In a child: a stack overflow aborts the process.
    fn a_1_mib_future_can_be_spawned_from_block_on() {
        let rt = rt(2);
        let v = rt.block_on(async { rondo::spawn(big_future()).await.unwrap() });
        assert_eq!(v, 1 << 20);
    }
}

// ---------------------------------------------------------------------------------------------
// Dropping a runtime
// ---------------------------------------------------------------------------------------------

/// A runtime dropped with pending, queued and grouped tasks frees everything it owns: a value
/// captured by the panic hook is released with it.
#[test]
fn a_dropped_runtime_frees_its_shared_state() {
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            let witness = Arc::new(());
            let w = witness.clone();
            let rt = rondo::Runtime::builder()
                .worker_threads(workers)
                .on_task_panic(move |_| {
                    let _ = &w;
                })
                .build()
                .unwrap();
            let g = rt.group().name("g").weight(3).build().unwrap();
            let strand = rt.group().max_concurrency(1).build().unwrap();
            let mut hs = Vec::new();
            for _ in 0..20 {
                hs.push(rt.spawn(std::future::pending::<()>()));
                hs.push(g.spawn(std::future::pending::<()>()));
                hs.push(strand.spawn(async { rondo::yield_now().await }));
            }
            // Queued behind a busy worker.
            for _ in 0..20 {
                g.spawn(async { common::spin(Duration::from_micros(100)) });
            }
            drop(rt);
            drop((g, strand, hs));
            assert_eq!(
                Arc::strong_count(&witness),
                1,
                "the runtime leaked with {workers} workers"
            );
        });
    }
}

/// Every task spawned while a runtime is being dropped is either run or dropped, and its handle
/// resolves; none is stranded in a queue nobody drains (a stress over many drops).
#[test]
fn spawns_racing_a_runtime_drop_are_never_stranded() {
    for workers in [1, 2, 4, 8] {
        watchdog(120, move || {
            for _ in 0..30 {
                let rt = rt(workers);
                let strand = rt.group().max_concurrency(1).build().unwrap();
                let handle = rt.handle().clone();
                let drops = DropCount::new();
                let stop = Arc::new(AtomicBool::new(false));
                let spawners: Vec<_> = (0..2)
                    .map(|i| {
                        let (handle, strand, drops, stop) =
                            (handle.clone(), strand.clone(), drops.clone(), stop.clone());
                        std::thread::spawn(move || {
                            let mut hs = Vec::new();
                            while !stop.load(Ordering::Relaxed) {
                                let g = drops.guard();
                                hs.push(if i == 0 {
                                    handle.spawn(async move { drop(g) })
                                } else {
                                    strand.spawn(async move { drop(g) })
                                });
                            }
                            hs
                        })
                    })
                    .collect();
                std::thread::sleep(Duration::from_millis(2));
                drop(rt);
                stop.store(true, Ordering::SeqCst);
                let mut total = 0;
                for s in spawners {
                    for h in s.join().unwrap() {
                        total += 1;
                        assert!(
                            h.is_finished(),
                            "a task spawned during the drop is stranded"
                        );
                    }
                }
                assert_eq!(drops.get(), total, "every future dropped exactly once");
            }
        });
    }
}

/// Dropping a runtime always reaches every parked worker (many short-lived runtimes, dropped
/// while their workers are parking).
#[test]
fn dropping_runtimes_while_workers_park_never_hangs() {
    watchdog(120, || {
        for i in 0..300 {
            let rt = rt(1 + i % 8);
            if i % 2 == 0 {
                rt.block_on(async { rondo::spawn(async {}).await.unwrap() });
            }
            drop(rt);
        }
    });
}

/// Spawns a task that waits in a nested `block_on` on a channel no task of `rt` will ever send
/// on; returns once the task waits, with its handle and the channel's sender.
fn wait_outside(
    rt: &rondo::Runtime,
    drops: &DropCount,
) -> (rondo::JoinHandle<u32>, oneshot::Sender<u32>) {
    let (outside_tx, outside_rx) = oneshot::channel::<u32>();
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let g = drops.guard();
    let h = rt.spawn(async move {
        let _g = g;
        started_tx.send(()).unwrap();
        rondo::block_on(outside_rx).unwrap()
    });
    rt.block_on(started_rx).unwrap();
    (h, outside_tx)
}

child_test! {
    /// Dropping the runtime while a task waits in a nested `block_on` for an event from outside,
    /// which fires during the drop, returns and drops the task's future exactly once.
    fn dropping_the_runtime_while_a_nested_block_on_waits_outside_drops_the_task_once() {
        let drops = DropCount::new();
        let rt = rt(1);
        let (h, outside_tx) = wait_outside(&rt, &drops);
        // Drop on another thread; the outside event fires while the drop is under way.
        let dropper = std::thread::spawn(move || drop(rt));
        std::thread::sleep(Duration::from_millis(200));
        let _ = outside_tx.send(7);
        dropper.join().unwrap();
        match futures::executor::block_on(h) {
            Ok(v) => assert_eq!(v, 7),
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        }
        assert_eq!(drops.get(), 1, "the task's future must be dropped exactly once");
    }
}

child_test! {
    /// `shutdown_timeout` returns while a task waits in a nested `block_on` for an event from
    /// outside that has not fired, and the task's future is dropped exactly once.
    fn shutdown_timeout_returns_while_a_nested_block_on_waits_outside() {
        let drops = DropCount::new();
        let rt = rt(2);
        let (h, outside_tx) = wait_outside(&rt, &drops);
        // The outside event has not fired: shutdown_timeout must still return.
        rt.shutdown_timeout(Duration::from_millis(200));
        let _ = outside_tx.send(7);
        assert!(
            eventually(10, || drops.get() == 1),
            "the task's future must be dropped exactly once, dropped {} times",
            drops.get()
        );
        match futures::executor::block_on(h) {
            Ok(v) => assert_eq!(v, 7),
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        }
        assert_eq!(drops.get(), 1);
    }
}
