//! The paused clock: `pause`, `resume`, `advance`, auto-advance, `start_paused`, and every timer
//! and `rondo::time::Instant` following the runtime's clock, at one worker and at several.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{builder, panic_text, watchdog};
use rondo::time::{
    Elapsed, Instant, MissedTickBehavior, advance, interval, interval_at, pause, resume, sleep,
    sleep_until, timeout,
};

const MS: Duration = Duration::from_millis(1);
/// One timer tick (2^17 ns) and a little: how far past a deadline auto-advance may move the clock.
const TICK: Duration = Duration::from_micros(132);

/// Worker counts every test runs at: the clock is per runtime, whatever the number of workers.
const WORKERS: [usize; 2] = [1, 3];

fn paused_rt(workers: usize) -> rondo::Runtime {
    builder(workers).start_paused(true).build().unwrap()
}

/// Polls `f` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_long_sleep_takes_no_real_time() {
    for w in WORKERS {
        watchdog(30, move || {
            paused_rt(w).block_on(async {
                let real = std::time::Instant::now();
                let start = Instant::now();
                sleep(Duration::from_secs(86_400)).await;
                let virt = start.elapsed();
                assert!(virt >= Duration::from_secs(86_400), "{virt:?}");
                assert!(virt < Duration::from_secs(86_400) + TICK, "{virt:?}");
                assert!(real.elapsed() < Duration::from_secs(10));
            });
        });
    }
}

#[test]
fn the_paused_clock_stands_still() {
    for w in WORKERS {
        paused_rt(w).block_on(async {
            let a = Instant::now();
            std::thread::sleep(5 * MS);
            assert_eq!(Instant::now(), a);
            // Spawned tasks on the workers read the same clock.
            let b = rondo::spawn(async { Instant::now() }).await.unwrap();
            assert_eq!(b, a);
        });
    }
}

#[test]
fn advance_moves_the_clock_exactly_and_fires_due_timers_in_order() {
    for w in WORKERS {
        watchdog(30, move || {
            paused_rt(w).block_on(async {
                let start = Instant::now();
                let log = Arc::new(Mutex::new(Vec::new()));
                for d in [50u64, 10, 40, 20, 30] {
                    let log = log.clone();
                    rondo::spawn(async move {
                        sleep(d as u32 * MS).await;
                        log.lock().unwrap().push((d, start.elapsed()));
                    });
                }
                // Let every task arm its timer.
                while rondo::Handle::current().metrics().timers < 5 {
                    rondo::task::yield_now().await;
                }
                for step in 1..=5usize {
                    advance(10 * MS).await;
                    assert_eq!(start.elapsed(), step as u32 * 10 * MS);
                    // This thread keeps polling, so the clock cannot auto-advance meanwhile.
                    while log.lock().unwrap().len() < step {
                        rondo::task::yield_now().await;
                    }
                    assert_eq!(start.elapsed(), step as u32 * 10 * MS);
                }
                let log = log.lock().unwrap().clone();
                let order: Vec<u64> = log.iter().map(|(d, _)| *d).collect();
                assert_eq!(order, [10, 20, 30, 40, 50]);
                for (d, at) in log {
                    assert_eq!(at, d as u32 * MS, "the {d} ms sleep completed at {at:?}");
                }
            });
        });
    }
}

#[test]
fn advance_short_of_a_deadline_leaves_the_sleep_pending() {
    paused_rt(1).block_on(async {
        let mut s = pin!(sleep(10 * MS));
        assert!(futures::poll!(s.as_mut()).is_pending());
        advance(10 * MS - Duration::from_nanos(1)).await;
        assert!(futures::poll!(s.as_mut()).is_pending());
        assert!(!s.is_elapsed());
        advance(Duration::from_nanos(1)).await;
        assert!(futures::poll!(s.as_mut()).is_ready());
        assert!(s.is_elapsed());
    });
}

/// A deadline the clock passed (by `advance`) before the sleep's first poll completes at that
/// poll, though no timer pass reached its tick.
#[test]
fn a_deadline_advanced_past_before_the_first_poll_is_due_at_once() {
    paused_rt(1).block_on(async {
        let mut s = pin!(sleep_until(Instant::now()));
        let mut t = pin!(timeout(MS, std::future::pending::<()>()));
        advance(MS).await;
        assert!(poll_once(&mut s).is_ready());
        assert_eq!(poll_once(&mut t), Poll::Ready(Err(Elapsed)));
    });
}

#[test]
fn auto_advance_jumps_to_the_earliest_timer_when_all_is_idle() {
    for w in WORKERS {
        watchdog(30, move || {
            paused_rt(w).block_on(async {
                let start = Instant::now();
                let hs: Vec<_> = [300u64, 100, 200]
                    .into_iter()
                    .map(|d| {
                        rondo::spawn(async move {
                            sleep(Duration::from_secs(d)).await;
                            start.elapsed()
                        })
                    })
                    .collect();
                for (h, d) in hs.into_iter().zip([300u64, 100, 200]) {
                    let at = h.await.unwrap();
                    let d = Duration::from_secs(d);
                    assert!(at >= d && at < d + TICK, "{at:?} for {d:?}");
                }
                let now = start.elapsed();
                assert!(now >= Duration::from_secs(300) && now < Duration::from_secs(300) + TICK);
            });
        });
    }
}

#[test]
fn a_busy_task_holds_auto_advance_back() {
    for w in WORKERS {
        watchdog(30, move || {
            paused_rt(w).block_on(async {
                let start = Instant::now();
                let sleeper = rondo::spawn(async move {
                    sleep(Duration::from_secs(60)).await;
                    start.elapsed()
                });
                // A task that keeps yielding is runnable: the clock must not move under it.
                let spinner = rondo::spawn(async move {
                    for _ in 0..2_000 {
                        assert_eq!(Instant::now(), start);
                        rondo::task::yield_now().await;
                    }
                });
                spinner.await.unwrap();
                let at = sleeper.await.unwrap();
                assert!(at >= Duration::from_secs(60) && at < Duration::from_secs(60) + TICK);
            });
        });
    }
}

#[test]
fn timeout_elapses_in_virtual_time() {
    for w in WORKERS {
        watchdog(30, move || {
            paused_rt(w).block_on(async {
                let start = Instant::now();
                let r = timeout(Duration::from_secs(5), std::future::pending::<()>()).await;
                assert_eq!(r, Err(Elapsed));
                let t = start.elapsed();
                assert!(t >= Duration::from_secs(5) && t < Duration::from_secs(5) + TICK);
                // A future that finishes first wins, at its own virtual time.
                let start = Instant::now();
                let r = timeout(Duration::from_secs(5), async {
                    sleep(Duration::from_secs(2)).await;
                    7
                })
                .await;
                assert_eq!(r, Ok(7));
                assert!(start.elapsed() < Duration::from_secs(2) + TICK);
            });
        });
    }
}

/// Ticks observed after `advance`s, for each missed-tick behaviour, with the ticks' scheduled
/// instants relative to the start.
#[test]
fn interval_ticks_follow_the_paused_clock_for_each_missed_tick_behavior() {
    // Ticks every 100 ms from 0, observed at 0, 100, then 350 (the ticks of 200 and 300 late).
    for behavior in [
        MissedTickBehavior::Burst,
        MissedTickBehavior::Delay,
        MissedTickBehavior::Skip,
    ] {
        paused_rt(1).block_on(async move {
            let start = Instant::now();
            let mut iv = interval(100 * MS);
            iv.set_missed_tick_behavior(behavior);
            let mut seen = Vec::new();
            let at = |t: Instant| (t - start).as_millis() as u64;
            seen.push(at(iv.tick().await));
            advance(100 * MS).await;
            seen.push(at(iv.tick().await));
            advance(250 * MS).await;
            // Late: every behaviour returns the tick scheduled at 200 at once.
            seen.push(at(iv.tick().await));
            assert_eq!(start.elapsed(), 350 * MS);
            // The rest wait for auto-advance.
            seen.push(at(iv.tick().await));
            seen.push(at(iv.tick().await));
            assert_eq!(seen[..2], [0, 100]);
            assert_eq!(seen[2], 200, "{behavior:?}");
            let after: Vec<u64> = match behavior {
                // Burst catches up with 300 at once, then 400 on schedule.
                MissedTickBehavior::Burst => vec![300, 400],
                // Delay: a period after the late tick was observed (350).
                MissedTickBehavior::Delay => vec![450, 550],
                // Skip: the next of the original schedule after 350.
                MissedTickBehavior::Skip => vec![400, 500],
            };
            assert_eq!(seen[3..], after[..], "{behavior:?}");
        });
    }
}

#[test]
fn interval_at_a_future_start_waits_for_auto_advance() {
    for w in WORKERS {
        paused_rt(w).block_on(async {
            let start = Instant::now() + Duration::from_secs(10);
            let mut iv = interval_at(start, Duration::from_secs(10));
            assert_eq!(iv.tick().await, start);
            assert_eq!(iv.tick().await, start + Duration::from_secs(10));
            assert!(Instant::now() >= start + Duration::from_secs(10));
        });
    }
}

#[test]
fn pause_inside_a_running_runtime_then_resume() {
    for w in WORKERS {
        watchdog(30, move || {
            builder(w).build().unwrap().block_on(async {
                pause();
                let start = Instant::now();
                sleep(Duration::from_secs(3600)).await;
                assert!(start.elapsed() >= Duration::from_secs(3600));
                advance(Duration::from_secs(60)).await;
                let paused_at = Instant::now();
                resume();
                // Running again, from where it stood, at the real clock's pace.
                let real = std::time::Instant::now();
                sleep(20 * MS).await;
                assert!(real.elapsed() >= 20 * MS);
                let t = paused_at.elapsed();
                assert!(t >= 20 * MS && t < Duration::from_secs(10), "{t:?}");
                // Sleeps from a plain deadline follow the shifted clock too.
                let d = Instant::now() + 5 * MS;
                sleep_until(d).await;
                assert!(Instant::now() >= d);
            });
        });
    }
}

/// A timer armed while the clock was paused fires in real time after `resume`: the keeper, parked
/// without a deadline while the clock stood still, sleeps until it again.
#[test]
fn a_timer_armed_while_paused_fires_after_resume() {
    for w in WORKERS {
        watchdog(30, move || {
            paused_rt(w).block_on(async {
                let start = Instant::now();
                let h = rondo::spawn(async move {
                    sleep(30 * MS).await;
                    start.elapsed()
                });
                // This thread keeps polling: the clock cannot auto-advance to the timer.
                while rondo::Handle::current().metrics().timers < 1 {
                    rondo::task::yield_now().await;
                }
                resume();
                let real = std::time::Instant::now();
                let at = h.await.unwrap();
                assert!(at >= 30 * MS, "{at:?}");
                assert!(real.elapsed() >= 25 * MS, "{:?}", real.elapsed());
            });
        });
    }
}

/// A `block_on`'s waker kept and woken after the call returned holds nothing back: a later
/// `block_on` on the same paused runtime still auto-advances.
#[test]
fn a_waker_kept_past_block_on_does_not_hold_auto_advance_back() {
    watchdog(30, || {
        let rt = paused_rt(1);
        let kept: Arc<Mutex<Option<Waker>>> = Arc::default();
        rt.block_on(std::future::poll_fn(|cx| {
            *kept.lock().unwrap() = Some(cx.waker().clone());
            Poll::Ready(())
        }));
        kept.lock().unwrap().as_ref().unwrap().wake_by_ref();
        rt.block_on(async {
            let start = Instant::now();
            sleep(Duration::from_secs(3600)).await;
            assert!(start.elapsed() >= Duration::from_secs(3600));
        });
        drop(kept);
    });
}

#[test]
fn pause_twice_panics() {
    let rt = paused_rt(1);
    let e = rt
        .block_on(async { rondo::spawn(async { pause() }).await })
        .unwrap_err();
    let msg = panic_text(e.into_panic());
    assert!(msg.contains("paused already"), "{msg}");
}

#[test]
fn resume_unpaused_panics() {
    let rt = builder(1).build().unwrap();
    let e = rt
        .block_on(async { rondo::spawn(async { resume() }).await })
        .unwrap_err();
    let msg = panic_text(e.into_panic());
    assert!(msg.contains("not paused"), "{msg}");
}

#[test]
fn advance_unpaused_panics() {
    let rt = builder(1).build().unwrap();
    let e = rt
        .block_on(async { rondo::spawn(async { advance(MS).await }).await })
        .unwrap_err();
    let msg = panic_text(e.into_panic());
    assert!(msg.contains("not paused"), "{msg}");
}

#[test]
fn pause_outside_a_runtime_panics() {
    let msg = panic_text(std::panic::catch_unwind(pause).unwrap_err());
    assert!(msg.contains("only inside a rondo runtime"), "{msg}");
    let msg = panic_text(std::panic::catch_unwind(resume).unwrap_err());
    assert!(msg.contains("only inside a rondo runtime"), "{msg}");
}

#[test]
fn instant_arithmetic_follows_the_paused_clock() {
    paused_rt(2).block_on(async {
        let a = Instant::now();
        advance(Duration::from_millis(1500)).await;
        let b = Instant::now();
        assert_eq!(b - a, Duration::from_millis(1500));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(b.duration_since(a), Duration::from_millis(1500));
        assert_eq!(a.checked_duration_since(b), None);
        assert_eq!(a.elapsed(), Duration::from_millis(1500));
        assert_eq!(a + Duration::from_millis(1500), b);
        assert_eq!(b - Duration::from_millis(1500), a);
        let mut c = a;
        c += Duration::from_secs(1);
        c -= Duration::from_millis(500);
        assert_eq!(c, a + Duration::from_millis(500));
        assert_eq!(Instant::from_std(b.into_std()), b);
        // A std instant compares with it, and the runtime's sleeps accept one.
        let std_b: std::time::Instant = b.into();
        assert!(std_b == b && a < std_b);
        let mut s = pin!(sleep_until(std_b + MS));
        assert!(poll_once(&mut s).is_pending());
        advance(MS).await;
        assert!(poll_once(&mut s).is_ready());
        assert_eq!(s.deadline(), b + MS);
    });
}

#[test]
fn start_paused_false_leaves_the_real_clock() {
    builder(1)
        .start_paused(false)
        .build()
        .unwrap()
        .block_on(async {
            let a = Instant::now();
            std::thread::sleep(2 * MS);
            assert!(a.elapsed() >= 2 * MS);
        });
}

#[rondo::test(start_paused = true)]
async fn the_test_macro_starts_paused() {
    let start = Instant::now();
    sleep(Duration::from_secs(7200)).await;
    let t = start.elapsed();
    assert!(t >= Duration::from_secs(7200) && t < Duration::from_secs(7200) + TICK);
}

#[rondo::test(flavor = "current_thread")]
async fn pause_in_a_test_body() {
    pause();
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    rondo::spawn(async move {
        sleep(Duration::from_secs(30)).await;
        tx.send(Instant::now()).unwrap();
    })
    .await
    .unwrap();
    assert!(rx.recv().unwrap() >= start + Duration::from_secs(30));
}
