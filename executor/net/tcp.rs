//! [`TcpListener`], [`TcpStream`] and a stream's owned halves.
//!
//! A stream is an `Arc<Async<std::net::TcpStream>>`. async-io reads and writes through `&Async`,
//! so [`TcpStream::into_split`] gives each half a clone of the `Arc` and no lock: each half waits
//! for its own readiness (readable or writable) in the reactor. The write half's `close` (and
//! dropping it) shuts the socket's write side down; the read half goes on reading.

use std::fmt;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_io::Async;
use futures_lite::io::{AsyncRead, AsyncWrite};
use socket2::{Domain, Protocol, Socket, Type};

use super::BACKLOG;
use super::addr::{ToSocketAddrs, each_addr};

/// A TCP socket listening for connections, as tokio's `TcpListener`, with a listen backlog of
/// [`BACKLOG`].
///
/// ```
/// use rondo::net::{TcpListener, TcpStream};
///
/// rondo::block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let addr = listener.local_addr().unwrap();
///     let client = TcpStream::connect(addr).await.unwrap();
///     let (_stream, peer) = listener.accept().await.unwrap();
///     assert_eq!(peer, client.local_addr().unwrap());
/// });
/// ```
pub struct TcpListener {
    inner: Async<std::net::TcpListener>,
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TcpListener")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl TcpListener {
    /// Binds a listener to `addr`: a socket address, or a host name and port resolved on rondo's
    /// blocking pool (see [`ToSocketAddrs`]). Each resolved address is tried in turn; the first
    /// that binds is used, and if none does the last error is returned.
    ///
    /// On Unix the socket is created with `SO_REUSEADDR`, as tokio's, so a server restarts on its
    /// port while old connections linger in `TIME_WAIT`. It listens with a backlog of
    /// [`BACKLOG`].
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind(("localhost", 0)).await.unwrap();
    ///     assert!(listener.local_addr().unwrap().ip().is_loopback());
    /// });
    /// ```
    pub async fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
        each_addr(addr, |a| async move { Self::bind_addr(a) }).await
    }

    fn bind_addr(addr: SocketAddr) -> io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        #[cfg(unix)]
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        socket.listen(BACKLOG)?;
        Ok(TcpListener {
            inner: Async::new(std::net::TcpListener::from(socket))?,
        })
    }

    /// Wraps a standard library listener (made non-blocking here) as tokio's `from_std`. Its
    /// backlog is the one it was created with.
    ///
    /// ```
    /// let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let listener = rondo::net::TcpListener::from_std(std_listener).unwrap();
    /// assert!(listener.local_addr().is_ok());
    /// ```
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        Ok(TcpListener {
            inner: Async::new(listener)?,
        })
    }

    /// Unwraps the standard library listener, still in non-blocking mode, as tokio's `into_std`.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     assert_eq!(listener.into_std().unwrap().local_addr().unwrap(), addr);
    /// });
    /// ```
    pub fn into_std(self) -> io::Result<std::net::TcpListener> {
        self.inner.into_inner()
    }

    /// Waits for the next connection and returns it with the peer's address.
    ///
    /// Errors are those of `accept(2)`: a connection the peer reset before it was accepted
    /// (`ConnectionAborted`), or the process or system out of file descriptors or memory
    /// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`), after which the connection stays in the
    /// backlog and a later `accept` may take it. None of them closes the listener.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (stream, peer) = listener.accept().await.unwrap();
    ///     assert_eq!(stream.peer_addr().unwrap(), peer);
    /// });
    /// ```
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (stream, peer) = self.inner.accept().await?;
        Ok((TcpStream::from_async(stream), peer))
    }

    /// Polls for the next connection, as tokio's `poll_accept`: `Pending` registers `cx`'s waker
    /// to be woken when a connection arrives.
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (_stream, peer) = poll_fn(|cx| listener.poll_accept(cx)).await.unwrap();
    ///     assert!(peer.ip().is_loopback());
    /// });
    /// ```
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        loop {
            match self.inner.get_ref().accept() {
                Ok((stream, peer)) => {
                    return Poll::Ready(Ok((TcpStream::from_std(stream)?, peer)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            std::task::ready!(self.inner.poll_readable(cx))?;
        }
    }

    /// The address the listener is bound to.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     assert_ne!(listener.local_addr().unwrap().port(), 0);
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// Sets the time-to-live of the IP packets this listener's connections send.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     listener.set_ttl(42).unwrap();
    ///     assert_eq!(listener.ttl().unwrap(), 42);
    /// });
    /// ```
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.get_ref().set_ttl(ttl)
    }

    /// The time-to-live of the IP packets this listener's connections send.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     assert!(listener.ttl().unwrap() > 0);
    /// });
    /// ```
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.get_ref().ttl()
    }
}

/// A TCP connection, as tokio's `TcpStream`: futures-io's `AsyncRead` and `AsyncWrite`, a
/// half-closing [`shutdown`](TcpStream::shutdown), and [`into_split`](TcpStream::into_split)
/// into owned halves that share the socket without a lock.
///
/// ```
/// use futures_lite::{AsyncReadExt, AsyncWriteExt};
/// use rondo::net::{TcpListener, TcpStream};
///
/// rondo::block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
///     let (mut server, _) = listener.accept().await.unwrap();
///     client.write_all(b"hi").await.unwrap();
///     client.shutdown().await.unwrap();
///     let mut got = String::new();
///     server.read_to_string(&mut got).await.unwrap(); // ends at the client's shutdown
///     assert_eq!(got, "hi");
/// });
/// ```
pub struct TcpStream {
    inner: Arc<Async<std::net::TcpStream>>,
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TcpStream")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl TcpStream {
    fn from_async(inner: Async<std::net::TcpStream>) -> TcpStream {
        TcpStream {
            inner: Arc::new(inner),
        }
    }

    /// Opens a connection to `addr`: a socket address, or a host name and port resolved on
    /// rondo's blocking pool (see [`ToSocketAddrs`]). Each resolved address is tried in turn,
    /// and if none accepts the last error is returned.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let port = listener.local_addr().unwrap().port();
    ///     // "localhost" may resolve to ::1 first; the IPv4 address is tried next.
    ///     let stream = TcpStream::connect(("localhost", port)).await.unwrap();
    ///     assert_eq!(stream.peer_addr().unwrap().port(), port);
    /// });
    /// ```
    pub async fn connect<A: ToSocketAddrs>(addr: A) -> io::Result<TcpStream> {
        each_addr(addr, |a| async move {
            Ok(TcpStream::from_async(
                Async::<std::net::TcpStream>::connect(a).await?,
            ))
        })
        .await
    }

    /// Wraps a connected standard library stream (made non-blocking here), as tokio's
    /// `from_std`.
    ///
    /// ```
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let std_stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let stream = rondo::net::TcpStream::from_std(std_stream).unwrap();
    /// assert_eq!(stream.peer_addr().unwrap(), listener.local_addr().unwrap());
    /// ```
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        Ok(TcpStream::from_async(Async::new(stream)?))
    }

    /// The local address of the connection.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     assert!(stream.local_addr().unwrap().ip().is_loopback());
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The address of the connection's peer.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     assert_eq!(TcpStream::connect(addr).await.unwrap().peer_addr().unwrap(), addr);
    /// });
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }

    /// Sets `TCP_NODELAY`: with `true`, small writes are sent at once instead of waiting to be
    /// coalesced (Nagle's algorithm).
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     stream.set_nodelay(true).unwrap();
    ///     assert!(stream.nodelay().unwrap());
    /// });
    /// ```
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.inner.get_ref().set_nodelay(nodelay)
    }

    /// Whether `TCP_NODELAY` is set.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     stream.set_nodelay(false).unwrap();
    ///     assert!(!stream.nodelay().unwrap());
    /// });
    /// ```
    pub fn nodelay(&self) -> io::Result<bool> {
        self.inner.get_ref().nodelay()
    }

    /// Sets the time-to-live of the IP packets the connection sends.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     stream.set_ttl(33).unwrap();
    ///     assert_eq!(stream.ttl().unwrap(), 33);
    /// });
    /// ```
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.get_ref().set_ttl(ttl)
    }

    /// The time-to-live of the IP packets the connection sends.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     assert!(stream.ttl().unwrap() > 0);
    /// });
    /// ```
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.get_ref().ttl()
    }

    /// Shuts the write side of the connection down, as tokio's `shutdown`: the peer reads end of
    /// file once it has read what was written, and this side can still read. futures-io's
    /// `close` (`AsyncWriteExt::close`) does the same.
    ///
    /// ```
    /// use futures_lite::{AsyncReadExt, AsyncWriteExt};
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (mut server, _) = listener.accept().await.unwrap();
    ///     client.shutdown().await.unwrap();
    ///     let mut rest = Vec::new();
    ///     assert_eq!(server.read_to_end(&mut rest).await.unwrap(), 0); // end of file
    ///     server.write_all(b"still open").await.unwrap(); // the other direction works
    ///     let mut buf = [0; 10];
    ///     client.read_exact(&mut buf).await.unwrap();
    ///     assert_eq!(&buf, b"still open");
    /// });
    /// ```
    pub async fn shutdown(&self) -> io::Result<()> {
        shutdown_write(self.inner.get_ref())
    }

    /// Receives data without removing it from the socket's queue.
    ///
    /// ```
    /// use futures_lite::AsyncWriteExt;
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (server, _) = listener.accept().await.unwrap();
    ///     client.write_all(b"GET").await.unwrap();
    ///     let mut buf = [0; 3];
    ///     let n = server.peek(&mut buf).await.unwrap();
    ///     assert_eq!(&buf[..n], &b"GET"[..n]);
    /// });
    /// ```
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.peek(buf).await
    }

    /// Waits until the socket is readable (data, end of file or an error waits), without reading.
    ///
    /// ```
    /// use futures_lite::AsyncWriteExt;
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (server, _) = listener.accept().await.unwrap();
    ///     client.write_all(b"x").await.unwrap();
    ///     server.readable().await.unwrap();
    /// });
    /// ```
    pub async fn readable(&self) -> io::Result<()> {
        self.inner.readable().await
    }

    /// Waits until the socket is writable, without writing.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     client.writable().await.unwrap();
    /// });
    /// ```
    pub async fn writable(&self) -> io::Result<()> {
        self.inner.writable().await
    }

    /// Polls for read readiness, as tokio's `poll_read_ready`: `Ready` once the socket is
    /// readable, without reading; `Pending` registers `cx`'s waker. A readiness event is consumed
    /// by the poll that returns `Ready`, so a later poll waits for a new event.
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use futures_lite::AsyncWriteExt;
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (server, _) = listener.accept().await.unwrap();
    ///     client.write_all(b"x").await.unwrap();
    ///     poll_fn(|cx| server.poll_read_ready(cx)).await.unwrap();
    /// });
    /// ```
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_readable(cx)
    }

    /// Polls for write readiness, as tokio's `poll_write_ready`.
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     poll_fn(|cx| client.poll_write_ready(cx)).await.unwrap();
    /// });
    /// ```
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_writable(cx)
    }

    /// Splits the stream into a read half and a write half that own it together, as tokio's
    /// `into_split`. They share the socket through an `Arc` with no lock: each may be moved to
    /// its own task and used at the same time as the other. Dropping the write half (or closing
    /// it) shuts the write side down; [`OwnedReadHalf::reunite`] puts the halves back together.
    ///
    /// ```
    /// use futures_lite::{AsyncReadExt, AsyncWriteExt};
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (server, _) = listener.accept().await.unwrap();
    ///     // An echo server: one task copies what the other half reads.
    ///     let (mut rd, mut wr) = server.into_split();
    ///     let echo = rondo::spawn(async move { futures_lite::io::copy(&mut rd, &mut wr).await });
    ///     let (mut crd, mut cwr) = client.into_split();
    ///     cwr.write_all(b"echo").await.unwrap();
    ///     drop(cwr); // half-closes: the echo task's copy ends
    ///     let mut back = String::new();
    ///     crd.read_to_string(&mut back).await.unwrap();
    ///     assert_eq!(back, "echo");
    ///     assert_eq!(echo.await.unwrap().unwrap(), 4);
    /// });
    /// ```
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        let write = OwnedWriteHalf {
            inner: self.inner.clone(),
            shutdown_on_drop: true,
        };
        (OwnedReadHalf { inner: self.inner }, write)
    }
}

/// Shuts the write side down. A socket whose peer already went away (`NotConnected`) has no
/// write side left to shut, which is what was asked.
fn shutdown_write(stream: &std::net::TcpStream) -> io::Result<()> {
    match stream.shutdown(Shutdown::Write) {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        r => r,
    }
}

/// The read half of a [`TcpStream`], from [`TcpStream::into_split`]; futures-io's `AsyncRead`.
///
/// ```
/// use futures_lite::{AsyncReadExt, AsyncWriteExt};
/// use rondo::net::{TcpListener, TcpStream};
///
/// rondo::block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
///     let (mut rd, _wr) = listener.accept().await.unwrap().0.into_split();
///     client.write_all(b"x").await.unwrap();
///     let mut b = [0];
///     rd.read_exact(&mut b).await.unwrap();
///     assert_eq!(rd.peer_addr().unwrap(), client.local_addr().unwrap());
/// });
/// ```
pub struct OwnedReadHalf {
    inner: Arc<Async<std::net::TcpStream>>,
}

/// The write half of a [`TcpStream`], from [`TcpStream::into_split`]; futures-io's `AsyncWrite`.
/// Closing it or dropping it shuts the write side of the connection down, as tokio's does;
/// [`forget`](OwnedWriteHalf::forget) drops it without.
///
/// ```
/// use futures_lite::{AsyncReadExt, AsyncWriteExt};
/// use rondo::net::{TcpListener, TcpStream};
///
/// rondo::block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let (_rd, mut wr) = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap().into_split();
///     let (mut server, _) = listener.accept().await.unwrap();
///     wr.write_all(b"bye").await.unwrap();
///     wr.close().await.unwrap();
///     let mut got = String::new();
///     server.read_to_string(&mut got).await.unwrap();
///     assert_eq!(got, "bye");
/// });
/// ```
pub struct OwnedWriteHalf {
    inner: Arc<Async<std::net::TcpStream>>,
    shutdown_on_drop: bool,
}

impl fmt::Debug for OwnedReadHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedReadHalf")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl fmt::Debug for OwnedWriteHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedWriteHalf")
            .field(self.inner.get_ref())
            .finish()
    }
}

/// The halves given to [`OwnedReadHalf::reunite`] came from different streams; both are returned.
///
/// ```
/// use rondo::net::{TcpListener, TcpStream};
///
/// rondo::block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     let addr = listener.local_addr().unwrap();
///     let (rd, _) = TcpStream::connect(addr).await.unwrap().into_split();
///     let (_, wr) = TcpStream::connect(addr).await.unwrap().into_split();
///     let err = rd.reunite(wr).unwrap_err();
///     assert!(err.to_string().contains("not from the same stream"));
/// });
/// ```
#[derive(Debug)]
pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

impl fmt::Display for ReuniteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tried to reunite halves that are not from the same stream")
    }
}

impl std::error::Error for ReuniteError {}

impl OwnedReadHalf {
    /// Puts the halves of one stream back together, as tokio's `reunite`; halves of two streams
    /// give a [`ReuniteError`] holding both.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let (rd, wr) = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap().into_split();
    ///     let stream = rd.reunite(wr).unwrap();
    ///     assert!(stream.peer_addr().is_ok());
    /// });
    /// ```
    pub fn reunite(self, other: OwnedWriteHalf) -> Result<TcpStream, ReuniteError> {
        if Arc::ptr_eq(&self.inner, &other.inner) {
            let mut other = other;
            other.shutdown_on_drop = false;
            drop(other);
            Ok(TcpStream { inner: self.inner })
        } else {
            Err(ReuniteError(self, other))
        }
    }

    /// The local address of the connection.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let (rd, _wr) = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap().into_split();
    ///     assert!(rd.local_addr().unwrap().ip().is_loopback());
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The address of the connection's peer.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     let (rd, _wr) = TcpStream::connect(addr).await.unwrap().into_split();
    ///     assert_eq!(rd.peer_addr().unwrap(), addr);
    /// });
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }
}

impl OwnedWriteHalf {
    /// Drops the half without shutting the write side down, as tokio's `forget`.
    ///
    /// ```
    /// use futures_lite::AsyncWriteExt;
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let (rd, wr) = client.into_split();
    ///     wr.forget();
    ///     assert!(rd.peer_addr().is_ok());
    /// });
    /// ```
    pub fn forget(mut self) {
        self.shutdown_on_drop = false;
    }

    /// The local address of the connection.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let (_rd, wr) = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap().into_split();
    ///     assert!(wr.local_addr().unwrap().ip().is_loopback());
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The address of the connection's peer.
    ///
    /// ```
    /// use rondo::net::{TcpListener, TcpStream};
    ///
    /// rondo::block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    ///     let addr = listener.local_addr().unwrap();
    ///     let (_rd, wr) = TcpStream::connect(addr).await.unwrap().into_split();
    ///     assert_eq!(wr.peer_addr().unwrap(), addr);
    /// });
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        if self.shutdown_on_drop {
            let _ = shutdown_write(self.inner.get_ref());
        }
    }
}

/// futures-io's `AsyncRead` through `&Async` (async-io reads with `&self`).
macro_rules! read_through_arc {
    ($($ty:ty),*) => {
        $(
            impl AsyncRead for $ty {
                fn poll_read(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    buf: &mut [u8],
                ) -> Poll<io::Result<usize>> {
                    Pin::new(&mut &*self.inner).poll_read(cx, buf)
                }

                fn poll_read_vectored(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    bufs: &mut [io::IoSliceMut<'_>],
                ) -> Poll<io::Result<usize>> {
                    Pin::new(&mut &*self.inner).poll_read_vectored(cx, bufs)
                }
            }
        )*
    };
}

/// futures-io's `AsyncWrite` through `&Async`; `close` shuts the write side down.
macro_rules! write_through_arc {
    ($($ty:ty),*) => {
        $(
            impl AsyncWrite for $ty {
                fn poll_write(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    buf: &[u8],
                ) -> Poll<io::Result<usize>> {
                    Pin::new(&mut &*self.inner).poll_write(cx, buf)
                }

                fn poll_write_vectored(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    bufs: &[io::IoSlice<'_>],
                ) -> Poll<io::Result<usize>> {
                    Pin::new(&mut &*self.inner).poll_write_vectored(cx, bufs)
                }

                fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                    // A socket buffers nothing in user space.
                    Poll::Ready(Ok(()))
                }

                fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                    Poll::Ready(super::tcp::shutdown_stream(self.inner.get_ref()))
                }
            }
        )*
    };
}

pub(super) use {read_through_arc, write_through_arc};

/// Half-closes a stream socket, for [`write_through_arc`].
pub(super) trait ShutdownWrite {
    /// Shuts the write side down.
    fn shutdown_write(&self) -> io::Result<()>;
}

impl ShutdownWrite for std::net::TcpStream {
    fn shutdown_write(&self) -> io::Result<()> {
        shutdown_write(self)
    }
}

pub(super) fn shutdown_stream<S: ShutdownWrite>(s: &S) -> io::Result<()> {
    s.shutdown_write()
}

read_through_arc!(TcpStream, OwnedReadHalf);
write_through_arc!(TcpStream, OwnedWriteHalf);
