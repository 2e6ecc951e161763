//! Where readiness wakes are dispatched with the `io` feature: on the worker sleeping in the
//! reactor, not on async-io's fallback thread. In a file of its own: async-io has one reactor per
//! process, and the runtimes of other tests would compete for it.
#![cfg(not(any(loom, miri)))]

mod common;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use async_io::Async;
use common::{builder, watchdog};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

const MS: Duration = Duration::from_millis(1);

/// Wraps a future's waker so that every wake records the name of the thread it happens on.
struct RecordWakes<F> {
    fut: Pin<Box<F>>,
    names: Arc<Mutex<Vec<String>>>,
}

struct Recorder {
    inner: Waker,
    names: Arc<Mutex<Vec<String>>>,
}

impl Wake for Recorder {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.names.lock().unwrap().push(name);
        self.inner.wake_by_ref();
    }
}

impl<F: Future> Future for RecordWakes<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::new(Recorder {
            inner: cx.waker().clone(),
            names: self.names.clone(),
        }));
        self.fut.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

/// A task awaits a readable socket while the workers are idle; a foreign thread writes to the
/// peer. The wake must come from the worker sleeping in the reactor, not from async-io's thread.
#[test]
fn readiness_wakes_are_dispatched_on_a_worker_when_workers_are_idle() {
    const ROUNDS: usize = 40;
    for workers in [1, 2, 4] {
        let names = watchdog(60, move || {
            let rt = builder(workers).thread_name("io-wake").build().unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut ack = [0u8; 1];
                for i in 0..ROUNDS {
                    // Long enough for every worker to park, short enough that async-io's
                    // thread keeps backing off instead of queueing for the reactor.
                    std::thread::sleep(2 * MS);
                    s.write_all(&[i as u8]).unwrap();
                    s.read_exact(&mut ack).unwrap();
                }
            });
            let names = Arc::new(Mutex::new(Vec::new()));
            let n = names.clone();
            rt.block_on(rt.spawn(async move {
                let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
                let mut b = [0u8; 1];
                for _ in 0..ROUNDS {
                    let readable = RecordWakes {
                        fut: Box::pin(s.readable()),
                        names: n.clone(),
                    };
                    readable.await.unwrap();
                    s.read_exact(&mut b).await.unwrap();
                    s.write_all(&b).await.unwrap();
                }
            }))
            .unwrap();
            peer.join().unwrap();
            names.lock().unwrap().clone()
        });
        let on_workers = names.iter().filter(|n| n.starts_with("io-wake")).count();
        let on_fallback = names.iter().filter(|n| *n == "async-io").count();
        eprintln!(
            "{workers} workers: {on_workers} of {} wakes on a worker",
            names.len()
        );
        // The first wake after a long idle stretch may be async-io's (it queues for the reactor
        // then), and a loaded machine may delay a worker past async-io's back-off: most, not all.
        assert!(
            on_workers * 2 > names.len(),
            "{workers} workers: {on_workers} of {} readiness wakes on a worker, {on_fallback} on \
             async-io's thread: {names:?}",
            names.len()
        );
    }
}
