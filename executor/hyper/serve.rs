//! [`serve`]: an HTTP server on a [`TcpListener`], in the shape of `axum::serve`.
//!
//! The protocol of one [`Serve`] future:
//!
//! 1. **Accept.** The loop accepts a connection, asks the placement hook (if any) for its group,
//!    counts it live, and spawns its task there (or into the serving task's own group). A
//!    connection is served HTTP/1.1 or HTTP/2, told apart by its first bytes (HTTP/2 with prior
//!    knowledge), with rondo's timer and executor: the streams HTTP/2 spawns join the
//!    connection's group.
//! 2. **Accept errors.** A connection reset or aborted before it was accepted is skipped at once.
//!    Any other error (out of file descriptors, `EMFILE`/`ENFILE`, or of memory,
//!    `ENOBUFS`/`ENOMEM`) is waited out for [`ACCEPT_BACKOFF`] before the next accept: the
//!    connection stays in the kernel's backlog, and accepting again at once would only spin. No
//!    error ends the loop, and a connection's own errors end only its task.
//! 3. **Graceful shutdown** (with [`Serve::with_graceful_shutdown`]). When the signal future
//!    resolves, the loop stops and drops the listener (new connections are refused from then on),
//!    sets the shutdown flag and notifies every connection. Each live connection then starts
//!    hyper's graceful shutdown: it finishes the requests in flight, answers no new ones and
//!    closes. The future resolves when the live count reaches zero. A connection task checks the
//!    flag after it registers for the notification, so none misses it.

use std::error::Error as StdError;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use event_listener::Event;
use futures_lite::future;
use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::server::conn::auto;

use super::{Io, RondoExecutor, RondoTimer};
use crate::Group;
use crate::net::TcpListener;

/// How long [`serve`]'s accept loop waits after an accept error other than a connection reset
/// before the peer was accepted (for example, the process out of file descriptors).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The error of a service, as hyper takes it.
type BoxError = Box<dyn StdError + Send + Sync>;

/// Which group a connection from a peer runs in; `None` for the serving task's own group.
type Place = Arc<dyn Fn(SocketAddr) -> Option<Group> + Send + Sync>;

/// Marks a service that [`serve`] takes as it is: a `hyper::service::Service`.
#[derive(Debug)]
pub enum HyperServiceMarker {}

/// Marks a service that [`serve`] adapts: a tower `Service`, such as an axum `Router` (feature
/// `tower`).
#[cfg(feature = "tower")]
#[derive(Debug)]
pub enum TowerServiceMarker {}

/// A service [`serve`] can serve each connection with: a `hyper::service::Service` of
/// `Request<Incoming>`, or with the `tower` feature a tower `Service` (an axum `Router`), cloned
/// for each connection. `M` tells the two kinds apart and is inferred.
///
/// ```
/// use std::convert::Infallible;
/// use hyper::{Request, Response, body::Incoming};
///
/// fn takes<M, S: rondo::hyper::IntoHyperService<M>>(_: S) {}
///
/// takes(hyper::service::service_fn(|_: Request<Incoming>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hi")))
/// }));
/// ```
pub trait IntoHyperService<M> {
    /// The hyper service.
    type Service: Clone + Send + 'static;

    /// Converts the service.
    fn into_hyper_service(self) -> Self::Service;
}

impl<S, B> IntoHyperService<(HyperServiceMarker, B)> for S
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
{
    type Service = S;

    fn into_hyper_service(self) -> S {
        self
    }
}

#[cfg(feature = "tower")]
impl<S, B> IntoHyperService<(TowerServiceMarker, B)> for S
where
    S: tower_service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
{
    type Service = hyper_util::service::TowerToHyperService<S>;

    fn into_hyper_service(self) -> Self::Service {
        hyper_util::service::TowerToHyperService::new(self)
    }
}

/// Serves HTTP on `listener`: each connection accepted is served with a clone of `service`, over
/// HTTP/1.1 or HTTP/2 (detected from its first bytes), in a task of its own, as `axum::serve`.
///
/// `service` is a `hyper::service::Service` (such as `hyper::service::service_fn(handler)`), or
/// with the `tower` feature a tower `Service` such as an axum `Router`. The result is a builder
/// to await: it serves until dropped, or, with
/// [`with_graceful_shutdown`](Serve::with_graceful_shutdown), until a signal and the requests in
/// flight at it are done. [`place`](Serve::place) chooses each connection's group.
///
/// Connection tasks join the group of the task that awaits the `Serve` (the default group, from
/// `block_on`), unless the placement hook chooses one. Accept errors never end the loop (see
/// [`ACCEPT_BACKOFF`]).
///
/// Differences from `axum::serve`: the listener is a [`rondo::net::TcpListener`](TcpListener)
/// only; the service is cloned per connection rather than made by a make-service; and HTTP
/// upgrades are served (`serve_connection_with_upgrades`) with no further option.
///
/// ```
/// use std::convert::Infallible;
/// use http_body_util::Full;
/// use hyper::body::{Bytes, Incoming};
/// use hyper::{Request, Response, service::service_fn};
///
/// async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
///     Ok(Response::new(Full::new(Bytes::from("hello"))))
/// }
///
/// rondo::block_on(async {
///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let addr = listener.local_addr().unwrap();
///     let server = rondo::spawn(rondo::hyper::serve(listener, service_fn(hello)).into_future());
///     // A blocking client on the blocking pool, so the example needs nothing else.
///     let reply = rondo::spawn_blocking(move || {
///         use std::io::{Read, Write};
///         let mut c = std::net::TcpStream::connect(addr).unwrap();
///         c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
///         let mut reply = String::new();
///         c.read_to_string(&mut reply).unwrap();
///         reply
///     })
///     .await
///     .unwrap();
///     assert!(reply.ends_with("hello"));
///     server.abort();
/// });
/// # use std::future::IntoFuture;
/// ```
pub fn serve<M, S>(listener: TcpListener, service: S) -> Serve<S::Service>
where
    S: IntoHyperService<M>,
{
    let mut builder = auto::Builder::new(RondoExecutor::new());
    builder.http1().timer(RondoTimer::new());
    builder.http2().timer(RondoTimer::new());
    Serve {
        listener,
        service: service.into_hyper_service(),
        builder: Arc::new(builder),
        place: None,
    }
}

/// An HTTP server, from [`serve`]: await it (it is [`IntoFuture`]) to serve until it is dropped.
///
/// ```
/// use std::convert::Infallible;
/// use hyper::{Request, Response, body::Incoming, service::service_fn};
///
/// rondo::block_on(async {
///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let svc = service_fn(|_: Request<Incoming>| async {
///         Ok::<_, Infallible>(Response::new(String::from("hi")))
///     });
///     let serve = rondo::hyper::serve(listener, svc);
///     assert!(serve.local_addr().unwrap().ip().is_loopback());
/// });
/// ```
pub struct Serve<S> {
    listener: TcpListener,
    service: S,
    builder: Arc<auto::Builder<RondoExecutor>>,
    place: Option<Place>,
}

impl<S> fmt::Debug for Serve<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("listener", &self.listener)
            .field("place", &self.place.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Serve<S> {
    /// The address the server listens on.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use hyper::{Request, Response, body::Incoming, service::service_fn};
    ///
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     let svc = service_fn(|_: Request<Incoming>| async {
    ///         Ok::<_, Infallible>(Response::new(String::new()))
    ///     });
    ///     assert_eq!(rondo::hyper::serve(listener, svc).local_addr().unwrap(), addr);
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Sets the placement hook: called with each connection's peer address as it is accepted,
    /// it returns the [`Group`] the connection's task runs in, or `None` for the serving task's
    /// own group. Everything the connection does (its requests' handlers, and the HTTP/2 streams
    /// hyper spawns) is then charged to that group, so one tenant's flood of requests shares the
    /// workers with the others by weight.
    ///
    /// A hook that panics is caught: that connection is closed unserved, and the server goes on.
    /// To place by something the first request carries (a path, a host, a header), place
    /// per request instead: spawn the handler into its group and await it
    /// (`group.spawn(handler).await`).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use hyper::{Request, Response, body::Incoming, service::service_fn};
    ///
    /// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    /// let local = rt.group().name("local").build().unwrap();
    /// rt.block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     let svc = service_fn(|_: Request<Incoming>| async {
    ///         let group = rondo::current_group().unwrap();
    ///         Ok::<_, Infallible>(Response::new(group.name().to_string()))
    ///     });
    ///     let serve = rondo::hyper::serve(listener, svc)
    ///         .place(move |peer| peer.ip().is_loopback().then(|| local.clone()));
    ///     let server = rondo::spawn(std::future::IntoFuture::into_future(serve));
    ///     let reply = rondo::spawn_blocking(move || {
    ///         use std::io::{Read, Write};
    ///         let mut c = std::net::TcpStream::connect(addr).unwrap();
    ///         c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    ///         let mut reply = String::new();
    ///         c.read_to_string(&mut reply).unwrap();
    ///         reply
    ///     })
    ///     .await
    ///     .unwrap();
    ///     assert!(reply.ends_with("local"));
    ///     server.abort();
    /// });
    /// ```
    pub fn place<F>(mut self, hook: F) -> Self
    where
        F: Fn(SocketAddr) -> Option<Group> + Send + Sync + 'static,
    {
        self.place = Some(Arc::new(hook));
        self
    }

    /// Serves until `signal` resolves, then shuts down gracefully, as axum's
    /// `with_graceful_shutdown`: stops accepting (the listener is closed, so new connections are
    /// refused), lets every connection finish the requests in flight (an idle HTTP/1.1
    /// keep-alive connection closes at once, an HTTP/2 one sends `GOAWAY`), and resolves when
    /// all connections are closed.
    ///
    /// `signal` is any future: `rondo::signal::ctrl_c()` (feature `signal`), a
    /// channel's receive, a timer. Bound the wait for slow requests with
    /// [`time::timeout`](crate::time::timeout) around the whole future.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use hyper::{Request, Response, body::Incoming, service::service_fn};
    ///
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     let svc = service_fn(|_: Request<Incoming>| async {
    ///         Ok::<_, Infallible>(Response::new(String::from("bye")))
    ///     });
    ///     let stop = rondo::time::sleep(Duration::from_millis(20));
    ///     rondo::hyper::serve(listener, svc).with_graceful_shutdown(stop).await.unwrap();
    ///     // The listener is closed.
    ///     assert!(std::net::TcpStream::connect(addr).is_err());
    /// });
    /// ```
    pub fn with_graceful_shutdown<F>(self, signal: F) -> WithGracefulShutdown<S, F>
    where
        F: Future + Send + 'static,
    {
        WithGracefulShutdown {
            serve: self,
            signal,
        }
    }
}

/// A server that shuts down gracefully at a signal, from [`Serve::with_graceful_shutdown`]:
/// await it (it is [`IntoFuture`]) to serve until the signal and the requests in flight at it
/// are done.
///
/// ```
/// use std::convert::Infallible;
/// use hyper::{Request, Response, body::Incoming, service::service_fn};
///
/// rondo::block_on(async {
///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let svc = service_fn(|_: Request<Incoming>| async {
///         Ok::<_, Infallible>(Response::new(String::new()))
///     });
///     // A signal that has already come: the server stops at once.
///     let done = rondo::hyper::serve(listener, svc).with_graceful_shutdown(async {});
///     assert!(done.await.is_ok());
/// });
/// ```
pub struct WithGracefulShutdown<S, F> {
    serve: Serve<S>,
    signal: F,
}

impl<S, F> fmt::Debug for WithGracefulShutdown<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithGracefulShutdown")
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

impl<S, F> WithGracefulShutdown<S, F> {
    /// The address the server listens on.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use hyper::{Request, Response, body::Incoming, service::service_fn};
    ///
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let svc = service_fn(|_: Request<Incoming>| async {
    ///         Ok::<_, Infallible>(Response::new(String::new()))
    ///     });
    ///     let s = rondo::hyper::serve(listener, svc).with_graceful_shutdown(async {});
    ///     assert!(s.local_addr().is_ok());
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.serve.local_addr()
    }
}

impl<S, B> IntoFuture for Serve<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run(self, future::pending::<()>()))
    }
}

impl<S, B, F> IntoFuture for WithGracefulShutdown<S, F>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Future + Send + 'static,
{
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run(self.serve, self.signal))
    }
}

/// What the accept loop and the connection tasks share: the shutdown flag and the live count.
struct Tracker {
    /// Set once, when the signal resolves.
    shutting_down: AtomicBool,
    /// Notified after `shutting_down` is set.
    shutdown: Event,
    /// Connections accepted and not yet closed.
    live: AtomicUsize,
    /// Notified when `live` drops to zero.
    idle: Event,
}

/// One live connection, counted while this exists (inside its task's future, so a task dropped
/// unpolled at runtime shutdown still uncounts itself).
struct Live(Arc<Tracker>);

impl Live {
    fn new(tracker: &Arc<Tracker>) -> Live {
        tracker.live.fetch_add(1, Ordering::SeqCst);
        Live(tracker.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify(usize::MAX);
        }
    }
}

/// Whether an accept error concerns only the connection being accepted (the peer reset it
/// before it was accepted); the next accept can follow at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// The accept loop and the graceful shutdown (steps in the module docs).
async fn run<S, B, F>(serve: Serve<S>, signal: F) -> io::Result<()>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Future + Send + 'static,
{
    let Serve {
        listener,
        service,
        builder,
        place,
    } = serve;
    let tracker = Arc::new(Tracker {
        shutting_down: AtomicBool::new(false),
        shutdown: Event::new(),
        live: AtomicUsize::new(0),
        idle: Event::new(),
    });
    let mut signal = pin!(async {
        signal.await;
    });
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            signal.as_mut().await;
            None
        })
        .await;
        let (stream, peer) = match accepted {
            None => break,
            Some(Ok(accepted)) => accepted,
            Some(Err(e)) if is_connection_error(&e) => continue,
            Some(Err(_)) => {
                // Out of descriptors or memory: the connection waits in the backlog.
                let stop = future::or(
                    async {
                        crate::time::sleep(ACCEPT_BACKOFF).await;
                        false
                    },
                    async {
                        signal.as_mut().await;
                        true
                    },
                )
                .await;
                if stop {
                    break;
                }
                continue;
            }
        };
        let group = match &place {
            None => None,
            Some(hook) => match std::panic::catch_unwind(AssertUnwindSafe(|| hook(peer))) {
                Ok(group) => group,
                // The hook panicked: this connection is closed unserved.
                Err(_) => continue,
            },
        };
        let live = Live::new(&tracker);
        let connection = serve_connection(live, stream, service.clone(), builder.clone());
        match group {
            Some(group) => drop(group.spawn(connection)),
            None => drop(crate::spawn(connection)),
        }
    }
    // Step 3: refuse new connections, tell the live ones, wait for them.
    drop(listener);
    tracker.shutting_down.store(true, Ordering::SeqCst);
    tracker.shutdown.notify(usize::MAX);
    loop {
        let idle = tracker.idle.listen();
        if tracker.live.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        idle.await;
    }
}

/// One connection's task: serve it until it closes, or shut it down gracefully once the server
/// shuts down.
async fn serve_connection<S, B>(
    live: Live,
    stream: crate::net::TcpStream,
    service: S,
    builder: Arc<auto::Builder<RondoExecutor>>,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let tracker = live.0.clone();
    let mut conn = pin!(builder.serve_connection_with_upgrades(Io::from_tcp(stream), service));
    loop {
        let notified = tracker.shutdown.listen();
        if tracker.shutting_down.load(Ordering::SeqCst) {
            conn.as_mut().graceful_shutdown();
            // A connection error ends this connection only.
            let _ = conn.as_mut().await;
            break;
        }
        let done = future::or(async { Some(conn.as_mut().await) }, async {
            notified.await;
            None
        })
        .await;
        if done.is_some() {
            break;
        }
    }
    drop(live);
}
