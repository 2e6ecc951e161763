//! Misuse cases that aborted the process or hung in the audit of issue 13, each run in a child
//! process so that an abort or a hang fails one test, not the whole suite.
//!
//! Each test re-executes this test binary with `RONDO_MISUSE_CASE` naming itself and an exact
//! name filter. In the child the case's body runs as an ordinary test; the parent waits at most
//! [`CHILD_LIMIT`], kills a child that is still running, and fails with the child's output unless
//! the child passed exactly that one test.
#![cfg(not(loom))]

mod common;

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{eventually, rt};
use futures::channel::oneshot;

const CASE_VAR: &str = "RONDO_MISUSE_CASE";
const CHILD_LIMIT: Duration = Duration::from_secs(30);

/// Runs `body` when this process is the child for `name`; otherwise runs the child and checks it.
fn in_child(name: &str, body: fn()) {
    if std::env::var(CASE_VAR).as_deref() == Ok(name) {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("cannot find the test binary to re-execute");
    let mut child = Command::new(exe)
        .args([
            name,
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CASE_VAR, name)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the child process");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let verdict = match status {
        None => format!("hung: killed after {CHILD_LIMIT:?}"),
        Some(s) if s.success() && out.contains("test result: ok. 1 passed") => return,
        Some(s) if s.success() => "the child ran no test: check the case's name".to_string(),
        Some(s) => {
            use std::os::unix::process::ExitStatusExt;
            match s.signal() {
                Some(sig) => format!("aborted: killed by signal {sig}"),
                None => format!("failed: {s}"),
            }
        }
    };
    panic!(
        "misuse case `{name}` {verdict}\n--- child stdout ---\n{out}\n--- child stderr ---\n{err}"
    );
}

/// Declares a test whose body runs in a child process.
macro_rules! misuse_case {
    ($(#[$attr:meta])* fn $name:ident() $body:block) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            in_child(stringify!($name), || $body);
        }
    };
}

/// A runtime whose panic hook counts reports.
fn counting_runtime(workers: usize) -> (rondo::Runtime, Arc<AtomicUsize>) {
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

/// A value whose destructor panics (unless the thread is already unwinding).
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("misuse: a destructor panicked");
        }
    }
}

/// Task A blocks on a message from B, then answers; B sends to A, then blocks on A's answer.
fn block_on_inversion(workers: usize) {
    let rt = rt(workers);
    let (to_a, rx_a) = oneshot::channel::<u32>();
    let (to_b, rx_b) = oneshot::channel::<u32>();
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

misuse_case! {
    // Today: hangs.
    fn nested_block_on_inversion_with_1_worker() {
        block_on_inversion(1);
    }
}

misuse_case! {
    // Today: hangs.
    fn nested_block_on_inversion_with_2_workers() {
        block_on_inversion(2);
    }
}

/// Each level spawns the next and waits for it with a nested `block_on`.
fn recurse(depth: u32) -> u32 {
    if depth == 0 {
        return 0;
    }
    rondo::block_on(rondo::spawn(async move { recurse(depth - 1) })).unwrap() + 1
}

/// Sixteen tasks, each recursing 50 levels deep through nested `block_on`s.
fn recursive_block_on(workers: usize) {
    let rt = rt(workers);
    let hs: Vec<_> = (0..16).map(|_| rt.spawn(async { recurse(50) })).collect();
    for h in hs {
        assert_eq!(rt.block_on(h).unwrap(), 50);
    }
}

misuse_case! {
    fn recursive_nested_block_on_of_depth_50_with_1_worker() {
        recursive_block_on(1);
    }
}

misuse_case! {
    fn recursive_nested_block_on_of_depth_50_with_2_workers() {
        recursive_block_on(2);
    }
}

/// Spawns a task that waits in a nested `block_on` on a channel no task of `rt` will ever send
/// on; returns once the task waits, with its handle and the channel's sender.
fn wait_outside(
    rt: &rondo::Runtime,
    drops: &common::DropCount,
) -> (rondo::JoinHandle<u32>, oneshot::Sender<u32>) {
    let (outside_tx, outside_rx) = oneshot::channel::<u32>();
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let g = drops.guard();
    let h = rt.spawn(async move {
        let _g = g;
        started_tx.send(()).unwrap();
        rondo::block_on(outside_rx).unwrap()
    });
    rt.block_on(started_rx).unwrap();
    (h, outside_tx)
}

misuse_case! {
    fn dropping_the_runtime_while_a_nested_block_on_waits_outside() {
        let drops = common::DropCount::new();
        let rt = rt(1);
        let (h, outside_tx) = wait_outside(&rt, &drops);
        // Drop on another thread; the outside event fires while the drop is under way.
        let dropper = std::thread::spawn(move || drop(rt));
        std::thread::sleep(Duration::from_millis(200));
        let _ = outside_tx.send(7);
        dropper.join().unwrap();
        match futures::executor::block_on(h) {
            Ok(v) => assert_eq!(v, 7),
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        }
        assert_eq!(drops.get(), 1, "the task's future must be dropped exactly once");
    }
}

misuse_case! {
    fn shutdown_timeout_while_a_nested_block_on_waits_outside() {
        let drops = common::DropCount::new();
        let rt = rt(2);
        let (h, outside_tx) = wait_outside(&rt, &drops);
        // The outside event has not fired: shutdown_timeout must still return.
        rt.shutdown_timeout(Duration::from_millis(200));
        let _ = outside_tx.send(7);
        assert!(
            eventually(10, || drops.get() == 1),
            "the task's future must be dropped exactly once, dropped {} times",
            drops.get()
        );
        match futures::executor::block_on(h) {
            Ok(v) => assert_eq!(v, 7),
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        }
        assert_eq!(drops.get(), 1);
    }
}

misuse_case! {
    // Today: aborts.
    fn a_detached_tasks_output_whose_drop_panics() {
        let (rt, reported) = counting_runtime(1);
        drop(rt.spawn(async { PanicsOnDrop }));
        assert!(
            eventually(10, || reported.load(Ordering::SeqCst) == 1),
            "the destructor's panic should be reported to on_task_panic"
        );
        assert_eq!(rt.block_on(rt.spawn(async { 5 })).unwrap(), 5, "the worker must survive");
    }
}

misuse_case! {
    fn a_detached_blocking_closures_output_whose_drop_panics() {
        let (rt, reported) = counting_runtime(1);
        drop(rt.spawn_blocking(|| {
            std::thread::sleep(Duration::from_millis(20));
            PanicsOnDrop
        }));
        assert!(
            eventually(5, || reported.load(Ordering::SeqCst) == 1),
            "the destructor's panic should be reported to on_task_panic"
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(reported.load(Ordering::SeqCst), 1, "reported once");
        assert_eq!(rt.block_on(rt.spawn_blocking(|| 5)).unwrap(), 5, "the pool must survive");
    }
}

misuse_case! {
    // Today: aborts.
    fn a_panic_payload_whose_drop_panics() {
        let (rt, reported) = counting_runtime(1);
        drop(rt.spawn(async { std::panic::panic_any(PanicsOnDrop) }));
        assert!(eventually(10, || reported.load(Ordering::SeqCst) >= 1));
        assert_eq!(rt.block_on(rt.spawn(async { 5 })).unwrap(), 5, "the worker must survive");
    }
}

misuse_case! {
    // Today: panics in the caller.
    fn a_join_handle_dropped_after_completion_does_not_raise_the_outputs_drop_panic() {
        let rt = rt(1);
        let h = rt.spawn(async { PanicsOnDrop });
        assert!(eventually(10, || h.is_finished()));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(h)));
        assert!(r.is_ok(), "dropping the JoinHandle raised the output's destructor panic");
        assert_eq!(rt.block_on(rt.spawn(async { 5 })).unwrap(), 5);
    }
}

/// On thread exit, wakes the stored task and spawns a task through the handle and through
/// `rondo::spawn`.
struct OnThreadExit {
    waker: Option<std::task::Waker>,
    handle: Option<rondo::Handle>,
    spawned: Option<futures::channel::mpsc::UnboundedSender<&'static str>>,
}

impl Drop for OnThreadExit {
    fn drop(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
        if let (Some(h), Some(tx)) = (self.handle.take(), self.spawned.take()) {
            let t = tx.clone();
            drop(h.spawn(async move {
                let _ = t.unbounded_send("handle");
            }));
            drop(rondo::spawn(async move {
                let _ = tx.unbounded_send("global");
            }));
        }
    }
}

thread_local! {
    static ON_EXIT: std::cell::RefCell<Option<OnThreadExit>> = const { std::cell::RefCell::new(None) };
}

misuse_case! {
    // Today: aborts.
    fn waking_and_spawning_from_a_thread_local_destructor() {
        use futures::StreamExt;
        let rt = rt(2);
        let (waker_tx, waker_rx) = std::sync::mpsc::channel();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        // A task that parks its waker and completes once woken.
        let task = rt.spawn(std::future::poll_fn(move |cx: &mut Context<'_>| {
            if w.load(Ordering::SeqCst) > 0 {
                return Poll::Ready(());
            }
            w.fetch_add(1, Ordering::SeqCst);
            waker_tx.send(cx.waker().clone()).unwrap();
            Poll::Pending
        }));
        let waker = waker_rx.recv().unwrap();
        let (spawned_tx, mut spawned_rx) = futures::channel::mpsc::unbounded();
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let h = handle.clone();
            ON_EXIT.with(|s| {
                *s.borrow_mut() = Some(OnThreadExit {
                    waker: Some(waker),
                    handle: Some(handle),
                    spawned: Some(spawned_tx),
                })
            });
            // Touch the runtime's own thread-locals after ours: thread-local destructors run in
            // reverse order, so the runtime's are gone when ours runs.
            h.block_on(async {});
            assert!(rondo::Handle::try_current().is_none());
        })
        .join()
        .unwrap();
        rt.block_on(task).unwrap();
        let mut seen: Vec<&str> = rt.block_on(async {
            vec![spawned_rx.next().await.unwrap(), spawned_rx.next().await.unwrap()]
        });
        seen.sort();
        assert_eq!(seen, ["global", "handle"]);
    }
}

/// A future that keeps 1 MiB of state across a suspension point.
async fn big_future() -> u64 {
    let buf = [1u8; 1 << 20];
    rondo::yield_now().await;
    buf.iter().map(|&b| u64::from(b)).sum::<u64>()
}

misuse_case! {
    // Today: aborts: stack overflow.
    fn a_1_mib_future_spawned_from_a_task() {
        let rt = rt(2);
        let h = rt.spawn(async { rondo::spawn(big_future()).await.unwrap() });
        assert_eq!(rt.block_on(h).unwrap(), 1 << 20);
    }
}

misuse_case! {
    // Today: aborts: stack overflow.
    fn a_1_mib_future_spawned_from_block_on() {
        let rt = rt(2);
        let v = rt.block_on(async { rondo::spawn(big_future()).await.unwrap() });
        assert_eq!(v, 1 << 20);
    }
}

misuse_case! {
    // Today: returns Err(cancelled).
    fn a_join_handle_polled_again_after_ready_panics_clearly() {
        let rt = rt(1);
        let mut h = rt.spawn(async { 3 });
        assert!(eventually(10, || h.is_finished()));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        match Pin::new(&mut h).poll(&mut cx) {
            Poll::Ready(r) => assert_eq!(r.unwrap(), 3),
            Poll::Pending => panic!("a finished task's handle must be ready"),
        }
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Pin::new(&mut h).poll(&mut cx)
        }));
        let payload = match again {
            Err(p) => p,
            Ok(r) => panic!("a second poll after Ready must panic, it returned {r:?}"),
        };
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(msg.contains("after"), "unclear panic message: {msg:?}");
    }
}

misuse_case! {
    // Today: wakes the other task.
    fn abort_after_completion_does_not_wake_an_unrelated_task() {
        let rt = rt(1);
        let g = rt.group().name("slots").build().unwrap();
        // A completed task whose handle is kept: its registry slot is free for the next task.
        // It waits once, so it takes a registry slot, and frees it when it completes.
        let finished = g.spawn(async {
            rondo::yield_now().await;
            2
        });
        assert!(eventually(10, || finished.is_finished()));
        // A task that is polled once, then waits with no waker stored anywhere: only a
        // spurious wake can poll it again.
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        let idle = g.spawn(std::future::poll_fn(move |_cx: &mut Context<'_>| {
            p.fetch_add(1, Ordering::SeqCst);
            Poll::<()>::Pending
        }));
        assert!(eventually(10, || polls.load(Ordering::SeqCst) == 1));
        finished.abort();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "aborting a completed task woke an unrelated one"
        );
        assert_eq!(rt.block_on(finished).unwrap(), 2, "the output is kept");
        idle.abort();
        assert!(rt.block_on(idle).unwrap_err().is_cancelled());
    }
}

/// Recursion that keeps 1 KiB of stack per level.
fn deep(n: u32) -> u32 {
    let buf = [n as u8; 1024];
    let r = if n == 0 { 0 } else { deep(n - 1) };
    std::hint::black_box(&buf);
    r + buf[0] as u32
}

misuse_case! {
    // In a child: a stack overflow aborts the process.
    fn deep_recursion_in_a_blocking_closure_gets_the_thread_stack_size() {
        // About 9 MiB of stack: more than a default thread has, well within 64 MiB.
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .thread_stack_size(64 << 20)
            .build()
            .unwrap();
        let expected: u32 = (0..=8 * 1024u32).map(|k| k % 256).sum();
        assert_eq!(rt.block_on(rt.spawn(async { deep(8 * 1024) })).unwrap(), expected);
        assert_eq!(rt.block_on(rt.spawn_blocking(|| deep(8 * 1024))).unwrap(), expected);
    }
}
