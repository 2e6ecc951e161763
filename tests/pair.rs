//! The concurrent/exclusive pair (`GroupBuilder::build_pair`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{spin, watchdog};

/// Counts the polls of the pair in progress, and records any overlap an exclusive poll sees.
#[derive(Default)]
struct Overlap {
    concurrent: AtomicUsize,
    exclusive: AtomicUsize,
    most_concurrent: AtomicUsize,
    violations: AtomicUsize,
}

impl Overlap {
    fn concurrent_poll(&self, d: Duration) {
        let now = self.concurrent.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_concurrent.fetch_max(now, Ordering::SeqCst);
        if self.exclusive.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        spin(d);
        self.concurrent.fetch_sub(1, Ordering::SeqCst);
    }

    fn exclusive_poll(&self, d: Duration) {
        if self.exclusive.fetch_add(1, Ordering::SeqCst) != 0
            || self.concurrent.load(Ordering::SeqCst) != 0
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        spin(d);
        if self.concurrent.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        self.exclusive.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn an_exclusive_poll_never_overlaps_another_poll_of_its_pair() {
    watchdog(60, || {
        for workers in [1, 2, 4, 8] {
            let rt = rondo::Runtime::builder()
                .worker_threads(workers)
                .build()
                .unwrap();
            let pair = rt.group().build_pair().unwrap();
            let o = Arc::new(Overlap::default());
            let mut hs = Vec::new();
            for i in 0..200 {
                let o = o.clone();
                if i % 5 == 0 {
                    hs.push(pair.exclusive().spawn(async move {
                        for _ in 0..3 {
                            o.exclusive_poll(Duration::from_micros(30));
                            rondo::yield_now().await;
                        }
                    }));
                } else {
                    hs.push(pair.concurrent().spawn(async move {
                        for _ in 0..3 {
                            o.concurrent_poll(Duration::from_micros(30));
                            rondo::yield_now().await;
                        }
                    }));
                }
            }
            // Other groups' work beside it: the pair's rule holds under load.
            let other = rt.group().build().unwrap();
            for _ in 0..50 {
                hs.push(other.spawn(async {
                    spin(Duration::from_micros(50));
                }));
            }
            rt.block_on(async {
                for h in hs {
                    h.await.unwrap();
                }
            });
            assert_eq!(
                o.violations.load(Ordering::SeqCst),
                0,
                "{workers} workers: an exclusive poll overlapped another poll of its pair"
            );
        }
    });
}

#[test]
fn concurrent_polls_overlap() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(4).build().unwrap();
        let pair = rt.group().build_pair().unwrap();
        let o = Arc::new(Overlap::default());
        let hs: Vec<_> = (0..16)
            .map(|_| {
                let o = o.clone();
                pair.concurrent()
                    .spawn(async move { o.concurrent_poll(Duration::from_millis(20)) })
            })
            .collect();
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
        });
        assert!(
            o.most_concurrent.load(Ordering::SeqCst) >= 2,
            "concurrent polls never overlapped"
        );
    });
}

#[test]
fn max_concurrency_bounds_the_concurrent_side() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(4).build().unwrap();
        let pair = rt.group().max_concurrency(2).build_pair().unwrap();
        let o = Arc::new(Overlap::default());
        let hs: Vec<_> = (0..16)
            .map(|_| {
                let o = o.clone();
                pair.concurrent()
                    .spawn(async move { o.concurrent_poll(Duration::from_millis(5)) })
            })
            .collect();
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
        });
        assert!(o.most_concurrent.load(Ordering::SeqCst) <= 2);
    });
}

#[test]
fn exclusive_work_goes_first_when_both_sides_wait() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
        let pair = rt.group().build_pair().unwrap();
        let release = Arc::new(AtomicBool::new(false));
        // A concurrent task holds the gate while both sides queue up behind it.
        let r = release.clone();
        let holder = pair.concurrent().spawn(async move {
            while !r.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut hs = Vec::new();
        // Alternately, an exclusive task first: from then on an exclusive task waits.
        for i in 0..5 {
            let o = order.clone();
            hs.push(
                pair.exclusive()
                    .spawn(async move { o.lock().unwrap().push(format!("x{i}")) }),
            );
            let o = order.clone();
            hs.push(
                pair.concurrent()
                    .spawn(async move { o.lock().unwrap().push(format!("c{i}")) }),
            );
        }
        std::thread::sleep(Duration::from_millis(20));
        release.store(true, Ordering::SeqCst);
        rt.block_on(holder).unwrap();
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
        });
        let order = order.lock().unwrap().clone();
        let first_concurrent = order.iter().position(|s| s.starts_with('c')).unwrap();
        assert!(
            order[..first_concurrent].len() == 5,
            "exclusive work did not go first: {order:?}"
        );
    });
}

#[test]
fn a_pair_under_a_cancelled_group_is_an_error() {
    let rt = common::rt(1);
    let g = rt.group().build().unwrap();
    g.cancel();
    let err = g.child().build_pair().unwrap_err();
    assert_eq!(err.kind(), rondo::group::GroupErrorKind::Cancelled);
    assert!(err.to_string().contains("cancelled"), "{err}");
    let err = rt.group().max_concurrency(0).build_pair().unwrap_err();
    assert_eq!(err.kind(), rondo::group::GroupErrorKind::InvalidConcurrency);
    let err = rt.group().weight(0).build_pair().unwrap_err();
    assert_eq!(err.kind(), rondo::group::GroupErrorKind::InvalidWeight);
}

#[test]
fn cancelling_the_pair_cancels_both_sides() {
    watchdog(30, || {
        let rt = common::rt(2);
        let pair = rt.group().build_pair().unwrap();
        let a = pair.concurrent().spawn(std::future::pending::<()>());
        let b = pair.exclusive().spawn(std::future::pending::<()>());
        pair.group().cancel();
        assert!(rt.block_on(a).unwrap_err().is_cancelled());
        assert!(rt.block_on(b).unwrap_err().is_cancelled());
    });
}
