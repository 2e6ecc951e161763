//! Behaviour of the bounded-barging mode (`with_barging`) of `AsyncOneManyLock` and `Semaphore`:
//! a release wakes without handing over, a running task may take the free resource first, a waiter
//! past the bound is handed the resource before any newcomer, and phase fairness holds (the batch
//! and wake-count tests shared with the fair mode live in `sync_lock.rs` and `sync_semaphore.rs`). Futures are
//! polled by hand with counting wakers. The bound is either an hour (never reached) or 1 ms with a
//! sleep well past it; no assertion depends on how fast anything runs.
#![cfg(not(loom))]

mod common;

use common::Probe;
use std::future::Future;
use std::time::Duration;

use rondo::sync::{AsyncOneManyLock, ExclusiveGuard, Semaphore, TryAcquireError};

const NEVER: Duration = Duration::from_secs(3600);
const SHORT: Duration = Duration::from_millis(1);

/// Sleeps well past `SHORT`.
fn outwait() {
    std::thread::sleep(SHORT * 20);
}

/// Newcomers take the resource and give it back (`take_and_give_back`) until one is refused;
/// returns how many got in.
fn barge_until_refused(mut take_and_give_back: impl FnMut() -> bool) -> usize {
    let mut barges = 0;
    while take_and_give_back() {
        barges += 1;
        assert!(
            barges <= 100,
            "newcomers kept the resource from a waiter past the bound"
        );
    }
    barges
}

#[test]
fn a_running_task_may_take_the_lock_before_the_woken_head() {
    let lock = AsyncOneManyLock::with_barging(0, NEVER);
    let w0 = lock.try_exclusive().unwrap();
    let mut head = Probe::new(lock.exclusive());
    head.pending();
    drop(w0);
    // Woken, not handed the lock: it is free for a running task.
    assert_eq!(head.wakes(), 1);
    let mut barger = lock
        .try_exclusive()
        .expect("the free lock can be taken by a newcomer");
    *barger += 1;
    head.pending(); // overtaken, keeps its place
    drop(barger);
    assert_eq!(head.wakes(), 2);
    let mut g = head.ready();
    *g += 1;
    drop(g);
    assert_eq!(*lock.try_shared().unwrap(), 2);
}

/// Queues two writers behind a held lock and releases it: only the first is woken.
fn release_to_two_writers(
    lock: &AsyncOneManyLock<()>,
) -> [Probe<impl Future<Output = ExclusiveGuard<'_, ()>>>; 2] {
    let w0 = lock.try_exclusive().unwrap();
    let mut writers = [Probe::new(lock.exclusive()), Probe::new(lock.exclusive())];
    for w in &mut writers {
        w.pending();
    }
    drop(w0);
    assert_eq!((writers[0].wakes(), writers[1].wakes()), (1, 0));
    writers
}

#[test]
fn one_release_wakes_one_writer_and_not_again_until_it_ran() {
    let lock = AsyncOneManyLock::with_barging((), NEVER);
    let [mut a, mut b] = release_to_two_writers(&lock);
    // Barge and release again before `a` ran: `a` is already awake, nobody else is woken.
    drop(lock.try_exclusive().unwrap());
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    let g = a.ready();
    b.pending();
    drop(g);
    assert_eq!(b.wakes(), 1);
    drop(b.ready());
}

#[test]
fn a_waiter_past_the_bound_is_granted_before_any_newcomer() {
    let lock = AsyncOneManyLock::with_barging(0, SHORT);
    let w0 = lock.try_exclusive().unwrap();
    let mut old = Probe::new(lock.exclusive());
    old.pending();
    outwait();
    drop(w0);
    // Handed off: the lock never became free for newcomers.
    assert_eq!(old.wakes(), 1);
    assert!(lock.try_exclusive().is_none());
    assert!(lock.try_shared().is_none());
    let mut newcomer = Probe::new(lock.exclusive());
    newcomer.pending();
    let g = old.ready();
    drop(g);
    assert_eq!(newcomer.wakes(), 1);
    drop(newcomer.ready());
    assert!(lock.try_exclusive().is_some(), "lock leaked");
}

#[test]
fn an_overtaken_waiter_past_the_bound_switches_to_hand_off() {
    let lock = AsyncOneManyLock::with_barging((), SHORT);
    let w0 = lock.try_exclusive().unwrap();
    let mut old = Probe::new(lock.exclusive());
    old.pending();
    drop(w0);
    // Woken while still young (a release right after queueing), then overtaken.
    let barger = lock.try_exclusive().unwrap();
    outwait();
    old.pending();
    // Its failed retry turned hand-off on: the barger's release goes straight to it.
    drop(barger);
    assert!(
        lock.try_exclusive().is_none(),
        "a newcomer got in ahead of the old waiter"
    );
    let g = old.ready();
    drop(g);
    assert!(lock.try_exclusive().is_some());
}

/// A woken waiter whose task does not run (its worker is busy with tasks that take the lock again
/// and again) is still handed the lock once past the bound: the releases skip the line only a few
/// times in a row before one of them checks the head's wait.
#[test]
fn a_woken_waiter_that_does_not_run_is_handed_the_lock_past_the_bound() {
    let lock = AsyncOneManyLock::with_barging(0, SHORT);
    let w0 = lock.try_exclusive().unwrap();
    let mut old = Probe::new(lock.exclusive());
    old.pending();
    drop(w0);
    assert_eq!(old.wakes(), 1, "woken while young, not handed the lock");
    outwait();
    let barges = barge_until_refused(|| lock.try_exclusive().map(|mut g| *g += 1).is_some());
    assert!(barges <= 16, "{barges} newcomers got in first");
    let mut g = old.ready();
    *g += 1;
    drop(g);
    assert_eq!(*lock.try_shared().unwrap(), barges + 1);
}

#[test]
fn readers_never_barge_past_a_waiting_writer() {
    let lock = AsyncOneManyLock::with_barging(0, NEVER);
    let r0 = lock.try_shared().unwrap();
    let mut w = Probe::new(lock.exclusive());
    w.pending();
    assert!(
        lock.try_shared().is_none(),
        "a reader passed a waiting writer"
    );
    let mut late = Probe::new(lock.shared());
    late.pending();
    drop(r0);
    assert_eq!((w.wakes(), late.wakes()), (1, 0));
    let g = w.ready();
    drop(g);
    assert_eq!(late.wakes(), 1);
    drop(late.ready());
}

#[test]
fn readers_past_the_bound_are_admitted_before_a_newcomer_writer() {
    let lock = AsyncOneManyLock::with_barging(0u32, SHORT);
    let w0 = lock.try_exclusive().unwrap();
    let mut readers: Vec<_> = (0..3).map(|_| Probe::new(lock.shared())).collect();
    for r in &mut readers {
        r.pending();
    }
    outwait();
    drop(w0);
    // Handed to the whole batch: a newcomer writer finds the lock taken.
    assert!(lock.try_exclusive().is_none());
    let guards: Vec<_> = readers.iter_mut().map(Probe::ready).collect();
    assert_eq!(guards.len(), 3);
    drop(guards);
    assert!(lock.try_exclusive().is_some());
}

/// The release wakes the first of two readers, and a newcomer writer takes the lock before it ran.
/// The reader's retry fails and it waits again in its place; the writer's release wakes it again,
/// and once it holds the lock it wakes the reader behind it to share it, instead of leaving that
/// one waiting until its own release.
#[test]
fn woken_readers_overtaken_by_a_writer_still_share() {
    let lock = AsyncOneManyLock::with_barging(0u32, NEVER);
    let w0 = lock.try_exclusive().unwrap();
    let mut r1 = Probe::new(lock.shared());
    let mut r2 = Probe::new(lock.shared());
    r1.pending();
    r2.pending();
    drop(w0);
    assert_eq!((r1.wakes(), r2.wakes()), (1, 0));
    let writer = lock.try_exclusive().expect("a newcomer writer may barge");
    r1.pending();
    assert_eq!((r1.wakes(), r2.wakes()), (1, 0));
    drop(writer);
    assert_eq!(
        (r1.wakes(), r2.wakes()),
        (2, 0),
        "the writer's release woke the head again"
    );
    let g1 = r1.ready();
    assert_eq!(
        r2.wakes(),
        1,
        "the reader that took the lock woke the other"
    );
    let g2 = r2.ready();
    assert!(lock.try_exclusive().is_none());
    drop((g1, g2));
    assert!(lock.try_exclusive().is_some(), "lock leaked");
}

#[test]
fn a_cancelled_woken_waiter_passes_the_wake_on() {
    let lock = AsyncOneManyLock::with_barging((), NEVER);
    let [a, mut b] = release_to_two_writers(&lock);
    drop(a);
    assert_eq!(b.wakes(), 1, "the wake died with the cancelled waiter");
    drop(b.ready());
}

#[test]
fn barging_semaphore_lets_a_running_task_take_a_released_permit() {
    let sem = Semaphore::with_barging(1, NEVER);
    let p = sem.try_acquire().unwrap();
    let mut head = Probe::new(sem.acquire());
    head.pending();
    drop(p);
    assert_eq!(head.wakes(), 1);
    let barger = sem
        .try_acquire()
        .expect("a free permit can be taken by a newcomer");
    head.pending();
    drop(barger);
    assert_eq!(head.wakes(), 2);
    drop(head.ready().unwrap());
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn barging_semaphore_keeps_acquire_many_at_the_head_among_waiters() {
    let sem = Semaphore::with_barging(2, NEVER);
    let held: Vec<_> = (0..2).map(|_| sem.try_acquire().unwrap()).collect();
    let mut big = Probe::new(sem.acquire_many(2));
    let mut small = Probe::new(sem.acquire());
    big.pending();
    small.pending();
    let mut held = held.into_iter();
    drop(held.next());
    // One permit free: the head needs two, so nobody in line is woken for it.
    assert_eq!((big.wakes(), small.wakes()), (0, 0));
    drop(held.next());
    assert_eq!((big.wakes(), small.wakes()), (1, 0));
    let p = big.ready().unwrap();
    small.pending();
    drop(p);
    assert_eq!(small.wakes(), 1);
    drop(small.ready().unwrap());
}

#[test]
fn semaphore_waiter_past_the_bound_is_handed_permits_before_a_newcomer() {
    let sem = Semaphore::with_barging(1, SHORT);
    let p = sem.try_acquire().unwrap();
    let mut old = Probe::new(sem.acquire());
    old.pending();
    outwait();
    drop(p);
    assert_eq!(old.wakes(), 1);
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    let p = old.ready().unwrap();
    assert_eq!(sem.available_permits(), 0);
    drop(p);
    assert_eq!(sem.available_permits(), 1);
    assert!(sem.try_acquire().is_ok(), "hand-off mode outlived the line");
}

/// A release that finds a woken waiter on its way, and every free permit promised to it, skips
/// the line; one that frees a permit nobody is promised wakes the next waiter, so two releases
/// still wake two waiters.
#[test]
fn barging_semaphore_releases_past_a_woken_waiter_wake_only_for_unpromised_permits() {
    let sem = Semaphore::with_barging(2, NEVER);
    let held: Vec<_> = (0..2).map(|_| sem.try_acquire().unwrap()).collect();
    let mut first = Probe::new(sem.acquire());
    let mut second = Probe::new(sem.acquire());
    first.pending();
    second.pending();
    let mut held = held.into_iter();
    drop(held.next());
    assert_eq!((first.wakes(), second.wakes()), (1, 0));
    // A running task takes the permit promised to `first` and gives it back: still promised.
    drop(
        sem.try_acquire()
            .expect("a free permit can be taken by a newcomer"),
    );
    assert_eq!((first.wakes(), second.wakes()), (1, 0));
    // The second permit is nobody's yet: it wakes `second`.
    drop(held.next());
    assert_eq!((first.wakes(), second.wakes()), (1, 1));
    let (a, b) = (first.ready().unwrap(), second.ready().unwrap());
    assert_eq!(sem.available_permits(), 0);
    drop((a, b));
    assert_eq!(sem.available_permits(), 2);
}

/// Unlike the lock (test above), a barging semaphore does not hand permits to a woken waiter
/// whose task has not run yet, even past the bound: they would sit idle until its task runs (on an
/// oversubscribed machine, until the OS runs its worker's thread), so newcomers may still take
/// them. Its own poll, finding them taken past the bound, switches to hand-off: the next release
/// hands it the permit before any newcomer.
#[test]
fn a_woken_waiter_past_the_bound_is_handed_permits_once_it_polls() {
    let sem = Semaphore::with_barging(1, SHORT);
    let p = sem.try_acquire().unwrap();
    let mut old = Probe::new(sem.acquire());
    old.pending();
    drop(p);
    assert_eq!(old.wakes(), 1, "woken while young, not handed the permit");
    outwait();
    for _ in 0..100 {
        let p = sem.try_acquire();
        assert!(
            p.is_ok(),
            "the permit went to a woken waiter whose task has not run"
        );
    }
    assert_eq!(old.wakes(), 1, "woken again while still on its way");
    let held = sem.try_acquire().unwrap();
    old.pending(); // overtaken past the bound: hand-off from now on
    drop(held);
    assert_eq!(
        old.wakes(),
        2,
        "the release after its poll did not hand it the permit"
    );
    assert_eq!(
        sem.try_acquire().unwrap_err(),
        TryAcquireError::NoPermits,
        "a newcomer passed a waiter past the bound"
    );
    drop(old.ready().unwrap());
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn close_fails_woken_waiters_of_a_barging_semaphore() {
    let sem = Semaphore::with_barging(1, NEVER);
    let p = sem.try_acquire().unwrap();
    let mut w = Probe::new(sem.acquire());
    w.pending();
    drop(p);
    assert_eq!(w.wakes(), 1);
    sem.close();
    assert!(w.ready().is_err());
    assert_eq!(sem.available_permits(), 1);
}

/// A release that frees permits for several waiters wakes them all; a newcomer may then take some
/// of the permits. A woken waiter behind others must not take what those ahead of it still need:
/// the head's `acquire_many(3)` is served before the later `acquire()`, whichever polls first.
#[test]
fn a_woken_waiter_leaves_the_permits_that_waiters_ahead_of_it_need() {
    let sem = Semaphore::with_barging(4, NEVER);
    let all = sem.try_acquire_many(4).unwrap();
    let mut head = Probe::new(sem.acquire_many(3));
    let mut later = Probe::new(sem.acquire());
    head.pending();
    later.pending();
    drop(all);
    assert_eq!((head.wakes(), later.wakes()), (1, 1));
    let newcomer = sem
        .try_acquire()
        .expect("a free permit can be taken by a newcomer");
    later.pending(); // three free, all needed by the head
    let h = head.ready().unwrap();
    assert_eq!(sem.available_permits(), 0);
    drop(newcomer);
    assert_eq!(later.wakes(), 2);
    let l = later.ready().unwrap();
    drop((h, l));
    assert_eq!(sem.available_permits(), 4);

    // With permits to spare for both, the later waiter need not wait for the head to poll.
    let all = sem.try_acquire_many(4).unwrap();
    let mut head = Probe::new(sem.acquire_many(2));
    let mut later = Probe::new(sem.acquire());
    head.pending();
    later.pending();
    drop(all);
    let newcomer = sem.try_acquire().unwrap();
    let l = later.ready().unwrap();
    let h = head.ready().unwrap();
    drop((newcomer, h, l));
    assert_eq!(sem.available_permits(), 4);
}
