//! Behaviour of `AsyncOneManyLock`: sharing, exclusion, FIFO order, phase-fair admission, cancellation.
//! Futures are polled by hand with counting wakers, so every assertion is about order and wake counts,
//! never about time.
#![cfg(not(loom))]

mod common;

use common::Probe;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use rondo::sync::{AsyncOneManyLock, OneManyGuard, OneManyMode};

#[test]
fn read_read_sharing() {
    let lock = AsyncOneManyLock::new(5);
    let a = lock.try_shared().unwrap();
    let mut b = Probe::new(lock.shared());
    let b = b.ready();
    let c = futures::executor::block_on(lock.shared());
    assert_eq!(*a + *b + *c, 15);
    assert!(lock.try_exclusive().is_none());
    drop((a, b, c));
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn write_excludes_readers_and_writers() {
    let lock = AsyncOneManyLock::new(0);
    let mut w = lock.try_exclusive().unwrap();
    *w = 1;
    assert!(lock.try_shared().is_none());
    assert!(lock.try_exclusive().is_none());
    let mut r = Probe::new(lock.shared());
    let mut w2 = Probe::new(lock.exclusive());
    r.pending();
    w2.pending();
    drop(w);
    // The reader queued first, so it is admitted; the writer still waits.
    assert_eq!(r.wakes(), 1);
    let g = r.ready();
    assert_eq!(*g, 1);
    w2.pending();
    assert_eq!(w2.wakes(), 0);
    drop(g);
    assert_eq!(w2.wakes(), 1);
    let mut g = w2.ready();
    *g = 2;
    drop(g);
    assert_eq!(*lock.try_shared().unwrap(), 2);
}

#[test]
fn try_variants_never_wait_and_respect_the_line() {
    let lock = AsyncOneManyLock::new(());
    let r = lock.try_shared().unwrap();
    assert!(lock.try_shared().is_some());
    assert!(lock.try_exclusive().is_none());
    // Once a writer waits, a newcomer's try_shared fails even though only readers hold the lock.
    let mut w = Probe::new(lock.exclusive());
    w.pending();
    assert!(lock.try_shared().is_none());
    assert!(lock.try_exclusive().is_none());
    drop(r);
    let g = w.ready();
    assert!(lock.try_shared().is_none());
    drop(g);
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn into_inner_and_get_mut() {
    let mut lock = AsyncOneManyLock::new(vec![1, 2]);
    lock.get_mut().push(3);
    futures::executor::block_on(async {
        lock.exclusive().await.push(4);
    });
    assert_eq!(lock.into_inner(), vec![1, 2, 3, 4]);
}

#[test]
fn writers_are_served_in_fifo_order() {
    let lock = AsyncOneManyLock::new(Vec::new());
    let first = lock.try_exclusive().unwrap();
    let mut writers: Vec<_> = (0..5)
        .map(|i| {
            let lock = &lock;
            Probe::new(async move {
                let mut g = lock.exclusive().await;
                g.push(i);
                g
            })
        })
        .collect();
    for w in &mut writers {
        w.pending();
    }
    drop(first);
    for i in 0..5 {
        // Only writer i has been woken; everyone behind it still waits.
        for (j, w) in writers.iter().enumerate() {
            assert_eq!(
                w.wakes(),
                usize::from(j <= i),
                "writer {j} after {i} releases"
            );
        }
        for w in &mut writers[i + 1..] {
            w.pending();
        }
        let g = writers[i].ready();
        drop(g);
    }
    assert_eq!(*lock.try_shared().unwrap(), [0, 1, 2, 3, 4]);
}

#[test]
fn a_read_behind_a_queued_writer_waits() {
    let lock = AsyncOneManyLock::new(());
    let r0 = lock.try_shared().unwrap();
    let mut w = Probe::new(lock.exclusive());
    w.pending();
    let mut r1 = Probe::new(lock.shared());
    r1.pending();
    drop(r0);
    assert_eq!(w.wakes(), 1);
    assert_eq!(r1.wakes(), 0);
    r1.pending();
    let g = w.ready();
    r1.pending();
    drop(g);
    assert_eq!(r1.wakes(), 1);
    drop(r1.ready());
}

#[test]
fn cancelling_a_queued_writer_admits_the_readers_behind_it() {
    let lock = AsyncOneManyLock::new(());
    let r0 = lock.try_shared().unwrap();
    let mut w = Probe::new(lock.exclusive());
    w.pending();
    let mut readers: Vec<_> = (0..3).map(|_| Probe::new(lock.shared())).collect();
    for r in &mut readers {
        r.pending();
    }
    let mut w2 = Probe::new(lock.exclusive());
    w2.pending();
    drop(w); // cancel the writer while r0 still holds the lock
    let mut guards = Vec::new();
    for r in &mut readers {
        assert_eq!(r.wakes(), 1);
        guards.push(r.ready());
    }
    assert_eq!(w2.wakes(), 0);
    w2.pending();
    drop(r0);
    assert_eq!(w2.wakes(), 0, "admitted readers still hold the lock");
    drop(guards);
    assert_eq!(w2.wakes(), 1);
    drop(w2.ready());
}

#[test]
fn one_writer_release_wakes_every_reader_before_the_next_writer() {
    readers_before_a_writer_get_in_first(AsyncOneManyLock::new(0), false);
}

/// Phase fairness holds in barging mode too, with the readers woken one by one rather than as one
/// batch: the release wakes the first reader, each reader that takes the lock wakes the next, and
/// the writer behind them, like the reader behind it, waits until they have all been in.
#[test]
fn barging_lock_wakes_every_reader_before_the_next_writer_one_by_one() {
    let bound = std::time::Duration::from_secs(3600);
    readers_before_a_writer_get_in_first(AsyncOneManyLock::with_barging(0, bound), true);
}

/// Six readers queue between two writers, and a seventh behind the second. When the first writer
/// leaves, the six get in before the second writer (all woken by that release, or each by the one
/// before it if `one_by_one`); the seventh gets in after it.
fn readers_before_a_writer_get_in_first(lock: AsyncOneManyLock<u32>, one_by_one: bool) {
    let w0 = lock.try_exclusive().unwrap();
    let mut early: Vec<_> = (0..6).map(|_| Probe::new(lock.shared())).collect();
    for r in &mut early {
        r.pending();
    }
    let mut w1 = Probe::new(lock.exclusive());
    w1.pending();
    let mut late = Probe::new(lock.shared());
    late.pending();

    drop(w0);
    let mut guards = Vec::new();
    for i in 0..early.len() {
        let woken: Vec<_> = early.iter().map(Probe::wakes).collect();
        let mut want = vec![1; if one_by_one { i + 1 } else { early.len() }];
        want.resize(early.len(), 0);
        assert_eq!(woken, want, "before reader {i} runs");
        assert_eq!((w1.wakes(), late.wakes()), (0, 0));
        guards.push(early[i].ready());
    }
    w1.pending();
    late.pending();
    assert_eq!(
        (w1.wakes(), late.wakes()),
        (0, 0),
        "the readers hold the lock"
    );
    drop(guards);
    assert_eq!((w1.wakes(), late.wakes()), (1, 0));
    let g = w1.ready();
    late.pending();
    drop(g);
    assert_eq!(late.wakes(), 1);
    drop(late.ready());
    for r in &early {
        assert_eq!(r.wakes(), 1, "woken exactly once");
    }
}

#[test]
fn a_granted_but_dropped_waiter_passes_the_lock_on() {
    let lock = AsyncOneManyLock::new(());
    let w0 = lock.try_exclusive().unwrap();
    let mut w1 = Probe::new(lock.exclusive());
    let mut w2 = Probe::new(lock.exclusive());
    w1.pending();
    w2.pending();
    drop(w0);
    assert_eq!(w1.wakes(), 1);
    drop(w1); // granted, never polled again
    assert_eq!(w2.wakes(), 1);
    drop(w2.ready());
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn a_granted_but_dropped_reader_releases_its_share() {
    let lock = AsyncOneManyLock::new(());
    let w0 = lock.try_exclusive().unwrap();
    let mut r = Probe::new(lock.shared());
    r.pending();
    let mut w1 = Probe::new(lock.exclusive());
    w1.pending();
    drop(w0);
    assert_eq!(r.wakes(), 1);
    drop(r);
    assert_eq!(w1.wakes(), 1);
    drop(w1.ready());
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn downgrade_keeps_writers_out_and_admits_waiting_readers() {
    let lock = AsyncOneManyLock::new(1);
    let mut w = lock.try_exclusive().unwrap();
    let mut r = Probe::new(lock.shared());
    r.pending();
    let mut w2 = Probe::new(lock.exclusive());
    w2.pending();
    *w = 2;
    let down = w.downgrade();
    assert_eq!(r.wakes(), 1);
    assert_eq!(*r.ready(), 2);
    assert_eq!(w2.wakes(), 0);
    assert!(lock.try_exclusive().is_none());
    assert!(
        lock.try_shared().is_none(),
        "a writer waits, so newcomers queue"
    );
    drop(down);
    assert_eq!(w2.wakes(), 1);
    drop(w2.ready());
}

#[test]
fn acquire_by_mode_and_arc_guards() {
    let lock = Arc::new(AsyncOneManyLock::new(10));
    futures::executor::block_on(async {
        match lock.acquire(OneManyMode::Exclusive).await {
            OneManyGuard::Exclusive(mut g) => *g += 1,
            OneManyGuard::Shared(_) => panic!("wrong mode"),
        }
        let g = lock.acquire(OneManyMode::Shared).await;
        assert_eq!((g.mode(), *g), (OneManyMode::Shared, 11));
    });
    let mut w = futures::executor::block_on(lock.exclusive_arc());
    let t = std::thread::spawn(move || {
        *w += 1;
        let r = w.downgrade();
        *r
    });
    assert_eq!(t.join().unwrap(), 12);
    let r = futures::executor::block_on(lock.shared_arc());
    assert_eq!(*r, 12);
    assert!(lock.try_exclusive().is_none());
    drop(r);
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn blocking_methods_wait_for_other_threads() {
    let n: u64 = if cfg!(miri) { 20 } else { 2_000 };
    let lock = Arc::new(AsyncOneManyLock::new(0u64));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            std::thread::spawn(move || {
                for _ in 0..n {
                    *lock.exclusive_blocking() += 1;
                    let r = lock.shared_blocking();
                    assert!(*r >= 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*lock.shared_blocking(), 4 * n);
}

#[test]
fn debug_output() {
    let lock = AsyncOneManyLock::new(3);
    assert!(format!("{lock:?}").contains('3'));
    let w = lock.try_exclusive().unwrap();
    assert!(format!("{lock:?}").contains("<locked>"));
    assert_eq!(format!("{w:?}"), "3");
}

/// Many threads running futures on `futures::executor`, mixing reads and writes: a writer is never
/// observed together with anyone else, and the final count is exact.
#[test]
fn threads_never_see_a_reader_during_a_write() {
    struct State {
        value: u64,
        writing: AtomicUsize,
    }
    let lock = Arc::new(AsyncOneManyLock::new(State {
        value: 0,
        writing: AtomicUsize::new(0),
    }));
    let readers_inside = Arc::new(AtomicUsize::new(0));
    // A multiple of 4: each thread writes n / 4 times.
    let n: u64 = if cfg!(miri) { 20 } else { 2_000 };
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let lock = lock.clone();
            let readers_inside = readers_inside.clone();
            std::thread::spawn(move || {
                futures::executor::block_on(async {
                    for i in 0..n {
                        if (i + t) % 4 == 0 {
                            let mut g = lock.exclusive().await;
                            assert_eq!(readers_inside.load(Ordering::SeqCst), 0);
                            assert_eq!(g.writing.fetch_add(1, Ordering::SeqCst), 0);
                            g.value += 1;
                            std::hint::spin_loop();
                            assert_eq!(g.writing.fetch_sub(1, Ordering::SeqCst), 1);
                        } else {
                            let g = lock.shared().await;
                            readers_inside.fetch_add(1, Ordering::SeqCst);
                            assert_eq!(g.writing.load(Ordering::SeqCst), 0);
                            readers_inside.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(lock.try_shared().unwrap().value, n);
}

#[test]
fn upgradable_shares_with_readers_and_excludes_writers_and_upgradables() {
    let lock = AsyncOneManyLock::new(1);
    let up = futures::executor::block_on(lock.upgradable());
    let r = lock
        .try_shared()
        .expect("readers share with an upgradable hold");
    assert!(lock.try_upgradable().is_none());
    assert!(lock.try_exclusive().is_none());
    let mut second = Probe::new(lock.upgradable());
    second.pending();
    assert_eq!(*up + *r, 2);
    drop(r);
    drop(up);
    assert_eq!(second.wakes(), 1);
    let up2 = second.ready();
    drop(up2);
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn upgrade_waits_for_readers_and_lets_no_writer_in_between() {
    let lock = AsyncOneManyLock::new(0);
    let up = lock.try_upgradable().unwrap();
    let r = lock.try_shared().unwrap();
    let mut writer = Probe::new(lock.exclusive());
    writer.pending();
    let mut upgrade = Probe::new(up.upgrade());
    upgrade.pending();
    // A reader arriving during the upgrade waits (the upgrade goes first).
    assert!(lock.try_shared().is_none());
    let mut late_reader = Probe::new(lock.shared());
    late_reader.pending();
    drop(r);
    assert_eq!((upgrade.wakes(), writer.wakes()), (1, 0));
    let mut w = upgrade.ready();
    *w = 7;
    writer.pending();
    drop(w);
    assert_eq!(writer.wakes(), 1);
    let w2 = writer.ready();
    assert_eq!(
        *w2, 7,
        "the queued writer ran after the upgrade, not before"
    );
    drop(w2);
    assert_eq!(*late_reader.ready(), 7);
}

#[test]
fn try_upgrade_and_downgrades() {
    let lock = AsyncOneManyLock::new(String::from("a"));
    let up = lock.try_upgradable().unwrap();
    let r = lock.try_shared().unwrap();
    let up = up.try_upgrade().expect_err("another reader is in");
    drop(r);
    let mut w = up.try_upgrade().expect("the only reader upgrades");
    w.push('b');
    let up = w.downgrade_to_upgradable();
    assert!(lock.try_shared().is_some());
    assert!(lock.try_exclusive().is_none());
    let r = up.downgrade();
    assert!(
        lock.try_upgradable().is_some(),
        "downgrade frees the upgradable slot"
    );
    assert_eq!(*r, "ab");
    drop(r);
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn a_dropped_upgrade_releases_the_lock() {
    let lock = AsyncOneManyLock::new(());
    // Dropped before its first poll.
    drop(lock.try_upgradable().unwrap().upgrade());
    assert!(lock.try_exclusive().is_some());
    // Dropped while queued behind a reader.
    let up = lock.try_upgradable().unwrap();
    let r = lock.try_shared().unwrap();
    let mut upgrade = Probe::new(up.upgrade());
    upgrade.pending();
    drop(upgrade);
    assert!(lock.try_upgradable().is_some());
    drop(r);
    assert!(lock.try_exclusive().is_some(), "lock leaked");
    // Granted, then dropped unpolled.
    let up = lock.try_upgradable().unwrap();
    let r = lock.try_shared().unwrap();
    let mut upgrade = Probe::new(up.upgrade());
    upgrade.pending();
    drop(r);
    assert_eq!(upgrade.wakes(), 1);
    drop(upgrade);
    assert!(lock.try_exclusive().is_some(), "granted upgrade leaked");
}

#[test]
fn mapped_guards_hold_the_lock_in_their_mode() {
    use rondo::sync::{ExclusiveGuard, MappedExclusiveGuard, SharedGuard};
    let lock = AsyncOneManyLock::new((1u8, vec![1u8]));
    let first = SharedGuard::map(lock.try_shared().unwrap(), |t| &t.0);
    assert_eq!(*first, 1);
    assert!(lock.try_exclusive().is_none());
    assert!(lock.try_shared().is_some());
    drop(first);
    let v = ExclusiveGuard::map(lock.try_exclusive().unwrap(), |t| &mut t.1);
    let mut last = MappedExclusiveGuard::map(v, |v| v.last_mut().unwrap());
    *last = 9;
    assert!(lock.try_shared().is_none());
    drop(last);
    assert_eq!(*lock.try_shared().unwrap(), (1, vec![9]));
    assert!(lock.try_exclusive().is_some());
}

#[test]
fn arc_futures_are_static_and_try_arc_variants_respect_the_lock() {
    fn spawnable<F: std::future::Future + Send + 'static>(f: F) -> F {
        f
    }
    let lock = Arc::new(AsyncOneManyLock::new(1));
    let read = spawnable(lock.shared_arc());
    let write = spawnable(lock.exclusive_arc());
    let r = futures::executor::block_on(read);
    assert!(lock.try_exclusive_arc().is_none());
    assert!(lock.try_shared_arc().is_some());
    drop(r);
    let handle = std::thread::spawn(move || {
        let mut w = futures::executor::block_on(write);
        *w += 1;
    });
    handle.join().unwrap();
    assert_eq!(*lock.try_shared_arc().unwrap(), 2);
}

/// A panic in a `map` closure unwinds through the guard that still owns the hold, which releases
/// it; the lock must not stay held (every later `exclusive()` would wait for ever).
#[test]
fn a_panicking_map_closure_releases_the_lock() {
    use rondo::sync::{ExclusiveGuard, MappedExclusiveGuard, SharedGuard};
    use std::time::Duration;
    for bound in [Duration::ZERO, Duration::from_secs(3600)] {
        let lock = AsyncOneManyLock::with_barging(vec![1u32], bound);
        let g = lock.try_exclusive().unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _m = ExclusiveGuard::map(g, |v| &mut v[10]);
        }));
        assert!(r.is_err());
        assert!(
            lock.try_exclusive().is_some(),
            "lock still held after ExclusiveGuard::map's closure panicked"
        );

        let g = lock.try_shared().unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _m = SharedGuard::map(g, |v| &v[10]);
        }));
        assert!(r.is_err());
        assert!(
            lock.try_exclusive().is_some(),
            "lock still held after SharedGuard::map's closure panicked"
        );

        let lock = AsyncOneManyLock::with_barging((0u8, vec![1u32]), bound);
        let g = ExclusiveGuard::map(lock.try_exclusive().unwrap(), |t| &mut t.1);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _m = MappedExclusiveGuard::map(g, |v| &mut v[10]);
        }));
        assert!(r.is_err());
        assert!(
            lock.try_exclusive().is_some(),
            "lock still held after MappedExclusiveGuard::map's closure panicked"
        );
    }
}

/// A waker whose `wake` panics.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("PanickingWaker woken");
    }
}

/// Polls `fut` once with a waker that panics when woken, expecting it to wait.
fn wait_with_panicking_waker<F: Future>(fut: Pin<&mut F>) {
    let waker = Waker::from(Arc::new(PanickingWaker));
    assert!(fut.poll(&mut Context::from_waker(&waker)).is_pending());
}

/// Runs `convert` (a guard conversion that admits `waiter`) with `waiter` waiting on a waker that
/// panics when woken: the panic unwinds out of the conversion, and `lock` must be free once the
/// waiter is gone, or `what` leaked its hold.
fn converting_past_a_panicking_waker<F: Future>(
    lock: &AsyncOneManyLock<u32>,
    waiter: F,
    convert: impl FnOnce(),
    what: &str,
) {
    let mut waiter = Box::pin(waiter);
    wait_with_panicking_waker(waiter.as_mut());
    let r = catch_unwind(AssertUnwindSafe(convert));
    assert!(r.is_err(), "the waker did not run");
    drop(waiter);
    assert!(lock.try_exclusive().is_some(), "{what} leaked its hold");
}

/// A conversion (`downgrade` and friends) that admits a waiter wakes it; if that waker panics, the
/// panic unwinds out of the conversion, and the hold it was converting must still be released.
#[test]
fn a_waker_panicking_in_a_downgrade_does_not_leak_the_hold() {
    use std::time::Duration;
    for bound in [Duration::ZERO, Duration::from_secs(3600)] {
        let lock = AsyncOneManyLock::with_barging(0u32, bound);
        let w = lock.try_exclusive().unwrap();
        let convert = move || drop(w.downgrade());
        converting_past_a_panicking_waker(
            &lock,
            lock.shared(),
            convert,
            "ExclusiveGuard::downgrade",
        );
        let w = lock.try_exclusive().unwrap();
        let convert = move || drop(w.downgrade_to_upgradable());
        let what = "ExclusiveGuard::downgrade_to_upgradable";
        converting_past_a_panicking_waker(&lock, lock.shared(), convert, what);
        let up = lock.try_upgradable().unwrap();
        let convert = move || drop(up.downgrade());
        let what = "UpgradableGuard::downgrade";
        converting_past_a_panicking_waker(&lock, lock.upgradable(), convert, what);
        let lock = Arc::new(AsyncOneManyLock::with_barging(0u32, bound));
        let w = lock.try_exclusive_arc().unwrap();
        let convert = move || drop(w.downgrade());
        let what = "ExclusiveGuardArc::downgrade";
        converting_past_a_panicking_waker(&lock, lock.shared(), convert, what);
    }
}

/// Cancelling a waiter drops the waker stored in its node. That drop may release a hold on the
/// same lock (here it does), so it must happen after the lock's internal mutex is unlocked.
#[test]
fn cancelling_a_waiter_drops_its_waker_outside_the_lock() {
    use std::time::Duration;
    for bound in [Duration::ZERO, Duration::from_secs(3600)] {
        common::watchdog(10, move || {
            let lock = Arc::new(AsyncOneManyLock::with_barging(0u32, bound));
            let w = Box::new(lock.try_exclusive_arc().unwrap());
            {
                let reader = pin!(lock.shared());
                common::wait_with_last_waker_holding(reader, w);
            } // cancel: drops the node's waker, which releases `w`
            assert!(lock.try_exclusive().is_some());
        });
    }
}

/// Re-polling a waiter with another waker replaces the one in its node; dropping the old one may
/// release a hold on the same lock, so it must happen after the internal mutex is unlocked.
#[test]
fn re_polling_a_waiter_drops_its_old_waker_outside_the_lock() {
    use std::time::Duration;
    for bound in [Duration::ZERO, Duration::from_secs(3600)] {
        common::watchdog(10, move || {
            let lock = Arc::new(AsyncOneManyLock::with_barging(0u32, bound));
            let w = Box::new(lock.try_exclusive_arc().unwrap());
            let mut reader = pin!(lock.shared());
            common::wait_with_last_waker_holding(reader.as_mut(), w);
            let mut cx = Context::from_waker(Waker::noop());
            // Replacing the waker releases `w`; the reader is then admitted (at once, or at the
            // next poll in barging mode).
            let g = match reader.as_mut().poll(&mut cx) {
                Poll::Ready(g) => g,
                Poll::Pending => match reader.as_mut().poll(&mut cx) {
                    Poll::Ready(g) => g,
                    Poll::Pending => panic!("the reader was not admitted after the release"),
                },
            };
            assert_eq!(*g, 0);
            drop(g);
            assert!(lock.try_exclusive().is_some());
        });
    }
}

/// Polls `fut` until it completes, at most twice (a barging waiter that was woken completes at its
/// next poll, a fair one at once).
fn ready_within_two_polls<F: Future>(mut fut: Pin<&mut F>, cx: &mut Context<'_>) -> F::Output {
    for _ in 0..2 {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return v;
        }
    }
    panic!("the waiter was not admitted after the release");
}

/// Each wait stores a clone of the waiter's waker; the clone may release a hold on the same lock,
/// so it must not run under the lock's internal mutex.
#[test]
fn waiting_clones_the_waker_outside_the_lock() {
    use std::time::Duration;
    for bound in [Duration::ZERO, Duration::from_secs(3600)] {
        common::watchdog(10, move || {
            let lock = Arc::new(AsyncOneManyLock::with_barging(0u32, bound));
            // Joining the line stores the waker of the first poll.
            let waker =
                common::waker_releasing_on_clone(Box::new(lock.try_exclusive_arc().unwrap()));
            let w = pin!(lock.exclusive());
            drop(ready_within_two_polls(w, &mut Context::from_waker(&waker)));
            // A later poll with another waker stores that one.
            let blocker = lock.try_exclusive_arc().unwrap();
            let mut w = pin!(lock.exclusive());
            let mut noop = Context::from_waker(Waker::noop());
            assert!(w.as_mut().poll(&mut noop).is_pending());
            let waker = common::waker_releasing_on_clone(Box::new(blocker));
            drop(ready_within_two_polls(w, &mut Context::from_waker(&waker)));
            assert!(lock.try_exclusive().is_some());
        });
    }
}

/// A release that admits several waiters wakes each of them; when one of their wakers panics,
/// the panic goes on to the releasing caller, but only after the waiters behind it were woken: it
/// once left them granted and never woken (a batch of readers after a writer, here, and a
/// semaphore's release to two waiters), waiting for good.
#[test]
fn a_panicking_waker_does_not_keep_the_waiters_after_it_asleep() {
    let lock = AsyncOneManyLock::new(0u32);
    let w = lock.try_exclusive().unwrap();
    let mut first = Box::pin(lock.shared());
    wait_with_panicking_waker(first.as_mut());
    let mut second = Probe::new(lock.shared());
    second.pending();
    let mut third = Probe::new(lock.shared());
    third.pending();
    assert!(catch_unwind(AssertUnwindSafe(move || drop(w))).is_err());
    assert_eq!((second.wakes(), third.wakes()), (1, 1));
    drop(first);
    drop((second.ready(), third.ready()));
    assert!(lock.try_exclusive().is_some());

    let sem = rondo::sync::Semaphore::new(0);
    let mut first = Box::pin(sem.acquire());
    wait_with_panicking_waker(first.as_mut());
    let mut second = Probe::new(sem.acquire());
    second.pending();
    assert!(catch_unwind(AssertUnwindSafe(|| sem.add_permits(2))).is_err());
    assert_eq!(second.wakes(), 1);
    drop(second.ready());
    drop(first);
    assert_eq!(sem.available_permits(), 2);
}

/// async-lock's variance check, moved over: a shared guard only ever reads its `T`, so it is
/// covariant in `T` and a guard of a longer-lived `T` passes where a shorter-lived one is expected.
/// This file does not compile if `SharedGuardArc` is invariant in `T`.
fn shorten_shared_arc<'a>(
    g: rondo::sync::SharedGuardArc<&'static str>,
) -> rondo::sync::SharedGuardArc<&'a str> {
    g
}

#[test]
fn shared_arc_guards_are_covariant_in_t() {
    let lock = Arc::new(AsyncOneManyLock::new("static"));
    let local = String::from("local");
    let g = shorten_shared_arc(lock.try_shared_arc().unwrap());
    // The shortened guard compares with a borrow of a local, as a `&'a str` guard would.
    let shorter: [&str; 2] = [*g, local.as_str()];
    assert_eq!(shorter, ["static", "local"]);
    assert!(lock.try_exclusive().is_none());
    drop(g);
    assert!(lock.try_exclusive().is_some());
}

/// `SharedGuardArc` keeps the `Arc` as a pointer typed for covariance; the pointer's metadata
/// must survive the round trip for unsized values, and the guard must give its strong count back.
#[test]
fn shared_arc_guards_of_unsized_values_release_the_lock_and_the_arc() {
    let slice: Arc<AsyncOneManyLock<[u8]>> = Arc::new(AsyncOneManyLock::new([1, 2, 3]));
    let g = slice.try_shared_arc().unwrap();
    assert_eq!((&*g, Arc::strong_count(&slice)), (&[1, 2, 3][..], 2));
    drop(g);
    assert_eq!(Arc::strong_count(&slice), 1);
    let mut w = futures::executor::block_on(slice.exclusive_arc());
    w[0] = 7;
    let r = w.downgrade();
    assert!(slice.try_exclusive().is_none());
    assert_eq!(&*r, [7, 2, 3]);
    drop(r);
    assert_eq!(Arc::strong_count(&slice), 1);
    assert!(slice.try_exclusive().is_some());

    let dynamic: Arc<AsyncOneManyLock<dyn std::fmt::Debug + Send + Sync>> =
        Arc::new(AsyncOneManyLock::new(String::from("s")));
    let g = futures::executor::block_on(dynamic.shared_arc());
    assert_eq!(format!("{g:?}"), "\"s\"");
    // The last owner of the `Arc` is the guard: dropping it drops the lock and its value.
    drop(dynamic);
    drop(g);
}

#[test]
fn shared_arc_guards_are_unwind_safe_as_shared_guards_are() {
    use std::panic::{RefUnwindSafe, UnwindSafe};
    fn unwind_safe<G: UnwindSafe + RefUnwindSafe>() {}
    unwind_safe::<rondo::sync::SharedGuard<'static, u8>>();
    unwind_safe::<rondo::sync::SharedGuardArc<u8>>();
}

/// Waits until a request from another thread has joined a fair lock's line while the lock is held
/// in a mode that admits readers: from then on `try_shared` fails.
fn until_a_waiter_queues<T>(lock: &AsyncOneManyLock<T>) {
    while let Some(r) = lock.try_shared() {
        drop(r);
        std::thread::yield_now();
    }
}

#[test]
fn blocking_arc_and_upgradable_variants_are_woken_by_releases_on_other_threads() {
    common::watchdog(30, || {
        let lock = Arc::new(AsyncOneManyLock::new(0u32));
        let release = |g: Box<dyn Send>| std::thread::spawn(move || drop(g)).join().unwrap();

        // `upgradable_blocking`, behind another upgradable hold.
        let up = lock.try_upgradable_arc().unwrap();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || *lock.upgradable_blocking())
        };
        until_a_waiter_queues(&lock);
        release(Box::new(up));
        assert_eq!(waiter.join().unwrap(), 0);

        // `upgradable_arc_blocking`: the guard comes back to this thread and upgrades here.
        let up = lock.try_upgradable_arc().unwrap();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.upgradable_arc_blocking())
        };
        until_a_waiter_queues(&lock);
        release(Box::new(up));
        let up = waiter.join().unwrap();
        *up.try_upgrade().unwrap() += 1;

        // `exclusive_arc_blocking`, behind a reader; the writer downgrades on its thread.
        let r = lock.try_shared_arc().unwrap();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let mut w = lock.exclusive_arc_blocking();
                *w += 1;
                w.downgrade()
            })
        };
        until_a_waiter_queues(&lock);
        release(Box::new(r));
        let r = waiter.join().unwrap();
        assert_eq!(*r, 2);
        assert!(lock.try_exclusive().is_none());
        drop(r);

        // `shared_arc_blocking`, behind a writer (queued or not yet: it waits either way).
        let mut w = lock.try_exclusive_arc().unwrap();
        *w += 1;
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || *lock.shared_arc_blocking())
        };
        release(Box::new(w));
        assert_eq!(waiter.join().unwrap(), 3);
        assert_eq!(Arc::strong_count(&lock), 1);
        assert!(lock.try_exclusive().is_some());
    });
}

#[test]
fn an_arc_upgrade_waits_for_the_readers_and_lets_nobody_in_between() {
    for lock in [
        AsyncOneManyLock::new(0),
        AsyncOneManyLock::with_barging(0, std::time::Duration::from_millis(1)),
    ] {
        let lock = Arc::new(lock);
        let up = futures::executor::block_on(lock.upgradable_arc());
        let r1 = lock.try_shared().unwrap();
        let r2 = lock.try_shared_arc().unwrap();
        let mut upgrade = Probe::new(up.upgrade());
        upgrade.pending();
        // Nobody gets in while the upgrade waits, and newcomers queue behind it.
        assert!(lock.try_shared().is_none());
        assert!(lock.try_exclusive().is_none());
        assert!(lock.try_upgradable().is_none());
        let mut writer = Probe::new(lock.exclusive_arc());
        writer.pending();
        let mut reader = Probe::new(lock.shared_arc());
        reader.pending();
        drop(r1);
        assert_eq!(upgrade.wakes(), 0, "a reader still holds the lock");
        upgrade.pending();
        std::thread::spawn(move || drop(r2)).join().unwrap();
        assert_eq!(upgrade.wakes(), 1);
        let mut w = upgrade.ready();
        *w = 1;
        assert_eq!((writer.wakes(), reader.wakes()), (0, 0));
        drop(w);
        assert_eq!(writer.wakes(), 1, "the line goes on in order");
        let mut w = writer.ready();
        *w += 1;
        reader.pending();
        drop(w);
        assert_eq!(*reader.ready(), 2);
        assert_eq!(Arc::strong_count(&lock), 1);
        assert!(lock.try_exclusive().is_some());
    }
}

#[test]
fn a_dropped_upgradable_arc_acquire_leaks_neither_the_lock_nor_the_arc() {
    let lock = Arc::new(AsyncOneManyLock::new(()));
    // Dropped before its first poll.
    drop(lock.upgradable_arc());
    assert_eq!(Arc::strong_count(&lock), 1);
    assert!(lock.try_exclusive().is_some());
    // Dropped while queued behind a writer: the upgradable acquire queued behind it moves up.
    let w = lock.try_exclusive().unwrap();
    let mut first = Probe::new(lock.upgradable_arc());
    first.pending();
    let mut second = Probe::new(lock.upgradable_arc());
    second.pending();
    drop(first);
    drop(w);
    assert_eq!(second.wakes(), 1);
    drop(second.ready());
    drop(second);
    assert_eq!(Arc::strong_count(&lock), 1);
    assert!(lock.try_exclusive().is_some(), "lock leaked");
    // Granted, then dropped unpolled.
    let w = lock.try_exclusive().unwrap();
    let mut up = Probe::new(lock.upgradable_arc());
    up.pending();
    drop(w);
    assert_eq!(up.wakes(), 1);
    drop(up);
    assert_eq!(Arc::strong_count(&lock), 1);
    assert!(
        lock.try_exclusive().is_some(),
        "granted upgradable hold leaked"
    );
}

#[test]
fn a_dropped_arc_upgrade_releases_the_lock_and_the_arc() {
    let lock = Arc::new(AsyncOneManyLock::new(()));
    // Dropped before its first poll.
    drop(lock.try_upgradable_arc().unwrap().upgrade());
    assert_eq!(Arc::strong_count(&lock), 1);
    assert!(lock.try_exclusive().is_some());
    // Dropped while queued behind a reader.
    let up = lock.try_upgradable_arc().unwrap();
    let r = lock.try_shared().unwrap();
    let mut upgrade = Probe::new(up.upgrade());
    upgrade.pending();
    drop(upgrade);
    assert!(lock.try_upgradable().is_some());
    drop(r);
    assert_eq!(Arc::strong_count(&lock), 1);
    assert!(lock.try_exclusive().is_some(), "lock leaked");
    // Granted, then dropped unpolled.
    let up = lock.try_upgradable_arc().unwrap();
    let r = lock.try_shared().unwrap();
    let mut upgrade = Probe::new(up.upgrade());
    upgrade.pending();
    drop(r);
    assert_eq!(upgrade.wakes(), 1);
    drop(upgrade);
    assert_eq!(Arc::strong_count(&lock), 1);
    assert!(lock.try_exclusive().is_some(), "granted upgrade leaked");
}

#[test]
fn arc_guard_conversions_admit_the_waiters_they_can() {
    let lock = Arc::new(AsyncOneManyLock::new(1));
    // Exclusive to upgradable: a waiting reader gets in, a waiting upgradable hold does not.
    let w = lock.try_exclusive_arc().unwrap();
    let mut reader = Probe::new(lock.shared_arc());
    reader.pending();
    let mut other = Probe::new(lock.upgradable_arc());
    other.pending();
    let up = w.downgrade_to_upgradable();
    assert_eq!((reader.wakes(), other.wakes()), (1, 0));
    let r = reader.ready();
    assert_eq!(*r + *up, 2);
    // Upgradable to shared: the waiting upgradable hold gets in.
    let shared = up.downgrade();
    assert_eq!(other.wakes(), 1);
    let other = other.ready();
    // A failed `try_upgrade` gives the guard back, still holding.
    let other = other.try_upgrade().unwrap_err();
    assert!(lock.try_upgradable().is_none());
    drop((r, shared));
    let mut w = other.try_upgrade().unwrap();
    *w = 5;
    assert!(lock.try_shared().is_none());
    drop(w);
    assert_eq!(*lock.try_shared_arc().unwrap(), 5);
    assert_eq!(format!("{:?}", lock.try_upgradable_arc().unwrap()), "5");
    assert_eq!(Arc::strong_count(&lock), 1);
}

#[test]
fn blocking_upgrades_are_woken_by_the_last_reader_leaving_on_another_thread() {
    common::watchdog(30, || {
        let lock = Arc::new(AsyncOneManyLock::new(0u32));
        for arc in [false, true] {
            let reader = lock.try_shared_arc().unwrap();
            let upgrader = {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    if arc {
                        let mut w = lock.upgradable_arc_blocking().upgrade_blocking();
                        *w += 1;
                        *w
                    } else {
                        let mut w = lock.upgradable_blocking().upgrade_blocking();
                        *w += 1;
                        *w
                    }
                })
            };
            // The upgrade has queued (at the front, shutting newcomers out); a writer queues
            // behind it.
            until_a_waiter_queues(&lock);
            let mut writer = Probe::new(lock.exclusive_arc());
            writer.pending();
            std::thread::spawn(move || drop(reader)).join().unwrap();
            let n = upgrader.join().unwrap();
            assert_eq!(writer.wakes(), 1, "the writer waited for the upgraded hold");
            *writer.ready() += 1;
            assert_eq!(*lock.try_shared().unwrap(), n + 1);
        }
        assert_eq!(*lock.try_shared().unwrap(), 4);
    });
}
