//! The task dump (`Builder::enable_task_dump`, `Handle::dump`): what it lists, each state (a
//! woken task queued until it is polled), poll counts, finished tasks leaving it, the switch off,
//! and dumps taken from another thread while workers run; and `AbortHandle`: aborting without the `JoinHandle`, `is_finished`, `id`,
//! `JoinSet::spawn`'s handles, `Extend` and `FromIterator`.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{builder, eventually, watchdog};
use rondo::runtime::{TaskDump, TaskState};
use rondo::sync::Semaphore;
use rondo::task::JoinSet;

fn dump_rt(workers: usize) -> rondo::Runtime {
    builder(workers).enable_task_dump().build().unwrap()
}

fn named(name: &str) -> rondo::task::Builder<'_> {
    rondo::task::Builder::new().name(name)
}

/// The dump's line for the task called `name`.
fn find(rt: &rondo::Runtime, name: &str) -> Option<TaskDump> {
    rt.dump()
        .unwrap()
        .tasks()
        .iter()
        .find(|t| t.name() == Some(name))
        .cloned()
}

/// Counts its drops: a task's future holding one shows when the task was dropped.
struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_dump_lists_every_live_task_with_its_name_and_group() {
    watchdog(60, || {
        let rt = dump_rt(2);
        let jobs = rt.group().name("jobs").build().unwrap();
        let a = named("a")
            .spawn_on(std::future::pending::<()>(), rt.handle())
            .unwrap();
        let b = named("b")
            .group(&jobs)
            .spawn(std::future::pending::<()>())
            .unwrap();
        let c = rt.spawn(std::future::pending::<()>());
        let dump = rt.dump().unwrap();
        assert_eq!(dump.tasks().len(), 3, "{dump}");
        let ids: HashSet<_> = dump.tasks().iter().map(|t| t.id()).collect();
        assert_eq!(ids, HashSet::from([a.id(), b.id(), c.id()]));
        let ta = find(&rt, "a").unwrap();
        assert_eq!((ta.id(), ta.group_name()), (a.id(), "default"));
        let tb = find(&rt, "b").unwrap();
        assert_eq!(
            (tb.id(), tb.group_name(), tb.group_id()),
            (b.id(), "jobs", jobs.id())
        );
        let tc = dump.tasks().iter().find(|t| t.id() == c.id()).unwrap();
        assert_eq!(tc.name(), None);
        let text = dump.to_string();
        assert_eq!(
            text.lines().count(),
            4,
            "a header and one line per task:\n{text}"
        );
        assert!(text.contains("jobs") && text.contains(" b "), "{text}");
        for h in [a, b, c] {
            h.abort();
        }
    });
}

#[test]
fn a_waiting_task_shows_idle_a_new_one_queued_and_the_dumping_task_running() {
    watchdog(60, || {
        // One worker: while the dumping task runs, a woken or new task cannot be polled.
        let rt = dump_rt(1);
        let sem = Arc::new(Semaphore::new(0));
        let s = sem.clone();
        let waiter = named("waiter")
            .spawn_on(
                async move {
                    let _p = s.acquire().await.unwrap();
                },
                rt.handle(),
            )
            .unwrap();
        assert!(eventually(10, || {
            find(&rt, "waiter").unwrap().state() == TaskState::Idle
        }));
        let idle = find(&rt, "waiter").unwrap();
        assert_eq!(idle.polls(), 1);
        assert!(idle.since_last_poll().is_some());
        let (me, fresh, woken) = rt
            .block_on(
                named("dumper")
                    .spawn_on(
                        async move {
                            let h = rondo::Handle::current();
                            let fresh = named("fresh").spawn(async {}).unwrap();
                            sem.add_permits(1);
                            let dump = h.dump().unwrap();
                            let state = |n: &str| {
                                let t = dump.tasks().iter().find(|t| t.name() == Some(n)).unwrap();
                                (t.state(), t.polls())
                            };
                            let r = (state("dumper"), state("fresh"), state("waiter"));
                            fresh.await.unwrap();
                            r
                        },
                        rt.handle(),
                    )
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(
            me,
            (TaskState::Running, 1),
            "the dumping task is in its poll"
        );
        assert_eq!(fresh, (TaskState::Queued, 0), "spawned, not yet polled");
        // Woken by the dumping task's poll, not yet polled again: queued.
        assert_eq!(woken, (TaskState::Queued, 1));
        rt.block_on(waiter).unwrap();
    });
}

#[test]
fn a_task_woken_from_outside_shows_queued_until_a_worker_polls_it() {
    watchdog(60, || {
        // One worker, held by a spinning task and never rescued: a woken task waits in a queue.
        let rt = builder(1)
            .stall_threshold(Duration::from_secs(3600))
            .enable_task_dump()
            .build()
            .unwrap();
        let sem = Arc::new(Semaphore::new(0));
        let s = sem.clone();
        let waiter = named("waiter")
            .spawn_on(
                async move {
                    s.acquire().await.unwrap().forget();
                    s.acquire().await.unwrap().forget();
                },
                rt.handle(),
            )
            .unwrap();
        assert!(eventually(10, || {
            find(&rt, "waiter").is_some_and(|t| t.state() == TaskState::Idle)
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let holder = named("holder")
            .spawn_on(
                async move {
                    while !st.load(Ordering::SeqCst) {
                        std::hint::spin_loop();
                    }
                },
                rt.handle(),
            )
            .unwrap();
        assert!(eventually(10, || {
            find(&rt, "holder").is_some_and(|t| t.state() == TaskState::Running)
        }));
        // The wake, from this thread, is recorded before it returns.
        sem.add_permits(1);
        let woken = find(&rt, "waiter").unwrap();
        let dump = rt.dump().unwrap();
        stop.store(true, Ordering::SeqCst);
        assert_eq!(
            (woken.state(), woken.polls()),
            (TaskState::Queued, 1),
            "{dump}"
        );
        // Polled again, it waits for the second permit: idle.
        assert!(eventually(10, || {
            find(&rt, "waiter").is_some_and(|t| t.polls() == 2 && t.state() == TaskState::Idle)
        }));
        sem.add_permits(1);
        rt.block_on(waiter).unwrap();
        rt.block_on(holder).unwrap();
    });
}

#[test]
fn a_task_woken_during_its_own_poll_shows_queued() {
    watchdog(60, || {
        let rt = dump_rt(1);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        // The yielder starts a task that holds the only worker, then yields: it waits in the
        // queue, woken during its own poll.
        let yielder = named("yielder")
            .spawn_on(
                async move {
                    let holder = named("holder")
                        .spawn(async move {
                            while !s.load(Ordering::SeqCst) {
                                std::hint::spin_loop();
                            }
                        })
                        .unwrap();
                    rondo::yield_now().await;
                    holder.await.unwrap();
                },
                rt.handle(),
            )
            .unwrap();
        let seen = eventually(10, || {
            find(&rt, "yielder").is_some_and(|t| t.polls() == 1 && t.state() == TaskState::Queued)
                && find(&rt, "holder").is_some_and(|t| t.state() == TaskState::Running)
        });
        let dump = rt.dump().unwrap();
        stop.store(true, Ordering::SeqCst);
        assert!(seen, "{dump}");
        rt.block_on(yielder).unwrap();
    });
}

#[test]
fn polls_are_counted() {
    watchdog(60, || {
        let rt = dump_rt(2);
        let sem = Arc::new(Semaphore::new(0));
        let s = sem.clone();
        let h = named("counted")
            .spawn_on(
                async move {
                    for _ in 0..5 {
                        rondo::yield_now().await;
                    }
                    let _p = s.acquire().await.unwrap();
                },
                rt.handle(),
            )
            .unwrap();
        assert!(eventually(10, || {
            find(&rt, "counted").is_some_and(|t| t.state() == TaskState::Idle)
        }));
        assert_eq!(
            find(&rt, "counted").unwrap().polls(),
            6,
            "five yields, then a wait"
        );
        sem.add_permits(1);
        rt.block_on(h).unwrap();
    });
}

#[test]
fn finished_tasks_leave_the_dump() {
    watchdog(60, || {
        let rt = dump_rt(2);
        let done = named("done").spawn_on(async { 1 }, rt.handle()).unwrap();
        let panics = named("panics")
            .spawn_on(async { panic!("boom") }, rt.handle())
            .unwrap();
        let aborted = named("aborted")
            .spawn_on(std::future::pending::<()>(), rt.handle())
            .unwrap();
        let detached = named("detached").spawn_on(async {}, rt.handle()).unwrap();
        drop(detached);
        assert_eq!(rt.block_on(done).unwrap(), 1);
        assert!(rt.block_on(panics).unwrap_err().is_panic());
        aborted.abort();
        assert!(rt.block_on(aborted).unwrap_err().is_cancelled());
        assert!(
            eventually(10, || rt.dump().unwrap().tasks().is_empty()),
            "{}",
            rt.dump().unwrap()
        );
        let g = rt.group().build().unwrap();
        let idle = g.spawn(std::future::pending::<()>());
        assert_eq!(rt.dump().unwrap().tasks().len(), 1);
        g.cancel();
        assert!(rt.block_on(idle).unwrap_err().is_cancelled());
        assert!(
            rt.dump().unwrap().tasks().is_empty(),
            "a cancelled group's tasks leave it"
        );
    });
}

#[test]
fn without_the_switch_a_dump_is_an_error_that_names_it() {
    let rt = rondo::Runtime::builder()
        .worker_threads(1)
        .on_task_spawn(|_| {})
        .build()
        .unwrap();
    let h = named("x")
        .spawn_on(std::future::pending::<()>(), rt.handle())
        .unwrap();
    let err = rt.dump().unwrap_err();
    assert!(err.to_string().contains("enable_task_dump"), "{err}");
    assert_eq!(rt.handle().dump().unwrap_err(), err);
    h.abort();
    // One runtime's dump lists only its own tasks.
    let other = dump_rt(1);
    let mine = other.spawn(std::future::pending::<()>());
    let dump = other.dump().unwrap();
    assert_eq!(dump.tasks().len(), 1);
    assert_eq!(dump.tasks()[0].id(), mine.id());
    mine.abort();
}

/// Tasks that spawn, yield, wait on a semaphore and finish, on 1, 2, 4 and 8 workers, while
/// another thread dumps in a loop: every dump lists only live tasks (none finished before it
/// began), each with its name, and the workers keep going.
#[test]
fn dumps_from_another_thread_under_load() {
    for workers in [1, 2, 4, 8] {
        watchdog(120, move || {
            let rt = dump_rt(workers);
            let finished = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let sem = Arc::new(Semaphore::new(4));
            let mut handles = Vec::new();
            for i in 0..64 {
                let (finished, sem) = (finished.clone(), sem.clone());
                let name = format!("load-{i}");
                handles.push(
                    named(&name)
                        .spawn_on(
                            async move {
                                for round in 0..200 {
                                    let _p = sem.acquire().await.unwrap();
                                    if round % 3 == 0 {
                                        let child = rondo::spawn(async {});
                                        child.await.unwrap();
                                    }
                                    rondo::yield_now().await;
                                }
                                finished.fetch_add(1, Ordering::SeqCst);
                            },
                            rt.handle(),
                        )
                        .unwrap(),
                );
            }
            let handle = rt.handle().clone();
            let s = stop.clone();
            let dumper = std::thread::spawn(move || {
                let mut dumps = 0;
                let mut most = 0;
                while !s.load(Ordering::SeqCst) {
                    let dump = handle.dump().unwrap();
                    for t in dump.tasks() {
                        if let Some(n) = t.name() {
                            assert!(n.starts_with("load-"), "{n}");
                        }
                        assert_eq!(t.group_name(), "default");
                    }
                    assert!(dump.tasks().len() <= 64 * 2, "{dump}");
                    most = most.max(dump.tasks().len());
                    dumps += 1;
                }
                (dumps, most)
            });
            for h in handles {
                rt.block_on(h).unwrap();
            }
            stop.store(true, Ordering::SeqCst);
            let (dumps, most) = dumper.join().unwrap();
            assert_eq!(finished.load(Ordering::SeqCst), 64);
            assert!(dumps > 0 && most > 0, "{dumps} dumps, at most {most} tasks");
            assert!(
                eventually(10, || rt.dump().unwrap().tasks().is_empty()),
                "{}",
                rt.dump().unwrap()
            );
        });
    }
}

#[test]
fn abort_handle_aborts_without_the_join_handle() {
    watchdog(60, || {
        let rt = dump_rt(2);
        let drops = Arc::new(AtomicUsize::new(0));
        let d = DropCount(drops.clone());
        let h = rt.spawn(async move {
            let _d = d;
            std::future::pending::<()>().await
        });
        let abort = h.abort_handle();
        assert_eq!(abort.id(), h.id());
        assert_eq!(
            h.abort_handle().id(),
            h.id(),
            "every call names the same task"
        );
        assert!(!abort.is_finished());
        // The JoinHandle goes first: the task runs on, detached, until aborted.
        drop(h);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert!(!abort.is_finished());
        let other = abort.clone();
        std::thread::spawn(move || other.abort()).join().unwrap();
        assert!(eventually(10, || drops.load(Ordering::SeqCst) == 1));
        assert!(eventually(10, || abort.is_finished()));
        abort.abort(); // a finished task: nothing happens
        assert!(rt.dump().unwrap().tasks().is_empty());
    });
}

#[test]
fn a_join_handle_yields_cancelled_after_an_abort_through_its_abort_handle() {
    watchdog(60, || {
        let rt = dump_rt(2);
        let h = rt.spawn(std::future::pending::<u8>());
        let abort = h.abort_handle();
        abort.abort();
        let err = rt.block_on(h).unwrap_err();
        assert!(err.is_cancelled());
        assert_eq!(err.id(), abort.id());
        assert!(abort.is_finished());
        // A completed task keeps its output: the abort came too late.
        let h = rt.spawn(async { 7 });
        let abort = h.abort_handle();
        assert_eq!(rt.block_on(h).unwrap(), 7);
        abort.abort();
        assert!(abort.is_finished());
        // A queued task is dropped unpolled.
        let polled = Arc::new(AtomicBool::new(false));
        let p = polled.clone();
        let (rt1, abort) = {
            let rt1 = dump_rt(1);
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let holder = rt1.spawn(async move {
                while !s.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
            });
            assert!(eventually(10, || {
                rt1.dump().unwrap().tasks()[0].state() == TaskState::Running
            }));
            let h = rt1.spawn(async move { p.store(true, Ordering::SeqCst) });
            let abort = h.abort_handle();
            abort.abort();
            stop.store(true, Ordering::SeqCst);
            rt1.block_on(holder).unwrap();
            assert!(rt1.block_on(h).unwrap_err().is_cancelled());
            (rt1, abort)
        };
        assert!(!polled.load(Ordering::SeqCst));
        assert!(abort.is_finished());
        drop(rt1);
    });
}

#[test]
fn abort_handle_is_clone_send_sync_and_outlives_its_runtime() {
    fn check<T: Clone + Send + Sync + std::fmt::Debug + 'static>() {}
    check::<rondo::task::AbortHandle>();
    let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    let h = rt.spawn(std::future::pending::<()>());
    let abort = h.abort_handle();
    assert!(format!("{abort:?}").contains("AbortHandle"));
    drop(h);
    drop(rt);
    assert!(eventually(10, || abort.is_finished()));
    abort.abort();
}

#[test]
fn join_set_spawn_returns_abort_handles() {
    watchdog(60, || {
        let rt = dump_rt(2);
        rt.block_on(async {
            let mut set = JoinSet::new();
            let mut handles = Vec::new();
            for i in 0..8u32 {
                handles.push(set.spawn(async move {
                    if i % 2 == 0 {
                        std::future::pending::<()>().await;
                    }
                    i
                }));
            }
            for h in handles.iter().step_by(2) {
                h.abort();
            }
            let (mut ok, mut cancelled) = (Vec::new(), HashSet::new());
            while let Some(r) = set.join_next().await {
                match r {
                    Ok(i) => ok.push(i),
                    Err(e) => {
                        assert!(e.is_cancelled());
                        cancelled.insert(e.id());
                    }
                }
            }
            ok.sort();
            assert_eq!(ok, [1, 3, 5, 7]);
            let expected: HashSet<_> = handles.iter().step_by(2).map(|h| h.id()).collect();
            assert_eq!(cancelled, expected);
            assert!(handles.iter().all(|h| h.is_finished()));
            let blocking = set.spawn_blocking(|| 9);
            assert_eq!(set.join_next().await.unwrap().unwrap(), 9);
            assert!(blocking.is_finished());
        });
    });
}

/// tokio's `extend` and `abort_tasks` tests, in rondo's words.
#[test]
fn join_set_extend_collect_and_abort_through_handles() {
    watchdog(60, || {
        let rt = dump_rt(2);
        rt.block_on(async {
            let mut set: JoinSet<usize> = (0..10).map(|i| async move { i }).collect();
            set.extend((10..20).map(|i| async move { i }));
            assert_eq!(set.len(), 20);
            let mut sum = 0;
            while let Some(r) = set.join_next().await {
                sum += r.unwrap();
            }
            assert_eq!(sum, (0..20).sum::<usize>());

            let mut set = JoinSet::new();
            let mut aborts = Vec::new();
            for i in 0..10usize {
                let abort = set.spawn(async move {
                    rondo::time::sleep(Duration::from_secs(i as u64)).await;
                    i
                });
                if i % 2 != 0 {
                    aborts.push(abort);
                }
            }
            for a in &aborts {
                a.abort();
            }
            let (mut finished, mut cancelled) = (0, 0);
            while let Some(r) = set.join_next().await {
                match r {
                    Ok(i) => {
                        assert_eq!(i % 2, 0);
                        finished += 1;
                        if finished == 1 {
                            // Only the first, instant one is waited for; the rest are aborted.
                            set.abort_all();
                        }
                    }
                    Err(e) => {
                        assert!(e.is_cancelled());
                        cancelled += 1;
                    }
                }
            }
            assert_eq!(finished + cancelled, 10);
            assert!(cancelled >= 5);
        });
    });
}
