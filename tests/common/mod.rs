//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `f` on its own thread and fails the test if it does not finish within `secs` seconds: a
/// lost wakeup or a deadlock becomes a failure instead of a hung test run.
pub fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            t.join().unwrap();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!(),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("timed out after {secs} s: a lost wakeup or a deadlock")
        }
    }
}

pub fn rt(workers: usize) -> rondo::Runtime {
    rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap()
}

/// Busy-waits for `d` (simulates CPU work without sleeping).
pub fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// Counts drops; clone it into futures to check each is dropped exactly once.
#[derive(Clone)]
pub struct DropCount(pub Arc<AtomicUsize>);

impl DropCount {
    pub fn new() -> Self {
        DropCount(Arc::new(AtomicUsize::new(0)))
    }
    pub fn guard(&self) -> DropGuard {
        DropGuard(self.0.clone())
    }
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

pub struct DropGuard(Arc<AtomicUsize>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `cond` every millisecond until it holds or `secs` pass; false on timeout.
pub fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}
