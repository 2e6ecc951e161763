//! `rondo::task::JoinSet`: results in completion order, aborts, panics, drop, length accounting,
//! shutdown, detach, many tasks, groups and blocking closures. Multi-worker tests follow
//! `RONDO_TEST_WORKERS` (see `common::rt`).

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{rt, watchdog};
use rondo::sync::Semaphore;
use rondo::task::JoinSet;
use rondo::time::sleep;

/// Counts its drops: a task's future holding one shows when the task was dropped.
struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn results_come_in_completion_order_and_every_one_once() {
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            rt(workers).block_on(async {
                let mut set = JoinSet::new();
                for i in 0..20u64 {
                    set.spawn(async move {
                        sleep(Duration::from_millis((20 - i) * 3)).await;
                        i
                    });
                }
                assert_eq!(set.len(), 20);
                let mut seen = Vec::new();
                while let Some(res) = set.join_next().await {
                    seen.push(res.unwrap());
                    assert_eq!(set.len(), 20 - seen.len());
                }
                // The longest sleep (task 0) ends last; every result arrives once.
                assert_eq!(*seen.last().unwrap(), 0);
                let distinct: HashSet<_> = seen.iter().copied().collect();
                assert_eq!(distinct.len(), 20);
                assert!(set.is_empty());
                assert!(set.join_next().await.is_none());
            });
        });
    }
}

#[test]
fn an_empty_set_joins_none_at_once() {
    rondo::block_on(async {
        let mut set = JoinSet::<()>::default();
        assert!(set.join_next().await.is_none());
        assert!(set.try_join_next().is_none());
        set.shutdown().await;
        assert_eq!(set.len(), 0);
    });
}

#[test]
fn aborted_tasks_are_cancelled_and_completed_ones_keep_their_output() {
    watchdog(60, || {
        rt(2).block_on(async {
            let mut set = JoinSet::new();
            set.spawn(async { 1 });
            // Wait for the quick task to end before the abort.
            let first = set.join_next().await.unwrap().unwrap();
            assert_eq!(first, 1);
            set.spawn(async { 2 });
            while set.try_join_next().is_none() {
                rondo::yield_now().await;
            }
            for _ in 0..3 {
                set.spawn(std::future::pending::<i32>());
            }
            set.spawn(async { 5 });
            // Ended before the abort: kept.
            let five = loop {
                if let Some(r) = set.try_join_next() {
                    break r;
                }
                rondo::yield_now().await;
            };
            assert_eq!(five.unwrap(), 5);
            set.abort_all();
            assert_eq!(set.len(), 3);
            let mut cancelled = 0;
            while let Some(res) = set.join_next().await {
                assert!(res.unwrap_err().is_cancelled());
                cancelled += 1;
            }
            assert_eq!(cancelled, 3);
        });
    });
}

#[test]
fn a_panicking_task_yields_a_panic_error_and_the_others_their_output() {
    watchdog(60, || {
        let (rt, reported) = common::counting_runtime(2);
        rt.block_on(async {
            let mut set = JoinSet::new();
            set.spawn(async { panic!("boom") });
            set.spawn(async { 7 });
            let mut panics = 0;
            let mut values = Vec::new();
            while let Some(res) = set.join_next().await {
                match res {
                    Ok(v) => values.push(v),
                    Err(e) => {
                        assert!(e.is_panic());
                        panics += 1;
                    }
                }
            }
            assert_eq!((panics, values), (1, vec![7]));
        });
        assert_eq!(reported.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn dropping_the_set_aborts_its_tasks() {
    watchdog(60, || {
        rt(2).block_on(async {
            let dropped = Arc::new(AtomicUsize::new(0));
            let mut set = JoinSet::new();
            for _ in 0..10 {
                let d = DropCount(dropped.clone());
                set.spawn(async move {
                    let _d = d;
                    std::future::pending::<()>().await
                });
            }
            drop(set);
            while dropped.load(Ordering::SeqCst) < 10 {
                sleep(Duration::from_millis(1)).await;
            }
        });
    });
}

#[test]
fn shutdown_aborts_and_waits_for_every_task() {
    watchdog(60, || {
        rt(4).block_on(async {
            let dropped = Arc::new(AtomicUsize::new(0));
            let mut set = JoinSet::new();
            for _ in 0..50 {
                let d = DropCount(dropped.clone());
                set.spawn(async move {
                    let _d = d;
                    sleep(Duration::from_secs(3600)).await
                });
            }
            set.shutdown().await;
            assert!(set.is_empty());
            // Every future was dropped before `shutdown` returned.
            assert_eq!(dropped.load(Ordering::SeqCst), 50);
            // The set is usable again.
            set.spawn(async {});
            assert!(set.join_next().await.unwrap().is_ok());
        });
    });
}

#[test]
fn detached_tasks_run_on_and_leave_the_set() {
    watchdog(60, || {
        rt(2).block_on(async {
            let gate = Arc::new(Semaphore::new(0));
            let done = Arc::new(AtomicUsize::new(0));
            let mut set = JoinSet::new();
            for _ in 0..5 {
                let (g, d) = (gate.clone(), done.clone());
                set.spawn(async move {
                    g.acquire().await.unwrap().forget();
                    d.fetch_add(1, Ordering::SeqCst);
                });
            }
            set.detach_all();
            assert_eq!(set.len(), 0);
            assert!(set.join_next().await.is_none());
            drop(set);
            gate.add_permits(5);
            while done.load(Ordering::SeqCst) < 5 {
                sleep(Duration::from_millis(1)).await;
            }
        });
    });
}

#[test]
fn a_set_reused_after_detach_all_only_sees_its_new_tasks() {
    watchdog(60, || {
        rt(2).block_on(async {
            let gate = Arc::new(Semaphore::new(0));
            let mut set = JoinSet::new();
            for _ in 0..5 {
                let g = gate.clone();
                set.spawn(async move {
                    g.acquire().await.unwrap().forget();
                    0
                });
            }
            set.detach_all();
            // The new tasks take the keys the detached ones had.
            for i in 1..=5 {
                let g = gate.clone();
                set.spawn(async move {
                    g.acquire().await.unwrap().forget();
                    i
                });
            }
            // Permits for the detached tasks and the new ones alike.
            gate.add_permits(10);
            let mut sum = 0;
            while !set.is_empty() {
                if let Some(res) = set.try_join_next() {
                    sum += res.unwrap();
                } else {
                    sleep(Duration::from_millis(1)).await;
                }
            }
            assert_eq!(sum, 15);
        });
    });
}

#[test]
fn many_tasks_are_each_joined_once() {
    for workers in [1, 2, 4, 8] {
        watchdog(120, move || {
            rt(workers).block_on(async {
                let mut set = JoinSet::new();
                let n = 20_000u64;
                for i in 0..n {
                    set.spawn(async move {
                        if i % 3 == 0 {
                            rondo::yield_now().await;
                        }
                        i
                    });
                }
                let mut sum = 0;
                let mut count = 0;
                while let Some(res) = set.join_next().await {
                    sum += res.unwrap();
                    count += 1;
                }
                assert_eq!(count, n);
                assert_eq!(sum, n * (n - 1) / 2);
            });
        });
    }
}

#[test]
fn join_next_is_cancel_safe() {
    watchdog(60, || {
        rt(2).block_on(async {
            let mut set = JoinSet::new();
            for i in 0..10u32 {
                set.spawn(async move {
                    sleep(Duration::from_millis(u64::from(i))).await;
                    i
                });
            }
            let mut got = Vec::new();
            while !set.is_empty() {
                // Give up on most waits: no result may be lost.
                if let Ok(Some(res)) =
                    rondo::time::timeout(Duration::from_micros(300), set.join_next()).await
                {
                    got.push(res.unwrap());
                }
            }
            got.sort();
            assert_eq!(got, (0..10).collect::<Vec<_>>());
        });
    });
}

#[test]
fn a_set_joined_from_a_task_is_woken_across_workers() {
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            let rt = rt(workers);
            let total = rt
                .block_on(rondo::spawn(async {
                    let mut set = JoinSet::new();
                    for i in 0..200u64 {
                        set.spawn(async move {
                            sleep(Duration::from_micros(i * 37 % 2000)).await;
                            i
                        });
                    }
                    let mut total = 0;
                    while let Some(res) = set.join_next().await {
                        total += res.unwrap();
                    }
                    total
                }))
                .unwrap();
            assert_eq!(total, 199 * 200 / 2);
        });
    }
}

#[test]
fn tasks_join_the_callers_group_or_the_one_named() {
    watchdog(60, || {
        let rt = rt(2);
        let a = rt.group().name("a").weight(3).build().unwrap();
        let b = rt.group().name("b").weight(5).build().unwrap();
        let weights = rt
            .block_on(a.spawn(async move {
                let mut set = JoinSet::new();
                set.spawn(async { rondo::current_group().unwrap().weight() });
                set.spawn_in_group(&b, async { rondo::current_group().unwrap().weight() });
                let mut w = Vec::new();
                while let Some(res) = set.join_next().await {
                    w.push(res.unwrap());
                }
                w.sort();
                w
            }))
            .unwrap();
        assert_eq!(weights, vec![3, 5]);
    });
}

#[test]
fn a_cancelled_groups_task_is_joined_cancelled() {
    watchdog(60, || {
        let rt = rt(2);
        let g = rt.group().build().unwrap();
        g.cancel();
        rt.block_on(async {
            let mut set = JoinSet::new();
            set.spawn_in_group(&g, async { 1 });
            assert!(set.join_next().await.unwrap().unwrap_err().is_cancelled());
            assert!(set.is_empty());
        });
    });
}

#[test]
fn blocking_closures_join_the_set() {
    watchdog(60, || {
        let rt = rt(2);
        rt.block_on(async {
            let mut set = JoinSet::new();
            for i in 0..8u32 {
                set.spawn_blocking(move || {
                    std::thread::sleep(Duration::from_millis(u64::from(i)));
                    i
                });
            }
            set.spawn(async { 100 });
            set.spawn_blocking(|| panic!("blocking boom"));
            let mut sum = 0;
            let mut panics = 0;
            while let Some(res) = set.join_next().await {
                match res {
                    Ok(v) => sum += v,
                    Err(e) => {
                        assert!(e.is_panic());
                        panics += 1;
                    }
                }
            }
            assert_eq!((sum, panics), (128, 1));
        });
        let mut set = JoinSet::new();
        set.spawn_blocking_on(|| 3, rt.handle());
        set.spawn_on(async { 4 }, rt.handle());
        let sum = rt.block_on(async {
            let mut s = 0;
            while let Some(r) = set.join_next().await {
                s += r.unwrap();
            }
            s
        });
        assert_eq!(sum, 7);
    });
}

#[test]
fn join_all_returns_every_output_and_resumes_a_panic() {
    let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    let mut all = rt.block_on(async {
        let mut set = rondo::task::JoinSet::new();
        for i in 0..20u32 {
            set.spawn(async move { i });
        }
        set.join_all().await
    });
    all.sort();
    assert_eq!(all, (0..20).collect::<Vec<_>>());
    let panicked = rt.block_on(rt.spawn(async {
        let mut set = rondo::task::JoinSet::new();
        set.spawn(async { panic!("boom in a set") });
        set.spawn(std::future::pending::<()>());
        set.join_all().await
    }));
    let err = panicked.unwrap_err();
    assert!(err.is_panic(), "{err}");
}

/// Regression: `try_join_next` polled the handles on the task's cooperative budget, so after 128
/// results in one poll it answered `None` though 872 finished tasks were left.
#[test]
fn try_join_next_sees_every_finished_task_in_one_poll() {
    let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    let count = rt.block_on(rt.spawn(async {
        let mut set = rondo::task::JoinSet::new();
        for _ in 0..1000 {
            set.spawn(async {});
        }
        // Let every task finish, then take all results without yielding in between.
        rondo::time::sleep(Duration::from_millis(200)).await;
        let mut count = 0;
        while let Some(res) = set.try_join_next() {
            res.unwrap();
            count += 1;
        }
        count
    }));
    assert_eq!(count.unwrap(), 1000);
}

#[test]
fn the_with_id_methods_name_each_joined_task_by_its_id() {
    watchdog(60, || {
        rt(2).block_on(async {
            let mut set = JoinSet::new();
            let mut spawned = HashSet::new();
            for i in 0..50u32 {
                let handle = set.spawn(async move {
                    sleep(Duration::from_millis(u64::from(i % 5))).await;
                    if i == 7 {
                        panic!("task 7");
                    }
                    i
                });
                spawned.insert(handle.id());
            }
            let mut joined = HashSet::new();
            let mut outputs = 0;
            while let Some(res) = set.join_next_with_id().await {
                let id = match res {
                    Ok((id, _)) => {
                        outputs += 1;
                        id
                    }
                    Err(e) => {
                        assert!(e.is_panic());
                        e.id()
                    }
                };
                assert!(joined.insert(id), "an id joined twice");
            }
            assert_eq!(outputs, 49);
            assert_eq!(joined, spawned);

            let id = set.spawn(async { 1 }).id();
            let taken = loop {
                match set.try_join_next_with_id() {
                    Some(res) => break res.unwrap(),
                    None => rondo::yield_now().await,
                }
            };
            assert_eq!(taken, (id, 1));
            assert!(set.try_join_next_with_id().is_none());
        });
    });
}
