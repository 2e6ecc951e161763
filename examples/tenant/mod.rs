//! The multi-tenant HTTP server and its load driver, shared by `examples/tenant_server.rs`,
//! `tests/hyper.rs` and `benches/http.rs` (they include this file with `#[path]`; each uses part of
//! it, hence the `dead_code` allowance).
//!
//! The server answers two tenants, told apart by the path: `/a/...` is tenant A, `/b/...` tenant B.
//! A path ending in `/work` burns [`WORK`] of CPU before answering (the heavy endpoint); anything
//! else answers at once (the light endpoint). The same routes run on three servers: rondo (with a
//! group per tenant, or everything in the default group), tokio and smol (async-executor threads
//! over async-io), all hyper 1.x HTTP/1.1 on loopback.
//!
//! The load driver is plain blocking `std::net::TcpStream` clients on threads sending keep-alive
//! HTTP/1.1 requests, so it shares no runtime with the server under test. Every loop it runs is
//! bounded in time and every socket has a read timeout.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use async_io::Async;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use smol_hyper::rt::FuturesIo;

/// The CPU the heavy endpoint burns per request, busy-waiting (a sleep would free the worker).
pub const WORK: Duration = Duration::from_millis(1);

/// How long a load client waits for a response before giving up: a bound, not an expectation.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Busy-waits for `d`.
pub fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The slices of the yielding heavy endpoint (`/steps`): it burns [`WORK`] in this many parts and
/// yields between them, as a CPU-heavy handler written for a cooperative runtime does (tokio's
/// guidance is 10 to 100 µs between yields), so no poll runs much longer than a slice.
pub const STEPS: u32 = 10;

/// The answer to `path`; `yield_now` makes the runtime's yield future (or one that does nothing,
/// where the handler is a task of its own).
///
/// The heavy endpoint (`/work`) first yields to its runtime once: without it, hyper's connection
/// task goes on to the connection's next request in the same poll when one has arrived (its
/// dispatcher serves up to 16 before it yields, and sockets from outside the runtime spend none
/// of the runtime's cooperative budget), so a single poll would burn many milliseconds for one
/// tenant while the other's requests wait, and on rondo the stall monitor would count the worker
/// as stuck. Its [`WORK`] then runs in one poll, as a handler that calls a long computation does.
/// The yielding heavy endpoint (`/steps`) burns the same CPU in [`STEPS`] slices with a yield
/// before each.
async fn respond<F: Future<Output = ()>>(
    path: &str,
    yield_now: impl Fn() -> F,
) -> Response<Full<Bytes>> {
    if path.ends_with("/work") {
        yield_now().await;
        spin(WORK);
        Response::new(Full::new(Bytes::from_static(b"worked")))
    } else if path.ends_with("/steps") {
        for _ in 0..STEPS {
            yield_now().await;
            spin(WORK / STEPS);
        }
        Response::new(Full::new(Bytes::from_static(b"worked")))
    } else {
        Response::new(Full::new(Bytes::from_static(b"hello")))
    }
}

fn unavailable() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"shutting down")));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

// ---------------------------------------------------------------------------------------------
// rondo

/// One group per tenant.
struct Tenants {
    a: rondo::Group,
    b: rondo::Group,
}

impl Tenants {
    fn of(&self, path: &str) -> Option<&rondo::Group> {
        if path.starts_with("/a/") {
            Some(&self.a)
        } else if path.starts_with("/b/") {
            Some(&self.b)
        } else {
            None
        }
    }
}

/// Where the rondo server runs a tenant's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Everything in the runtime's default group: no fairness between tenants.
    OneGroup,
    /// Connections in the default group; each request's handler spawned into its tenant's group
    /// and awaited. Works whatever a connection carries, at the price of two more trips through
    /// the run queues per request (to the handler and back).
    PerRequest,
    /// Each connection in its tenant's group, chosen from its first request line, read with
    /// `peek` before hyper sees it: later requests on the connection are charged to the same
    /// tenant. One trip through the run queues per request.
    PerConnection,
    /// As `PerConnection`, with each tenant's group capped at one poll fewer than there are
    /// workers (`Group::max_concurrency`, at least 1): a tenant's flood never holds every worker,
    /// so another tenant's request finds one free however long the flood's polls are, at the
    /// price of the flooding tenant's throughput (it gets `workers - 1` workers at most).
    Reserved,
    /// A tree: each tenant a group, each connection a child group of its tenant
    /// (`Group::child`), chosen as in `PerConnection`. Tenants share by weight however many
    /// connections each has, and a tenant's connections share its part among themselves.
    Tree,
}

/// The server on rondo. Dropping it shuts its runtime down, which drops the listener and every
/// connection.
pub struct RondoServer {
    pub addr: SocketAddr,
    rt: rondo::Runtime,
    tenants: Option<Arc<Tenants>>,
}

impl RondoServer {
    /// Starts the server on a free loopback port with `workers` worker threads (named
    /// `srv-rondo-N`); tenant groups have weight 1 each.
    pub fn start(workers: usize, placement: Placement) -> io::Result<RondoServer> {
        Self::start_on(0, workers, placement)
    }

    /// Like [`start`](Self::start), on 127.0.0.1 at `port` (0 picks a free one).
    pub fn start_on(port: u16, workers: usize, placement: Placement) -> io::Result<RondoServer> {
        let builder = rondo::Runtime::builder().worker_threads(workers);
        Self::start_with(port, builder, placement)
    }

    /// Like [`start_on`](Self::start_on), on a runtime built from `builder` (its threads named
    /// here).
    pub fn start_with(
        port: u16,
        builder: rondo::Builder,
        placement: Placement,
    ) -> io::Result<RondoServer> {
        let rt = builder
            .thread_name("srv-rondo")
            .build()
            .map_err(io::Error::other)?;
        let workers = rt.handle().worker_count();
        let tenants = if placement == Placement::OneGroup {
            None
        } else {
            let cap = (placement == Placement::Reserved).then(|| workers.saturating_sub(1).max(1));
            let group = |name: &str| {
                let g = rt.group().name(name);
                let g = match cap {
                    Some(n) => g.max_concurrency(n),
                    None => g,
                };
                g.build().map_err(io::Error::other)
            };
            Some(Arc::new(Tenants {
                a: group("tenant-a")?,
                b: group("tenant-b")?,
            }))
        };
        let listener = Async::<TcpListener>::bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
        let addr = listener.get_ref().local_addr()?;
        rt.spawn(rondo_accept(listener, tenants.clone(), placement));
        Ok(RondoServer { addr, rt, tenants })
    }

    /// Tenant `a` or `b`'s group, when the server runs with groups.
    pub fn group(&self, tenant: char) -> Option<rondo::Group> {
        let t = self.tenants.as_ref()?;
        Some(if tenant == 'a' {
            t.a.clone()
        } else {
            t.b.clone()
        })
    }

    /// The runtime serving the connections.
    pub fn runtime(&self) -> &rondo::Runtime {
        &self.rt
    }
}

/// The accept loop, in the default group.
async fn rondo_accept(
    listener: Async<TcpListener>,
    tenants: Option<Arc<Tenants>>,
    placement: Placement,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, or a connection reset before it was accepted: try again
            // shortly rather than spin on the error or stop serving.
            Err(_) => {
                rondo::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.get_ref().set_nodelay(true);
        let tenants = tenants.clone();
        match placement {
            // A connection's tenant is known only once its first request arrives, and a task
            // cannot move between groups: the connection runs in the default group, and each
            // request's handler in its tenant's.
            Placement::OneGroup | Placement::PerRequest => {
                rondo::spawn(rondo_connection(stream, tenants));
            }
            // The connection's first request line picks its group; the task that waits for it is
            // light and runs in the default group, then the connection is spawned where it
            // belongs, and its handlers run inline.
            Placement::PerConnection | Placement::Reserved | Placement::Tree => {
                rondo::spawn(async move {
                    let tenant = first_request_tenant(&stream).await;
                    let is_b = tenant == Some("/b/");
                    let group = tenant.and_then(|t| tenants.as_deref()?.of(t).cloned());
                    let group = match (placement, group) {
                        // The connection's own group, nested under its tenant's.
                        (Placement::Tree, Some(tenant)) => tenant.child().build().ok(),
                        (_, group) => group,
                    };
                    match group {
                        // B's connection, traced (`trace`).
                        Some(g) if trace::on() && is_b => {
                            let port = stream.get_ref().peer_addr().map_or(0, |a| a.port());
                            drop(g.spawn(trace::Traced {
                                port,
                                fut: Box::pin(rondo_connection(stream, None)),
                            }))
                        }
                        Some(g) => drop(g.spawn(rondo_connection(stream, None))),
                        None => rondo_connection(stream, None).await,
                    }
                });
            }
        }
    }
}

/// The path prefix (`/a/` or `/b/`) of the connection's first request, peeked at without taking
/// it from the socket, or `None` if it does not arrive within 10 s or does not say.
async fn first_request_tenant(stream: &Async<TcpStream>) -> Option<&'static str> {
    rondo::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 32];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            // "GET /a/work HTTP/1.1": the path starts after the method's space.
            let line = &buf[..n];
            let prefix = line
                .iter()
                .position(|&b| b == b' ')
                .and_then(|space| line.get(space + 1..space + 4));
            match prefix {
                Some(b"/a/") => return Some("/a/"),
                Some(b"/b/") => return Some("/b/"),
                Some(_) => return None,
                // A client may send its request line in pieces: the socket stays readable with
                // the piece peeked, so wait a little before looking again rather than spin.
                None if n < buf.len() && !line.contains(&b'\n') => {
                    rondo::time::sleep(Duration::from_micros(50)).await;
                }
                None => return None,
            }
        }
    })
    .await
    .ok()?
}

/// Serves one connection; with `tenants`, each request's handler runs in its tenant's group.
async fn rondo_connection(stream: Async<TcpStream>, tenants: Option<Arc<Tenants>>) {
    let service = service_fn(move |req: Request<Incoming>| {
        let tenants = tenants.clone();
        async move { Ok::<_, Infallible>(rondo_route(req, tenants).await) }
    });
    // A client that goes away mid-request is that connection's business only.
    let _ = http1::Builder::new()
        .timer(rondo::hyper::RondoTimer::new())
        .serve_connection(rondo::hyper::Io::from_async(stream), service)
        .await;
}

/// Runs the request's handler in its tenant's group when there are groups: the connection's task
/// spawns it there and waits for it, so the handler's CPU is charged to the tenant and shares the
/// workers with the other tenants by weight. Otherwise the handler runs inline.
async fn rondo_route(
    req: Request<Incoming>,
    tenants: Option<Arc<Tenants>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    match tenants.as_deref().and_then(|t| t.of(&path)) {
        // Cancelled only when the runtime shuts down under the request.
        // The handler is a task of its own, so the connection's poll already ends at the spawn: it
        // needs no yield.
        Some(group) => group
            .spawn(async move { respond(&path, || async {}).await })
            .await
            .unwrap_or_else(|_| unavailable()),
        None => respond(&path, rondo::yield_now).await,
    }
}

/// Where tenant B's request time goes on the rondo server (with `TENANT_TRACE=1` in the
/// environment; `benches/http.rs` prints it after each tenant run). Each request of B is split at
/// the readiness wake of its connection's task and at that task's next poll: from the client's
/// send to the wake (the reactor's dispatch: who holds the reactor, and how soon it runs), from
/// the wake to the poll (the wait in the run queues), and from the poll to the client's receipt
/// (the handler, the write and the client thread's own wake-up). The wake's thread is recorded:
/// async-io's fallback thread, a worker, or another. Requests are matched by the client's port,
/// the server side's peer port, in one table under a mutex: a diagnostic, not a measurement of
/// throughput.
pub mod trace {
    use super::*;
    use std::collections::HashMap;
    use std::pin::Pin;
    use std::sync::OnceLock;
    use std::task::{Context, Poll, Wake, Waker};

    /// Whether tracing is on (`TENANT_TRACE=1`), read once.
    pub fn on() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        *ON.get_or_init(|| std::env::var("TENANT_TRACE").is_ok_and(|v| v == "1"))
    }

    /// Which thread a wake happened on.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum WokenOn {
        Fallback,
        Worker,
        Other,
    }

    /// One request in flight: when it was sent, woken (and by whom) and polled.
    #[derive(Default, Clone, Copy)]
    struct Stamp {
        send: Option<Instant>,
        wake: Option<(Instant, WokenOn)>,
        poll: Option<Instant>,
    }

    /// The requests in flight, by the client's port.
    fn table() -> &'static Mutex<HashMap<u16, Stamp>> {
        static T: OnceLock<Mutex<HashMap<u16, Stamp>>> = OnceLock::new();
        T.get_or_init(Default::default)
    }

    /// A finished request: send to wake, wake to poll, poll to receipt, in all, and the waker.
    type Sample = (Duration, Duration, Duration, Duration, WokenOn);

    fn samples() -> &'static Mutex<Vec<Sample>> {
        static S: OnceLock<Mutex<Vec<Sample>>> = OnceLock::new();
        S.get_or_init(Default::default)
    }

    /// The client on `port` sends a request now.
    pub fn sent(port: u16) {
        let stamp = Stamp {
            send: Some(Instant::now()),
            ..Default::default()
        };
        table().lock().unwrap().insert(port, stamp);
    }

    /// The client on `port` has its response; kept while `measuring`.
    pub fn received(port: u16, measuring: bool) {
        let now = Instant::now();
        let Some(s) = table().lock().unwrap().remove(&port) else {
            return;
        };
        if let (true, Some(send), Some((wake, by)), Some(poll)) =
            (measuring, s.send, s.wake, s.poll)
        {
            samples().lock().unwrap().push((
                wake.saturating_duration_since(send),
                poll.saturating_duration_since(wake),
                now.saturating_duration_since(poll),
                now - send,
                by,
            ));
        }
    }

    /// Wraps a connection task's waker: its first wake after a send is stamped.
    struct Recorder {
        port: u16,
        inner: Waker,
    }

    impl Wake for Recorder {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref()
        }
        fn wake_by_ref(self: &Arc<Self>) {
            if let Some(s) = table().lock().unwrap().get_mut(&self.port) {
                if s.send.is_some() && s.wake.is_none() {
                    let by = match std::thread::current().name() {
                        Some("async-io") => WokenOn::Fallback,
                        Some(n) if n.starts_with("srv-") => WokenOn::Worker,
                        _ => WokenOn::Other,
                    };
                    s.wake = Some((Instant::now(), by));
                }
            }
            self.inner.wake_by_ref();
        }
    }

    /// A connection task of B, traced: stamps its first poll after a wake.
    pub struct Traced<F> {
        pub port: u16,
        pub fut: Pin<Box<F>>,
    }

    impl<F: Future> Future for Traced<F> {
        type Output = F::Output;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let port = self.port;
            if let Some(s) = table().lock().unwrap().get_mut(&port) {
                if s.wake.is_some() && s.poll.is_none() {
                    s.poll = Some(Instant::now());
                }
            }
            let waker = Waker::from(Arc::new(Recorder {
                port,
                inner: cx.waker().clone(),
            }));
            self.fut.as_mut().poll(&mut Context::from_waker(&waker))
        }
    }

    /// Prints the percentiles of each part, the wakes by thread, and the mean parts of the
    /// slowest 2% of requests; then starts over.
    pub fn report() {
        let mut v = std::mem::take(&mut *samples().lock().unwrap());
        if v.is_empty() {
            return;
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let pct = |f: fn(&Sample) -> Duration, v: &[Sample]| {
            let mut d: Vec<Duration> = v.iter().map(f).collect();
            d.sort_unstable();
            format!(
                "{:.0}/{:.0}",
                us(percentile(&d, 0.5)),
                us(percentile(&d, 0.99))
            )
        };
        let by = |v: &[Sample]| {
            let n = |w| v.iter().filter(|s| s.4 == w).count();
            format!(
                "async-io {} worker {} other {}",
                n(WokenOn::Fallback),
                n(WokenOn::Worker),
                n(WokenOn::Other)
            )
        };
        println!(
            "  trace of {} B requests, p50/p99 in µs: send→wake {}, wake→poll {}, poll→recv {}, \
             total {}; woken on {}",
            v.len(),
            pct(|s| s.0, &v),
            pct(|s| s.1, &v),
            pct(|s| s.2, &v),
            pct(|s| s.3, &v),
            by(&v)
        );
        v.sort_unstable_by_key(|s| std::cmp::Reverse(s.3));
        let top = &v[..(v.len() / 50).max(1)];
        let mean =
            |f: fn(&Sample) -> Duration| us(top.iter().map(f).sum::<Duration>() / top.len() as u32);
        println!(
            "  slowest 2%, means in µs: send→wake {:.0}, wake→poll {:.0}, poll→recv {:.0}, \
             total {:.0}; woken on {}",
            mean(|s| s.0),
            mean(|s| s.1),
            mean(|s| s.2),
            mean(|s| s.3),
            by(top)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// tokio

/// The same routes on tokio's multi-thread runtime (one queue for every task; worker threads
/// named `srv-tokio`).
pub struct TokioServer {
    pub addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl TokioServer {
    pub fn start(workers: usize) -> io::Result<TokioServer> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("srv-tokio")
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(loopback()))?;
        let addr = listener.local_addr()?;
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let service = service_fn(|req: Request<Incoming>| async move {
                        Ok::<_, Infallible>(respond(req.uri().path(), tokio::task::yield_now).await)
                    });
                    let _ = http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(TokioServer { addr, rt: Some(rt) })
    }
}

impl Drop for TokioServer {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// smol

/// The same routes on smol's pieces: an `async_executor::Executor` run by `workers` threads
/// (named `srv-smol-N`), each driving the async-io reactor while it waits, as `smol` does.
pub struct SmolServer {
    pub addr: SocketAddr,
    executor: Option<Arc<async_executor::Executor<'static>>>,
    stops: Vec<futures::channel::oneshot::Sender<()>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl SmolServer {
    pub fn start(workers: usize) -> io::Result<SmolServer> {
        let executor = Arc::new(async_executor::Executor::new());
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        for i in 0..workers {
            let (stop, stopped) = futures::channel::oneshot::channel::<()>();
            let ex = executor.clone();
            threads.push(thread::Builder::new().name(format!("srv-smol-{i}")).spawn(
                move || {
                    async_io::block_on(ex.run(async {
                        let _ = stopped.await;
                    }))
                },
            )?);
            stops.push(stop);
        }
        let listener = Async::<TcpListener>::bind(loopback())?;
        let addr = listener.get_ref().local_addr()?;
        // The accept loop holds the executor weakly: the executor owns the loop's task, and a
        // strong reference would keep both alive forever.
        executor
            .spawn(smol_accept(listener, Arc::downgrade(&executor)))
            .detach();
        Ok(SmolServer {
            addr,
            executor: Some(executor),
            stops,
            threads,
        })
    }
}

async fn smol_accept(
    listener: Async<TcpListener>,
    executor: Weak<async_executor::Executor<'static>>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            async_io::Timer::after(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.get_ref().set_nodelay(true);
        let Some(ex) = executor.upgrade() else { return };
        ex.spawn(async move {
            let service = service_fn(|req: Request<Incoming>| async move {
                Ok::<_, Infallible>(
                    respond(req.uri().path(), futures_lite::future::yield_now).await,
                )
            });
            let _ = http1::Builder::new()
                .timer(smol_hyper::rt::SmolTimer::new())
                .serve_connection(FuturesIo::new(stream), service)
                .await;
        })
        .detach();
    }
}

impl Drop for SmolServer {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Dropping the executor drops its tasks: the listener and every connection close.
        self.executor.take();
    }
}

// ---------------------------------------------------------------------------------------------
// The load driver

/// A keep-alive HTTP/1.1 client over a blocking socket.
pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: String,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        Ok(Client {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            line: String::new(),
        })
    }

    /// Sends `GET path` and reads the whole response; returns the body's length. A status other
    /// than 200, a malformed response or a closed connection is an error.
    pub fn get(&mut self, path: &str) -> io::Result<usize> {
        // One write: formatting straight into the unbuffered socket sends the request in three
        // segments (`TCP_NODELAY`), as few real clients do.
        let request = format!("GET {path} HTTP/1.1\r\nHost: tenant\r\n\r\n");
        if trace::on() && path.starts_with("/b/") {
            trace::sent(self.writer.local_addr()?.port());
        }
        self.writer.write_all(request.as_bytes())?;
        self.line.clear();
        self.reader.read_line(&mut self.line)?;
        if !self.line.starts_with("HTTP/1.1 200") {
            return Err(io::Error::other(format!(
                "unexpected status line {:?}",
                self.line
            )));
        }
        let mut length = None;
        loop {
            self.line.clear();
            if self.reader.read_line(&mut self.line)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let header = self.line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse::<usize>().ok();
                }
            }
        }
        let length = length.ok_or_else(|| io::Error::other("response without content-length"))?;
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        Ok(length)
    }
}

/// The `p`-th percentile (0.0 to 1.0) of sorted samples, or zero for none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The tenant workload: A floods a heavy endpoint from `a_conns` connections as fast as they are
/// answered; B's `b_conns` connections each send a light request, then pause `b_pause`.
#[derive(Clone, Debug)]
pub struct TenantLoad {
    pub a_conns: usize,
    /// The path A floods: `/a/work` (1 ms in one poll) or `/a/steps` (the same in slices).
    pub a_path: &'static str,
    pub b_conns: usize,
    pub b_pause: Duration,
    /// The path B requests: `/b/hello` (light) or `/b/work` (as heavy as A's, but rare).
    pub b_path: &'static str,
    /// Load before measuring starts (connections opened, queues filled).
    pub warmup: Duration,
    /// How long B's latencies and A's requests are counted.
    pub measure: Duration,
}

impl TenantLoad {
    /// The standard flood, measured for `measure`: 32 connections of A on `/a/work`, 2 of B each
    /// requesting `/b/hello` every 5 ms, after 300 ms of warm-up. Change a field with struct
    /// update syntax (`TenantLoad { a_conns: 0, ..TenantLoad::flood(d) }`).
    pub fn flood(measure: Duration) -> TenantLoad {
        TenantLoad {
            a_conns: 32,
            a_path: "/a/work",
            b_conns: 2,
            b_pause: Duration::from_millis(5),
            b_path: "/b/hello",
            warmup: Duration::from_millis(300),
            measure,
        }
    }
}

/// What one tenant run measured.
#[derive(Clone, Debug)]
pub struct TenantReport {
    /// B's request latencies during the measured window, sorted.
    pub b: Vec<Duration>,
    /// A's requests completed during the measured window.
    pub a_requests: u64,
    pub measured: Duration,
}

impl TenantReport {
    pub fn b_p50(&self) -> Duration {
        percentile(&self.b, 0.50)
    }
    pub fn b_p99(&self) -> Duration {
        percentile(&self.b, 0.99)
    }
    pub fn a_per_sec(&self) -> f64 {
        self.a_requests as f64 / self.measured.as_secs_f64()
    }
}

/// Runs `load` against the server at `addr`: bounded by `warmup + measure` plus one response.
pub fn run_tenants(addr: SocketAddr, load: &TenantLoad) -> io::Result<TenantReport> {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let a_done = Arc::new(AtomicU64::new(0));
    let b_lat = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..load.a_conns {
        let (stop, measuring, a_done) = (stop.clone(), measuring.clone(), a_done.clone());
        let mut client = Client::connect(addr)?;
        let path = load.a_path;
        threads.push(thread::Builder::new().name(format!("load-a-{i}")).spawn(
            move || -> io::Result<()> {
                while !stop.load(Ordering::Relaxed) {
                    client.get(path)?;
                    if measuring.load(Ordering::Relaxed) {
                        a_done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            },
        )?);
    }
    for i in 0..load.b_conns {
        let (stop, measuring, b_lat) = (stop.clone(), measuring.clone(), b_lat.clone());
        let mut client = Client::connect(addr)?;
        let (pause, path) = (load.b_pause, load.b_path);
        threads.push(thread::Builder::new().name(format!("load-b-{i}")).spawn(
            move || -> io::Result<()> {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    client.get(path)?;
                    let took = start.elapsed();
                    if trace::on() {
                        trace::received(
                            client.writer.local_addr()?.port(),
                            measuring.load(Ordering::Relaxed),
                        );
                    }
                    if measuring.load(Ordering::Relaxed) {
                        mine.push(took);
                    }
                    thread::sleep(pause);
                }
                b_lat.lock().unwrap().extend(mine);
                Ok(())
            },
        )?);
    }
    thread::sleep(load.warmup);
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    thread::sleep(load.measure);
    measuring.store(false, Ordering::Relaxed);
    let measured = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a load thread panicked")?;
    }
    let mut b = std::mem::take(&mut *b_lat.lock().unwrap());
    b.sort_unstable();
    if trace::on() {
        trace::report();
    }
    Ok(TenantReport {
        b,
        a_requests: a_done.load(Ordering::Relaxed),
        measured,
    })
}

/// Hello-world throughput: `conns` keep-alive connections request `/hello` back to back for
/// `measure` after `warmup`; returns the requests completed while measuring and the window.
pub fn run_flood(
    addr: SocketAddr,
    conns: usize,
    warmup: Duration,
    measure: Duration,
    mut during: impl FnMut(bool),
) -> io::Result<(u64, Duration)> {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for i in 0..conns {
        let (stop, measuring, done) = (stop.clone(), measuring.clone(), done.clone());
        let mut client = Client::connect(addr)?;
        threads.push(thread::Builder::new().name(format!("load-{i}")).spawn(
            move || -> io::Result<()> {
                while !stop.load(Ordering::Relaxed) {
                    client.get("/hello")?;
                    if measuring.load(Ordering::Relaxed) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            },
        )?);
    }
    thread::sleep(warmup);
    during(true);
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    thread::sleep(measure);
    measuring.store(false, Ordering::Relaxed);
    let measured = start.elapsed();
    during(false);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a load thread panicked")?;
    }
    Ok((done.load(Ordering::Relaxed), measured))
}

/// Light load: one connection sends `/hello` at `rate` requests per second for `measure`;
/// returns the latencies, sorted.
pub fn run_paced(addr: SocketAddr, rate: u32, measure: Duration) -> io::Result<Vec<Duration>> {
    let mut client = Client::connect(addr)?;
    client.get("/hello")?;
    let period = Duration::from_secs(1) / rate;
    let start = Instant::now();
    let mut next = start;
    let mut lat = Vec::new();
    while start.elapsed() < measure {
        let t = Instant::now();
        client.get("/hello")?;
        lat.push(t.elapsed());
        next += period;
        if let Some(rest) = next.checked_duration_since(Instant::now()) {
            thread::sleep(rest);
        }
    }
    lat.sort_unstable();
    Ok(lat)
}

// ---------------------------------------------------------------------------------------------
// Per-thread CPU and context switches (Linux /proc)

/// CPU time and context switches summed over this process's threads whose names start with one
/// of the given prefixes (`/proc/self/task/*`). Linux only; elsewhere every count is zero.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadUsage {
    pub cpu: Duration,
    pub switches: u64,
}

impl ThreadUsage {
    pub fn sample(prefixes: &[&str]) -> ThreadUsage {
        let mut usage = ThreadUsage::default();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return usage;
        };
        for task in tasks.flatten() {
            let dir = task.path();
            let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
                continue;
            };
            if !prefixes.iter().any(|p| comm.trim_end().starts_with(p)) {
                continue;
            }
            if let Ok(stat) = std::fs::read_to_string(dir.join("stat")) {
                // The fields after the command name, which may hold spaces, end with ')';
                // utime and stime are fields 14 and 15 of the line, in clock ticks.
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let times = fields.get(11..13).unwrap_or_default();
                let ticks: u64 = times.iter().filter_map(|f| f.parse::<u64>().ok()).sum();
                // Linux reports these in USER_HZ, which is 100 on every architecture it supports
                // for this interface.
                usage.cpu += Duration::from_millis(ticks * 10);
            }
            if let Ok(status) = std::fs::read_to_string(dir.join("status")) {
                for line in status.lines() {
                    if let Some(v) = line
                        .strip_prefix("voluntary_ctxt_switches:")
                        .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                    {
                        usage.switches += v.trim().parse::<u64>().unwrap_or(0);
                    }
                }
            }
        }
        usage
    }

    pub fn since(self, earlier: ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            switches: self.switches.saturating_sub(earlier.switches),
        }
    }
}
