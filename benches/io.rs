//! Loopback TCP ping-pong (issue 11): rondo against tokio and smol-style async-executor threads.
//!
//! - `64 conns`: 64 connections, each does `ROUND_TRIPS` round trips of 64 bytes (the client
//!   writes 64 bytes, the server's echo task echoes them, the client reads them back); client and
//!   server tasks run on the same runtime. Time per round trip over all of them (throughput).
//! - `1 conn`: one connection doing `LATENCY_ROUND_TRIPS` round trips: the time of one round trip
//!   under light load (latency).
//!
//! Each row also gives the context switches per round trip: voluntary plus involuntary, summed
//! over every thread of the process (`/proc/self/task/*/status`), counted over the timed part.
//!
//! Rows: rondo as built (with the default `io` feature its workers drive the async-io reactor;
//! built with `--no-default-features --features macros` the reactor is left to async-io's own
//! thread, as before the feature), tokio's multi-threaded runtime with its own reactor, and
//! async-executor with one `async_io::block_on(executor.run(..))` per thread (smol's way). Every
//! runtime gets `RONDO_BENCH_WORKERS` threads (2 by default). Runs are interleaved round by round;
//! the median of `ROUNDS` is shown.
//!
//! Run with `cargo bench --bench io` (and again with
//! `cargo bench -p rondo --no-default-features --features macros --bench io`: at the workspace
//! root, feature flags without `-p` are ignored).

mod common;

use std::future::Future;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_io::Async;
use common::{cores, print_table, workers};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

const ROUNDS: usize = 5;
const CONNECTIONS: usize = 64;
const ROUND_TRIPS: usize = 1_000;
const LATENCY_ROUND_TRIPS: usize = 5_000;
const MSG: usize = 64;

type BoxFut = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Context switches so far, summed over every live thread of the process.
fn context_switches() -> u64 {
    let mut n = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                for line in s.lines() {
                    if line.starts_with("voluntary_ctxt_switches:")
                        || line.starts_with("nonvoluntary_ctxt_switches:")
                    {
                        n += line
                            .split_whitespace()
                            .nth(1)
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0);
                    }
                }
            }
        }
    }
    n
}

/// One measurement: time and context switches per round trip.
#[derive(Clone, Copy)]
struct Sample {
    ns: f64,
    switches: f64,
}

/// Runs `body` (which completes `trips` round trips) and measures it.
fn measure(trips: usize, body: impl FnOnce()) -> Sample {
    let cs = context_switches();
    let start = Instant::now();
    body();
    let took = start.elapsed();
    let cs = context_switches() - cs;
    Sample {
        ns: took.as_nanos() as f64 / trips as f64,
        switches: cs as f64 / trips as f64,
    }
}

/// The ping-pong over async-io sockets, with tasks spawned by `spawn`; resolves when every client
/// is done.
async fn async_io_ping_pong(
    spawn: Arc<dyn Fn(BoxFut) -> BoxFut + Send + Sync>,
    conns: usize,
    trips: usize,
) {
    let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
    let addr: SocketAddr = listener.get_ref().local_addr().unwrap();
    let sp = spawn.clone();
    let server = spawn(Box::pin(async move {
        // The echo tasks are awaited, not dropped: dropping an async-executor task cancels it.
        let mut echoes = Vec::with_capacity(conns);
        for _ in 0..conns {
            let (mut s, _) = listener.accept().await.unwrap();
            echoes.push(sp(Box::pin(async move {
                let mut buf = [0u8; MSG];
                while s.read_exact(&mut buf).await.is_ok() {
                    s.write_all(&buf).await.unwrap();
                }
            })));
        }
        for e in echoes {
            e.await;
        }
    }));
    let clients: Vec<_> = (0..conns)
        .map(|_| {
            spawn(Box::pin(async move {
                let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
                let mut buf = [7u8; MSG];
                for _ in 0..trips {
                    s.write_all(&buf).await.unwrap();
                    s.read_exact(&mut buf).await.unwrap();
                }
            }))
        })
        .collect();
    for c in clients {
        c.await;
    }
    server.await;
}

/// The same over tokio's sockets.
async fn tokio_ping_pong(conns: usize, trips: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..conns {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; MSG];
                while s.read_exact(&mut buf).await.is_ok() {
                    s.write_all(&buf).await.unwrap();
                }
            });
        }
    });
    let clients: Vec<_> = (0..conns)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let mut buf = [7u8; MSG];
                for _ in 0..trips {
                    s.write_all(&buf).await.unwrap();
                    s.read_exact(&mut buf).await.unwrap();
                }
            })
        })
        .collect();
    server.await.unwrap();
    for c in clients {
        c.await.unwrap();
    }
}

fn rondo_run(rt: &rondo::Runtime, conns: usize, trips: usize) -> Sample {
    let spawn: Arc<dyn Fn(BoxFut) -> BoxFut + Send + Sync> = Arc::new(|f| {
        let h = rondo::spawn(f);
        Box::pin(async move { h.await.unwrap() })
    });
    measure(conns * trips, || {
        rt.block_on(async { rondo::spawn(async_io_ping_pong(spawn, conns, trips)).await })
            .unwrap()
    })
}

fn tokio_run(rt: &tokio::runtime::Runtime, conns: usize, trips: usize) -> Sample {
    measure(conns * trips, || {
        rt.block_on(async { tokio::spawn(tokio_ping_pong(conns, trips)).await })
            .unwrap()
    })
}

/// async-executor with `workers` threads, each running `async_io::block_on(executor.run(..))`.
struct Smol {
    ex: Arc<async_executor::Executor<'static>>,
    /// Dropping a sender stops its thread.
    stops: Vec<futures::channel::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Smol {
    fn new(workers: usize) -> Self {
        let ex = Arc::new(async_executor::Executor::new());
        let (stops, threads) = (0..workers)
            .map(|i| {
                let (tx, rx) = futures::channel::oneshot::channel::<()>();
                let ex = ex.clone();
                let t = std::thread::Builder::new()
                    .name(format!("smol-{i}"))
                    .spawn(move || {
                        let _ = async_io::block_on(ex.run(rx));
                    })
                    .unwrap();
                (tx, t)
            })
            .unzip();
        Smol { ex, stops, threads }
    }

    fn run(&self, conns: usize, trips: usize) -> Sample {
        let ex = self.ex.clone();
        let spawn: Arc<dyn Fn(BoxFut) -> BoxFut + Send + Sync> =
            Arc::new(move |f| Box::pin(ex.spawn(f)));
        let task = self.ex.spawn(async_io_ping_pong(spawn, conns, trips));
        // The caller waits without driving the reactor: only the executor's threads do.
        measure(conns * trips, || futures::executor::block_on(task))
    }
}

impl Drop for Smol {
    fn drop(&mut self) {
        self.stops.clear();
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

fn median(mut v: Vec<Sample>) -> Sample {
    v.sort_by(|a, b| a.ns.total_cmp(&b.ns));
    v[v.len() / 2]
}

fn main() {
    let workers = workers();
    let io = if cfg!(feature = "io") {
        "io: workers drive the reactor"
    } else {
        "io off: async-io's thread drives the reactor"
    };
    println!(
        "Loopback TCP ping-pong, {MSG}-byte messages, {workers} worker threads per runtime, {} \
         cores; rondo built with {io}; median of {ROUNDS} interleaved rounds",
        cores()
    );
    let rondo_rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let smol = Smol::new(workers);
    let cases = [
        ("64 conns", CONNECTIONS, ROUND_TRIPS),
        ("1 conn", 1, LATENCY_ROUND_TRIPS),
    ];
    let mut rows = Vec::new();
    for (name, conns, trips) in cases {
        // A warm-up round each, unmeasured.
        rondo_run(&rondo_rt, conns, trips / 10);
        tokio_run(&tokio_rt, conns, trips / 10);
        smol.run(conns, trips / 10);
        let (mut r, mut t, mut s) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            r.push(rondo_run(&rondo_rt, conns, trips));
            t.push(tokio_run(&tokio_rt, conns, trips));
            s.push(smol.run(conns, trips));
            std::thread::sleep(Duration::from_millis(20));
        }
        let rondo_name = if cfg!(feature = "io") {
            "rondo (io)"
        } else {
            "rondo (io off)"
        };
        for (who, v) in [
            (rondo_name, r),
            ("tokio", t),
            ("async-executor + async-io", s),
        ] {
            let m = median(v);
            rows.push(vec![
                name.to_string(),
                who.to_string(),
                format!("{:.0}", m.ns),
                format!("{:.3}", m.switches),
            ]);
        }
    }
    print_table(
        &[
            "case",
            "runtime",
            "ns per round trip",
            "context switches per round trip",
        ],
        &rows,
    );
}
