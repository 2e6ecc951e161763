//! hyper 1.x on rondo: an executor that spawns into the current group, one that spawns into a
//! given [`Group`], a timer on rondo's own [`time::Sleep`](crate::time::Sleep), an adapter of
//! `futures-io` streams to hyper's I/O traits, and (with the `io` feature) `serve`, a whole
//! HTTP/1.1 and HTTP/2 server on a `rondo::net::TcpListener`. Enabled by the `hyper` feature.
//!
//! hyper leaves three things to its runtime, and this module supplies them:
//!
//! - **Spawning** ([`hyper::rt::Executor`]): [`RondoExecutor`] spawns into the group of the task
//!   that calls it, as [`rondo::spawn`](crate::spawn) does, so the tasks hyper spawns for a
//!   connection (HTTP/2 streams, for instance) stay in the connection's group and share its
//!   weight. [`GroupExecutor`] spawns into one group chosen up front.
//! - **Timers** ([`hyper::rt::Timer`]): [`RondoTimer`] hands out rondo sleeps, which arm in the
//!   timing wheel of the worker polling them. hyper's `reset` moves the existing sleep instead of
//!   allocating a new one.
//! - **Sockets** ([`hyper::rt::Read`] and [`hyper::rt::Write`]): rondo has no reactor of its own;
//!   sockets come from the `async-io` crate, whose reactor rondo's idle workers drive (feature
//!   `io`). [`Io`] adapts any `futures-io` stream, such as `async_io::Async<TcpStream>`, to
//!   hyper's I/O traits, without zeroing hyper's read buffer before each read;
//!   [`Io::from_async`] does so for async-io's sockets and also skips the reads that would find
//!   the socket empty.
//!
//! # Serving
//!
//! `serve(listener, service)` is the server in one call, in the shape of `axum::serve`: it
//! accepts, serves each connection over HTTP/1.1 or HTTP/2 in a task of its own, survives accept
//! errors, shuts down gracefully with `.with_graceful_shutdown(signal)`, and puts each connection
//! into the group `.place(hook)` chooses. With the `tower` feature it also serves tower services,
//! such as an axum `Router`.
//!
//! # Serving connections by hand
//!
//! Accept with `async_io::Async<TcpListener>`, wrap each stream in [`Io::from_async`], and serve
//! it with hyper's connection builder given a [`RondoTimer`] (and an executor where the protocol
//! needs one, as HTTP/2 does), inside a rondo task. Spawn each connection into the group it should
//! be charged to: with one group per tenant, one tenant's flood of requests shares the workers
//! with the others by weight instead of queueing in front of them.
//!
//! ```
//! use std::convert::Infallible;
//! use std::io::{Read, Write};
//! use std::net::{TcpListener, TcpStream};
//!
//! use async_io::Async;
//! use http_body_util::Full;
//! use hyper::body::{Bytes, Incoming};
//! use hyper::server::conn::http1;
//! use hyper::service::service_fn;
//! use hyper::{Request, Response};
//! use rondo::hyper::Io;
//!
//! async fn hello(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
//!     Ok(Response::new(Full::new(Bytes::from("hello from rondo"))))
//! }
//!
//! let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
//! let tenant = rt.group().name("tenant-a").weight(2).build().unwrap();
//! let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
//! let addr = listener.get_ref().local_addr().unwrap();
//!
//! // The accept loop runs in the default group; each connection runs in the tenant's group.
//! let accept = rt.spawn(async move {
//!     loop {
//!         let (stream, _) = listener.accept().await.unwrap();
//!         tenant.spawn(async move {
//!             let served = http1::Builder::new()
//!                 .timer(rondo::hyper::RondoTimer::new())
//!                 .serve_connection(Io::from_async(stream), service_fn(hello))
//!                 .await;
//!             served.unwrap();
//!         });
//!     }
//! });
//!
//! // A plain blocking client, so the example needs nothing else.
//! let mut client = TcpStream::connect(addr).unwrap();
//! client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
//! let mut reply = String::new();
//! client.read_to_string(&mut reply).unwrap();
//! assert!(reply.starts_with("HTTP/1.1 200 OK"));
//! assert!(reply.ends_with("hello from rondo"));
//! accept.abort();
//! ```
//!
//! A client works the same way: `hyper::client::conn::http1::handshake` over an [`Io`] of an
//! `Async<TcpStream>`, with the returned connection future spawned as a rondo task.

mod io;

pub use io::Io;

cfg_reactor! {
    mod serve;

    #[cfg(feature = "tower")]
    pub use serve::TowerServiceMarker;
    pub use serve::{
        ACCEPT_BACKOFF, HyperServiceMarker, IntoHyperService, Serve, WithGracefulShutdown, serve,
    };
}

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::Group;
use crate::time::{Sleep, sleep, sleep_until};

/// A [`hyper::rt::Executor`] that spawns into the current group, as
/// [`rondo::spawn`](crate::spawn) does: the group of the task that calls it, the runtime's default
/// group inside `block_on` or `enter`, and the global runtime's default group anywhere else.
///
/// hyper calls its executor from the connection's own task, so the tasks it spawns for a
/// connection join the connection's group. The spawned tasks are detached: hyper never waits for
/// them through the executor.
///
/// ```
/// use hyper::rt::Executor;
/// use rondo::hyper::RondoExecutor;
///
/// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
/// let group = rt.group().name("tenant-b").build().unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// // The executor is called from a task of `group`, as hyper calls it from a connection's task.
/// group.spawn(async move {
///     RondoExecutor::new().execute(async move {
///         tx.send(rondo::current_group().unwrap().name().to_string()).unwrap();
///     });
/// });
/// assert_eq!(rx.recv().unwrap(), "tenant-b");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RondoExecutor {
    _private: (),
}

impl RondoExecutor {
    /// An executor that spawns into the current group.
    ///
    /// ```
    /// use hyper::rt::Executor;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// // Outside any runtime it spawns onto the global runtime.
    /// rondo::hyper::RondoExecutor::new().execute(async move { tx.send(7).unwrap() });
    /// assert_eq!(rx.recv().unwrap(), 7);
    /// ```
    pub fn new() -> Self {
        RondoExecutor { _private: () }
    }
}

impl<F> hyper::rt::Executor<F> for RondoExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        // Dropping the handle detaches the task.
        drop(crate::spawn(future));
    }
}

/// A [`hyper::rt::Executor`] that spawns into one given [`Group`], wherever it is called from.
///
/// Use it where hyper spawns from a task that is not in the group the work should be charged to.
///
/// ```
/// use hyper::rt::Executor;
/// use rondo::hyper::GroupExecutor;
///
/// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
/// let batch = rt.group().name("batch").build().unwrap();
/// let exec = GroupExecutor::new(batch.clone());
/// assert_eq!(exec.group().name(), "batch");
/// let (tx, rx) = std::sync::mpsc::channel();
/// // Called from outside any task, the future still runs in `batch`.
/// exec.execute(async move {
///     tx.send(rondo::current_group().unwrap().name().to_string()).unwrap();
/// });
/// assert_eq!(rx.recv().unwrap(), "batch");
/// ```
#[derive(Debug, Clone)]
pub struct GroupExecutor {
    group: Group,
}

impl GroupExecutor {
    /// An executor that spawns into `group`.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("g").build().unwrap();
    /// let exec = rondo::hyper::GroupExecutor::new(g);
    /// assert_eq!(exec.group().name(), "g");
    /// ```
    pub fn new(group: Group) -> Self {
        GroupExecutor { group }
    }

    /// The group this executor spawns into.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().weight(3).build().unwrap();
    /// assert_eq!(rondo::hyper::GroupExecutor::from(g).group().weight(), 3);
    /// ```
    pub fn group(&self) -> &Group {
        &self.group
    }
}

impl From<Group> for GroupExecutor {
    /// Same as [`GroupExecutor::new`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let exec: rondo::hyper::GroupExecutor = rt.group().name("x").build().unwrap().into();
    /// assert_eq!(exec.group().name(), "x");
    /// ```
    fn from(group: Group) -> Self {
        GroupExecutor::new(group)
    }
}

impl<F> hyper::rt::Executor<F> for GroupExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        drop(self.group.spawn(future));
    }
}

/// A [`hyper::rt::Timer`] on rondo's timers: its sleeps are [`rondo::time::Sleep`](Sleep)s, which
/// arm in the runtime that polls them (see [`time`](crate::time)), and
/// [`reset`](hyper::rt::Timer::reset) moves a sleep it made instead of allocating a new one.
///
/// Give it to hyper's connection builders (`.timer(RondoTimer::new())`) to enable hyper's
/// timeouts, such as the HTTP/1.1 server's `header_read_timeout`.
///
/// ```
/// use std::time::{Duration, Instant};
/// use hyper::rt::Timer;
/// use rondo::hyper::RondoTimer;
///
/// rondo::block_on(async {
///     let timer = RondoTimer::new();
///     let start = Instant::now();
///     timer.sleep(Duration::from_millis(2)).await;
///     assert!(start.elapsed() >= Duration::from_millis(2));
/// });
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RondoTimer {
    _private: (),
}

impl RondoTimer {
    /// A timer on the current runtime's timing wheels.
    ///
    /// ```
    /// use hyper::rt::Timer;
    /// let timer = rondo::hyper::RondoTimer::new();
    /// let s = timer.sleep(std::time::Duration::from_secs(1));
    /// assert!(s.is::<rondo::time::Sleep>());
    /// ```
    pub fn new() -> Self {
        RondoTimer { _private: () }
    }
}

impl hyper::rt::Timer for RondoTimer {
    /// A rondo [`sleep`] of `duration`, boxed.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(sleep(duration))
    }

    /// A rondo [`sleep_until`] `deadline`, boxed.
    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(sleep_until(deadline))
    }

    /// Moves a sleep this timer made to `new_deadline`, in place (an armed timer moves within its
    /// wheel, and a completed one becomes pending again); any other sleep is replaced by a new one.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use hyper::rt::Timer;
    ///
    /// rondo::block_on(async {
    ///     let timer = rondo::hyper::RondoTimer::new();
    ///     let start = Instant::now();
    ///     let mut s = timer.sleep(Duration::from_secs(3600));
    ///     timer.reset(&mut s, Instant::now() + Duration::from_millis(2));
    ///     s.await;
    ///     assert!(start.elapsed() < Duration::from_secs(60));
    /// });
    /// ```
    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            Some(ours) => ours.reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// rondo's sleep is hyper's sleep as it is (it is `Send` and `Sync`), so [`RondoTimer`] boxes it
/// without a wrapper and can find it again by downcasting.
impl hyper::rt::Sleep for Sleep {}
