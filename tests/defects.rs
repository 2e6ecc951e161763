//! Regression tests for the defects the runtime review found (the core hand-off issue), each named
//! after what it proves. Cases that used to abort the process run in a child process (the test
//! binary re-executed with one test selected), so an abort fails one test, not the whole suite.

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{rt, spin, spinner, watchdog};

/// Runs the test `name` of this binary in a child process with `RONDO_CHILD=1`, and fails if the
/// child does not exit successfully within `secs` (its output is shown).
fn in_child(name: &str, secs: u64) {
    if std::env::var_os("RONDO_CHILD").is_some() {
        unreachable!("in_child is only called by the parent");
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("RONDO_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(
                status.success(),
                "child `{name}` failed ({status}):\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "child `{name}` hung for {secs} s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_child() -> bool {
    std::env::var_os("RONDO_CHILD").is_some()
}

/// The body of a child-process test: runs `body` in the child, and the child from the parent.
macro_rules! child_test {
    ($name:ident, $secs:expr, $body:block) => {
        #[test]
        fn $name() {
            if is_child() {
                $body
            } else {
                in_child(stringify!($name), $secs);
            }
        }
    };
}

// Defect 1: nested block_on inversion. A's block_on waited under B's frame (or the reverse) on the
// same thread, and neither could finish.
child_test!(
    nested_block_on_inversion_completes_on_one_and_two_workers,
    60,
    {
        for workers in [1, 2] {
            let rt = rt(workers);
            let (to_a, rx_a) = futures::channel::oneshot::channel::<u32>();
            let (to_b, rx_b) = futures::channel::oneshot::channel::<u32>();
            let a = rt.spawn(async move {
                let v = rondo::block_on(rx_a).unwrap();
                to_b.send(v + 1).unwrap();
                v
            });
            let b = rt.spawn(async move {
                to_a.send(1).unwrap();
                rondo::block_on(rx_b).unwrap()
            });
            assert_eq!(rt.block_on(a).unwrap(), 1);
            assert_eq!(rt.block_on(b).unwrap(), 2);
        }
    }
);

fn recurse(depth: u32) -> u32 {
    if depth == 0 {
        return 0;
    }
    let h = rondo::spawn(async move { recurse(depth - 1) + 1 });
    rondo::block_on(h).unwrap()
}

// Defect 1: tasks that each call block_on recursively used to stack every level on one thread.
child_test!(recursive_nested_block_on_completes, 120, {
    for workers in [1, 2] {
        let rt = rt(workers);
        let h = rt.spawn(async { recurse(5_000) });
        assert_eq!(rt.block_on(h).unwrap(), 5_000);
    }
});

/// Defect 2: a runtime dropped with pending, queued and grouped tasks frees everything it owns:
/// a value captured by the panic hook is released with it.
#[test]
fn a_dropped_runtime_frees_its_shared_state() {
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            let witness = Arc::new(());
            let w = witness.clone();
            let rt = rondo::Runtime::builder()
                .worker_threads(workers)
                .on_task_panic(move |_| {
                    let _ = &w;
                })
                .build()
                .unwrap();
            let g = rt.group().name("g").weight(3).build().unwrap();
            let strand = rt.group().max_concurrency(1).build().unwrap();
            let mut hs = Vec::new();
            for _ in 0..20 {
                hs.push(rt.spawn(std::future::pending::<()>()));
                hs.push(g.spawn(std::future::pending::<()>()));
                hs.push(strand.spawn(async { rondo::yield_now().await }));
            }
            // Queued behind a busy worker.
            for _ in 0..20 {
                g.spawn(async { spin(Duration::from_micros(100)) });
            }
            drop(rt);
            drop((g, strand, hs));
            assert_eq!(
                Arc::strong_count(&witness),
                1,
                "the runtime leaked with {workers} workers"
            );
        });
    }
}

/// Defect 3: a worker stuck in one poll no longer pins the fairness floor. Group B arrives while
/// group A has been running on the free worker; the two must share it, instead of B taking it all
/// until it has "caught up" with A's service.
#[test]
fn a_stuck_worker_does_not_freeze_the_fairness_floor() {
    watchdog(60, || {
        let rt = common::rt_at_least(2, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let stuck = rt.group().name("stuck").build().unwrap();
        let a = rt.group().name("a").build().unwrap();
        let b = rt.group().name("b").build().unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let blocker = stuck.spawn(async move {
            started_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(900));
        });
        started_rx.recv().unwrap();
        let (at, bt) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut hs: Vec<_> = (0..4)
            .map(|_| a.spawn(spinner(at.clone(), stop.clone())))
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let a_before = at.load(Ordering::SeqCst);
        hs.extend((0..4).map(|_| b.spawn(spinner(bt.clone(), stop.clone()))));
        std::thread::sleep(Duration::from_millis(250));
        stop.store(true, Ordering::SeqCst);
        let (a_ns, b_ns) = (
            (at.load(Ordering::SeqCst) - a_before) as f64,
            bt.load(Ordering::SeqCst) as f64,
        );
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
            blocker.await.unwrap();
        });
        // Ideal 50:50 (measured before the fix: 0.5 ms against 199.5 ms).
        let share = a_ns / (a_ns + b_ns);
        assert!(
            (0.2..=0.8).contains(&share),
            "group a got {a_ns} ns and group b {b_ns} ns while a worker was stuck"
        );
    });
}

/// Runs its closure when the thread's thread-locals are destroyed.
struct RunOnDrop(std::cell::RefCell<Option<Box<dyn FnOnce()>>>);
impl Drop for RunOnDrop {
    fn drop(&mut self) {
        if let Some(f) = self.0.borrow_mut().take() {
            f();
        }
    }
}

thread_local! {
    static TRIGGER: RunOnDrop = const { RunOnDrop(std::cell::RefCell::new(None)) };
}

// Defect 4: waking or spawning from a thread-local destructor, after rondo's own thread-locals on
// that thread were destroyed, aborted the process.
child_test!(
    waking_and_spawning_from_a_thread_local_destructor_is_safe,
    60,
    {
        let rt = rt(2);
        let handle = rt.handle().clone();
        let (waker_tx, waker_rx) = mpsc::channel::<Waker>();
        let woken = Arc::new(AtomicBool::new(false));
        let w2 = woken.clone();
        let idle = rt.spawn(std::future::poll_fn(move |cx| {
            if w2.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            let _ = waker_tx.send(cx.waker().clone());
            Poll::Pending
        }));
        let waker = waker_rx.recv().unwrap();
        let spawned = Arc::new(AtomicBool::new(false));
        let s2 = spawned.clone();
        let (w3, h2) = (woken.clone(), handle.clone());
        std::thread::spawn(move || {
            // Registered first, so destroyed last: after rondo's thread-locals on this thread.
            TRIGGER.with(|t| {
                *t.0.borrow_mut() = Some(Box::new(move || {
                    w3.store(true, Ordering::SeqCst);
                    waker.wake();
                    drop(h2.spawn(async move { s2.store(true, Ordering::SeqCst) }));
                    drop(rondo::spawn(async {}));
                }))
            });
            // Initialise rondo's thread-locals on this thread.
            h2_block_on(&handle);
        })
        .join()
        .unwrap();
        rt.block_on(idle).unwrap();
        assert!(common::eventually(10, || spawned.load(Ordering::SeqCst)));
    }
);

fn h2_block_on(handle: &rondo::Handle) {
    handle.block_on(async {
        rondo::spawn(async {}).await.unwrap();
        rondo::yield_now().await;
    });
}

struct PanicOnDrop(&'static str);
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("{}", self.0);
    }
}

fn counting_runtime(workers: usize) -> (rondo::Runtime, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .on_task_panic(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    (rt, seen)
}

// Defect 5: a detached task's output whose destructor panics, and a panic payload whose
// destructor panics, killed the process.
child_test!(panicking_output_and_payload_destructors_are_caught, 60, {
    let (rt, seen) = counting_runtime(2);
    for _ in 0..10 {
        drop(rt.spawn(async {
            rondo::yield_now().await;
            PanicOnDrop("output destructor")
        }));
        drop(rt.spawn(async {
            rondo::yield_now().await;
            std::panic::panic_any(PanicOnDrop("payload destructor"));
        }));
    }
    assert!(common::eventually(10, || seen.load(Ordering::SeqCst) >= 20));
    // The workers still serve.
    assert_eq!(rt.block_on(rt.spawn(async { 5 })).unwrap(), 5);
});

/// Defect 5: dropping a `JoinHandle` whose finished task's output panics in its destructor used to
/// raise that panic in the dropping thread; it goes to the panic hook instead.
#[test]
fn dropping_a_handle_to_a_panicking_output_does_not_panic_the_caller() {
    let (rt, seen) = counting_runtime(1);
    let h = rt.spawn(async { PanicOnDrop("output") });
    while !h.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = catch_unwind(AssertUnwindSafe(move || drop(h)));
    assert!(
        r.is_ok(),
        "dropping the handle raised the destructor's panic"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
}

/// Defect 6: a `JoinHandle` polled again after it returned `Ready` panics with a clear message
/// instead of claiming the task was cancelled.
#[test]
fn a_join_handle_polled_after_ready_panics_clearly() {
    let rt = rt(1);
    let mut h = rt.spawn(async { 3 });
    let mut cx = Context::from_waker(Waker::noop());
    let first = loop {
        if let Poll::Ready(v) = Pin::new(&mut h).poll(&mut cx) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(first.unwrap(), 3);
    let again = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut h).poll(&mut cx)));
    let msg = panic_text(again.expect_err("a second poll must panic"));
    assert!(msg.contains("polled after it returned Ready"), "{msg}");
}

/// The text of a panic's payload ("" if it is not text).
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Counts its polls and stays pending.
struct CountPolls(Arc<AtomicUsize>);
impl Future for CountPolls {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Poll::Pending
    }
}

/// Defect 7: `abort` after completion woke whichever task had reused the finished task's registry
/// slot.
#[test]
fn abort_after_completion_wakes_no_other_task() {
    watchdog(30, || {
        let rt = rt(1);
        let g = rt.group().build().unwrap();
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        // Registers (returns Pending once), then completes.
        let done = g.spawn(async move { rx.await.unwrap() });
        std::thread::sleep(Duration::from_millis(20));
        tx.send(()).unwrap();
        while !done.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Takes the freed slot.
        let polls = Arc::new(AtomicUsize::new(0));
        let other = g.spawn(CountPolls(polls.clone()));
        assert!(common::eventually(5, || polls.load(Ordering::SeqCst) == 1));
        done.abort();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(polls.load(Ordering::SeqCst), 1, "abort woke another task");
        other.abort();
    });
}

// Defect 8: a 1 MiB future spawned from a task and from `block_on` overflowed the stack.
child_test!(
    a_one_mib_future_can_be_spawned_from_a_task_and_from_block_on,
    60,
    {
        fn big() -> impl Future<Output = usize> + Send + 'static {
            let buf = [7u8; 1 << 20];
            async move {
                rondo::yield_now().await;
                std::hint::black_box(&buf).iter().map(|&b| b as usize).sum()
            }
        }
        let rt = rt(2);
        let from_task = rt.block_on(rt.spawn(async { rondo::spawn(big()).await.unwrap() }));
        assert_eq!(from_task.unwrap(), 7 << 20);
        let from_block_on = rt.block_on(async { rondo::spawn(big()).await.unwrap() });
        assert_eq!(from_block_on, 7 << 20);
    }
);

/// Defect 9: `rondo::spawn` held a thread-local borrow while a refused task's future was dropped,
/// so a destructor that calls `block_on` panicked.
#[test]
fn a_refused_futures_destructor_may_call_block_on() {
    struct BlockOnInDrop(Arc<AtomicBool>);
    impl Drop for BlockOnInDrop {
        fn drop(&mut self) {
            rondo::block_on(async {});
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let rt = rt(1);
    let handle = rt.handle().clone();
    drop(rt);
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let mut spawned = None;
    handle.block_on(async {
        let guard = BlockOnInDrop(d);
        spawned = Some(rondo::spawn(async move {
            let _g = guard;
        }));
    });
    let h = spawned.unwrap();
    assert!(dropped.load(Ordering::SeqCst));
    assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
}

/// Defect 10: every task spawned while a runtime is being dropped is either run or dropped, and
/// its handle resolves; none is stranded in a queue nobody drains (a stress over many drops).
#[test]
fn spawns_racing_a_runtime_drop_are_never_stranded() {
    for workers in [1, 2, 4, 8] {
        watchdog(120, move || {
            for _ in 0..30 {
                let rt = rt(workers);
                let strand = rt.group().max_concurrency(1).build().unwrap();
                let handle = rt.handle().clone();
                let drops = common::DropCount::new();
                let stop = Arc::new(AtomicBool::new(false));
                let spawners: Vec<_> = (0..2)
                    .map(|i| {
                        let (handle, strand, drops, stop) =
                            (handle.clone(), strand.clone(), drops.clone(), stop.clone());
                        std::thread::spawn(move || {
                            let mut hs = Vec::new();
                            while !stop.load(Ordering::Relaxed) {
                                let g = drops.guard();
                                hs.push(if i == 0 {
                                    handle.spawn(async move { drop(g) })
                                } else {
                                    strand.spawn(async move { drop(g) })
                                });
                            }
                            hs
                        })
                    })
                    .collect();
                std::thread::sleep(Duration::from_millis(2));
                drop(rt);
                stop.store(true, Ordering::SeqCst);
                let mut total = 0;
                for s in spawners {
                    for h in s.join().unwrap() {
                        total += 1;
                        assert!(
                            h.is_finished(),
                            "a task spawned during the drop is stranded"
                        );
                    }
                }
                assert_eq!(drops.get(), total, "every future dropped exactly once");
            }
        });
    }
}

/// Defect 11: dropping a runtime always reaches every parked worker (many short-lived runtimes,
/// dropped while their workers are parking).
#[test]
fn dropping_runtimes_while_workers_park_never_hangs() {
    watchdog(120, || {
        for i in 0..300 {
            let rt = rt(1 + i % 8);
            if i % 2 == 0 {
                rt.block_on(async { rondo::spawn(async {}).await.unwrap() });
            }
            drop(rt);
        }
    });
}

/// The nested `block_on` runs the awaited task inline when it has not started and sits in this
/// core's queues: no other thread takes part.
#[test]
fn nested_block_on_runs_an_unstarted_local_child_inline() {
    let rt = rt(1);
    let h = rt.spawn(async {
        let me = std::thread::current().id();
        let child = rondo::spawn(async { std::thread::current().id() });
        let ran_on = rondo::block_on(child).unwrap();
        (me, ran_on, std::thread::current().id())
    });
    let (me, child, after) = rt.block_on(h).unwrap();
    assert_eq!(me, child, "the child ran inline on the waiting thread");
    assert_eq!(me, after);
}

/// A nested `block_on` that must wait hands its core over: the other tasks keep running on the
/// single worker's core while this thread waits.
#[test]
fn nested_block_on_hands_the_core_over_while_it_waits() {
    watchdog(30, || {
        let rt = rt(1);
        let (tx, rx) = futures::channel::oneshot::channel::<u32>();
        let waiter = rt.spawn(async move { rondo::block_on(rx).unwrap() });
        std::thread::sleep(Duration::from_millis(20));
        // Runs on the core while the waiter's thread blocks.
        let sender = rt.spawn(async move { tx.send(9).unwrap() });
        rt.block_on(sender).unwrap();
        assert_eq!(rt.block_on(waiter).unwrap(), 9);
    });
}

/// `Runtime::enter` makes `rondo::spawn` from plain code target the chosen runtime.
#[test]
fn enter_selects_the_runtime_for_plain_spawns() {
    let rt = rondo::Runtime::builder()
        .worker_threads(1)
        .thread_name("entered")
        .build()
        .unwrap();
    {
        let _g = rt.enter();
        let h = rondo::spawn(async { std::thread::current().name().map(String::from) });
        assert_eq!(rondo::block_on(h).unwrap().as_deref(), Some("entered-0"));
        assert!(rondo::Handle::try_current().is_some());
    }
    assert!(rondo::Handle::try_current().is_none());
}

/// A value whose destructor runs `f`: the cleanup a cancelled task's future does when dropped.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// An aborted task's future is dropped by a worker as a poll would end it: with the core lent and
/// the task's group current. Its destructor once ran with neither, so a `block_on` there parked
/// the worker while it kept its core (the runtime froze, and so did dropping it), and a spawn
/// there went to the default group.
#[test]
fn a_cancelled_tasks_destructor_may_block_on_and_spawns_into_its_group() {
    watchdog(30, || {
        let rt = common::rt(1);
        let group = rt.group().name("tenant").build().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let guard = OnDrop(move || {
            let name = rondo::block_on(rondo::spawn(async {
                rondo::current_group().unwrap().name().to_string()
            }));
            s.lock().unwrap().push(name.unwrap());
        });
        let (_keep, never) = futures::channel::oneshot::channel::<()>();
        let h = group.spawn(async move {
            let _guard = guard;
            let _ = never.await;
        });
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
        assert_eq!(*seen.lock().unwrap(), vec![String::from("tenant")]);
        // The runtime still runs tasks, and drops.
        assert_eq!(rt.block_on(rt.spawn(async { 7 })).unwrap(), 7);
        drop(rt);
    });
}

/// A cancelled task's destructor that blocks is watched like a poll that blocks: the stall
/// monitor hands the core's queues to another thread, which runs the other tasks meanwhile.
#[test]
fn a_cancelled_tasks_blocking_destructor_is_rescued() {
    watchdog(30, || {
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .stall_threshold(Duration::from_millis(5))
            .build()
            .unwrap();
        let other_ran = Arc::new(AtomicBool::new(false));
        let seen_by_destructor = Arc::new(AtomicBool::new(false));
        let (o, s) = (other_ran.clone(), seen_by_destructor.clone());
        let guard = OnDrop(move || {
            // Blocks its thread until the other task ran (at most 5 s).
            let end = Instant::now() + Duration::from_secs(5);
            while !o.load(Ordering::SeqCst) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
            s.store(o.load(Ordering::SeqCst), Ordering::SeqCst);
        });
        let (_keep, never) = futures::channel::oneshot::channel::<()>();
        let h = rt.spawn(async move {
            let _guard = guard;
            let _ = never.await;
        });
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        let o = other_ran.clone();
        let other = rt.spawn(async move { o.store(true, Ordering::SeqCst) });
        rt.block_on(other).unwrap();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
        assert!(
            seen_by_destructor.load(Ordering::SeqCst),
            "the other task waited for the blocking destructor"
        );
    });
}

/// Cancelling the default group (what `current_group` returns in a plain spawn) once cancelled
/// every later plain spawn on the runtime for good; it is refused with a message that says what
/// to do instead, and the runtime keeps spawning.
#[test]
fn the_default_group_cannot_be_cancelled() {
    watchdog(30, || {
        let rt = rt(1);
        let g = rt
            .block_on(rt.spawn(async { rondo::current_group().unwrap() }))
            .unwrap();
        assert_eq!(g.name(), "default");
        let msg = panic_text(catch_unwind(AssertUnwindSafe(|| g.cancel())).unwrap_err());
        assert!(msg.contains("default group cannot be cancelled"), "{msg}");
        assert!(!g.is_cancelled());
        assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
        // A group of one's own still cancels.
        let own = rt.group().build().unwrap();
        let h = own.spawn(std::future::pending::<()>());
        own.cancel();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
    });
}

/// Enter guards dropped out of order once left the first runtime current after both guards were
/// gone (a plain spawn then went to a dropped runtime and came back cancelled); the misuse now
/// panics, and guards dropped in order leave no runtime current.
#[test]
fn enter_guards_dropped_out_of_order_panic() {
    watchdog(30, || {
        let a = rt(1);
        let b = rt(1);
        // On a thread of its own: what is current after the misuse is not specified.
        let (ha, hb) = (a.handle().clone(), b.handle().clone());
        let misuse = std::thread::spawn(move || {
            let ga = ha.enter();
            let gb = hb.enter();
            let msg = panic_text(catch_unwind(AssertUnwindSafe(move || drop(ga))).unwrap_err());
            std::mem::forget(gb);
            msg
        });
        let msg = misuse.join().unwrap();
        assert!(msg.contains("reverse order"), "{msg}");
        let ga = a.enter();
        let gb = b.enter();
        drop(gb);
        drop(ga);
        assert!(rondo::Handle::try_current().is_none());
    });
}

/// Inside a task the runtime polling it stays current under another runtime's enter guard, as
/// `Handle::enter` documents: `Handle::current` and `rondo::spawn` name the task's runtime.
#[test]
fn inside_a_task_the_polling_runtime_stays_current_under_an_enter_guard() {
    watchdog(30, || {
        let a = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let b = rondo::Runtime::builder().worker_threads(3).build().unwrap();
        let hb = b.handle().clone();
        let seen = a
            .block_on(a.spawn(async move {
                let (current, spawned) = {
                    let _g = hb.enter();
                    let current = rondo::Handle::current().worker_count();
                    let spawned = rondo::spawn(async { rondo::Handle::current().worker_count() });
                    (current, spawned)
                };
                (current, spawned.await.unwrap())
            }))
            .unwrap();
        assert_eq!(seen, (1, 1));
    });
}

/// A nested `block_on` whose future panics while it holds its worker's core (before any hand-off)
/// gives the core back as it unwinds: the task in the core's LIFO slot still runs, later tasks
/// run, and the runtime drops. The unwind once dropped the core: its LIFO task came back
/// cancelled, the worker never ran again, and dropping the runtime hung.
#[test]
fn a_nested_block_on_that_panics_keeps_its_worker() {
    watchdog(30, || {
        let rt = rt(2);
        let seven = rt.block_on(rt.spawn(async {
            // Lands in this worker's LIFO slot.
            let child = rondo::spawn(async { 7 });
            let r = catch_unwind(AssertUnwindSafe(|| {
                rondo::block_on(async { panic!("a panic in a nested block_on") })
            }));
            assert!(r.is_err());
            child.await
        }));
        assert_eq!(seven.unwrap().unwrap(), 7);
        // Uncaught in the task: its handle gets the panic, and the worker goes on.
        let one = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let h = one.spawn(async { rondo::block_on(async { panic!("uncaught") }) });
        assert!(one.block_on(h).unwrap_err().is_panic());
        assert_eq!(one.block_on(one.spawn(async { 3 })).unwrap(), 3);
        drop(one);
        drop(rt);
    });
}

/// A `Scoped` polled again after it returned `Ready` panicked with `JoinHandle`'s message, naming
/// a type the caller never held; its message names `Scoped` and says what to do.
#[test]
fn a_scoped_polled_after_ready_panics_naming_scoped() {
    let rt = rt(1);
    let g = rt.group().build().unwrap();
    let mut s = g.scope(async { 3 });
    let mut cx = Context::from_waker(Waker::noop());
    let first = loop {
        if let Poll::Ready(v) = Pin::new(&mut s).poll(&mut cx) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(first.unwrap(), 3);
    let again = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut s).poll(&mut cx)));
    let msg = panic_text(again.expect_err("a second poll must panic"));
    assert!(
        msg.starts_with("Scoped polled after it returned Ready"),
        "{msg}"
    );
    assert!(!msg.contains("JoinHandle"), "{msg}");
}

/// A waker that counts nothing: what matters is who holds it (`Arc::strong_count`).
struct Held;
impl std::task::Wake for Held {
    fn wake(self: Arc<Self>) {}
}

/// A `JoinHandle` polled `Pending` and then dropped (a `select` or `timeout` that gave up on it)
/// left its waker registered in the task, which kept it, and the polling task and group it
/// belongs to, until the task completed, possibly never. Dropping the handle now releases it.
#[test]
fn a_join_handle_dropped_after_pending_releases_its_waker() {
    watchdog(30, || {
        let rt = rt(2);
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let mut h = rt.spawn(rx);
        let w = Arc::new(Held);
        let waker = Waker::from(w.clone());
        assert!(
            Pin::new(&mut h)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(waker);
        drop(h);
        assert_eq!(
            Arc::strong_count(&w),
            1,
            "the unfinished task still holds the dropped handle's waker"
        );
        // The detached task still runs to its end.
        let g = rt.group().build().unwrap();
        let probe = g.spawn(async {});
        rt.block_on(probe).unwrap();
        tx.send(()).unwrap();
    });
}

/// A future refused by a cancelled group is dropped unpolled on the spawning thread, and a
/// cancelled future wherever it ends up dropped (a closed queue at shutdown, a worker): its
/// destructor is the task's code and runs with the task's group current, as in a poll. So a
/// `rondo::spawn` there goes to that group (refused too) instead of the spawner's context: from
/// plain code, the global runtime, which used to start and run the cleanup there; from a task of
/// another group, that group.
#[test]
fn a_refused_futures_destructor_spawns_into_its_own_group() {
    watchdog(30, || {
        let rt = common::rt(2);
        let closed = rt.group().name("closed").build().unwrap();
        closed.cancel();
        // What each destructor saw: its current group, and whether its spawn was refused.
        type Seen = Arc<std::sync::Mutex<Vec<(Option<String>, bool)>>>;
        let seen: Seen = Default::default();
        let spawned_ran = Arc::new(AtomicUsize::new(0));
        let probe = |seen: &Seen| {
            let (seen, ran) = (seen.clone(), spawned_ran.clone());
            OnDrop(move || {
                let name = rondo::current_group().map(|g| g.name().to_string());
                let ran = ran.clone();
                let h = rondo::spawn(async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
                seen.lock().unwrap().push((name, h.is_finished()));
            })
        };
        // From plain code.
        let guard = probe(&seen);
        let h = closed.spawn(async move {
            let _guard = guard;
        });
        assert!(futures::executor::block_on(h).unwrap_err().is_cancelled());
        // From a task of another group.
        let other = rt.group().name("other").build().unwrap();
        let guard = probe(&seen);
        let c = closed.clone();
        let cancelled = rt
            .block_on(other.spawn(async move {
                let refused = c.spawn(async move {
                    let _guard = guard;
                });
                refused.await.unwrap_err().is_cancelled()
            }))
            .unwrap();
        assert!(cancelled);
        rt.block_on(other.wait_idle());
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(spawned_ran.load(Ordering::SeqCst), 0);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(Some(String::from("closed")), true); 2]
        );
    });
}
