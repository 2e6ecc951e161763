//! loom models of the acquire / release / cancel races of `AsyncOneManyLock` and `Semaphore`.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models::sync`. The protected
//! data lives in a `loom::cell::UnsafeCell`, so loom reports any access that the primitives fail to
//! order (a reader during a write, two writers, a missing happens-before on hand-off), and a lost
//! wakeup shows up as a deadlock.
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::sync::{AsyncOneManyLock, Semaphore};

// Every interleaving, bounded in CI (see `model_bounded_in_ci`).
use super::{block_on, model_bounded_in_ci, poll_once};

/// Polls a future up to twice (never after it completed), then drops it: if it was granted between the
/// polls, or while not being polled, the drop must pass the grant on.
fn poll_twice_then_drop<F: Future>(f: F) {
    let mut f = pin!(f);
    if poll_once(f.as_mut()).is_pending() {
        let _ = poll_once(f.as_mut());
    }
}

struct Data {
    lock: AsyncOneManyLock<()>,
    cell: UnsafeCell<usize>,
}

impl Data {
    fn new() -> Arc<Self> {
        Arc::new(Data {
            lock: AsyncOneManyLock::new(()),
            cell: UnsafeCell::new(0),
        })
    }
    fn write(&self) {
        // SAFETY: called only while holding the exclusive guard; loom's `UnsafeCell` reports any
        // access the lock fails to order, which is what these models check.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }
    fn read(&self) -> usize {
        // SAFETY: called only while holding a shared or exclusive guard (see `write`).
        self.cell.with(|p| unsafe { *p })
    }
}

/// A thread that takes the lock shared, reads, and leaves.
fn spawn_reader(d: &Arc<Data>) -> thread::JoinHandle<()> {
    let d = d.clone();
    thread::spawn(move || {
        block_on(async {
            let _g = d.lock.shared().await;
            d.read();
        })
    })
}

/// A writer and a reader race (both may queue); the data accesses must be ordered.
#[test]
fn lock_writer_and_reader_race() {
    model_bounded_in_ci(|| {
        let d = Data::new();
        let d2 = d.clone();
        let t = thread::spawn(move || {
            block_on(async {
                let _g = d2.lock.exclusive().await;
                d2.write();
            })
        });
        let seen = block_on(async {
            let _g = d.lock.shared().await;
            d.read()
        });
        t.join().unwrap();
        assert!(seen <= 1);
        assert_eq!(d.read(), 1);
        assert!(d.lock.try_exclusive().is_some());
    });
}

/// Two writers hand off to each other; then a downgrade races a reader.
#[test]
fn lock_two_writers_and_downgrade() {
    model_bounded_in_ci(|| {
        let d = Data::new();
        let d2 = d.clone();
        let t = thread::spawn(move || {
            block_on(async {
                let g = d2.lock.exclusive().await;
                d2.write();
                let _r = g.downgrade();
                d2.read();
            })
        });
        block_on(async {
            let _g = d.lock.exclusive().await;
            d.write();
        });
        t.join().unwrap();
        assert_eq!(d.read(), 2);
        assert!(d.lock.try_exclusive().is_some());
    });
}

/// A writer queues behind a held shared lock and is cancelled while a reader arrives: the reader must
/// get in although the lock is still held (it is never released during the race, so only the
/// cancellation can admit a reader queued behind the writer; a lost admission is a loom deadlock).
#[test]
fn lock_cancelled_writer_admits_reader_behind_it() {
    model_bounded_in_ci(|| {
        let d = Data::new();
        let held = d.lock.try_shared().unwrap();
        let d2 = d.clone();
        let canceller = thread::spawn(move || {
            let mut w = pin!(d2.lock.exclusive());
            assert!(poll_once(w.as_mut()).is_pending());
            // dropped here: cancelled
        });
        let reader = spawn_reader(&d);
        reader.join().unwrap();
        canceller.join().unwrap();
        drop(held);
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// A queued writer races its own cancellation against the release of the shared lock, while a reader
/// arrives: whatever the interleaving, everyone finishes and nothing leaks.
#[test]
fn lock_writer_cancel_races_release() {
    model_bounded_in_ci(|| {
        let d = Data::new();
        let held = d.lock.try_shared().unwrap();
        let d2 = d.clone();
        let canceller = thread::spawn(move || {
            let mut w = pin!(d2.lock.exclusive());
            if let Poll::Ready(_guard) = poll_once(w.as_mut()) {
                d2.write();
            }
        });
        let reader = spawn_reader(&d);
        drop(held);
        canceller.join().unwrap();
        reader.join().unwrap();
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// A writer that was granted the lock in a race with its own cancellation passes it on.
#[test]
fn lock_granted_then_dropped_passes_on() {
    model_bounded_in_ci(|| {
        let d = Data::new();
        let held = d.lock.try_exclusive().unwrap();
        let d2 = d.clone();
        let canceller = thread::spawn(move || {
            poll_twice_then_drop(d2.lock.exclusive());
        });
        let d3 = d.clone();
        let waiter = thread::spawn(move || {
            block_on(async {
                let _g = d3.lock.exclusive().await;
                d3.write();
            })
        });
        drop(held);
        canceller.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(d.read(), 1);
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

struct Sem {
    sem: Semaphore,
    cell: UnsafeCell<usize>,
}

impl Sem {
    /// Increments the counter; only called while holding a permit of the one-permit semaphore.
    fn bump(&self) {
        // SAFETY: the semaphore has one permit and this runs while holding it, so accesses are
        // exclusive; loom's `UnsafeCell` reports any access the semaphore fails to order.
        self.cell.with_mut(|p| unsafe { *p += 1 });
    }
    fn value(&self) -> usize {
        // SAFETY: called after every other thread has been joined.
        self.cell.with(|p| unsafe { *p })
    }
}

/// One permit as a mutex: two threads acquire and release; accesses must be ordered.
#[test]
fn semaphore_acquire_release_race() {
    model_bounded_in_ci(|| {
        let s = Arc::new(Sem {
            sem: Semaphore::new(1),
            cell: UnsafeCell::new(0),
        });
        let s2 = s.clone();
        let t = thread::spawn(move || {
            block_on(async {
                let _p = s2.sem.acquire().await.unwrap();
                s2.bump();
            })
        });
        block_on(async {
            let _p = s.sem.acquire().await.unwrap();
            s.bump();
        });
        t.join().unwrap();
        assert_eq!(s.value(), 2);
        assert_eq!(s.sem.available_permits(), 1);
    });
}

/// A waiter is cancelled while the permit holder releases and another waiter waits: the permit is
/// neither lost nor handed out twice, and the other waiter is woken.
#[test]
fn semaphore_cancel_races_release() {
    model_bounded_in_ci(|| {
        let sem = Arc::new(Semaphore::new(1));
        let held = sem.try_acquire().unwrap();
        let s2 = sem.clone();
        let canceller = thread::spawn(move || {
            poll_twice_then_drop(s2.acquire());
        });
        let s3 = sem.clone();
        let waiter = thread::spawn(move || {
            block_on(async {
                drop(s3.acquire().await.unwrap());
            })
        });
        drop(held);
        canceller.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(sem.available_permits(), 1, "permit lost or duplicated");
    });
}

/// The head `acquire_many(2)` is cancelled while a smaller request waits behind it and a permit is
/// still held: the smaller request must be served by the cancellation itself.
#[test]
fn semaphore_cancelled_head_lets_smaller_through() {
    model_bounded_in_ci(|| {
        let sem = Arc::new(Semaphore::new(2));
        let held = sem.try_acquire().unwrap();
        let s2 = sem.clone();
        let canceller = thread::spawn(move || {
            let mut f = pin!(s2.acquire_many(2));
            assert!(poll_once(f.as_mut()).is_pending());
        });
        let s3 = sem.clone();
        let waiter = thread::spawn(move || block_on(s3.acquire()).unwrap().forget());
        waiter.join().unwrap();
        canceller.join().unwrap();
        drop(held);
        assert_eq!(sem.available_permits(), 1);
    });
}

/// Two releases from two threads wake two waiters (neither wakeup is lost). The releases are
/// permit drops (a fair semaphore's release is one `fetch_add`, then the line is served if anyone
/// waits); the woken waiters leak their permits with `mem::forget`, so the model counts only the
/// operations it is about.
#[test]
fn semaphore_two_releases_wake_two_waiters() {
    model_bounded_in_ci(|| {
        // A std `Arc`: the `_arc` permits hold one (loom does not need to model the count).
        let sem = std::sync::Arc::new(Semaphore::new(2));
        let (p1, p2) = (
            sem.try_acquire_arc().unwrap(),
            sem.try_acquire_arc().unwrap(),
        );
        let s2 = sem.clone();
        let t = thread::spawn(move || {
            block_on(async { std::mem::forget(s2.acquire().await.unwrap()) });
        });
        let releaser = thread::spawn(move || drop(p1));
        drop(p2);
        block_on(async { std::mem::forget(sem.acquire().await.unwrap()) });
        t.join().unwrap();
        releaser.join().unwrap();
        assert_eq!(sem.available_permits(), 0);
    });
}

/// `close` races a waiter and a release: the waiter completes (Ok or Err), never hangs.
#[test]
fn semaphore_close_races_waiter() {
    model_bounded_in_ci(|| {
        let sem = Arc::new(Semaphore::new(0));
        let s2 = sem.clone();
        let t = thread::spawn(move || block_on(s2.acquire_many(1)).map(|p| p.forget()).is_ok());
        let s3 = sem.clone();
        let closer = thread::spawn(move || s3.close());
        sem.add_permits(1);
        let got = t.join().unwrap();
        closer.join().unwrap();
        assert!(sem.is_closed());
        assert_eq!(sem.available_permits(), if got { 0 } else { 1 });
        let waker = futures::task::noop_waker();
        let mut late = pin!(sem.acquire());
        assert!(matches!(
            late.as_mut().poll(&mut Context::from_waker(&waker)),
            Poll::Ready(Err(_))
        ));
    });
}

// ---------------------------------------------------------------------------------------------
// Bounded barging (`with_barging`). `NEVER` keeps a lock in barging mode for the whole model (no
// waiter gets near an hour); `ALWAYS` (1 ns) puts every waiter past the bound by the time anyone
// checks, so releases switch to hand-off while newcomers race them through the fast path.
// ---------------------------------------------------------------------------------------------

use std::time::Duration;

const NEVER: Duration = Duration::from_secs(3600);
const ALWAYS: Duration = Duration::from_nanos(1);

impl Data {
    fn barging(bound: Duration) -> Arc<Self> {
        Arc::new(Data {
            lock: AsyncOneManyLock::with_barging((), bound),
            cell: UnsafeCell::new(0),
        })
    }
}

/// A thread that takes the lock exclusively, writes, and leaves.
fn spawn_writer(d: &Arc<Data>) -> thread::JoinHandle<()> {
    let d = d.clone();
    thread::spawn(move || {
        block_on(async {
            let _g = d.lock.exclusive().await;
            d.write();
        })
    })
}

/// A waiting writer is woken (not granted) by the release while a second writer barges through the
/// fast path: writes stay ordered and the woken one is not lost.
fn barging_two_writers(bound: Duration) {
    model_bounded_in_ci(move || {
        let d = Data::barging(bound);
        let held = d.lock.try_exclusive().unwrap();
        let a = spawn_writer(&d);
        let b = spawn_writer(&d);
        drop(held);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(d.read(), 2);
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

#[test]
fn barging_lock_writer_barges_past_woken_writer() {
    barging_two_writers(NEVER);
}

#[test]
fn barging_lock_switches_to_hand_off_under_a_newcomer() {
    barging_two_writers(ALWAYS);
}

/// A reader and a writer race a barging lock's release: woken readers and a barging writer must
/// never overlap, and nobody waits for ever.
#[test]
fn barging_lock_reader_and_writer_race_release() {
    model_bounded_in_ci(|| {
        let d = Data::barging(NEVER);
        let held = d.lock.try_exclusive().unwrap();
        let w = spawn_writer(&d);
        let r = spawn_reader(&d);
        drop(held);
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(d.read(), 1);
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// Under loom a barging bound counts the line's clock reads, not nanoseconds (see `Stamp` in
/// `executor/sync/waiters.rs`): with three, two readers that queued and were woken by one release
/// are still young at that release (two reads after the first joined) and past the bound at their
/// retry.
const THREE_READS: Duration = Duration::from_nanos(3);

/// Two readers queue, the release wakes the first (which wakes the second once it holds the lock),
/// and a newcomer writer barges in before they poll. While a reader is on its way, that writer's
/// release skips the line (`NOTIFIED`); the reader that finds it still holding and has waited past
/// the bound switches the lock to hand-off in the same step, so the release cannot slip by between
/// them and leave the lock free in hand-off mode with nobody served.
///
/// Explored with at most three preemptions, within which loom finds the lost wake-up it guards
/// against in seconds; unbounded, a first form of this model took about nine minutes.
#[test]
fn barging_lock_woken_readers_race_a_barging_writer() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let d = Data::barging(THREE_READS);
        let held = d.lock.try_exclusive().unwrap();
        let a = spawn_reader(&d);
        let b = spawn_reader(&d);
        drop(held);
        if let Some(g) = d.lock.try_exclusive() {
            d.write();
            drop(g);
        }
        a.join().unwrap();
        b.join().unwrap();
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// A woken waiter is dropped in a race with the release that woke it: its wake must pass to the
/// waiter behind it.
#[test]
fn barging_lock_cancelled_woken_waiter_passes_the_wake_on() {
    cancelled_woken_waiter_passes_on(false);
}

/// Readers are woken one at a time, each by the one before it once that one holds the lock. The
/// first is dropped in a race with the release that wakes it: the wake, and with it the chain,
/// must pass to the reader behind it.
#[test]
fn barging_lock_cancelled_woken_reader_passes_the_chain_on() {
    cancelled_woken_waiter_passes_on(true);
}

/// Two writers, or two readers, queue behind a held lock; the first polls twice and is dropped
/// while the lock is released.
fn cancelled_woken_waiter_passes_on(readers: bool) {
    model_bounded_in_ci(move || {
        let d = Data::barging(NEVER);
        let held = d.lock.try_exclusive().unwrap();
        let d2 = d.clone();
        let canceller = thread::spawn(move || {
            if readers {
                poll_twice_then_drop(d2.lock.shared());
            } else {
                poll_twice_then_drop(d2.lock.exclusive());
            }
        });
        let waiter = if readers {
            spawn_reader(&d)
        } else {
            spawn_writer(&d)
        };
        drop(held);
        canceller.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(d.read(), usize::from(!readers));
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// An upgrade waits for a reader to leave while a writer queues: the upgrade's write and the
/// writer's are ordered, and the reader never sees a write in progress.
#[test]
fn upgrade_races_reader_release_and_writer() {
    model_bounded_in_ci(|| {
        let d = Data::new();
        let reader = d.lock.try_shared().unwrap();
        let d2 = d.clone();
        let upgrader = thread::spawn(move || {
            block_on(async {
                let up = d2.lock.upgradable().await;
                let seen = d2.read();
                let _w = up.upgrade().await;
                assert_eq!(d2.read(), seen, "a writer got in during the upgrade");
                d2.write();
            })
        });
        let w = spawn_writer(&d);
        d.read();
        drop(reader);
        upgrader.join().unwrap();
        w.join().unwrap();
        assert_eq!(d.read(), 2);
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// An upgrade is cancelled while the reader it waits for leaves: the lock ends free either way.
#[test]
fn upgrade_cancel_races_reader_release() {
    model_bounded_in_ci(|| {
        let d = Data::barging(NEVER);
        let reader = d.lock.try_shared().unwrap();
        let d2 = d.clone();
        let canceller = thread::spawn(move || {
            let up = d2.lock.try_upgradable().unwrap();
            poll_twice_then_drop(up.upgrade());
        });
        drop(reader);
        canceller.join().unwrap();
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// One permit as a mutex on a barging semaphore: a waiter woken by a release races a barging
/// acquirer; accesses stay ordered and the permit count is exact.
fn barging_semaphore_mutex(bound: Duration) {
    model_bounded_in_ci(move || {
        let s = Arc::new(Sem {
            sem: Semaphore::with_barging(1, bound),
            cell: UnsafeCell::new(0),
        });
        let held = s.sem.try_acquire().unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    block_on(async {
                        let _p = s.sem.acquire().await.unwrap();
                        s.bump();
                    })
                })
            })
            .collect();
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(s.value(), 2);
        assert_eq!(s.sem.available_permits(), 1);
    });
}

#[test]
fn barging_semaphore_waiter_races_barger() {
    barging_semaphore_mutex(NEVER);
}

#[test]
fn barging_semaphore_switches_to_hand_off() {
    barging_semaphore_mutex(ALWAYS);
}

/// Two releases from two threads wake two waiters of a barging semaphore, and a woken waiter that is
/// cancelled passes its wake on.
#[test]
fn barging_semaphore_cancel_and_two_releases() {
    model_bounded_in_ci(|| {
        let sem = Arc::new(Semaphore::with_barging(0, NEVER));
        let s2 = sem.clone();
        let canceller = thread::spawn(move || poll_twice_then_drop(s2.acquire()));
        let s3 = sem.clone();
        let waiter = thread::spawn(move || block_on(s3.acquire()).unwrap().forget());
        sem.add_permits(1);
        waiter.join().unwrap();
        canceller.join().unwrap();
        assert_eq!(sem.available_permits(), 0, "permit lost or duplicated");
    });
}

/// Makes the calling loom thread's waiters wait in the share `id` of weight `weight` (under loom
/// no task runs in a group).
fn in_share(id: usize, weight: u32) {
    crate::sync::loom_share::set(crate::sync::ShareKey { id, weight });
}

/// Group-fair semaphore: a waiter of one group is granted the permit by the release while it is
/// being cancelled, and a waiter of a heavier group waits too. The grant is passed on (or never
/// made), never lost; the queue ends empty.
#[test]
fn group_fair_semaphore_grant_races_cancel() {
    model_bounded_in_ci(|| {
        let s = Arc::new(Sem {
            sem: Semaphore::group_fair(1).unwrap(),
            cell: UnsafeCell::new(0),
        });
        let held = s.sem.try_acquire().unwrap();
        let s2 = s.clone();
        let canceller = thread::spawn(move || {
            in_share(1, 1);
            poll_twice_then_drop(s2.sem.acquire());
        });
        let s3 = s.clone();
        let waiter = thread::spawn(move || {
            in_share(2, 2);
            block_on(async {
                let _p = s3.sem.acquire().await.unwrap();
                s3.bump();
            })
        });
        drop(held);
        canceller.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(s.value(), 1);
        assert_eq!(s.sem.available_permits(), 1, "permit lost or duplicated");
        assert_eq!(s.sem.heaviest_waiting_weight(), 0);
    });
}

/// Group-fair semaphore: releases race new waiters of two groups joining the queue; every waiter
/// is served (no lost wakeup) and the accesses under the permit are ordered.
#[test]
fn group_fair_semaphore_release_races_new_waiters() {
    model_bounded_in_ci(|| {
        let s = Arc::new(Sem {
            sem: Semaphore::group_fair(1).unwrap(),
            cell: UnsafeCell::new(0),
        });
        let held = s.sem.try_acquire().unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            in_share(1, 3);
            block_on(async {
                let _p = s2.sem.acquire().await.unwrap();
                s2.bump();
            })
        });
        let s3 = s.clone();
        let u = thread::spawn(move || {
            in_share(2, 1);
            block_on(async {
                let _p = s3.sem.acquire().await.unwrap();
                s3.bump();
            })
        });
        drop(held);
        t.join().unwrap();
        u.join().unwrap();
        assert_eq!(s.value(), 2);
        assert_eq!(s.sem.available_permits(), 1);
        assert_eq!(s.sem.heaviest_waiting_weight(), 0);
    });
}

/// Group-fair lock: a writer of one group is cancelled while the release may grant it, and a
/// reader of another group waits behind it: the reader gets in, the lock is not leaked.
#[test]
fn group_fair_lock_writer_cancel_races_release_and_reader() {
    model_bounded_in_ci(|| {
        let d = Arc::new(Data {
            lock: AsyncOneManyLock::group_fair(()),
            cell: UnsafeCell::new(0),
        });
        let held = d.lock.try_exclusive().unwrap();
        let d2 = d.clone();
        let canceller = thread::spawn(move || {
            in_share(1, 5);
            poll_twice_then_drop(d2.lock.exclusive());
        });
        let d3 = d.clone();
        let reader = thread::spawn(move || {
            in_share(2, 1);
            block_on(async {
                let _g = d3.lock.shared().await;
                d3.read()
            })
        });
        d.write();
        drop(held);
        canceller.join().unwrap();
        assert_eq!(reader.join().unwrap(), 1);
        assert!(d.lock.try_exclusive().is_some(), "lock leaked");
        assert_eq!(d.lock.heaviest_waiting_weight(), 0);
    });
}

/// Group-fair semaphore, weight inheritance: the holder of the cached group's uncounted permit
/// releases it on another thread while a waiter of a heavier group joins and looks up the
/// holders. Whichever comes first, once the release is done no loan is out for the uncounted
/// holds, and at the end nothing is held, counted or lent.
#[test]
fn group_fair_semaphore_uncounted_release_races_a_waiter_joining() {
    model_bounded_in_ci(|| {
        let sem = std::sync::Arc::new(Semaphore::group_fair(1).unwrap());
        in_share(1, 1);
        // The first hold makes its group the cached one: uncounted.
        let permit = sem.try_acquire_arc().unwrap();
        assert_eq!(sem.inheritance_snapshot(), (1, 0, 0, 0));
        let holder = thread::spawn(move || {
            in_share(1, 1);
            drop(permit);
        });
        let s2 = sem.clone();
        let waiter = thread::spawn(move || {
            in_share(2, 5);
            block_on(async {
                let _p = s2.acquire().await.unwrap();
            })
        });
        holder.join().unwrap();
        let (_, _, lent, _) = sem.inheritance_snapshot();
        assert_eq!(lent, 0, "a loan outlived the uncounted hold it was for");
        waiter.join().unwrap();
        assert_eq!(sem.inheritance_snapshot(), (0, 0, 0, 0));
        assert_eq!(sem.available_permits(), 1);
        assert_eq!(sem.heaviest_waiting_weight(), 0);
    });
}

/// Group-fair lock, weight inheritance: an uncounted reader releases while a counted reader of
/// another group stays and a writer of a heavier group joins. The release leaves a reader in
/// place, yet it goes through the line, so the loan for the uncounted hold ends with it.
#[test]
fn group_fair_lock_uncounted_reader_release_races_a_writer_joining() {
    model_bounded_in_ci(|| {
        let lock = std::sync::Arc::new(AsyncOneManyLock::group_fair(()));
        in_share(1, 1);
        let uncounted = lock.try_shared_arc().unwrap();
        in_share(3, 1);
        let counted = lock.try_shared_arc().unwrap();
        assert_eq!(lock.inheritance_snapshot(), (2, 1, 0, 1));
        let holder = thread::spawn(move || {
            in_share(1, 1);
            drop(uncounted);
        });
        let l2 = lock.clone();
        let writer = thread::spawn(move || {
            in_share(2, 5);
            block_on(async {
                let _g = l2.exclusive().await;
            })
        });
        holder.join().unwrap();
        let (held, counted_holds, lent, _) = lock.inheritance_snapshot();
        assert_eq!((held, counted_holds), (1, 1), "the counted reader holds");
        assert_eq!(lent, 0, "a loan outlived the uncounted hold it was for");
        drop(counted);
        writer.join().unwrap();
        assert_eq!(lock.inheritance_snapshot(), (0, 0, 0, 0));
        assert!(lock.try_exclusive().is_some(), "lock leaked");
    });
}

/// Group-fair lock, weight inheritance: an uncounted reader releases while a reader of another
/// group takes a counted hold and a writer of a heavier group joins. Whatever the order, once
/// all but the writer are done, a loan is out for the uncounted holds exactly when some are left
/// and someone waits.
#[test]
fn group_fair_lock_uncounted_release_races_a_counted_reader_and_a_writer() {
    model_bounded_in_ci(|| {
        let lock = std::sync::Arc::new(AsyncOneManyLock::group_fair(()));
        in_share(1, 1);
        let uncounted = lock.try_shared_arc().unwrap();
        let holder = thread::spawn(move || {
            in_share(1, 1);
            drop(uncounted);
        });
        let l2 = lock.clone();
        let reader = thread::spawn(move || {
            in_share(3, 1);
            block_on(l2.shared_arc())
        });
        let l3 = lock.clone();
        let writer = thread::spawn(move || {
            in_share(2, 5);
            block_on(async {
                let _g = l3.exclusive().await;
            })
        });
        holder.join().unwrap();
        let counted = reader.join().unwrap();
        assert!(
            lock.uncounted_loan_is_current(),
            "the loan for the uncounted holds is stale"
        );
        drop(counted);
        writer.join().unwrap();
        assert_eq!(lock.inheritance_snapshot(), (0, 0, 0, 0));
    });
}
