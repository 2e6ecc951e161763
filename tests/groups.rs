//! Fairness groups (issue 4): concurrency limits, cancellation, `wait_idle`, lifecycle, context
//! flow, builder errors and metrics. The fairness invariants are in `tests/fairness.rs`; the
//! figures themselves are measured in `benches/fairness.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{DropCount, eventually, hold_a_worker, rt, spin, spinner, thread_cpu, watchdog};
use futures::channel::oneshot;

#[test]
fn a_serial_group_never_polls_two_tasks_at_once() {
    watchdog(120, || {
        let rt = rt(2);
        let g = rt
            .group()
            .name("strand")
            .max_concurrency(1)
            .build()
            .unwrap();
        let in_poll = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..10_000)
            .map(|i| {
                let (p, o) = (in_poll.clone(), overlaps.clone());
                g.spawn(async move {
                    for step in 0..2 {
                        if p.fetch_add(1, Ordering::SeqCst) != 0 {
                            o.fetch_add(1, Ordering::SeqCst);
                        }
                        if i % 100 == 0 {
                            spin(Duration::from_micros(20));
                        }
                        p.fetch_sub(1, Ordering::SeqCst);
                        if step == 0 {
                            rondo::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        // Other work keeps both workers busy meanwhile.
        let noise: Vec<_> = (0..2000)
            .map(|_| rt.spawn(async { rondo::yield_now().await }))
            .collect();
        rt.block_on(async {
            for h in handles {
                h.await.unwrap();
            }
            for h in noise {
                h.await.unwrap();
            }
        });
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "two tasks of a serial group ran at once"
        );
    });
}

#[test]
fn a_serial_group_polls_in_fifo_order() {
    watchdog(60, || {
        let rt = rt(2);
        let g = rt.group().max_concurrency(1).build().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let n = if cfg!(miri) { 50 } else { 1000 };
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let o = order.clone();
                g.spawn(async move { o.lock().unwrap().push(i) })
            })
            .collect();
        rt.block_on(async {
            for h in handles {
                h.await.unwrap();
            }
        });
        assert_eq!(*order.lock().unwrap(), (0..n).collect::<Vec<_>>());
    });
}

#[test]
fn max_concurrency_bounds_parallel_polls() {
    watchdog(60, || {
        let rt = rt(2);
        let g = rt.group().max_concurrency(1).build().unwrap();
        let g3 = rt.group().max_concurrency(3).build().unwrap();
        // Under Miri 300 tasks took about a minute, the watchdog's limit.
        let n = if cfg!(miri) { 100 } else { 300 };
        for (group, limit) in [(g, 1usize), (g3, 3)] {
            let in_poll = Arc::new(AtomicUsize::new(0));
            let peak = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    let (p, m) = (in_poll.clone(), peak.clone());
                    group.spawn(async move {
                        let now = p.fetch_add(1, Ordering::SeqCst) + 1;
                        m.fetch_max(now, Ordering::SeqCst);
                        spin(Duration::from_micros(50));
                        p.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect();
            rt.block_on(async {
                for h in hs {
                    h.await.unwrap();
                }
            });
            assert!(peak.load(Ordering::SeqCst) <= limit);
        }
    });
}

#[test]
fn cancel_drops_queued_tasks_unrun_and_running_ones_at_their_next_suspension() {
    watchdog(60, || {
        let rt = rt(1);
        let g = rt.group().name("doomed").build().unwrap();
        // A task of the group that is running (suspended) when cancel comes.
        let (started_tx, started_rx) = oneshot::channel::<()>();
        let drops = DropCount::new();
        let guard = drops.guard();
        let running = g.spawn(async move {
            let _g = guard;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        rt.block_on(started_rx).unwrap();
        // Occupy the only worker so the next tasks stay queued.
        let release = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        let blocker = rt.spawn(async move {
            while !r.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        let ran = Arc::new(AtomicUsize::new(0));
        let queued: Vec<_> = (0..100)
            .map(|_| {
                let (ran, guard) = (ran.clone(), drops.guard());
                g.spawn(async move {
                    let _g = guard;
                    ran.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        g.cancel();
        assert!(g.is_cancelled());
        release.store(true, Ordering::SeqCst);
        rt.block_on(blocker).unwrap();
        assert!(rt.block_on(running).unwrap_err().is_cancelled());
        for h in queued {
            assert!(rt.block_on(h).unwrap_err().is_cancelled());
        }
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "a queued task of a cancelled group ran"
        );
        assert_eq!(drops.get(), 101);
        // Spawning into a cancelled group resolves cancelled at once, without running.
        let late_ran = Arc::new(AtomicBool::new(false));
        let l = late_ran.clone();
        let late = g.spawn(async move { l.store(true, Ordering::SeqCst) });
        assert!(late.is_finished());
        assert!(rt.block_on(late).unwrap_err().is_cancelled());
        assert!(!late_ran.load(Ordering::SeqCst));
        rt.block_on(g.wait_idle());
        let m = g.metrics();
        assert_eq!(
            (m.spawned, m.cancelled, m.completed, m.unfinished),
            (102, 102, 0, 0)
        );
        // Other groups are untouched.
        assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
    });
}

#[test]
fn wait_idle_resolves_only_when_every_task_finished() {
    watchdog(60, || {
        let rt = rt(2);
        let g = rt.group().build().unwrap();
        rt.block_on(g.wait_idle()); // an empty group is idle
        let (tx, rx) = oneshot::channel::<()>();
        let rx = futures::future::FutureExt::shared(rx);
        for _ in 0..20 {
            let rx = rx.clone();
            g.spawn(async move {
                let _ = rx.await;
            });
        }
        assert_eq!(g.len(), 20);
        let idle = Arc::new(AtomicBool::new(false));
        let (g2, i2) = (g.clone(), idle.clone());
        let waiter = rt.spawn(async move {
            g2.wait_idle().await;
            i2.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !idle.load(Ordering::SeqCst),
            "wait_idle resolved with 20 tasks unfinished"
        );
        tx.send(()).unwrap();
        rt.block_on(waiter).unwrap();
        assert!(idle.load(Ordering::SeqCst));
        assert_eq!(g.len(), 0);
        assert!(g.is_empty());
    });
}

#[test]
fn a_dropped_and_drained_group_keeps_running_then_is_freed() {
    watchdog(60, || {
        let rt = rt(2);
        assert_eq!(rt.handle().group_count(), 1);
        let done = Arc::new(AtomicUsize::new(0));
        {
            let g = rt.group().name("temp").build().unwrap();
            for _ in 0..10 {
                let d = done.clone();
                g.spawn(async move {
                    rondo::yield_now().await;
                    std::thread::sleep(Duration::from_millis(2));
                    d.fetch_add(1, Ordering::SeqCst);
                });
            }
            assert_eq!(rt.handle().group_count(), 2);
        } // every handle dropped: the tasks are not cancelled
        assert!(eventually(20, || done.load(Ordering::SeqCst) == 10));
        assert!(
            eventually(20, || rt.handle().group_count() == 1),
            "the drained group was not freed"
        );
    });
}

#[test]
fn children_inherit_the_group_of_their_parent() {
    watchdog(30, || {
        let rt = rt(2);
        let g = rt.group().name("parent").build().unwrap();
        let names = rt
            .block_on(g.spawn(async {
                let child = rondo::spawn(async {
                    let grandchild =
                        rondo::spawn(async { rondo::current_group().unwrap().name().to_string() });
                    (
                        rondo::current_group().unwrap().name().to_string(),
                        grandchild.await.unwrap(),
                    )
                });
                let via_handle = rondo::Handle::current()
                    .spawn(async { rondo::current_group().unwrap().name().to_string() });
                let (c, gc) = child.await.unwrap();
                (c, gc, via_handle.await.unwrap())
            }))
            .unwrap();
        assert_eq!(names, ("parent".into(), "parent".into(), "parent".into()));
        // From outside any task, Runtime::spawn uses the default group.
        let outside =
            rt.block_on(rt.spawn(async { rondo::current_group().unwrap().name().to_string() }));
        assert_eq!(outside.unwrap(), "default");
        assert!(rondo::current_group().is_none());
    });
}

/// Group ids come from the shard a group is created in, not from one runtime-wide counter, so
/// the default group is named by the runtime, not by having the first id: groups created from
/// several threads get distinct names, none of them "default", and the count follows them.
#[test]
fn unnamed_groups_from_many_threads_get_distinct_names_and_none_is_default() {
    let rt = rt(2);
    let handle = rt.handle().clone();
    let made: Vec<rondo::Group> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let handle = handle.clone();
                s.spawn(move || {
                    (0..40)
                        .map(|_| handle.group().build().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let mut names: Vec<String> = made.iter().map(|g| g.name().to_string()).collect();
    assert!(names.iter().all(|n| n.starts_with("group-")), "{names:?}");
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 160, "two groups share a name");
    assert_eq!(rt.handle().group_count(), 161);
    let default =
        rt.block_on(rt.spawn(async { rondo::current_group().unwrap().name().to_string() }));
    assert_eq!(default.unwrap(), "default");
    drop(made);
    assert_eq!(rt.handle().group_count(), 1);
}

#[test]
fn group_builder_and_set_weight_reject_bad_input() {
    let rt = rt(1);
    for (w, ok) in [
        (0u32, false),
        (1, true),
        (rondo::group::MAX_WEIGHT, true),
        (rondo::group::MAX_WEIGHT + 1, false),
    ] {
        let r = rt.group().weight(w).build();
        assert_eq!(r.is_ok(), ok, "weight {w}");
        if let Err(e) = r {
            assert!(
                e.to_string().contains("weight must be between 1 and 10000"),
                "{e}"
            );
        }
    }
    let e = rt.group().max_concurrency(0).build().unwrap_err();
    assert!(
        e.to_string().contains("max_concurrency must be at least 1"),
        "{e}"
    );
    let g = rt.group().weight(3).build().unwrap();
    assert!(g.set_weight(0).is_err());
    assert!(g.set_weight(rondo::group::MAX_WEIGHT + 1).is_err());
    assert_eq!(g.weight(), 3);
    g.set_weight(7).unwrap();
    assert_eq!(g.weight(), 7);
    assert_eq!(g.metrics().weight, 7);
}

#[test]
fn metrics_count_what_happened() {
    watchdog(60, || {
        let rt = rt(2);
        let g = rt.group().name("counted").build().unwrap();
        let ok: Vec<_> = (0..50)
            .map(|_| {
                g.spawn(async {
                    spin(Duration::from_micros(200));
                    rondo::yield_now().await;
                })
            })
            .collect();
        let bad = g.spawn(async { panic!("counted panic") });
        let aborted = g.spawn(std::future::pending::<()>());
        aborted.abort();
        rt.block_on(async {
            for h in ok {
                h.await.unwrap();
            }
            assert!(bad.await.unwrap_err().is_panic());
            assert!(aborted.await.unwrap_err().is_cancelled());
        });
        rt.block_on(g.wait_idle());
        let m = g.metrics();
        assert_eq!(m.name, "counted");
        assert_eq!(
            (
                m.spawned,
                m.completed,
                m.panicked,
                m.cancelled,
                m.unfinished
            ),
            (52, 50, 1, 1, 0)
        );
        assert!(
            eventually(5, || g.metrics().polls >= 101),
            "{:?}",
            g.metrics()
        );
        assert!(
            g.metrics().busy >= Duration::from_millis(5),
            "{:?}",
            g.metrics()
        );
        assert_eq!(g.metrics().runnable, 0);
    });
}

#[test]
fn one_hundred_thousand_groups_work() {
    watchdog(120, || {
        let rt = rt(2);
        let done = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..100_000)
            .map(|_| {
                let g = rt.group().build().unwrap();
                let d = done.clone();
                g.spawn(async move {
                    d.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        rt.block_on(async {
            for h in handles {
                h.await.unwrap();
            }
        });
        assert_eq!(done.load(Ordering::SeqCst), 100_000);
        assert!(eventually(20, || rt.handle().group_count() == 1));
    });
}

#[test]
fn scope_runs_later_polls_in_the_new_group_and_its_children_join_it() {
    watchdog(60, || {
        let rt = rt(2);
        let a = rt.group().name("a").build().unwrap();
        let b = rt.group().name("b").build().unwrap();
        let b2 = b.clone();
        let h = a.spawn(async move {
            // The connection's first request: served in the group it was spawned in.
            spin(Duration::from_millis(1));
            b2.scope(async {
                let child =
                    rondo::spawn(async { rondo::current_group().unwrap().name().to_string() });
                let mut cpu = Duration::ZERO;
                for _ in 0..20 {
                    let t = thread_cpu();
                    spin(Duration::from_millis(1));
                    cpu += thread_cpu() - t;
                    rondo::yield_now().await;
                }
                (
                    rondo::current_group().unwrap().name().to_string(),
                    child.await.unwrap(),
                    cpu,
                )
            })
            .await
            .unwrap()
        });
        let (inside, child, cpu) = rt.block_on(h).unwrap();
        assert_eq!((inside.as_str(), child.as_str()), ("b", "b"));
        // Every poll of the scoped work was charged to `b`, not to the task that waited for it:
        // at least 80% of the CPU time its spins counted (charges are in CPU time, so spins the
        // system preempted count less than their 20 ms of wall time).
        assert!(
            eventually(5, || {
                let m = b.metrics();
                m.polls >= 21 && m.busy.as_secs_f64() >= 0.8 * cpu.as_secs_f64()
            }),
            "{:?}, the spins counted {cpu:?}",
            b.metrics()
        );
        assert_eq!(b.metrics().completed, 2);
        assert!(a.metrics().busy < b.metrics().busy, "{:?}", a.metrics());
        assert_eq!(a.metrics().completed, 1);
    });
}

/// A task that gives up on a `JoinHandle` (a timeout) and ends no longer keeps its group alive:
/// the abandoned handle's waker, registered in a task that never completes, held the waiting task
/// and, through it, its group, so a group per connection that timed out on background work was
/// never freed.
#[test]
fn a_group_whose_task_gave_up_on_a_join_handle_is_freed() {
    watchdog(60, || {
        let rt = rt(2);
        let background = rt.group().name("background").build().unwrap();
        let before = rt.metrics().groups_alive;
        let mut senders = Vec::new();
        for _ in 0..100 {
            let (tx, rx) = oneshot::channel::<()>();
            senders.push(tx);
            let conn = rt.group().build().unwrap();
            let bg = background.clone();
            let h = conn.spawn(async move {
                let work = bg.spawn(rx);
                rondo::time::timeout(Duration::from_millis(1), work)
                    .await
                    .is_err()
            });
            drop(conn);
            assert!(rt.block_on(h).unwrap(), "the background work finished");
        }
        assert!(
            eventually(5, || rt.metrics().groups_alive <= before),
            "{} groups alive, {before} before",
            rt.metrics().groups_alive
        );
        assert_eq!(background.len(), 100);
        drop(senders);
        rt.block_on(background.wait_idle());
    });
}

#[test]
fn dropping_a_scope_cancels_its_work_and_failures_come_back_as_join_errors() {
    watchdog(60, || {
        let rt = rt(2);
        let g = rt.group().name("scoped").build().unwrap();
        let drops = DropCount::new();
        let guard = drops.guard();
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let r = rt.block_on(rondo::time::timeout(
            Duration::from_millis(20),
            g.scope(async move {
                let _guard = guard;
                s.store(true, Ordering::SeqCst);
                std::future::pending::<()>().await
            }),
        ));
        assert!(r.is_err());
        assert!(started.load(Ordering::SeqCst));
        // Dropped by a worker (never inline in the dropping task), and counted as cancelled.
        assert!(eventually(5, || drops.get() == 1));
        assert!(eventually(5, || g.metrics().cancelled == 1));

        let err = rt
            .block_on(g.scope(async { panic!("scoped work panicked") }))
            .unwrap_err();
        assert!(err.is_panic());

        let (tx, rx) = oneshot::channel::<()>();
        let waiting = rt.spawn({
            let g = g.clone();
            async move { g.scope(rx).await }
        });
        assert!(eventually(5, || g.metrics().unfinished == 1));
        g.cancel();
        assert!(rt.block_on(waiting).unwrap().unwrap_err().is_cancelled());
        drop(tx);
    });
}

#[test]
fn a_wake_across_groups_runs_on_the_waking_worker() {
    use futures::{SinkExt, StreamExt};
    watchdog(60, || {
        let rt = rt(2);
        let a = rt.group().name("a").build().unwrap();
        let b = rt.group().name("b").build().unwrap();
        let (mut to_b, mut at_b) = futures::channel::mpsc::channel::<u32>(1);
        let (mut to_a, mut at_a) = futures::channel::mpsc::channel::<u32>(1);
        drop(b.spawn(async move {
            while let Some(v) = at_b.next().await {
                if to_a.send(v).await.is_err() {
                    break;
                }
            }
        }));
        let lifo =
            |rt: &rondo::Runtime| -> u64 { rt.metrics().workers.iter().map(|w| w.lifo_hits).sum() };
        let before = lifo(&rt);
        rt.block_on(a.spawn(async move {
            for i in 0..1_000 {
                to_b.send(i).await.unwrap();
                assert_eq!(at_a.next().await, Some(i));
            }
        }))
        .unwrap();
        // Each round trip is two wakes across groups, each from a task a worker polls; they go to
        // that worker's LIFO slot (not through the other group's global queue) unless the woken
        // group is ahead of the waking one, which two groups doing the same work never are for
        // long.
        // Counts are published when a worker parks or its quantum ends: wait for that.
        assert!(
            eventually(5, || lifo(&rt) - before >= 1_000),
            "{} LIFO hits in 1,000 cross-group round trips",
            lifo(&rt) - before
        );
    });
}

/// A task that wakes tasks of many other groups in one poll (a shared service replying to its
/// clients, each client in its group): each woken task takes the LIFO slot and pushes the one
/// before it out. That one stays on the worker, in its local queue, where it was bound anyway,
/// instead of going to its group's global queue, which would list the group and cost a pick.
#[test]
fn tasks_pushed_out_of_the_lifo_slot_by_other_groups_stay_on_the_worker() {
    const CLIENTS: usize = 200;
    watchdog(60, || {
        // The server's one poll sends 200 replies. Under ThreadSanitizer that takes long enough
        // for the stall monitor to rescue the core mid-poll (a rescued poll's wakes go through
        // the groups' global queues) and for the quantum to end after it (a quantum end may hand
        // the local queue back to the groups' global queues): both set as far out as allowed.
        let rt = common::builder(2)
            .stall_threshold(Duration::from_secs(5))
            .quantum(Duration::from_millis(100))
            .build()
            .unwrap();
        let server = rt.group().name("server").build().unwrap();
        let mut replies = Vec::new();
        let mut clients = Vec::new();
        for i in 0..CLIENTS {
            let (tx, rx) = oneshot::channel::<usize>();
            replies.push(tx);
            let g = rt.group().name(format!("client{i}")).build().unwrap();
            clients.push(g.spawn(async move { rx.await.unwrap() }));
        }
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let server_task = server.spawn(async move {
            go_rx.await.unwrap();
            for (i, tx) in replies.into_iter().enumerate() {
                tx.send(i).unwrap();
            }
        });
        // Every task is waiting; counters are published when a worker parks.
        let picks =
            |rt: &rondo::Runtime| -> u64 { rt.metrics().workers.iter().map(|w| w.picks).sum() };
        let settled = |rt: &rondo::Runtime| {
            let before = picks(rt);
            std::thread::sleep(Duration::from_millis(50));
            picks(rt) == before
        };
        assert!(eventually(10, || settled(&rt)));
        let before = picks(&rt);
        go_tx.send(()).unwrap();
        rt.block_on(server_task).unwrap();
        for (i, c) in clients.into_iter().enumerate() {
            assert_eq!(rt.block_on(c).unwrap(), i);
        }
        assert!(eventually(10, || settled(&rt)));
        let used = picks(&rt) - before;
        // The server's own wake, from this thread, is one pick.
        assert!(
            used <= 2,
            "{used} scheduler picks for {CLIENTS} clients woken from one poll"
        );
    });
}

/// A thread outside the runtime wakes tasks in many groups, one message at a time (a task per
/// connection, each in its group, woken by an I/O thread). A pusher counts its group as listed
/// just before queueing it for the scheduler; a worker that sees the count in between must not
/// take the scheduler's lock to find nothing, about once per wake, contending with the worker
/// doing the real picks. A worker visits only when a pick can find a group, so visits that take
/// nothing stay rare.
#[test]
fn foreign_wakes_into_many_groups_do_not_send_workers_to_an_empty_scheduler() {
    use futures::{SinkExt, StreamExt};
    const TASKS: usize = 256;
    const WAKES: usize = 40;
    watchdog(120, || {
        let rt = rt(2);
        let groups: Vec<_> = (0..TASKS).map(|_| rt.group().build().unwrap()).collect();
        let ready = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for g in &groups {
            let (tx, mut rx) = futures::channel::mpsc::channel::<usize>(1);
            senders.push(tx);
            let ready = ready.clone();
            handles.push(g.spawn(async move {
                ready.fetch_add(1, Ordering::SeqCst);
                let mut got = 0;
                while rx.next().await.is_some() {
                    got += 1;
                }
                got
            }));
        }
        assert!(eventually(30, || ready.load(Ordering::SeqCst) == TASKS));
        let sender = std::thread::spawn(move || {
            futures::executor::block_on(async move {
                for round in 0..WAKES {
                    for tx in &mut senders {
                        tx.send(round).await.unwrap();
                    }
                }
            })
        });
        for h in handles {
            assert_eq!(rt.block_on(h).unwrap(), WAKES);
        }
        sender.join().unwrap();
        // Counters are published when a worker parks: wait until they stop moving.
        let counts = |rt: &rondo::Runtime| -> Vec<(u64, u64)> {
            let m = rt.metrics();
            m.workers.iter().map(|w| (w.picks, w.empty_picks)).collect()
        };
        assert!(eventually(10, || {
            let before = counts(&rt);
            std::thread::sleep(Duration::from_millis(50));
            counts(&rt) == before
        }));
        let m = rt.metrics();
        let picks: u64 = m.workers.iter().map(|w| w.picks).sum();
        let empty: u64 = m.workers.iter().map(|w| w.empty_picks).sum();
        let lane: u64 = m.workers.iter().map(|w| w.lane_takes).sum();
        assert!(picks + lane > 0);
        assert!(
            empty <= picks + lane,
            "{empty} scheduler visits took nothing, against {picks} picks and {lane} lane takes \
             that found work ({} wakes)",
            TASKS * WAKES
        );
    });
}

/// Tasks spawned from outside into many groups at once (a task per request, each in its group)
/// cost a worker one scheduler visit per several groups, not one per group: a pick also takes the
/// other one-shot groups that are due. 64 groups of one task each, queued while the only worker is
/// busy, then run: far fewer picks than groups, every task run once. (New
/// tasks never take the lane, which is for tasks woken after a wait: the picks must move.)
#[test]
fn one_scheduler_visit_takes_several_one_shot_groups() {
    watchdog(60, || {
        let rt = common::builder(1)
            .stall_threshold(Duration::from_secs(5))
            .build()
            .unwrap();
        let (release, busy) = hold_a_worker(&rt);
        let picks = |rt: &rondo::Runtime| rt.metrics().workers[0].picks;
        let ran = Arc::new(AtomicUsize::new(0));
        let groups: Vec<_> = (0..64).map(|_| rt.group().build().unwrap()).collect();
        let handles: Vec<_> = groups
            .iter()
            .map(|g| {
                let ran = ran.clone();
                g.spawn(async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let before = picks(&rt);
        release.store(true, Ordering::SeqCst);
        rt.block_on(busy).unwrap();
        for h in handles {
            rt.block_on(h).unwrap();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 64);
        // Published at parks: wait for the worker to go idle.
        assert!(eventually(10, || rt.metrics().workers[0].parks > 0
            && picks(&rt) > before));
        let used = picks(&rt) - before;
        assert!(
            used <= 24,
            "{used} scheduler picks for 64 one-shot groups (one per group before batching)"
        );
    });
}

/// Tasks woken from outside into many idle groups (a connection per group, each woken by the
/// reactor) take the lane: they run without a pick, and their groups' service is charged about
/// once per ten groups. 64 groups with a task each waiting on a channel, the worker idle; a
/// foreign thread sends to every task; every task runs once, all 64 from the lane, with few
/// scheduler visits.
///
/// A group whose first poll was charged more than a quantum is past the floor by more than the
/// lane allows and rightly takes the rotation instead. That happens when the OS preempts the
/// worker mid-poll (seen under ThreadSanitizer on a loaded machine: one poll charged 2.8 ms
/// against the default 500 µs quantum), so the test runs with the longest quantum and excuses
/// each group that was still charged more than one.
#[test]
fn foreign_wakes_into_idle_groups_run_from_the_lane_without_picks() {
    watchdog(60, || {
        let quantum = Duration::from_millis(100);
        let rt = common::builder(1)
            .quantum(quantum)
            .stall_threshold(Duration::from_secs(5))
            .build()
            .unwrap();
        let groups: Vec<_> = (0..64).map(|_| rt.group().build().unwrap()).collect();
        let ready = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for g in &groups {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            senders.push(tx);
            let (ready, ran) = (ready.clone(), ran.clone());
            handles.push(g.spawn(async move {
                ready.fetch_add(1, Ordering::SeqCst);
                rx.await.unwrap();
                ran.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert!(eventually(10, || ready.load(Ordering::SeqCst) == 64));
        let worker = |rt: &rondo::Runtime| rt.metrics().workers[0];
        // Counters are published when the worker parks: wait until they stop moving.
        assert!(eventually(10, || {
            let before = worker(&rt);
            std::thread::sleep(Duration::from_millis(30));
            worker(&rt) == before
        }));
        let before = worker(&rt);
        let overcharged = groups.iter().filter(|g| g.metrics().busy > quantum).count() as u64;
        std::thread::spawn(move || {
            for tx in senders {
                tx.send(()).unwrap();
            }
        })
        .join()
        .unwrap();
        for h in handles {
            rt.block_on(h).unwrap();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 64);
        let all_but_overcharged = before.lane_takes + 64 - overcharged;
        assert!(eventually(10, || worker(&rt).lane_takes >= all_but_overcharged));
        let after = worker(&rt);
        let (lane, picks) = (
            after.lane_takes - before.lane_takes,
            after.picks - before.picks,
        );
        assert!(
            (64 - overcharged..=64).contains(&lane),
            "{lane} of 64 woken tasks of idle groups ran from the lane; {overcharged} groups were \
             charged more than a quantum and may take the rotation, every other one must not"
        );
        assert!(
            picks <= 12 + overcharged,
            "{picks} picks for 64 groups woken into the lane"
        );
    });
}

/// A poll rescued while stuck returns on its own thread, which then counts the poll for the task's
/// group. Here the task completes in that poll and its group's handle was dropped meanwhile, so
/// the task held the group's last `Arc` and the group is gone once the poll returns: counting must
/// not reach the group through the thread's current-group pointer, which ThreadSanitizer reported
/// as a use after free (CI runs this test under it).
#[test]
fn a_rescued_poll_that_completes_its_task_leaves_its_dropped_group_alone() {
    watchdog(60, || {
        let rt = common::builder(1)
            .stall_threshold(Duration::from_millis(50))
            .build()
            .unwrap();
        let g = rt.group().build().unwrap();
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let started = Arc::new(AtomicBool::new(false));
        // Detached: the task is freed when its last poll returns, and with it the group's last
        // `Arc`.
        drop(g.spawn({
            let started = started.clone();
            async move {
                // Work waits behind this poll (in the core's LIFO slot), so the core is rescued.
                drop(rondo::spawn(async {}));
                started.store(true, Ordering::SeqCst);
                blocked.recv().unwrap();
            }
        }));
        assert!(eventually(10, || started.load(Ordering::SeqCst)));
        assert!(eventually(10, || rt.metrics().rescues >= 1));
        drop(g);
        // The rescuing thread runs the waiting task and parks, dropping what it held of the group.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            rt.metrics().groups_alive,
            2,
            "the default group and the blocked task's"
        );
        release.send(()).unwrap();
        assert!(eventually(10, || rt.metrics().groups_alive == 1));
        assert_eq!(rt.block_on(rt.spawn(async { 7 })).unwrap(), 7);
        drop(rt);
    });
}

/// A future that counts its own polls.
struct CountPolls<F> {
    polls: Arc<AtomicUsize>,
    fut: std::pin::Pin<Box<F>>,
}

impl<F: std::future::Future> std::future::Future for CountPolls<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.fut.as_mut().poll(cx)
    }
}

/// Workers alternate between two groups on every message (each reply wakes a task of the other
/// group, which runs beside the served one); a group's polls and service wait in the worker's
/// charges between scheduler visits. Once the runtime is idle, each group's metrics count exactly
/// the polls its tasks saw, and both were charged service.
#[test]
fn group_metrics_count_every_poll_when_workers_alternate_between_groups() {
    use futures::{SinkExt, StreamExt};
    watchdog(120, || {
        let rt = rt(2);
        let a = rt.group().name("pings").build().unwrap();
        let b = rt.group().name("pongs").build().unwrap();
        let (polls_a, polls_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        rt.block_on(async {
            let mut handles = Vec::new();
            for _ in 0..16 {
                let (mut to_pong, mut pong_rx) = futures::channel::mpsc::channel::<u32>(1);
                let (mut to_ping, mut ping_rx) = futures::channel::mpsc::channel::<u32>(1);
                handles.push(b.spawn(CountPolls {
                    polls: polls_b.clone(),
                    fut: Box::pin(async move {
                        while let Some(v) = pong_rx.next().await {
                            if to_ping.send(v).await.is_err() {
                                break;
                            }
                        }
                    }),
                }));
                handles.push(a.spawn(CountPolls {
                    polls: polls_a.clone(),
                    fut: Box::pin(async move {
                        for i in 0..500 {
                            to_pong.send(i).await.unwrap();
                            assert_eq!(ping_rx.next().await, Some(i));
                        }
                    }),
                }));
            }
            for h in handles {
                h.await.unwrap();
            }
        });
        let exact = || {
            a.metrics().polls == polls_a.load(Ordering::SeqCst) as u64
                && b.metrics().polls == polls_b.load(Ordering::SeqCst) as u64
        };
        assert!(
            eventually(10, exact),
            "pings {:?} (counted {}), pongs {:?} (counted {})",
            a.metrics(),
            polls_a.load(Ordering::SeqCst),
            b.metrics(),
            polls_b.load(Ordering::SeqCst)
        );
        assert!(a.metrics().busy > Duration::ZERO && b.metrics().busy > Duration::ZERO);
        // Every task was polled (a poll may run several round trips: a reply can arrive before
        // the task asks for it).
        assert!(polls_a.load(Ordering::SeqCst) >= 16 && polls_b.load(Ordering::SeqCst) >= 16);
    });
}

/// A task waiting in the lane when the runtime shuts down is dropped by the drain (its future's
/// destructor runs), not left in the lane holding the runtime. The only worker spins in one long
/// poll (no rescue: a long stall threshold) while a foreign thread wakes a task of an idle group,
/// which waits in the lane; shutdown gives up on the spinning worker after its timeout and drains.
#[test]
fn a_task_waiting_in_the_lane_is_dropped_at_shutdown() {
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    watchdog(60, || {
        let rt = common::builder(1)
            .stall_threshold(Duration::from_secs(30))
            .build()
            .unwrap();
        let g = rt.group().build().unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let waiting = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (dropped, waiting) = (Dropped(dropped.clone()), waiting.clone());
            g.spawn(async move {
                let _guard = dropped;
                waiting.store(true, Ordering::SeqCst);
                let _ = rx.await;
                std::future::pending::<()>().await;
            })
        };
        assert!(eventually(10, || waiting.load(Ordering::SeqCst)));
        let (release, spinner) = hold_a_worker(&rt);
        std::thread::spawn(move || tx.send(()).unwrap())
            .join()
            .unwrap();
        assert_eq!(
            rt.metrics().groups_runnable,
            1,
            "the woken task waits in the lane"
        );
        assert!(!dropped.load(Ordering::SeqCst));
        let releaser = {
            let release = release.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(500));
                release.store(true, Ordering::SeqCst);
            })
        };
        rt.shutdown_timeout(Duration::from_millis(100));
        assert!(
            dropped.load(Ordering::SeqCst),
            "the task in the lane was not dropped by shutdown's drain"
        );
        releaser.join().unwrap();
        drop((waiter, spinner));
    });
}

/// A task woken from outside takes the lane only if its group is not behind the rotation's
/// first group: the lane never passes over a group waiting in the rotation.
///
/// One worker, a 100 ms quantum. Group L has had 60 ms of service and group H 5 ms; both idle.
/// Then the worker serves a spinner (yielding every millisecond) in a group of the largest
/// weight, whose virtual runtime barely moves, so the floor stays near 0. H gets new tasks, which
/// go through H's queue into the rotation at the spinner's next quantum end (H at 5 ms is not
/// behind the spinner, so the worker stays). Then L's waiting task is woken from another thread:
/// L is within a quantum of the floor, but behind H, so it must not take the lane, and once the
/// spinner stops a pick runs H first.
///
/// Service is measured in wall time, so a thread the operating system preempts is charged for
/// the preemption: L passes H through the lane only if H's service reaches 47.5 ms, so 42.5 ms of
/// preemption while H runs are allowed for. (With 40 and 20 ms, 7.5 ms of preemption during H's
/// service let L pass, the likeliest reading of one failure under ThreadSanitizer in CI.)
#[test]
fn the_lane_never_passes_a_group_waiting_in_the_rotation() {
    watchdog(60, || {
        let rt = common::builder(1)
            .quantum(Duration::from_millis(100))
            .stall_threshold(Duration::from_secs(30))
            .build()
            .unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let l = rt.group().name("L").build().unwrap();
        let h = rt.group().name("H").build().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let waiting = Arc::new(AtomicBool::new(false));
        let l_task = {
            let (order, waiting) = (order.clone(), waiting.clone());
            l.spawn(async move {
                spin(Duration::from_millis(60));
                waiting.store(true, Ordering::SeqCst);
                rx.await.unwrap();
                order.lock().unwrap().push("L");
            })
        };
        assert!(eventually(10, || waiting.load(Ordering::SeqCst)));
        rt.block_on(h.spawn(async { spin(Duration::from_millis(5)) }))
            .unwrap();
        let (s, release, spinner) = keep_the_worker_at_max_weight(&rt);
        // Three tasks: more than a pick takes along as an extra group.
        let h_tasks: Vec<_> = (0..3)
            .map(|_| {
                let order = order.clone();
                h.spawn(async move {
                    order.lock().unwrap().push("H");
                })
            })
            .collect();
        // S's service reaches its metrics at the end of each of the worker's scheduler visits (its
        // quantum ends), and every visit admits the groups listed before it into the rotation. The
        // first change seen may end a visit that began before H's tasks were spawned; the second
        // ends one that began after.
        let mut seen = s.metrics().busy;
        let mut flushes = 0;
        assert!(eventually(20, || {
            let busy = s.metrics().busy;
            if busy != seen {
                seen = busy;
                flushes += 1;
            }
            flushes >= 2
        }));
        std::thread::spawn(move || tx.send(()).unwrap())
            .join()
            .unwrap();
        release.store(true, Ordering::SeqCst);
        rt.block_on(async {
            spinner.await.unwrap();
            for t in h_tasks {
                t.await.unwrap();
            }
            l_task.await.unwrap();
        });
        assert_eq!(*order.lock().unwrap(), ["H", "H", "H", "L"]);
    });
}

/// A group at the highest weight (S) whose task spins in 1 ms slices until `release` is set: its
/// virtual runtime stays the smallest, so it keeps the worker while groups behind it wait in the
/// rotation.
fn keep_the_worker_at_max_weight(
    rt: &rondo::Runtime,
) -> (rondo::Group, Arc<AtomicBool>, rondo::JoinHandle<()>) {
    let s = rt.group().weight(rondo::group::MAX_WEIGHT).build().unwrap();
    let release = Arc::new(AtomicBool::new(false));
    let spinner = {
        let release = release.clone();
        s.spawn(async move {
            while !release.load(Ordering::SeqCst) {
                spin(Duration::from_millis(1));
                rondo::yield_now().await;
            }
        })
    };
    (s, release, spinner)
}

/// Tasks woken from outside into groups a little ahead of one waiting in the rotation take the
/// lane, not the rotation: the lane lets them pass that group by up to an eighth of a quantum of
/// their own service. With no such slack, groups woken one task at a time and charged about alike
/// (a task per connection) kept finding some group in the rotation a few microseconds behind
/// them, and each of their wakes took the rotation too, a pick under the scheduler lock: one wake
/// in five of the `wakes` bench's 1,024-group row. Here the woken groups are 2 ms ahead of the
/// waiting one, the quantum 100 ms.
#[test]
fn groups_a_little_ahead_of_the_rotations_first_take_the_lane() {
    const WOKEN: usize = 8;
    watchdog(60, || {
        let quantum = Duration::from_millis(100);
        let rt = common::builder(1)
            .quantum(quantum)
            .stall_threshold(Duration::from_secs(30))
            .build()
            .unwrap();
        let woken: Vec<_> = (0..WOKEN).map(|_| rt.group().build().unwrap()).collect();
        let ready = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for g in &woken {
            let (tx, rx) = oneshot::channel::<()>();
            senders.push(tx);
            let ready = ready.clone();
            handles.push(g.spawn(async move {
                spin(Duration::from_millis(3));
                ready.fetch_add(1, Ordering::SeqCst);
                rx.await.unwrap();
            }));
        }
        assert!(eventually(10, || ready.load(Ordering::SeqCst) == WOKEN));
        // F is charged 1 ms, 2 ms less than each woken group.
        let f = rt.group().name("F").build().unwrap();
        rt.block_on(f.spawn(async { spin(Duration::from_millis(1)) }))
            .unwrap();
        // S keeps the worker; F's new task waits in the rotation meanwhile, behind the woken
        // groups.
        let (s, release, spinner) = keep_the_worker_at_max_weight(&rt);
        let before_busy = s.metrics().busy;
        let f_task = f.spawn(async {});
        // S's service reaches its metrics at its quantum ends: once 150 ms more has, a quantum end
        // has admitted F into the rotation and published where it stands.
        assert!(eventually(20, || s.metrics().busy
            >= before_busy + Duration::from_millis(150)));
        let lane_takes = |rt: &rondo::Runtime| rt.metrics().workers[0].lane_takes;
        let before = lane_takes(&rt);
        // A group charged much more than its 3 ms (a preempted spin) may be too far ahead.
        let too_far = woken
            .iter()
            .filter(|g| g.metrics().busy > f.metrics().busy + quantum / 16)
            .count();
        std::thread::spawn(move || {
            for tx in senders {
                tx.send(()).unwrap();
            }
        })
        .join()
        .unwrap();
        release.store(true, Ordering::SeqCst);
        rt.block_on(async {
            spinner.await.unwrap();
            f_task.await.unwrap();
            for h in handles {
                h.await.unwrap();
            }
        });
        // Counters are published when the worker parks.
        let wanted = (WOKEN - too_far) as u64;
        let _ = eventually(10, || lane_takes(&rt) - before >= wanted);
        let lane = lane_takes(&rt) - before;
        assert!(
            lane >= wanted,
            "{lane} of {WOKEN} tasks woken from outside took the lane ({too_far} of their groups \
             were charged more than {:?} beyond F)",
            quantum / 16
        );
    });
}

/// A nested `block_on` that runs the awaited task inline (a task of another group, let beside
/// the caller's) gives the core back to the caller's group afterwards: the rest of the caller's
/// poll is charged to the caller. It once stayed charged to the inlined task's group, polls and
/// time alike.
#[test]
fn a_nested_block_on_charges_the_rest_of_the_callers_poll_to_the_caller() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::from_secs(1))
            .build()
            .unwrap();
        let scoped = rt.group().name("scoped").build().unwrap();
        let outer = rt.group().name("outer").build().unwrap();
        for _ in 0..20 {
            let g = scoped.clone();
            rt.block_on(outer.spawn(async move {
                // Ahead of `scoped` in virtual time, so its task may run beside and be inlined.
                spin(Duration::from_millis(2));
                rondo::block_on(g.scope(async { 1 })).unwrap();
                spin(Duration::from_millis(1));
            }))
            .unwrap();
        }
        // A worker flushes its groups' counters at its next scheduler visit (parking, here).
        assert!(eventually(10, || scoped.metrics().polls
            + outer.metrics().polls
            >= 40));
        let (s, o) = (scoped.metrics(), outer.metrics());
        assert_eq!(s.polls, 20, "the scoped group ran 20 one-poll tasks");
        assert_eq!(o.polls, 20, "the outer group ran 20 one-poll tasks");
        // 20 × 3 ms of the caller's own spinning, generously bounded.
        assert!(o.busy >= Duration::from_millis(40), "outer: {:?}", o.busy);
        assert!(
            s.busy < o.busy / 2,
            "scoped {:?}, outer {:?}",
            s.busy,
            o.busy
        );
    });
}

/// A worker stuck in one poll does not pin the fairness floor. Group B arrives while group A has
/// been running on the free worker; the two share it, instead of B taking it all until it has
/// "caught up" with A's service.
#[test]
fn a_stuck_worker_does_not_freeze_the_fairness_floor() {
    watchdog(60, || {
        let rt = common::rt_at_least(2, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let stuck = rt.group().name("stuck").build().unwrap();
        let a = rt.group().name("a").build().unwrap();
        let b = rt.group().name("b").build().unwrap();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let blocker = stuck.spawn(async move {
            started_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(900));
        });
        started_rx.recv().unwrap();
        let (at, bt) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut hs: Vec<_> = (0..4)
            .map(|_| a.spawn(spinner(at.clone(), stop.clone())))
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let a_before = at.load(Ordering::SeqCst);
        hs.extend((0..4).map(|_| b.spawn(spinner(bt.clone(), stop.clone()))));
        std::thread::sleep(Duration::from_millis(250));
        stop.store(true, Ordering::SeqCst);
        let (a_ns, b_ns) = (
            (at.load(Ordering::SeqCst) - a_before) as f64,
            bt.load(Ordering::SeqCst) as f64,
        );
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
            blocker.await.unwrap();
        });
        // Ideal 50:50 (with a frozen floor: 0.5 ms against 199.5 ms).
        let share = a_ns / (a_ns + b_ns);
        assert!(
            (0.2..=0.8).contains(&share),
            "group a got {a_ns} ns and group b {b_ns} ns while a worker was stuck"
        );
    });
}

/// The default group (what `current_group` returns in a plain spawn) cannot be cancelled, which
/// would cancel every later plain spawn on the runtime: `cancel` panics with a message that says
/// what to do instead, and the runtime keeps spawning.
#[test]
fn the_default_group_cannot_be_cancelled() {
    watchdog(30, || {
        let rt = rt(1);
        let g = rt
            .block_on(rt.spawn(async { rondo::current_group().unwrap() }))
            .unwrap();
        assert_eq!(g.name(), "default");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.cancel()));
        let msg = common::panic_text(r.unwrap_err());
        assert!(msg.contains("default group cannot be cancelled"), "{msg}");
        assert!(!g.is_cancelled());
        assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
        // A group of one's own still cancels.
        let own = rt.group().build().unwrap();
        let h = own.spawn(std::future::pending::<()>());
        own.cancel();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
    });
}

/// A `Scoped` polled again after it returned `Ready` panics with a message that names `Scoped`
/// (not `JoinHandle`, a type the caller never held) and says what to do.
#[test]
fn a_scoped_polled_after_ready_panics_naming_scoped() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    let rt = rt(1);
    let g = rt.group().build().unwrap();
    let mut s = g.scope(async { 3 });
    let mut cx = Context::from_waker(Waker::noop());
    let first = loop {
        if let Poll::Ready(v) = Pin::new(&mut s).poll(&mut cx) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(first.unwrap(), 3);
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Pin::new(&mut s).poll(&mut cx)
    }));
    let msg = common::panic_text(again.expect_err("a second poll must panic"));
    assert!(
        msg.starts_with("Scoped polled after it returned Ready"),
        "{msg}"
    );
    assert!(!msg.contains("JoinHandle"), "{msg}");
}

/// A future refused by a cancelled group is dropped unpolled on the spawning thread, and a
/// cancelled future wherever it ends up dropped (a closed queue at shutdown, a worker): its
/// destructor is the task's code and runs with the task's group current, as in a poll. So a
/// `rondo::spawn` there goes to that group (refused too) instead of the spawner's context: from
/// plain code, not the global runtime; from a task of another group, not that group.
#[test]
fn a_refused_futures_destructor_spawns_into_its_own_group() {
    watchdog(30, || {
        let rt = rt(2);
        let closed = rt.group().name("closed").build().unwrap();
        closed.cancel();
        // What each destructor saw: its current group, and whether its spawn was refused.
        type Seen = Arc<Mutex<Vec<(Option<String>, bool)>>>;
        let seen: Seen = Default::default();
        let spawned_ran = Arc::new(AtomicUsize::new(0));
        let probe = |seen: &Seen| {
            let (seen, ran) = (seen.clone(), spawned_ran.clone());
            common::OnDrop(move || {
                let name = rondo::current_group().map(|g| g.name().to_string());
                let ran = ran.clone();
                let h = rondo::spawn(async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
                seen.lock().unwrap().push((name, h.is_finished()));
            })
        };
        // From plain code.
        let guard = probe(&seen);
        let h = closed.spawn(async move {
            let _guard = guard;
        });
        assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
        // From a task of another group.
        let other = rt.group().name("other").build().unwrap();
        let guard = probe(&seen);
        let c = closed.clone();
        let cancelled = rt
            .block_on(other.spawn(async move {
                let refused = c.spawn(async move {
                    let _guard = guard;
                });
                refused.await.unwrap_err().is_cancelled()
            }))
            .unwrap();
        assert!(cancelled);
        rt.block_on(other.wait_idle());
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(spawned_ran.load(Ordering::SeqCst), 0);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(Some(String::from("closed")), true); 2]
        );
    });
}
