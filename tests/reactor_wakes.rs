//! Readiness wakes dispatched by a worker waiting in the reactor (feature `io`): a task of a due
//! group runs on that worker, without the lane; a group that is not due keeps its share; no wake
//! is lost among many sockets. In a file of its own, its tests one at a time: async-io has one
//! reactor per process, and runtimes running at once would compete for it.
#![cfg(not(any(loom, miri)))]

mod common;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use async_io::Async;
use common::{spin, watchdog};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

/// The tests of this file run one at a time (see the module docs).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The worker counts every test runs with: fewer workers than CPUs, as many, and more.
const WORKERS: [usize; 4] = [1, 2, 4, 8];

/// Where a wake happened: its thread, and whether that thread is one of the runtime's workers.
#[derive(Clone, Copy, Debug)]
struct WakeAt {
    thread: ThreadId,
    on_worker: bool,
}

/// A wake (where it happened) and the thread of the poll that followed it.
type WakeThenPoll = (WakeAt, ThreadId);

/// Wraps a future's waker: every wake records where it happened, and the next poll records its
/// own thread beside it.
struct Traced<F> {
    fut: Pin<Box<F>>,
    woken: Arc<Mutex<Option<WakeAt>>>,
    log: Arc<Mutex<Vec<WakeThenPoll>>>,
    worker_prefix: &'static str,
}

struct Recorder {
    inner: Waker,
    woken: Arc<Mutex<Option<WakeAt>>>,
    worker_prefix: &'static str,
}

impl Wake for Recorder {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let t = std::thread::current();
        let on_worker = t.name().is_some_and(|n| n.starts_with(self.worker_prefix));
        *self.woken.lock().unwrap() = Some(WakeAt {
            thread: t.id(),
            on_worker,
        });
        self.inner.wake_by_ref();
    }
}

impl<F: Future> Future for Traced<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if let Some(at) = self.woken.lock().unwrap().take() {
            self.log
                .lock()
                .unwrap()
                .push((at, std::thread::current().id()));
        }
        let waker = Waker::from(Arc::new(Recorder {
            inner: cx.waker().clone(),
            woken: self.woken.clone(),
            worker_prefix: self.worker_prefix,
        }));
        self.fut.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

fn runtime(workers: usize, name: &str) -> rondo::Runtime {
    rondo::Runtime::builder()
        .worker_threads(workers)
        .thread_name(name)
        .build()
        .unwrap()
}

/// A task in a group of its own awaits a readable socket `rounds` times while the other workers
/// idle; a foreign thread writes to the peer every 2 ms. Returns each wake with the thread of the
/// poll after it, and the lane takes of the runtime's workers.
fn wakes_and_polls(workers: usize, rounds: usize) -> (Vec<WakeThenPoll>, u64) {
    watchdog(60, move || {
        let rt = runtime(workers, "rw-here");
        let group = rt.group().name("conn").build().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut ack = [0u8; 1];
            for i in 0..rounds {
                std::thread::sleep(Duration::from_millis(2));
                s.write_all(&[i as u8]).unwrap();
                s.read_exact(&mut ack).unwrap();
            }
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let task = group.spawn(async move {
            let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
            let mut b = [0u8; 1];
            for _ in 0..rounds {
                let readable = Traced {
                    fut: Box::pin(s.readable()),
                    woken: Arc::new(Mutex::new(None)),
                    log: l.clone(),
                    worker_prefix: "rw-here",
                };
                readable.await.unwrap();
                s.read_exact(&mut b).await.unwrap();
                s.write_all(&b).await.unwrap();
            }
        });
        rt.block_on(task).unwrap();
        peer.join().unwrap();
        let lane_takes = rt.metrics().workers.iter().map(|w| w.lane_takes).sum();
        let log = log.lock().unwrap().clone();
        (log, lane_takes)
    })
}

/// A readiness wake dispatched by the worker waiting in the reactor, of a group that is due (idle,
/// at the floor), runs on that worker: the poll after the wake is on the wake's thread, and the
/// task never goes through the lane (where another worker could take it). Only wakes from
/// async-io's own thread, which holds no core, take the lane.
#[test]
fn a_readiness_wake_runs_on_the_worker_that_dispatched_it() {
    let _alone = one_at_a_time();
    for workers in WORKERS {
        let rounds = 60;
        let (log, lane_takes) = wakes_and_polls(workers, rounds);
        assert!(log.len() >= rounds, "{workers} workers: a wake per round");
        let on_worker: Vec<_> = log.iter().filter(|(at, _)| at.on_worker).collect();
        assert!(
            on_worker.len() * 2 >= rounds,
            "{workers} workers: most wakes come from a worker in the reactor: {} of {rounds}",
            on_worker.len()
        );
        let moved = on_worker
            .iter()
            .filter(|(at, poll)| at.thread != *poll)
            .count();
        assert_eq!(
            moved,
            0,
            "{workers} workers: {moved} of {} wakes dispatched on a worker ran elsewhere",
            on_worker.len()
        );
        let off_worker = log.len().saturating_sub(on_worker.len()) as u64;
        // Wakes this test does not trace (the connect's, a read's) may come from async-io's
        // thread too; without the rule, every traced wake took the lane.
        assert!(
            lane_takes <= off_worker + rounds as u64 / 10,
            "{workers} workers: {lane_takes} lane takes, but only {off_worker} wakes came from \
             outside the workers"
        );
    }
}

/// Serves `conns` connections in `group`: each task awaits a byte, burns `work` of CPU, and
/// sends it back, until its peer closes.
fn serve_in(group: &rondo::Group, listener: Async<TcpListener>, conns: usize, work: Duration) {
    group.spawn(async move {
        for _ in 0..conns {
            let (mut s, _) = listener.accept().await.unwrap();
            rondo::spawn(async move {
                let mut b = [0u8; 1];
                while s.read_exact(&mut b).await.is_ok() {
                    spin(work);
                    if s.write_all(&b).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
}

/// Two groups of weights 1 and 4, each serving connections whose foreign peers send one byte at a
/// time as fast as the replies come: the groups' tasks are woken only by readiness, dispatched on
/// the workers, and there is more work than workers. The weight-4 group gets four times the
/// service of the weight-1 group: a wake of a group that is ahead is not run where it was
/// dispatched but queued behind the groups that are due.
#[test]
fn groups_woken_only_by_readiness_keep_their_shares() {
    let _alone = one_at_a_time();
    for workers in WORKERS {
        let ratio = watchdog(60, move || {
            let rt = runtime(workers, "rw-share");
            let light = rt.group().name("w1").weight(1).build().unwrap();
            let heavy = rt.group().name("w4").weight(4).build().unwrap();
            // Enough connections per group to keep every worker busy with either group alone.
            let conns = 2 * workers + 2;
            let work = Duration::from_micros(200);
            let stop = Arc::new(AtomicBool::new(false));
            let replies = Arc::new(AtomicU64::new(0));
            let mut peers = Vec::new();
            for g in [&light, &heavy] {
                let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
                let addr = listener.get_ref().local_addr().unwrap();
                let _guard = rt.enter();
                serve_in(g, listener, conns, work);
                for _ in 0..conns {
                    let (stop, replies) = (stop.clone(), replies.clone());
                    peers.push(std::thread::spawn(move || {
                        let mut s = TcpStream::connect(addr).unwrap();
                        s.set_nodelay(true).unwrap();
                        let mut b = [0u8; 1];
                        while !stop.load(Ordering::Relaxed) {
                            s.write_all(&b).unwrap();
                            s.read_exact(&mut b).unwrap();
                            replies.fetch_add(1, Ordering::Relaxed);
                        }
                    }));
                }
            }
            std::thread::sleep(Duration::from_millis(300));
            let (l0, h0) = (light.metrics().busy, heavy.metrics().busy);
            let r0 = replies.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(2000));
            let (l1, h1) = (light.metrics().busy, heavy.metrics().busy);
            let r1 = replies.load(Ordering::Relaxed);
            stop.store(true, Ordering::Relaxed);
            for p in peers {
                p.join().unwrap();
            }
            assert!(r1 > r0, "{workers} workers: no replies while measured");
            (h1 - h0).as_secs_f64() / (l1 - l0).as_secs_f64().max(1e-9)
        });
        eprintln!("{workers} workers: weight 4 against weight 1: {ratio:.2}");
        // Far from 1, where the weights would be ignored (both groups ask for the same), with
        // room for a loaded machine's noise, which moves the ratio by more than a few percent
        // whichever path the wakes take.
        assert!(
            (2.0..=8.0).contains(&ratio),
            "{workers} workers: the weight-4 group got {ratio:.2} times the weight-1 group's \
             service (4 expected)"
        );
    }
}

/// Many sockets ping-pong between tasks of the runtime, in flat groups, a tenant tree's groups
/// and the default group: every wake is a readiness wake, dispatched by a worker in the reactor
/// or by async-io's thread. All finish: no wake is lost on the way to the worker that runs it.
#[test]
fn many_sockets_ping_pong_without_a_lost_wake() {
    let _alone = one_at_a_time();
    for workers in WORKERS {
        watchdog(60, move || {
            let rt = runtime(workers, "rw-stress");
            let tenant = rt.group().name("tenant").build().unwrap();
            let pairs = 64;
            let rounds = 200;
            let started = Instant::now();
            let mut done = Vec::new();
            for i in 0..pairs {
                let group = match i % 3 {
                    0 => Some(rt.group().build().unwrap()),
                    1 => Some(tenant.child().build().unwrap()),
                    _ => None,
                };
                let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
                let addr = listener.get_ref().local_addr().unwrap();
                let server = async move {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let mut b = [0u8; 8];
                    while s.read_exact(&mut b).await.is_ok() {
                        if s.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                };
                let client = async move {
                    let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
                    let mut b = [0u8; 8];
                    for r in 0..rounds {
                        s.write_all(&u64::to_le_bytes(r)).await.unwrap();
                        s.read_exact(&mut b).await.unwrap();
                        assert_eq!(u64::from_le_bytes(b), r);
                    }
                };
                match &group {
                    Some(g) => {
                        g.spawn(server);
                        done.push(g.spawn(client));
                    }
                    None => {
                        rt.spawn(server);
                        done.push(rt.spawn(client));
                    }
                }
            }
            for d in done {
                rt.block_on(d).unwrap();
            }
            eprintln!(
                "{workers} workers: {pairs} pairs x {rounds} round trips in {:?}",
                started.elapsed()
            );
        });
    }
}
