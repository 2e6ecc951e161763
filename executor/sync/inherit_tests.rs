//! Weight inheritance on the group-fair primitives (`group_fair.rs`, "Weight inheritance"): which
//! weight a holder's group is scheduled at while heavier groups wait, and that every loan ends.
//!
//! Each acquire is polled once inside a task of its group (so it is counted, or joins the line,
//! for that group), then handed to the test thread, which drops it or polls it by hand; the
//! holder's group's effective weight is read from its scheduling hint.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::Runtime;
use crate::group::Group;
use crate::sync::{AsyncOneManyLock, Semaphore};

fn rt() -> Runtime {
    Runtime::builder().worker_threads(1).build().unwrap()
}

fn group(rt: &Runtime, weight: u32) -> Group {
    rt.group().weight(weight).build().unwrap()
}

/// The weight the scheduler serves `g` at.
fn effective(g: &Group) -> u32 {
    g.inner.weight_hint()
}

type Waiting<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Polls `fut` once in a task of `g`: it must wait (it joins the line in `g`'s share).
// The task hands the half-polled future back.
#[allow(clippy::async_yields_async)]
fn waiting<T: Send + 'static>(rt: &Runtime, g: &Group, mut fut: Waiting<T>) -> Waiting<T> {
    rt.block_on(g.spawn(async move {
        assert!(
            futures::poll!(&mut fut).is_pending(),
            "the acquire should wait"
        );
        fut
    }))
    .unwrap()
}

/// Whatever `fut` gives, taken in a task of `g` (a hold counted for `g`).
fn taken<T: Send + 'static>(rt: &Runtime, g: &Group, fut: Waiting<T>) -> T {
    rt.block_on(g.spawn(fut)).unwrap()
}

fn poll_now<T>(fut: &mut Waiting<T>) -> Poll<T> {
    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_lock_holder_runs_at_its_heaviest_waiters_weight_until_it_releases() {
    let rt = rt();
    let (l, h) = (group(&rt, 1), group(&rt, 100));
    let lock = Arc::new(AsyncOneManyLock::group_fair(0u32));
    let guard = taken(&rt, &l, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 1, "nobody waits: no loan");
    // L's hold is uncounted (L is the first group to hold the lock).
    assert_eq!(lock.inheritance_snapshot(), (1, 0, 0, 0));
    let w = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 100, "H waits: L runs at H's weight");
    assert_eq!(lock.inheritance_snapshot(), (1, 0, 100, 0));
    assert!(lock.uncounted_loan_is_current());
    assert_eq!(l.weight(), 1, "its own weight stays");
    assert_eq!(effective(&h), 100);
    drop(guard);
    assert_eq!(effective(&l), 1, "released: the loan ends");
    // H was granted the lock; nobody waits for it, so H is lent nothing either.
    let mut w = w;
    assert!(poll_now(&mut w).is_ready());
    assert_eq!(effective(&h), 100);
}

#[test]
fn a_cancelled_waiter_ends_the_loan() {
    let rt = rt();
    let (l, h) = (group(&rt, 1), group(&rt, 100));
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let guard = taken(&rt, &l, Box::pin(lock.clone().shared_arc()));
    let w = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 100);
    drop(w);
    assert_eq!(effective(&l), 1, "the waiter left: the loan ends");
    drop(guard);
    assert_eq!(effective(&l), 1);
    assert!(lock.try_exclusive().is_some(), "nothing is left held");
}

#[test]
fn a_granted_waiter_ends_the_loan_and_is_lent_in_turn() {
    let rt = rt();
    let (l, m, h) = (group(&rt, 1), group(&rt, 2), group(&rt, 100));
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let guard = taken(&rt, &l, Box::pin(lock.clone().exclusive_arc()));
    // M is served first (it joined first, and the queue's tags tie at the start), H waits behind.
    let mut wm = waiting(&rt, &m, Box::pin(lock.clone().exclusive_arc()));
    let wh = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 100);
    drop(guard);
    assert_eq!(effective(&l), 1, "L released");
    assert_eq!(
        effective(&m),
        100,
        "M was granted, holds with H waiting: M runs at 100"
    );
    let Poll::Ready(gm) = poll_now(&mut wm) else {
        panic!("M should hold the lock")
    };
    drop(wh);
    assert_eq!(effective(&m), 2, "H left: M is back at its own weight");
    drop(gm);
    assert_eq!(effective(&m), 2);
}

#[test]
fn nested_loans_follow_the_heaviest_waiter_still_waiting() {
    let rt = rt();
    let (l, a, b) = (group(&rt, 1), group(&rt, 100), group(&rt, 40));
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let guard = taken(&rt, &l, Box::pin(lock.clone().exclusive_arc()));
    let wa = waiting(&rt, &a, Box::pin(lock.clone().exclusive_arc()));
    let wb = waiting(&rt, &b, Box::pin(lock.clone().shared_arc()));
    assert_eq!(effective(&l), 100);
    drop(wa);
    assert_eq!(
        effective(&l),
        40,
        "the heavier waiter left: the next heaviest's weight"
    );
    drop(wb);
    assert_eq!(effective(&l), 1);
    drop(guard);
}

#[test]
fn loans_from_two_primitives_end_when_both_are_released() {
    let rt = rt();
    let (l, a, b) = (group(&rt, 1), group(&rt, 100), group(&rt, 40));
    let one = Arc::new(AsyncOneManyLock::group_fair(()));
    let two = Arc::new(Semaphore::group_fair(1).unwrap());
    let g1 = taken(&rt, &l, Box::pin(one.clone().exclusive_arc()));
    let g2 = taken(&rt, &l, Box::pin(two.clone().acquire_arc()));
    let wa = waiting(&rt, &a, Box::pin(one.clone().exclusive_arc()));
    let wb = waiting(&rt, &b, Box::pin(two.clone().acquire_arc()));
    assert_eq!(effective(&l), 100);
    drop(g2);
    // A loan of 100 is still out: the group keeps the heaviest weight lent until every loan is
    // returned.
    assert_eq!(effective(&l), 100);
    drop(g1);
    assert_eq!(effective(&l), 1);
    drop((wa, wb));
}

#[test]
fn a_semaphore_holder_is_lent_per_group_and_each_loan_ends_with_its_last_permit() {
    let rt = rt();
    let (l, k, h) = (group(&rt, 1), group(&rt, 3), group(&rt, 50));
    let sem = Arc::new(Semaphore::group_fair(3).unwrap());
    let mut pl = taken(&rt, &l, Box::pin(sem.clone().acquire_many_arc(2))).unwrap();
    let pk = taken(&rt, &k, Box::pin(sem.clone().acquire_arc())).unwrap();
    let w = waiting(&rt, &h, Box::pin(sem.clone().acquire_many_arc(2)));
    assert_eq!((effective(&l), effective(&k)), (50, 50));
    // Half of L's permits back: L still holds one, and H still waits (it needs two).
    drop(pl.split(1).unwrap());
    assert_eq!((effective(&l), effective(&k)), (50, 50));
    drop(pk);
    assert_eq!(effective(&k), 3, "K's last permit: its loan ends");
    // H was granted two permits; nobody waits now.
    assert_eq!(effective(&l), 1, "nobody waits: L's loan ends too");
    let mut w = w;
    let Poll::Ready(Ok(ph)) = poll_now(&mut w) else {
        panic!("H should have its permits")
    };
    drop((ph, pl));
    assert_eq!(sem.available_permits(), 3);
}

#[test]
fn forgotten_permits_end_the_loan_and_close_returns_every_loan() {
    let rt = rt();
    let (l, h) = (group(&rt, 1), group(&rt, 100));
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let p = taken(&rt, &l, Box::pin(sem.clone().acquire_arc())).unwrap();
    let w = waiting(&rt, &h, Box::pin(sem.clone().acquire_arc()));
    assert_eq!(effective(&l), 100);
    p.forget();
    assert_eq!(effective(&l), 1, "forgotten: L holds nothing");
    drop(w);
    sem.add_permits(1);
    let p = taken(&rt, &l, Box::pin(sem.clone().acquire_arc())).unwrap();
    let mut w = waiting(&rt, &h, Box::pin(sem.clone().acquire_arc()));
    assert_eq!(effective(&l), 100);
    sem.close();
    assert_eq!(effective(&l), 1, "closed: nobody waits");
    assert!(matches!(poll_now(&mut w), Poll::Ready(Err(_))));
    drop(p);
}

#[test]
fn a_cancelled_holder_group_returns_its_loan() {
    let rt = rt();
    let (l, h) = (group(&rt, 1), group(&rt, 100));
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let (tx, rx) = std::sync::mpsc::channel();
    let held = lock.clone();
    let _holder = l.spawn(async move {
        let _g = held.exclusive().await;
        tx.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    rx.recv().unwrap();
    let mut w = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 100);
    l.cancel();
    // The holder's future is dropped on a worker: wait for it (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let granted = loop {
        if let Poll::Ready(g) = poll_now(&mut w) {
            break Some(g);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert!(
        granted.is_some(),
        "the cancelled holder's guard was never dropped"
    );
    assert_eq!(effective(&l), 1);
}

#[test]
fn in_a_tree_the_whole_path_to_the_holder_is_lent() {
    let rt = rt();
    let tenant = group(&rt, 2);
    let leaf = tenant.child().weight(1).build().unwrap();
    let h = group(&rt, 100);
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let guard = taken(&rt, &leaf, Box::pin(lock.clone().exclusive_arc()));
    let w = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!((effective(&leaf), effective(&tenant)), (100, 100));
    drop(guard);
    assert_eq!((effective(&leaf), effective(&tenant)), (1, 2));
    drop(w);
}

#[test]
fn a_guard_released_in_another_group_still_ends_the_loan() {
    let rt = rt();
    let (l, o, h) = (group(&rt, 1), group(&rt, 5), group(&rt, 100));
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let guard = taken(&rt, &l, Box::pin(lock.clone().exclusive_arc()));
    let w = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 100);
    // Moved to a task of another group and released there.
    rt.block_on(o.spawn(async move { drop(guard) })).unwrap();
    assert_eq!(effective(&l), 1);
    assert_eq!(effective(&o), 5);
    drop(w);
}

#[test]
fn plain_primitives_lend_nothing() {
    let rt = rt();
    let (l, h) = (group(&rt, 1), group(&rt, 100));
    let lock = Arc::new(AsyncOneManyLock::new(()));
    let guard = taken(&rt, &l, Box::pin(lock.clone().exclusive_arc()));
    let w = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    assert_eq!(effective(&l), 1);
    drop((w, guard));
    let sem = Arc::new(Semaphore::new(1));
    let p = taken(&rt, &l, Box::pin(sem.clone().acquire_arc()));
    let w = waiting(&rt, &h, Box::pin(sem.clone().acquire_arc()));
    assert_eq!(effective(&l), 1);
    drop((w, p));
}

#[test]
fn added_permits_leave_the_holders_as_they_are() {
    let rt = rt();
    let (l, h) = (group(&rt, 1), group(&rt, 100));
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let p = taken(&rt, &l, Box::pin(sem.clone().acquire_arc())).unwrap();
    // One more permit is free, not one fewer held: L still holds its permit.
    sem.add_permits(1);
    let w = waiting(&rt, &h, Box::pin(sem.clone().acquire_many_arc(2)));
    assert_eq!(
        effective(&l),
        100,
        "H waits for L's permit: L runs at H's weight"
    );
    assert_eq!(sem.forget_permits(1), 1);
    assert_eq!(effective(&l), 100, "L holds its permit still");
    drop((w, p));
    assert_eq!(effective(&l), 1);
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn a_guard_that_outlives_its_group_is_lent_nothing_and_still_released() {
    let rt = rt();
    let h = group(&rt, 100);
    let lock = Arc::new(AsyncOneManyLock::group_fair(()));
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let (guard, permit) = {
        let l = group(&rt, 1);
        let guard = taken(&rt, &l, Box::pin(lock.clone().exclusive_arc()));
        let permit = taken(&rt, &l, Box::pin(sem.clone().acquire_arc())).unwrap();
        (guard, permit)
        // L's handle goes here; its task is done: the group is gone.
    };
    let mut wl = waiting(&rt, &h, Box::pin(lock.clone().exclusive_arc()));
    let mut ws = waiting(&rt, &h, Box::pin(sem.clone().acquire_arc()));
    assert_eq!(lock.heaviest_waiting_weight(), 100);
    drop((guard, permit));
    assert!(poll_now(&mut wl).is_ready(), "the lock was handed on");
    assert!(
        matches!(poll_now(&mut ws), Poll::Ready(Ok(_))),
        "the permit was handed on"
    );
    assert_eq!(effective(&h), 100);
}

#[test]
fn each_group_is_lent_for_its_own_holds_whichever_took_the_fast_path() {
    let rt = rt();
    let (a, b, h) = (group(&rt, 1), group(&rt, 2), group(&rt, 100));
    let sem = Arc::new(Semaphore::group_fair(3).unwrap());
    // A's hold goes uncounted (A is the first group to hold), B's is counted.
    let pa = taken(&rt, &a, Box::pin(sem.clone().acquire_arc())).unwrap();
    let pb = taken(&rt, &b, Box::pin(sem.clone().acquire_arc())).unwrap();
    // Held 2, counted 1 (B's), nothing lent, `COUNTED` set.
    assert_eq!(sem.inheritance_snapshot(), (2, 1, 0, 1));
    let w = waiting(&rt, &h, Box::pin(sem.clone().acquire_many_arc(3)));
    assert_eq!((effective(&a), effective(&b)), (100, 100));
    assert_eq!(sem.inheritance_snapshot(), (2, 1, 100, 1));
    drop(pa);
    assert_eq!(
        (effective(&a), effective(&b)),
        (1, 100),
        "A released: its loan ends"
    );
    drop(pb);
    assert_eq!(effective(&b), 2, "B released: its loan ends");
    let mut w = w;
    let Poll::Ready(Ok(ph)) = poll_now(&mut w) else {
        panic!("H should have its permits")
    };
    drop(ph);
    // Nothing held now: B becomes the cached group at its next hold, A's hold is counted.
    let pb = taken(&rt, &b, Box::pin(sem.clone().acquire_arc())).unwrap();
    let pa = taken(&rt, &a, Box::pin(sem.clone().acquire_arc())).unwrap();
    let w = waiting(&rt, &h, Box::pin(sem.clone().acquire_many_arc(3)));
    assert_eq!((effective(&a), effective(&b)), (100, 100));
    drop(pb);
    assert_eq!(
        (effective(&a), effective(&b)),
        (100, 2),
        "B released: its loan ends"
    );
    drop((w, pa));
    assert_eq!((effective(&a), effective(&b)), (1, 2));
    assert_eq!(sem.available_permits(), 3);
}
