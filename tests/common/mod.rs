//! Helpers shared by the integration tests.
#![allow(dead_code)]

#[macro_use]
pub mod child;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
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

/// A runtime with `workers` workers. A test that asks for several workers gets
/// `RONDO_TEST_WORKERS` of them instead when that is set (CI runs the suites again with 4 and 8, so
/// the cores are oversubscribed); a single-worker runtime stays single.
pub fn rt(workers: usize) -> rondo::Runtime {
    rt_at_least(workers, 1)
}

/// Like [`rt`], but never fewer than `min` workers (for tests that need one worker stuck and
/// another free).
pub fn rt_at_least(workers: usize, min: usize) -> rondo::Runtime {
    builder_at_least(workers, min).build().unwrap()
}

/// A builder for a runtime with `workers` workers, counted as [`rt`] counts them.
pub fn builder(workers: usize) -> rondo::Builder {
    builder_at_least(workers, 1)
}

fn builder_at_least(workers: usize, min: usize) -> rondo::Builder {
    let workers = match std::env::var("RONDO_TEST_WORKERS") {
        Ok(n) if workers > 1 => n
            .parse()
            .expect("RONDO_TEST_WORKERS must be a whole number of workers"),
        _ => workers,
    }
    .max(min);
    rondo::Runtime::builder().worker_threads(workers)
}

/// A runtime with exactly `workers` workers (not [`rt`]'s count) whose panic hook counts the panics
/// it is told of, with that count.
pub fn counting_runtime(workers: usize) -> (rondo::Runtime, Arc<AtomicUsize>) {
    let reported = Arc::new(AtomicUsize::new(0));
    let r = reported.clone();
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .on_task_panic(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    (rt, reported)
}

/// The text of a panic's payload ("" if it is not text).
pub fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A value whose destructor runs `f`: the cleanup a cancelled task's future does when dropped.
pub struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// The CPU time the calling thread has burned (Linux's per-thread CPU clock): what rondo charges
/// a group for, where wall time also counts the time the system preempted the thread.
pub fn thread_cpu() -> Duration {
    #[repr(C)]
    struct Timespec {
        tv_sec: std::ffi::c_long,
        tv_nsec: std::ffi::c_long,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: std::ffi::c_int, tp: *mut Timespec) -> std::ffi::c_int;
    }
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the C library's `clock_gettime` (clock 3 is `CLOCK_THREAD_CPUTIME_ID` on Linux)
    // writes one `struct timespec`, two `long`s, into `ts`, which is valid for the call.
    let rc = unsafe { clock_gettime(3, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy-waits for `d` (simulates CPU work without sleeping).
pub fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// A task body that spins 50 µs at a time, yielding between, until `stop`, and adds each slice's
/// wall time to `total` (what its group is charged for).
pub async fn spinner(total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        spin(Duration::from_micros(50));
        total.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        rondo::yield_now().await;
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

/// A waker that counts how often it was woken.
pub struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A future under manual control, with its own counting waker.
pub struct Probe<F: Future> {
    fut: Pin<Box<F>>,
    count: Arc<Counter>,
    waker: Waker,
}

impl<F: Future> Probe<F> {
    pub fn new(fut: F) -> Self {
        let count = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        Probe {
            fut: Box::pin(fut),
            count,
            waker,
        }
    }
    pub fn poll(&mut self) -> Poll<F::Output> {
        self.fut
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
    }
    pub fn pending(&mut self) {
        assert!(self.poll().is_pending(), "expected the future to wait");
    }
    pub fn ready(&mut self) -> F::Output {
        match self.poll() {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("expected the future to be ready"),
        }
    }
    pub fn wakes(&self) -> usize {
        self.count.0.load(Ordering::SeqCst)
    }
}

/// Spawns `n` tasks on `rt` that each block their worker's thread for `d` (a plain
/// `std::thread::sleep`, no `block_in_place`), and waits until `min(n, at_least)` of them have
/// started. Returns their handles.
#[allow(dead_code)]
pub fn spawn_blocking_sleepers(
    rt: &rondo::Runtime,
    n: usize,
    d: Duration,
    at_least: usize,
) -> Vec<rondo::JoinHandle<()>> {
    let started = Arc::new(AtomicUsize::new(0));
    let sleepers: Vec<_> = (0..n)
        .map(|_| {
            let started = started.clone();
            rt.spawn(async move {
                started.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(d);
            })
        })
        .collect();
    while started.load(Ordering::SeqCst) < n.min(at_least) {
        std::thread::sleep(Duration::from_millis(1));
    }
    sleepers
}

/// Spawns a task that spins on a worker until the returned flag is set, and waits until it runs.
pub fn hold_a_worker(rt: &rondo::Runtime) -> (Arc<AtomicBool>, rondo::JoinHandle<()>) {
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let task = {
        let (started, release) = (started.clone(), release.clone());
        rt.spawn(async move {
            started.store(true, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
    };
    assert!(eventually(10, || started.load(Ordering::SeqCst)));
    (release, task)
}

/// A waker whose `clone` drops `held` (the first clone does; later ones find it gone): a
/// contrived but legal waker, since cloning runs the waker's own code. Holding a permit or guard
/// of the primitive it is about to wait on, it checks that the primitive never clones a waker
/// under its internal mutex (the release would lock it again and deadlock).
#[allow(dead_code)]
pub fn waker_releasing_on_clone(held: Box<dyn Send>) -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable, Waker};
    type Slot = std::sync::Mutex<Option<Box<dyn Send>>>;
    const VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, drop_slot);
    fn raw(slot: *const Slot) -> RawWaker {
        RawWaker::new(slot.cast(), &VTABLE)
    }
    unsafe fn clone(data: *const ()) -> RawWaker {
        // SAFETY: `data` is the `Arc<Slot>` pointer this vtable was made with, still alive: the
        // waker being cloned holds one count of it.
        let slot = unsafe { Arc::from_raw(data.cast::<Slot>()) };
        drop(slot.lock().unwrap().take());
        let copy = Arc::clone(&slot);
        std::mem::forget(slot);
        raw(Arc::into_raw(copy))
    }
    unsafe fn noop(_: *const ()) {}
    unsafe fn drop_slot(data: *const ()) {
        // SAFETY: each waker made with this vtable owns one count of the `Arc<Slot>` at `data`.
        drop(unsafe { Arc::from_raw(data.cast::<Slot>()) });
    }
    let slot: Arc<Slot> = Arc::new(std::sync::Mutex::new(Some(held)));
    // SAFETY: the vtable's functions keep the `Arc` count balanced (one count per waker) and
    // are thread-safe (the slot is behind a `Mutex`).
    unsafe { Waker::from_raw(raw(Arc::into_raw(slot))) }
}

/// Polls `fut` once with a waker that owns `held`, expecting it to wait, and keeps no copy of
/// that waker: the primitive's copy (in the waiter's node) is the last, so dropping it drops
/// `held`, say a permit or guard of the same primitive, whose release locks its internal mutex.
#[allow(dead_code)]
pub fn wait_with_last_waker_holding<F: std::future::Future>(
    fut: std::pin::Pin<&mut F>,
    held: Box<dyn Send>,
) {
    struct Holding(#[allow(dead_code)] std::sync::Mutex<Option<Box<dyn Send>>>);
    impl std::task::Wake for Holding {
        fn wake(self: Arc<Self>) {}
    }
    let waker = std::task::Waker::from(Arc::new(Holding(std::sync::Mutex::new(Some(held)))));
    let pending = fut
        .poll(&mut std::task::Context::from_waker(&waker))
        .is_pending();
    assert!(pending, "the waiter did not wait");
}
