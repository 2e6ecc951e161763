//! Timers: sleep, timeout and interval semantics, cancellation, coalescing, idle parking, timers
//! under busy workers, and shutdown.

mod common;

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{rt, rt_at_least, watchdog};
use rondo::sync::{AsyncOneManyLock, Semaphore};
use rondo::time::{Elapsed, MissedTickBehavior, interval, sleep, sleep_until, timeout, timeout_at};

const MS: Duration = Duration::from_millis(1);

#[test]
fn sleeps_never_complete_early() {
    watchdog(60, || {
        let rt = rt(2);
        rt.block_on(async {
            let hs: Vec<_> = (0..200u64)
                .map(|i| {
                    rondo::spawn(async move {
                        let d = Duration::from_micros(i * 97 % 20_000);
                        let start = Instant::now();
                        sleep(d).await;
                        let took = start.elapsed();
                        assert!(took >= d, "slept {took:?} of {d:?}");
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
            // On the block_on thread too (a foreign shard).
            let deadline = Instant::now() + 3 * MS;
            sleep_until(deadline).await;
            assert!(Instant::now() >= deadline);
        });
    });
}

#[test]
fn deadlines_fire_in_order() {
    watchdog(60, || {
        // One worker: what fires together is queued and polled in the order it fired. Rescue off:
        // on a loaded machine the OS can preempt a task between its wake-up and its push for
        // longer than the stall threshold, and a rescue thread then rightly runs the next task
        // meanwhile, which pushes first.
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::from_secs(600))
            .build()
            .unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        rt.block_on(async {
            let start = Instant::now() + 20 * MS;
            // Spawned in a scrambled order, deadlines 1 ms apart.
            let hs: Vec<_> = (0..40u64)
                .map(|i| (i * 17) % 40)
                .map(|k| {
                    let order = order.clone();
                    rondo::spawn(async move {
                        let deadline = start + Duration::from_millis(k);
                        // A task first polled after its deadline (a very slow machine) completes
                        // at once, out of order: only the others are compared.
                        let armed_in_time = Instant::now() < deadline;
                        sleep_until(deadline).await;
                        order.lock().unwrap().push((k, armed_in_time));
                    })
                })
                .collect();
            for h in hs {
                h.await.unwrap();
            }
        });
        let order: Vec<u64> = order
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, in_time)| *in_time)
            .map(|(k, _)| *k)
            .collect();
        assert!(
            order.len() >= 20,
            "most tasks should arm in time: {}",
            order.len()
        );
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    });
}

#[test]
fn sleep_outside_any_runtime_uses_the_global_runtime() {
    watchdog(30, || {
        let start = Instant::now();
        // A foreign executor, no rondo runtime entered.
        futures::executor::block_on(sleep(2 * MS));
        assert!(start.elapsed() >= 2 * MS);
        rondo::block_on(sleep(2 * MS));
        assert!(start.elapsed() >= 4 * MS);
    });
}

/// `timeout` and `interval`, like `sleep`, work under `rondo::block_on` outside any runtime and in
/// tasks spawned there: both run on the global runtime.
#[test]
fn timeout_and_interval_work_on_the_global_runtime() {
    watchdog(30, || {
        assert_eq!(
            rondo::block_on(timeout(Duration::from_secs(5), async { 7 })),
            Ok(7)
        );
        let start = Instant::now();
        let r = rondo::block_on(timeout(2 * MS, std::future::pending::<()>()));
        assert_eq!(r, Err(Elapsed));
        assert!(start.elapsed() >= 2 * MS);
        let gap = rondo::block_on(rondo::spawn(async {
            let mut every = interval(3 * MS);
            let first = every.tick().await;
            let second = every.tick().await;
            let r = timeout(MS, sleep(Duration::from_secs(3600))).await;
            (second - first, r)
        }))
        .unwrap();
        assert!(gap.0 >= 3 * MS, "{:?}", gap.0);
        assert_eq!(gap.1, Err(Elapsed));
    });
}

#[test]
fn reset_moves_the_deadline_both_ways() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            let start = Instant::now();
            let mut s = pin!(sleep(Duration::from_secs(3600)));
            // Armed far away, then moved close.
            assert!(futures::poll!(s.as_mut()).is_pending());
            s.as_mut().reset(Instant::now() + 2 * MS);
            s.as_mut().await;
            assert!(start.elapsed() < Duration::from_secs(30));
            // Completed, then moved later: pending again until the new deadline. The margin is
            // wide because under Miri milliseconds pass between two statements.
            let later = Instant::now() + 250 * MS;
            s.as_mut().reset(later);
            assert!(!s.is_elapsed());
            s.as_mut().await;
            assert!(Instant::now() >= later);
            assert!(s.is_elapsed());
        });
    });
}

#[test]
fn timeout_returns_the_output_or_elapsed() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            assert_eq!(timeout(Duration::from_secs(5), async { 3 }).await, Ok(3));
            let start = Instant::now();
            let r = timeout(3 * MS, sleep(Duration::from_secs(3600))).await;
            assert_eq!(r, Err(Elapsed));
            assert!(start.elapsed() >= 3 * MS);
            let r = timeout_at(Instant::now() + MS, std::future::pending::<()>()).await;
            assert_eq!(r.unwrap_err().to_string(), "deadline has elapsed");
            // A future ready at the same poll as the deadline wins.
            let r = timeout(Duration::ZERO, async { 1 }).await;
            assert_eq!(r, Ok(1));
        });
    });
}

#[test]
fn timeout_around_a_semaphore_is_cancel_safe() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            let sem = Arc::new(Semaphore::new(1));
            let held = sem.acquire().await.unwrap();
            // Every timed-out acquire leaves no waiter and takes no permit.
            for _ in 0..50 {
                assert!(timeout(MS / 4, sem.acquire()).await.is_err());
            }
            assert_eq!(sem.available_permits(), 0);
            // A waiter behind the timed-out ones still gets the permit when it is released.
            let s2 = sem.clone();
            let waiter = rondo::spawn(async move {
                let _p = s2.acquire().await.unwrap();
                7
            });
            sleep(2 * MS).await;
            drop(held);
            assert_eq!(
                timeout(Duration::from_secs(10), waiter)
                    .await
                    .unwrap()
                    .unwrap(),
                7
            );
            assert_eq!(sem.available_permits(), 1);
        });
    });
}

#[test]
fn timeout_around_a_lock_is_cancel_safe() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            let lock = Arc::new(AsyncOneManyLock::new(0u32));
            let guard = lock.shared().await;
            for _ in 0..50 {
                assert!(timeout(MS / 4, lock.exclusive()).await.is_err());
            }
            // Readers are not held back by the abandoned writers.
            assert!(lock.try_shared().is_some());
            let l2 = lock.clone();
            let writer = rondo::spawn(async move {
                *l2.exclusive().await += 1;
            });
            sleep(2 * MS).await;
            drop(guard);
            timeout(Duration::from_secs(10), writer)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(*lock.shared().await, 1);
        });
    });
}

#[test]
fn interval_ticks_on_schedule() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            let start = Instant::now();
            let mut iv = interval(2 * MS);
            let first = iv.tick().await;
            // The first tick is at once.
            assert!(first <= Instant::now() && first >= start);
            let mut prev = first;
            for _ in 0..5 {
                let t = iv.tick().await;
                assert_eq!(t - prev, 2 * MS);
                assert!(Instant::now() >= t);
                prev = t;
            }
        });
    });
}

/// Ticks every 10 ms; the task is late by 35 ms after the first tick; returns the next three
/// scheduled instants, relative to the first tick, in ms.
fn ticks_after_a_stall(behavior: MissedTickBehavior) -> Vec<u128> {
    let rt = rt(1);
    rt.block_on(rt.spawn(async move {
        let mut iv = interval(10 * MS);
        iv.set_missed_tick_behavior(behavior);
        let t0 = iv.tick().await;
        std::thread::sleep(35 * MS);
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push((iv.tick().await - t0).as_millis());
        }
        out
    }))
    .unwrap()
}

#[test]
fn missed_ticks_burst_delay_or_skip() {
    watchdog(30, || {
        // Burst: the missed ticks at 10, 20 and 30 complete at once.
        assert_eq!(ticks_after_a_stall(MissedTickBehavior::Burst), [10, 20, 30]);
        // Skip: the next is at 40, on the original phase.
        assert_eq!(ticks_after_a_stall(MissedTickBehavior::Skip)[..2], [10, 40]);
        // Delay: after the late tick (observed at 35 ms or later), a full period.
        let d = ticks_after_a_stall(MissedTickBehavior::Delay);
        assert_eq!(d[0], 10);
        assert!(d[1] >= 45 && d[2] - d[1] >= 10, "{d:?}");
    });
}

/// Ticks every 100 ms; the tick due at 100 is observed at 160 (late, but by less than a period);
/// returns the instant the tick after it was scheduled for, relative to the first tick, in ms,
/// and the real time from observing the late tick to that next tick completing.
fn tick_after_a_short_stall(behavior: MissedTickBehavior) -> (u128, Duration) {
    let rt = rt(1);
    rt.block_on(rt.spawn(async move {
        let mut iv = interval(100 * MS);
        iv.set_missed_tick_behavior(behavior);
        let t0 = iv.tick().await;
        std::thread::sleep((t0 + 160 * MS).saturating_duration_since(Instant::now()));
        assert_eq!(iv.tick().await, t0 + 100 * MS);
        let observed = Instant::now();
        let next = iv.tick().await;
        ((next - t0).as_millis(), observed.elapsed())
    }))
    .unwrap()
}

/// `Delay` never brings the tick after a late one closer than a period, even when the tick was
/// late by less than a period: it once kept the original schedule then, so the tick observed at
/// 160 ms was followed by one at 200, 40 ms later. `Burst` and `Skip` keep the schedule.
#[test]
fn delay_keeps_a_full_period_after_a_tick_late_by_less_than_one() {
    watchdog(30, || {
        let (next, gap) = tick_after_a_short_stall(MissedTickBehavior::Delay);
        assert!(next >= 260, "the next tick was scheduled at {next} ms");
        assert!(
            gap >= 95 * MS,
            "the next tick came {gap:?} after the late one"
        );
        for b in [MissedTickBehavior::Burst, MissedTickBehavior::Skip] {
            assert_eq!(tick_after_a_short_stall(b).0, 200, "{b:?}");
        }
    });
}

/// `Interval::reset_after`, tokio's name for restarting the schedule a given time from now (it
/// was missing): the next tick comes that long after the call, and later ones a period apart; a
/// duration too long for an `Instant` leaves the interval waiting instead of overflowing.
#[test]
fn interval_reset_after_restarts_the_schedule() {
    watchdog(30, || {
        rt(2).block_on(async {
            let mut iv = interval(Duration::from_secs(3600));
            iv.tick().await;
            let before = Instant::now();
            iv.reset_after(20 * MS);
            let next = iv.tick().await;
            assert!(next >= before + 20 * MS && Instant::now() >= next);
            assert!(before.elapsed() < Duration::from_secs(30));
            iv.reset_after(Duration::MAX);
            assert!(poll_once(&mut pin!(iv.tick())).is_pending());
        });
    });
}

/// `?` on a timeout's result works in a function returning `io::Result`, as with tokio: the
/// error is `TimedOut` and says the deadline elapsed.
#[test]
fn elapsed_converts_to_a_timed_out_io_error() {
    async fn wait_briefly() -> std::io::Result<()> {
        timeout(MS, std::future::pending::<()>()).await?;
        Ok(())
    }
    let e = watchdog(30, || rt(1).block_on(wait_briefly())).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(e.to_string(), "deadline has elapsed");
    assert!(e.get_ref().is_some_and(|inner| inner.is::<Elapsed>()));
}

#[test]
#[should_panic(expected = "the period must be greater than zero")]
fn zero_interval_panics_clearly() {
    let _ = interval(Duration::ZERO);
}

/// A zero duration is over at the first poll: `sleep(Duration::ZERO)` completes and
/// `timeout(Duration::ZERO, ..)` gives up without a trip through the timer wheel, which processes
/// a passed deadline only at its next pass (up to a tick later; an idle wheel's pass is due only
/// once the timer is armed), and until then both returned `Pending`.
#[test]
fn a_zero_duration_is_over_at_the_first_poll() {
    watchdog(60, || {
        let rt = rt(1);
        rt.block_on(async {
            // Each ready zero sleep spends a unit of this poll's budget: well under it.
            for _ in 0..20 {
                assert!(poll_once(&mut pin!(sleep(Duration::ZERO))).is_ready());
                let mut never = pin!(timeout(Duration::ZERO, std::future::pending::<()>()));
                assert!(matches!(poll_once(&mut never), Poll::Ready(Err(_))));
                // The inner future still goes first.
                let mut ready = pin!(timeout(Duration::ZERO, async { 7 }));
                assert_eq!(poll_once(&mut ready), Poll::Ready(Ok(7)));
            }
        });
    });
}

/// A loop of zero-duration sleeps still gives the worker back: each ready one spends a unit of the
/// task's cooperative budget, so another task on the only worker gets its turn (a stall rescue,
/// which would also let it run, is kept out of reach).
#[test]
fn a_loop_of_zero_sleeps_lets_other_tasks_run() {
    watchdog(60, || {
        let rt = common::builder(1)
            .stall_threshold(Duration::from_secs(3600))
            .build()
            .unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            rt.spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    sleep(Duration::ZERO).await;
                    n += 1;
                }
                n
            })
        };
        let other = rt.spawn(async move { stop.store(true, Ordering::SeqCst) });
        rt.block_on(other).unwrap();
        assert!(rt.block_on(spinner).unwrap() > 0);
    });
}

/// Polls `f` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    Pin::new(f).poll(&mut Context::from_waker(&waker))
}

/// The task runs on `rt`, not on the global runtime (which `rondo::spawn` outside any runtime
/// would use), so another test's sleep on the global runtime cannot show in the count (under
/// ThreadSanitizer one did: 1,001 live timers).
#[test]
fn a_million_cancelled_timers_leave_nothing_behind() {
    watchdog(120, || {
        let rt = rt(2);
        rt.block_on(rt.spawn(async {
            let far = Instant::now() + Duration::from_secs(3600);
            // Some live timers at the same time, so cancellation works inside a busy wheel.
            let mut live: Vec<_> = (0..1000u64)
                .map(|i| sleep_until(far + Duration::from_micros(i * 1000)))
                .collect();
            for s in &mut live {
                assert!(poll_once(s).is_pending());
            }
            for i in 0..1_000_000u64 {
                let mut s = sleep_until(far + Duration::from_micros(i % 5_000_000));
                assert!(poll_once(&mut s).is_pending());
                drop(s);
            }
            assert_eq!(rondo::Handle::current().metrics().timers, 1000);
            drop(live);
        }))
        .unwrap();
        assert_eq!(rt.metrics().timers, 0);
    });
}

/// A million timers live at once, spread over levels and slots, then all cancelled: every entry
/// goes (the wheel gives its room back, `an_emptied_slab_gives_its_room_back`), and the wheel
/// still fires the next timer on time.
#[test]
fn a_million_timers_armed_at_once_then_cancelled_leave_nothing_behind() {
    watchdog(120, || {
        let rt = rt(2);
        rt.block_on(rt.spawn(async {
            for round in 0..2u64 {
                // Ten seconds to an hour ahead: placed on the upper levels, none due meanwhile.
                let base = Instant::now() + Duration::from_secs(10);
                let mut all: Vec<_> = (0..1_000_000u64)
                    .map(|i| sleep_until(base + Duration::from_micros(i * 7_919 % 3_600_000_000)))
                    .collect();
                for s in &mut all {
                    assert!(poll_once(s).is_pending());
                }
                assert_eq!(
                    rondo::Handle::current().metrics().timers,
                    1_000_000,
                    "round {round}"
                );
                drop(all);
                assert_eq!(
                    rondo::Handle::current().metrics().timers,
                    0,
                    "round {round}"
                );
            }
            let start = Instant::now();
            sleep(2 * MS).await;
            assert!(start.elapsed() >= 2 * MS);
        }))
        .unwrap();
        assert_eq!(rt.metrics().timers, 0);
    });
}

#[test]
fn overlapping_slack_windows_fire_in_one_wakeup() {
    watchdog(60, || {
        let rt = rt(2);
        let wakeups = |rt: &rondo::Runtime| rt.metrics().timer_wakeups;
        // 100 timers with deadlines spread over 20..120 ms: windows of 200 ms all overlap.
        // Without slack they need a wakeup every few of them; the spread is wide enough that a
        // keeper descheduled for a while by other tests on a loaded machine still wakes several
        // times.
        let run = |slack: Duration| {
            let before = wakeups(&rt);
            rt.block_on(async {
                let base = Instant::now() + 20 * MS;
                let hs: Vec<_> = (0..100u64)
                    .map(|i| {
                        rondo::spawn(async move {
                            let deadline = base + Duration::from_millis(i);
                            sleep_until(deadline).with_slack(slack).await;
                            assert!(Instant::now() >= deadline);
                        })
                    })
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            });
            wakeups(&rt) - before
        };
        let exact = run(Duration::ZERO);
        let coalesced = run(200 * MS);
        assert_eq!(coalesced, 1, "slack windows overlap: one wakeup expected");
        assert!(
            exact >= 5,
            "timers 1 ms apart without slack fired in {exact} wakeups"
        );
    });
}

#[test]
fn timers_fire_while_every_worker_is_busy() {
    watchdog(60, || {
        let rt = rt(2);
        let workers = rt.handle().worker_count();
        rt.block_on(async move {
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            // Every worker runs a task that yields in a loop: nobody parks.
            let busy: Vec<_> = (0..workers)
                .map(|_| {
                    let stop = stop.clone();
                    rondo::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            common::spin(Duration::from_micros(50));
                            rondo::yield_now().await;
                        }
                    })
                })
                .collect();
            let start = Instant::now();
            rondo::spawn(sleep(5 * MS)).await.unwrap();
            let took = start.elapsed();
            stop.store(true, Ordering::Relaxed);
            for b in busy {
                b.await.unwrap();
            }
            // Busy workers fire timers at quantum ends: generous bound.
            assert!(took < Duration::from_secs(2), "a 5 ms sleep took {took:?}");
        });
    });
}

#[test]
fn shutdown_with_sleeping_tasks_frees_them() {
    watchdog(30, || {
        let rt = rt(2);
        let token = Arc::new(());
        let started = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let t = token.clone();
            let s = started.clone();
            rt.spawn(async move {
                s.fetch_add(1, Ordering::SeqCst);
                sleep(Duration::from_secs(3600)).await;
                drop(t);
            });
        }
        while started.load(Ordering::SeqCst) < 100 {
            std::thread::sleep(MS);
        }
        drop(rt);
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

fn panic_message(r: std::thread::Result<()>) -> String {
    let p = r.unwrap_err();
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap()
}

#[test]
fn a_sleep_polled_after_its_runtime_shut_down_panics_clearly() {
    // Armed while the runtime ran, polled after it was dropped.
    let rt = rt(1);
    let mut s = Box::pin(sleep(Duration::from_secs(3600)));
    rt.block_on(async {
        assert!(futures::poll!(s.as_mut()).is_pending());
    });
    drop(rt);
    let msg = panic_message(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || {
            let _ = poll_once(&mut s);
        },
    )));
    assert!(msg.contains("after its runtime shut down"), "{msg}");
    // First polled in the context of a runtime that was dropped.
    let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    let h = rt.handle().clone();
    drop(rt);
    let msg = panic_message(std::panic::catch_unwind(|| {
        let _g = h.enter();
        let _ = poll_once(&mut sleep(MS));
    }));
    assert!(msg.contains("after its runtime shut down"), "{msg}");
}

#[test]
fn idle_runtime_with_many_long_timers_parks() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            for i in 0..10_000u64 {
                rondo::spawn(sleep(Duration::from_secs(600 + i)));
            }
            sleep(5 * MS).await;
        });
        let parks =
            |rt: &rondo::Runtime| -> u64 { rt.metrics().workers.iter().map(|w| w.parks).sum() };
        std::thread::sleep(20 * MS);
        let before = parks(&rt);
        let wakeups = rt.metrics().timer_wakeups;
        std::thread::sleep(300 * MS);
        // Nothing is due for ten minutes: no worker wakes (a few spurious wakes allowed).
        assert!(
            parks(&rt) - before <= 4,
            "workers woke {} times",
            parks(&rt) - before
        );
        assert_eq!(rt.metrics().timer_wakeups, wakeups);
        assert_eq!(rt.metrics().timers, 10_000);
    });
}

#[test]
fn timers_fire_while_every_worker_is_blocked() {
    watchdog(60, || {
        let rt = rt(2);
        let workers = rt.handle().worker_count();
        // Every worker runs a task that blocks its thread (no `block_in_place`, no await).
        let sleepers =
            common::spawn_blocking_sleepers(&rt, workers, Duration::from_millis(600), workers);
        let start = Instant::now();
        // A timer armed and fired while every worker is stuck: the stall monitor hands the stuck
        // workers' queues to other threads, which run this task and fire its timer.
        rt.block_on(rt.spawn(async {
            sleep(5 * MS).await;
            timeout(5 * MS, std::future::pending::<()>())
                .await
                .unwrap_err();
        }))
        .unwrap();
        let took = start.elapsed();
        assert!(
            took < Duration::from_millis(450),
            "timers waited for the blocked workers: {took:?}"
        );
        for s in sleepers {
            rt.block_on(s).unwrap();
        }
    });
}

/// A worker that finds timers due while another worker is in a long processing pass waits for that
/// pass; it does not spin through its parking loop. (It did: the pass was busy, so the keeper
/// fired nothing, counted itself woken, found no work and parked again, about once a microsecond
/// for as long as the pass lasted, taking a CPU from the very thread it waited for. On a 2-core
/// machine that thread could then wait for a whole OS time slice, and no timer fired for 1–4 ms.)
///
/// The long pass: 400,000 timers a few tens of milliseconds ahead sit in level-1 slots of the
/// wheel, and the pass that reaches them re-places them all. Every worker runs a task that spins
/// and yields until just after that pass starts, so whichever worker runs the pass, the others
/// come to park while it lasts.
#[test]
#[cfg_attr(miri, ignore = "400,000 timers")]
fn a_worker_waits_for_a_long_timer_pass_instead_of_spinning() {
    watchdog(120, || {
        let rt = rt(2);
        let workers = rt.handle().worker_count();
        let parks = |rt: &rondo::Runtime| rt.metrics().workers.iter().map(|w| w.parks).sum::<u64>();
        const TIMERS: u64 = 400_000;
        let (sleeps, base) = rt
            .block_on(rt.spawn(async move {
                // Arming takes tens of milliseconds in a release build and many times that under
                // a sanitizer: the deadlines begin well after an estimate from a first batch.
                let t = Instant::now();
                let mut first: Vec<_> = (0..TIMERS / 100)
                    .map(|_| Box::pin(sleep(Duration::from_secs(3600))))
                    .collect();
                for s in &mut first {
                    assert!(poll_once(s).is_pending());
                }
                drop(first);
                let base = Instant::now() + t.elapsed() * 300 + 50 * MS;
                let mut sleeps: Vec<_> = (0..TIMERS)
                    .map(|i| Box::pin(sleep_until(base + Duration::from_nanos(i * 20))))
                    .collect();
                for s in &mut sleeps {
                    assert!(poll_once(s).is_pending());
                }
                (sleeps, base)
            }))
            .unwrap();
        assert!(
            Instant::now() + 10 * MS < base,
            "arming took too long for this test's timing"
        );
        let before = parks(&rt);
        let busy: Vec<_> = (0..workers)
            .map(|_| {
                rt.spawn(async move {
                    while Instant::now() < base + MS {
                        common::spin(Duration::from_micros(50));
                        rondo::yield_now().await;
                    }
                })
            })
            .collect();
        for b in busy {
            rt.block_on(b).unwrap();
        }
        // Every timer has fired once no processing pass is left to wait for.
        while rt.metrics().timers_fired < TIMERS {
            std::thread::sleep(MS);
        }
        let parked = parks(&rt) - before;
        drop(sleeps);
        assert!(
            parked < 2_000,
            "workers parked {parked} times around one processing pass: they spin while it runs"
        );
    });
}

/// CPU clock ticks (10 ms each) used so far by this process's threads whose names start with
/// `prefix`.
fn thread_cpu_ticks(prefix: &str) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = e.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(p.join("comm")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue;
        };
        if comm.starts_with(prefix) {
            // utime and stime: fields 14 and 15, so 11 and 12 after the name's parenthesis.
            let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
                .split_whitespace()
                .collect();
            total += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        }
    }
    total
}

/// A deadline further off than the driver's ticks reach in nanoseconds (`u64::MAX` ns, a common
/// "forever") once made the instant the keeper parks until wrap to about now: it parked for
/// nothing, over and over, on a whole CPU, for as long as the timer lived.
#[cfg(target_os = "linux")]
#[test]
fn a_sleep_of_u64_max_nanoseconds_leaves_its_worker_idle() {
    watchdog(30, || {
        let rt = common::builder(1).thread_name("forever").build().unwrap();
        // Alone: a nearer deadline would be the one the keeper parks until.
        rt.spawn(sleep(Duration::from_nanos(u64::MAX)));
        std::thread::sleep(20 * MS);
        let before = thread_cpu_ticks("forever");
        std::thread::sleep(300 * MS);
        let used = thread_cpu_ticks("forever") - before;
        // An idle worker uses none; allow a few ticks of noise. Spinning took all 30.
        assert!(
            used <= 5,
            "the idle runtime's threads used {used} ticks of CPU in 300 ms"
        );
        assert_eq!(rt.metrics().timers, 1);
    });
}

/// Periods too long for an `Instant` to add: the first tick completes, the next never comes,
/// under every missed-tick behaviour and after `reset` (each once overflowed inside `tick`).
#[test]
fn an_interval_of_duration_max_ticks_once() {
    watchdog(30, || {
        let rt = rt(1);
        rt.block_on(async {
            for behavior in [
                MissedTickBehavior::Burst,
                MissedTickBehavior::Delay,
                MissedTickBehavior::Skip,
            ] {
                let mut iv = interval(Duration::MAX);
                iv.set_missed_tick_behavior(behavior);
                iv.tick().await;
                assert!(timeout(2 * MS, iv.tick()).await.is_err(), "{behavior:?}");
                iv.reset();
                assert!(timeout(2 * MS, iv.tick()).await.is_err(), "{behavior:?}");
            }
            // A stall past a first tick in the past: the late paths (`Delay`, `Skip`) too.
            for behavior in [MissedTickBehavior::Delay, MissedTickBehavior::Skip] {
                let start = Instant::now() - Duration::from_secs(1);
                let mut iv = rondo::time::interval_at(start, Duration::MAX);
                iv.set_missed_tick_behavior(behavior);
                assert_eq!(iv.tick().await, start);
                assert!(timeout(2 * MS, iv.tick()).await.is_err(), "{behavior:?}");
            }
        });
    });
}

/// A thread outside the runtime waiting on one of its timers (`Handle::block_on`) is woken when
/// the runtime is dropped, and its next poll panics with the timer's message; so is a task of
/// another runtime awaiting such a timer. Shutdown once dropped those wakers without waking
/// them, and both waited for good.
#[test]
fn waiters_outside_a_runtime_are_woken_when_it_drops_their_timers() {
    watchdog(30, || {
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let h = rt.handle().clone();
        let (armed_tx, armed_rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                h.block_on(async {
                    let mut s = pin!(sleep(Duration::from_secs(3600)));
                    assert!(futures::poll!(s.as_mut()).is_pending());
                    armed_tx.send(()).unwrap();
                    s.await;
                })
            }))
        });
        armed_rx.recv().unwrap();
        drop(rt);
        let msg = panic_message(waiter.join().unwrap());
        assert!(msg.contains("after its runtime shut down"), "{msg}");

        let a = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let b = rt_at_least(2, 1);
        let mut s = Box::pin(sleep(Duration::from_secs(3600)));
        a.block_on(async { assert!(futures::poll!(s.as_mut()).is_pending()) });
        let (polled_tx, polled_rx) = std::sync::mpsc::channel();
        let task = b.spawn(async move {
            let mut first = true;
            std::future::poll_fn(|cx| {
                if first {
                    first = false;
                    polled_tx.send(()).unwrap();
                }
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.as_mut().poll(cx)));
                match r {
                    Ok(Poll::Pending) => Poll::Pending,
                    Ok(Poll::Ready(())) => Poll::Ready(String::from("fired")),
                    Err(p) => Poll::Ready(panic_message(Err(p))),
                }
            })
            .await
        });
        polled_rx.recv().unwrap();
        drop(a);
        let msg = b.block_on(task).unwrap();
        assert!(msg.contains("after its runtime shut down"), "{msg}");
    });
}

/// A waker's `clone` is its owner's code and may use the timers of the same runtime: reading
/// the runtime's metrics (which counts every shard's timers) from a waker cloned by a `Sleep`'s
/// first poll, and by a poll with a new waker, once deadlocked on the shard's lock.
#[test]
fn a_waker_whose_clone_reads_the_timers_does_not_deadlock_a_sleep() {
    use std::sync::OnceLock;
    use std::task::{RawWaker, RawWakerVTable, Waker};

    static HANDLE: OnceLock<rondo::Handle> = OnceLock::new();
    static CLONES: AtomicUsize = AtomicUsize::new(0);
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    fn clone(p: *const ()) -> RawWaker {
        if let Some(h) = HANDLE.get() {
            let _ = h.metrics().timers;
            CLONES.fetch_add(1, Ordering::SeqCst);
        }
        RawWaker::new(p, &VTABLE)
    }
    fn noop(_: *const ()) {}

    watchdog(30, || {
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        HANDLE.set(rt.handle().clone()).unwrap();
        let _g = rt.enter();
        // SAFETY: the vtable's functions ignore the data pointer, so any pointer is valid.
        let waker = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) };
        let mut cx = Context::from_waker(&waker);
        // Arming.
        let mut s = Box::pin(sleep(Duration::from_secs(10)));
        assert!(s.as_mut().poll(&mut cx).is_pending());
        // A poll with another waker replaces the stored one.
        let mut t = Box::pin(sleep(Duration::from_secs(10)));
        assert!(
            t.as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending()
        );
        assert!(t.as_mut().poll(&mut cx).is_pending());
        assert_eq!(CLONES.load(Ordering::SeqCst), 2);
        assert_eq!(rt.metrics().timers, 2);
    });
}

/// A timer armed before every worker blocks (its task already waiting, nothing queued) fires on
/// time: the stall monitor counts a due timer as work waiting behind the stalled cores. It once
/// waited for a blocking poll to return (a 20 ms sleep took 505 ms).
#[test]
fn a_timer_armed_before_every_worker_blocks_fires_on_time() {
    for workers in [1, 2] {
        watchdog(30, move || {
            let rt = rondo::Runtime::builder()
                .worker_threads(workers)
                .build()
                .unwrap();
            let t0 = Instant::now();
            let timer = rt.spawn(async move {
                sleep(20 * MS).await;
                t0.elapsed()
            });
            std::thread::sleep(5 * MS);
            let sleepers = common::spawn_blocking_sleepers(&rt, workers, 1000 * MS, workers);
            let fired = rt.block_on(timer).unwrap();
            for s in sleepers {
                rt.block_on(s).unwrap();
            }
            // Generous: the stall threshold (5 ms by default) and a rescue, not the 1 s block.
            assert!(
                fired < 500 * MS,
                "{workers} workers: a 20 ms sleep took {fired:?}"
            );
        });
    }
}

#[test]
fn skip_from_a_start_centuries_ago_waits_for_the_next_tick_after_now() {
    // A start over 584 years back: more nanoseconds behind than a u64 holds.
    let Some(start) = Instant::now().checked_sub(Duration::from_secs(600 * 365 * 86_400)) else {
        return; // a platform whose clock cannot go back that far
    };
    watchdog(30, move || {
        rondo::block_on(async move {
            let period = 2 * MS;
            let mut iv = rondo::time::interval_at(start, period);
            iv.set_missed_tick_behavior(MissedTickBehavior::Skip);
            assert_eq!(iv.tick().await, start);
            let before = Instant::now();
            let next = iv.tick().await;
            // The next tick of the original schedule after the late one: not in the past, and at
            // most a period (plus the timer's lateness) away.
            assert!(next >= before, "ticked {:?} before now", before - next);
            assert!(
                next <= before + period,
                "ticked {:?} after now",
                next - before
            );
            let d = next.duration_since(start);
            assert_eq!(d.as_nanos() % period.as_nanos(), 0, "off the schedule");
        });
    });
}

#[test]
fn a_bursting_interval_spends_the_cooperative_budget() {
    watchdog(30, || {
        rondo::block_on(async {
            // An hour of 1 µs ticks behind: billions of ticks ready at once.
            let start = Instant::now() - Duration::from_secs(3600);
            let mut iv = rondo::time::interval_at(start, Duration::from_micros(1));
            let ready_in_one_poll = std::future::poll_fn(|cx| {
                let mut n = 0u32;
                while iv.poll_tick(cx).is_ready() {
                    n += 1;
                    if n > 1_000_000 {
                        break;
                    }
                }
                Poll::Ready(n)
            })
            .await;
            assert!(
                ready_in_one_poll <= rondo::task::BUDGET,
                "{ready_in_one_poll} ticks in one poll"
            );
        });
    });
}

#[test]
fn a_bursting_interval_lets_the_other_tasks_of_its_worker_run() {
    watchdog(60, || {
        let rt = rt(1);
        rt.block_on(async {
            rondo::spawn(async {
                let start = Instant::now() - Duration::from_secs(3600);
                let mut iv = rondo::time::interval_at(start, Duration::from_micros(1));
                let other = rondo::spawn(async {});
                let mut ticks = 0u64;
                while !other.is_finished() {
                    iv.tick().await;
                    ticks += 1;
                    assert!(ticks < 10_000_000, "the other task never ran");
                }
            })
            .await
            .unwrap();
        });
    });
}

/// A timeout fires around a future that is ready whenever it has budget: the future spends the
/// task's whole cooperative budget in every poll, and the deadline is still seen.
#[test]
fn a_timeout_elapses_around_a_future_that_spends_every_budget() {
    watchdog(60, || {
        for workers in [1, 2] {
            let rt = rt(workers);
            let spins = Arc::new(AtomicUsize::new(0));
            let s = spins.clone();
            let r = rt.block_on(rt.spawn(timeout(MS, async move {
                loop {
                    rondo::task::consume_budget().await;
                    s.fetch_add(1, Ordering::Relaxed);
                }
            })));
            assert_eq!(r.unwrap(), Err(Elapsed));
            assert!(spins.load(Ordering::Relaxed) > 0);
            // Under `block_on` as well.
            let r = rt.block_on(timeout(MS, async {
                loop {
                    rondo::task::consume_budget().await;
                }
            }));
            assert_eq!(r, Err::<(), _>(Elapsed));
        }
    });
}
