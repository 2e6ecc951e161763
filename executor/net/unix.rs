//! Unix domain sockets: [`UnixListener`], [`UnixStream`] and a stream's owned halves, as tokio's
//! `tokio::net::unix`. The halves share the socket by `Arc` with no lock, as the TCP ones do.

use std::fmt;
use std::io;
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_io::Async;
use futures_lite::io::{AsyncRead, AsyncWrite};
use socket2::{Domain, SockAddr, Socket, Type};

use super::BACKLOG;
use super::tcp::{ShutdownWrite, read_through_arc, write_through_arc};

/// A Unix domain socket listening for connections, as tokio's `UnixListener`, with a listen
/// backlog of [`BACKLOG`].
///
/// ```
/// use rondo::net::{UnixListener, UnixStream};
///
/// let dir = std::env::temp_dir().join(format!("rondo-doc-ul-{}", std::process::id()));
/// let _ = std::fs::remove_file(&dir);
/// rondo::block_on(async {
///     let listener = UnixListener::bind(&dir).unwrap();
///     let _client = UnixStream::connect(&dir).await.unwrap();
///     let (_stream, _peer) = listener.accept().await.unwrap();
/// });
/// std::fs::remove_file(&dir).unwrap();
/// ```
pub struct UnixListener {
    inner: Async<std::os::unix::net::UnixListener>,
}

impl fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnixListener")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl UnixListener {
    /// Binds a listener to the socket file at `path`, which must not exist yet.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rondo-doc-ub-{}", std::process::id()));
    /// let _ = std::fs::remove_file(&path);
    /// rondo::block_on(async {
    ///     let listener = rondo::net::UnixListener::bind(&path).unwrap();
    ///     assert_eq!(listener.local_addr().unwrap().as_pathname(), Some(path.as_path()));
    /// });
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
        socket.bind(&SockAddr::unix(path)?)?;
        socket.listen(BACKLOG)?;
        Ok(UnixListener {
            inner: Async::new(std::os::unix::net::UnixListener::from(std::os::fd::OwnedFd::from(
                socket,
            )))?,
        })
    }

    /// Wraps a standard library listener (made non-blocking here), as tokio's `from_std`.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rondo-doc-uf-{}", std::process::id()));
    /// let _ = std::fs::remove_file(&path);
    /// let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    /// assert!(rondo::net::UnixListener::from_std(std_listener).is_ok());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        Ok(UnixListener {
            inner: Async::new(listener)?,
        })
    }

    /// Waits for the next connection and returns it with the peer's address (usually unnamed).
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rondo-doc-ua-{}", std::process::id()));
    /// let _ = std::fs::remove_file(&path);
    /// rondo::block_on(async {
    ///     let listener = rondo::net::UnixListener::bind(&path).unwrap();
    ///     let _c = rondo::net::UnixStream::connect(&path).await.unwrap();
    ///     let (_s, peer) = listener.accept().await.unwrap();
    ///     assert!(peer.is_unnamed());
    /// });
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub async fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (stream, peer) = self.inner.accept().await?;
        Ok((UnixStream::from_async(stream), peer))
    }

    /// The address the listener is bound to.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rondo-doc-ul2-{}", std::process::id()));
    /// let _ = std::fs::remove_file(&path);
    /// let listener = rondo::net::UnixListener::bind(&path).unwrap();
    /// assert_eq!(listener.local_addr().unwrap().as_pathname(), Some(path.as_path()));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }
}

/// A Unix domain stream, as tokio's `UnixStream`: futures-io's `AsyncRead` and `AsyncWrite`, a
/// half-closing [`shutdown`](UnixStream::shutdown), and [`into_split`](UnixStream::into_split).
///
/// ```
/// use futures_lite::{AsyncReadExt, AsyncWriteExt};
///
/// rondo::block_on(async {
///     let (mut a, mut b) = rondo::net::UnixStream::pair().unwrap();
///     a.write_all(b"hi").await.unwrap();
///     a.shutdown().await.unwrap();
///     let mut got = String::new();
///     b.read_to_string(&mut got).await.unwrap();
///     assert_eq!(got, "hi");
/// });
/// ```
pub struct UnixStream {
    inner: Arc<Async<std::os::unix::net::UnixStream>>,
}

impl fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnixStream")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl UnixStream {
    fn from_async(inner: Async<std::os::unix::net::UnixStream>) -> UnixStream {
        UnixStream {
            inner: Arc::new(inner),
        }
    }

    /// Connects to the socket file at `path`.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rondo-doc-uc-{}", std::process::id()));
    /// let _ = std::fs::remove_file(&path);
    /// rondo::block_on(async {
    ///     let _listener = rondo::net::UnixListener::bind(&path).unwrap();
    ///     let s = rondo::net::UnixStream::connect(&path).await.unwrap();
    ///     assert_eq!(s.peer_addr().unwrap().as_pathname(), Some(path.as_path()));
    /// });
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        Ok(UnixStream::from_async(
            Async::<std::os::unix::net::UnixStream>::connect(path).await?,
        ))
    }

    /// A connected pair of unnamed sockets.
    ///
    /// ```
    /// let (a, b) = rondo::net::UnixStream::pair().unwrap();
    /// assert!(a.local_addr().unwrap().is_unnamed() && b.peer_addr().unwrap().is_unnamed());
    /// ```
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = Async::<std::os::unix::net::UnixStream>::pair()?;
        Ok((UnixStream::from_async(a), UnixStream::from_async(b)))
    }

    /// Wraps a connected standard library stream (made non-blocking here), as tokio's
    /// `from_std`.
    ///
    /// ```
    /// let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    /// assert!(rondo::net::UnixStream::from_std(a).is_ok());
    /// ```
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        Ok(UnixStream::from_async(Async::new(stream)?))
    }

    /// The local address of the connection.
    ///
    /// ```
    /// let (a, _b) = rondo::net::UnixStream::pair().unwrap();
    /// assert!(a.local_addr().unwrap().is_unnamed());
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The address of the connection's peer.
    ///
    /// ```
    /// let (a, _b) = rondo::net::UnixStream::pair().unwrap();
    /// assert!(a.peer_addr().unwrap().is_unnamed());
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }

    /// Shuts the write side down, as tokio's `shutdown`: the peer reads end of file, and this
    /// side can still read. futures-io's `close` does the same.
    ///
    /// ```
    /// use futures_lite::{AsyncReadExt, AsyncWriteExt};
    ///
    /// rondo::block_on(async {
    ///     let (mut a, mut b) = rondo::net::UnixStream::pair().unwrap();
    ///     a.shutdown().await.unwrap();
    ///     assert_eq!(b.read(&mut [0; 4]).await.unwrap(), 0);
    ///     b.write_all(b"back").await.unwrap();
    ///     let mut buf = [0; 4];
    ///     a.read_exact(&mut buf).await.unwrap();
    /// });
    /// ```
    pub async fn shutdown(&self) -> io::Result<()> {
        self.inner.get_ref().shutdown_write()
    }

    /// Polls for read readiness, as tokio's `poll_read_ready` (see
    /// [`TcpStream::poll_read_ready`](super::TcpStream::poll_read_ready)).
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use futures_lite::AsyncWriteExt;
    ///
    /// rondo::block_on(async {
    ///     let (mut a, b) = rondo::net::UnixStream::pair().unwrap();
    ///     a.write_all(b"x").await.unwrap();
    ///     poll_fn(|cx| b.poll_read_ready(cx)).await.unwrap();
    /// });
    /// ```
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_readable(cx)
    }

    /// Splits the stream into halves that own it together, with no lock (see
    /// [`TcpStream::into_split`](super::TcpStream::into_split)).
    ///
    /// ```
    /// use futures_lite::{AsyncReadExt, AsyncWriteExt};
    ///
    /// rondo::block_on(async {
    ///     let (a, mut b) = rondo::net::UnixStream::pair().unwrap();
    ///     let (mut rd, mut wr) = a.into_split();
    ///     wr.write_all(b"1").await.unwrap();
    ///     b.write_all(b"2").await.unwrap();
    ///     let mut buf = [0];
    ///     rd.read_exact(&mut buf).await.unwrap();
    ///     assert_eq!(&buf, b"2");
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

impl ShutdownWrite for std::os::unix::net::UnixStream {
    fn shutdown_write(&self) -> io::Result<()> {
        match self.shutdown(std::net::Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            r => r,
        }
    }
}

/// The read half of a [`UnixStream`], from [`UnixStream::into_split`].
///
/// ```
/// let (a, _b) = rondo::net::UnixStream::pair().unwrap();
/// let (rd, _wr) = a.into_split();
/// assert!(format!("{rd:?}").contains("OwnedReadHalf"));
/// ```
pub struct OwnedReadHalf {
    inner: Arc<Async<std::os::unix::net::UnixStream>>,
}

/// The write half of a [`UnixStream`], from [`UnixStream::into_split`]. Closing or dropping it
/// shuts the write side down.
///
/// ```
/// use futures_lite::AsyncReadExt;
///
/// rondo::block_on(async {
///     let (a, mut b) = rondo::net::UnixStream::pair().unwrap();
///     let (_rd, wr) = a.into_split();
///     drop(wr);
///     assert_eq!(b.read(&mut [0; 1]).await.unwrap(), 0);
/// });
/// ```
pub struct OwnedWriteHalf {
    inner: Arc<Async<std::os::unix::net::UnixStream>>,
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

impl OwnedReadHalf {
    /// Puts the halves of one stream back together; halves of two streams are given back.
    ///
    /// ```
    /// let (a, b) = rondo::net::UnixStream::pair().unwrap();
    /// let (rd, wr) = a.into_split();
    /// let (_rd2, wr2) = b.into_split();
    /// let (rd, _wr2) = rd.reunite(wr2).unwrap_err();
    /// assert!(rd.reunite(wr).is_ok());
    /// ```
    pub fn reunite(self, other: OwnedWriteHalf) -> Result<UnixStream, (OwnedReadHalf, OwnedWriteHalf)> {
        if Arc::ptr_eq(&self.inner, &other.inner) {
            let mut other = other;
            other.shutdown_on_drop = false;
            drop(other);
            Ok(UnixStream { inner: self.inner })
        } else {
            Err((self, other))
        }
    }
}

impl OwnedWriteHalf {
    /// Drops the half without shutting the write side down, as tokio's `forget`.
    ///
    /// ```
    /// let (a, _b) = rondo::net::UnixStream::pair().unwrap();
    /// let (_rd, wr) = a.into_split();
    /// wr.forget();
    /// ```
    pub fn forget(mut self) {
        self.shutdown_on_drop = false;
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        if self.shutdown_on_drop {
            let _ = self.inner.get_ref().shutdown_write();
        }
    }
}

read_through_arc!(UnixStream, OwnedReadHalf);
write_through_arc!(UnixStream, OwnedWriteHalf);
