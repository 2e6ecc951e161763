//! `rondo::task_local!`: scopes set a value for a future's polls, across awaits and workers;
//! nested scopes shadow and restore; `with` panics and `try_with` errs outside a scope; the value
//! is put back even when a poll panics; `sync_scope` and `get`.

mod common;

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{rt, watchdog};
use rondo::task::JoinSet;

rondo::task_local! {
    static NUMBER: u32;
    /// A documented key with a visibility.
    pub(crate) static NAME: String;
}

rondo::task_local! { static FLAG: bool }

#[test]
fn a_scope_sets_the_value_across_awaits_and_workers() {
    watchdog(60, || {
        rt(4).block_on(async {
            let mut set = JoinSet::new();
            for i in 0..64u32 {
                set.spawn(NUMBER.scope(i, async move {
                    for _ in 0..20 {
                        assert_eq!(NUMBER.get(), i);
                        rondo::yield_now().await;
                        rondo::time::sleep(Duration::from_micros(50)).await;
                    }
                    NUMBER.get()
                }));
            }
            let mut sum = 0;
            while let Some(res) = set.join_next().await {
                sum += res.unwrap();
            }
            assert_eq!(sum, 63 * 64 / 2);
        });
    });
}

#[test]
fn the_value_is_unset_outside_the_scope_and_between_polls() {
    assert!(NUMBER.try_with(|_| ()).is_err());
    rondo::block_on(async {
        let mut scoped = std::pin::pin!(NUMBER.scope(1, async {
            rondo::yield_now().await;
            NUMBER.get()
        }));
        // Polled once by hand: the value is set inside, gone again after the poll.
        let first = std::future::poll_fn(|cx| {
            let p = scoped.as_mut().poll(cx);
            std::task::Poll::Ready(p)
        })
        .await;
        assert!(first.is_pending());
        assert!(NUMBER.try_with(|_| ()).is_err());
        assert_eq!(scoped.await, 1);
        assert!(NUMBER.try_with(|_| ()).is_err());
    });
}

#[test]
fn nested_scopes_shadow_and_restore() {
    rondo::block_on(NAME.scope("outer".into(), async {
        NAME.scope("inner".into(), async {
            assert_eq!(NAME.with(|n| n.clone()), "inner");
            rondo::yield_now().await;
            assert_eq!(NAME.with(|n| n.clone()), "inner");
        })
        .await;
        assert_eq!(NAME.with(|n| n.clone()), "outer");
        NAME.sync_scope("sync".into(), || {
            assert_eq!(NAME.with(|n| n.clone()), "sync");
        });
        assert_eq!(NAME.with(|n| n.clone()), "outer");
    }));
    assert!(NAME.try_with(|_| ()).is_err());
}

#[test]
fn keys_are_independent() {
    let (n, f) = NUMBER.sync_scope(3, || FLAG.sync_scope(true, || (NUMBER.get(), FLAG.get())));
    assert_eq!((n, f), (3, true));
    assert!(FLAG.sync_scope(false, || NUMBER.try_with(|_| ()).is_err()));
}

#[test]
fn with_outside_a_scope_panics_with_a_clear_message() {
    let err = catch_unwind(|| NUMBER.with(|n| *n)).unwrap_err();
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()).unwrap());
    assert!(msg.contains("outside its scope"), "{msg}");
    let err = NUMBER.try_with(|n| *n).unwrap_err();
    assert!(err.to_string().contains("not set"));
}

#[test]
fn a_panicking_poll_restores_the_outer_value() {
    NUMBER.sync_scope(10, || {
        let mut inner = Box::pin(NUMBER.scope(20, async {
            assert_eq!(NUMBER.get(), 20);
            panic!("inside the scope");
        }));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let r = catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(&mut cx)));
        assert!(r.is_err());
        assert_eq!(NUMBER.get(), 10);
    });
    // A panicking `sync_scope` closure too.
    let r = catch_unwind(|| NUMBER.sync_scope(1, || panic!("sync")));
    assert!(r.is_err());
    assert!(NUMBER.try_with(|_| ()).is_err());
}

#[test]
fn the_inner_future_is_dropped_with_the_value_set() {
    struct ReadsOnDrop(Arc<AtomicBool>);
    impl Drop for ReadsOnDrop {
        fn drop(&mut self) {
            self.0.store(
                NUMBER.try_with(|n| *n == 5).unwrap_or(false),
                Ordering::SeqCst,
            );
        }
    }
    let saw = Arc::new(AtomicBool::new(false));
    let guard = ReadsOnDrop(saw.clone());
    let fut = NUMBER.scope(5, async move {
        let _g = guard;
        std::future::pending::<()>().await;
    });
    drop(fut);
    assert!(saw.load(Ordering::SeqCst));
    assert!(NUMBER.try_with(|_| ()).is_err());
}

#[test]
fn a_scope_on_another_task_does_not_leak_into_this_one() {
    watchdog(60, || {
        rt(1).block_on(async {
            let other = rondo::spawn(NUMBER.scope(99, async {
                for _ in 0..10 {
                    rondo::yield_now().await;
                }
            }));
            let me = rondo::spawn(async {
                let seen = Cell::new(false);
                for _ in 0..10 {
                    seen.set(seen.get() | NUMBER.try_with(|_| ()).is_ok());
                    rondo::yield_now().await;
                }
                seen.get()
            });
            other.await.unwrap();
            assert!(!me.await.unwrap());
        });
    });
}

#[test]
fn try_get_and_take_value() {
    rondo::task_local! { static N: u64; }
    assert!(N.try_get().is_err());
    rondo::block_on(async {
        let mut scoped = std::pin::pin!(N.scope(5, async { N.try_get() }));
        assert_eq!(scoped.as_mut().take_value(), Some(5));
        assert_eq!(scoped.as_mut().take_value(), None);
        assert!(
            scoped.await.is_err(),
            "the value was taken out of the scope"
        );
        assert_eq!(N.scope(6, async { N.try_get() }).await, Ok(6));
    });
}
