//! [`Io`]: hyper's I/O traits over any `futures-io` stream, such as `async_io::Async<TcpStream>`.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_lite::io::{AsyncRead, AsyncWrite};
use hyper::rt::ReadBufCursor;

/// The most one read moves: what one thread's scratch buffer holds.
const SCRATCH: usize = 16 * 1024;

thread_local! {
    /// Initialized once per thread: a `futures-io` read needs initialized bytes, and hyper hands
    /// out uninitialized ones (see [`Io`]).
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// Waits for a stream to become readable without reading (async-io's `Async::poll_readable`).
type PollReadable<T> = fn(&T, &mut Context<'_>) -> Poll<io::Result<()>>;

/// Adapts a `futures-io` stream (an `async_io::Async<TcpStream>`, a `UnixStream`, a TLS stream)
/// to [`hyper::rt::Read`] and [`hyper::rt::Write`], for hyper's servers and clients.
///
/// hyper reads into memory it has not initialized, and a `futures-io` read must be given
/// initialized bytes. Zeroing hyper's read buffer before every read (8 KiB or more, and also for
/// a read that finds nothing) costs more than the read usually brings in, so `Io` reads into a
/// buffer of its thread that was zeroed once, and copies only the bytes that arrived. Writes go
/// straight through. For async-io's sockets, [`from_async`](Io::from_async) also skips the reads
/// that would find the socket empty.
///
/// ```
/// use std::convert::Infallible;
/// use std::io::{Read, Write};
/// use std::net::{TcpListener, TcpStream};
///
/// use async_io::Async;
/// use http_body_util::Full;
/// use hyper::body::{Bytes, Incoming};
/// use hyper::server::conn::http1;
/// use hyper::service::service_fn;
/// use hyper::{Request, Response};
/// use rondo::hyper::{Io, RondoTimer};
///
/// async fn hello(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
///     Ok(Response::new(Full::new(Bytes::from("hello"))))
/// }
///
/// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
/// let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
/// let addr = listener.get_ref().local_addr().unwrap();
/// let server = rt.spawn(async move {
///     let (stream, _) = listener.accept().await.unwrap();
///     http1::Builder::new()
///         .timer(RondoTimer::new())
///         .serve_connection(Io::from_async(stream), service_fn(hello))
///         .await
/// });
/// let mut client = TcpStream::connect(addr).unwrap();
/// client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
/// let mut reply = String::new();
/// client.read_to_string(&mut reply).unwrap();
/// assert!(reply.ends_with("hello"));
/// rt.block_on(server).unwrap().unwrap();
/// ```
pub struct Io<T> {
    inner: T,
    /// Set by [`from_async`](Io::from_async): waits for the stream to become readable, with no
    /// read (async-io's `Async::poll_readable`).
    readiness: Option<PollReadable<T>>,
    /// The last read returned less than it asked for: the socket had nothing more then.
    drained: bool,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Io<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Io")
            .field("inner", &self.inner)
            .field("readiness", &self.readiness.is_some())
            .finish()
    }
}

impl<T> Io<T> {
    /// Wraps `inner`.
    ///
    /// ```
    /// let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    /// let io = rondo::hyper::Io::new(async_io::Async::new(a).unwrap());
    /// assert!(io.get_ref().get_ref().peer_addr().is_ok());
    /// ```
    pub fn new(inner: T) -> Self {
        Io {
            inner,
            readiness: None,
            drained: false,
        }
    }

    /// The wrapped stream.
    ///
    /// ```
    /// let io = rondo::hyper::Io::new(futures_lite::io::Cursor::new(vec![1u8, 2]));
    /// assert_eq!(io.get_ref().get_ref(), &vec![1u8, 2]);
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped stream, mutably.
    ///
    /// ```
    /// let mut io = rondo::hyper::Io::new(futures_lite::io::Cursor::new(vec![1u8, 2]));
    /// io.get_mut().set_position(1);
    /// assert_eq!(io.get_ref().position(), 1);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Unwraps the stream.
    ///
    /// ```
    /// let io = rondo::hyper::Io::new(futures_lite::io::Cursor::new(vec![1u8, 2]));
    /// assert_eq!(io.into_inner().into_inner(), vec![1, 2]);
    /// ```
    pub fn into_inner(self) -> T {
        self.inner
    }
}

cfg_reactor! {
    impl<S> Io<async_io::Async<S>> {
        /// Wraps an async-io stream, and skips the reads that would find its socket empty.
        ///
        /// A read that returns less than it asked for left the socket empty. async-io's own read
        /// tries the socket first and waits for readiness only after that failed, so the next read
        /// costs a system call that fails and, while the readiness event that delivered the data is
        /// not yet consumed, often a second one; HTTP/1.1 keep-alive makes such a read per request.
        /// An `Io` from this constructor waits for readiness first after a short read, which costs
        /// only the re-registration the failed read would have made. [`new`](Io::new) works with any
        /// stream; use this one for `Async<TcpStream>` and `Async<UnixStream>`.
        ///
        /// ```
        /// use std::io::Write;
        /// use std::pin::Pin;
        ///
        /// use async_io::Async;
        /// use hyper::rt::{Read, ReadBuf};
        ///
        /// let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        /// let mut io = rondo::hyper::Io::from_async(Async::new(a).unwrap());
        /// let mut raw = [std::mem::MaybeUninit::uninit(); 64];
        /// let mut buf = ReadBuf::uninit(&mut raw);
        /// b.write_all(b"ping").unwrap();
        /// async_io::block_on(std::future::poll_fn(|cx| {
        ///     Pin::new(&mut io).poll_read(cx, buf.unfilled())
        /// }))
        /// .unwrap();
        /// assert_eq!(buf.filled(), b"ping");
        /// ```
        pub fn from_async(inner: async_io::Async<S>) -> Self {
            Io {
                inner,
                readiness: Some(async_io::Async::poll_readable),
                drained: false,
            }
        }
    }
}

cfg_reactor! {
    impl Io<crate::net::TcpStream> {
        /// Wraps a [`rondo::net::TcpStream`](crate::net::TcpStream), and skips the reads that
        /// would find its socket empty, as [`from_async`](Io::from_async) does.
        ///
        /// ```
        /// rondo::block_on(async {
        ///     let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ///     let stream = rondo::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        ///     let io = rondo::hyper::Io::from_tcp(stream);
        ///     assert!(io.get_ref().peer_addr().is_ok());
        /// });
        /// ```
        pub fn from_tcp(inner: crate::net::TcpStream) -> Self {
            Io {
                inner,
                readiness: Some(crate::net::TcpStream::poll_read_ready),
                drained: false,
            }
        }
    }

    impl Io<crate::net::UnixStream> {
        /// Wraps a [`rondo::net::UnixStream`](crate::net::UnixStream), and skips the reads that
        /// would find its socket empty, as [`from_async`](Io::from_async) does.
        ///
        /// ```
        /// let (a, _b) = rondo::net::UnixStream::pair().unwrap();
        /// let io = rondo::hyper::Io::from_unix(a);
        /// assert!(io.get_ref().peer_addr().is_ok());
        /// ```
        pub fn from_unix(inner: crate::net::UnixStream) -> Self {
            Io {
                inner,
                readiness: Some(crate::net::UnixStream::poll_read_ready),
                drained: false,
            }
        }
    }
}

impl<T> From<T> for Io<T> {
    fn from(inner: T) -> Self {
        Io::new(inner)
    }
}

impl<T: AsyncRead + Unpin> hyper::rt::Read for Io<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let (Some(readable), true) = (this.readiness, this.drained) {
            // The socket was empty at the last read: wait until it is readable, with no read.
            ready!(readable(&this.inner, cx))?;
            this.drained = false;
        }
        let want = buf.remaining().min(SCRATCH);
        let before = buf.remaining();
        let inner = Pin::new(&mut this.inner);
        let mut read = Some(|scratch: &mut [u8], buf: &mut ReadBufCursor<'_>| {
            let n = ready!(inner.poll_read(cx, &mut scratch[..want]))?;
            // A stream that claims more than it was given breaks `AsyncRead`'s contract; the
            // slice index panics then, inside the task that polls this connection.
            buf.put_slice(&scratch[..n]);
            Poll::Ready(Ok(()))
        });
        let shared = SCRATCH_BUF.try_with(|s| {
            let mut scratch = s.try_borrow_mut().ok()?;
            read.take().map(|f| f(&mut scratch, &mut buf))
        });
        let polled = match (shared, read) {
            (Ok(Some(polled)), _) => polled,
            // The thread's buffer is in use (a stream that reads through another `Io` inside its
            // own read) or gone (thread teardown): a buffer of this read's own.
            (_, Some(f)) => f(&mut vec![0; want], &mut buf),
            (_, None) => unreachable!("the read ran, so it returned its result"),
        };
        if let (Some(readable), Poll::Ready(Ok(()))) = (this.readiness, &polled) {
            if want > 0 && before - buf.remaining() < want {
                // Short: the socket is empty now. Consume the readiness event that brought this
                // data (or register for the next), so the next read waits for a new event.
                this.drained = true;
                let _ = readable(&this.inner, cx);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> hyper::rt::Write for Io<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    use futures_lite::io::Cursor;
    use hyper::rt::{Read, ReadBuf, Write};

    fn noop_cx<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
        f(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// Reads `io` to its end through hyper's cursor, `cap` bytes of room per read.
    fn read_all<T: AsyncRead + Unpin>(io: &mut Io<T>, cap: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut raw = vec![MaybeUninit::<u8>::uninit(); cap];
            let mut buf = ReadBuf::uninit(&mut raw);
            let polled = noop_cx(|cx| Pin::new(&mut *io).poll_read(cx, buf.unfilled()));
            assert!(matches!(polled, Poll::Ready(Ok(()))));
            if buf.filled().is_empty() {
                return out;
            }
            out.extend_from_slice(buf.filled());
        }
    }

    #[test]
    fn reads_arrive_whole_in_small_and_large_reads() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for cap in [1, 100, SCRATCH, 3 * SCRATCH] {
            let mut io = Io::new(Cursor::new(data.clone()));
            assert_eq!(read_all(&mut io, cap), data, "room {cap}");
        }
    }

    /// A stream whose read goes through another `Io` finds the thread's buffer taken, and gets
    /// one of its own.
    #[test]
    fn a_read_nested_in_a_read_still_arrives() {
        struct Nested(Io<Cursor<Vec<u8>>>);
        impl AsyncRead for Nested {
            fn poll_read(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                out: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                let mut raw = vec![MaybeUninit::<u8>::uninit(); out.len()];
                let mut buf = ReadBuf::uninit(&mut raw);
                ready!(Pin::new(&mut self.0).poll_read(cx, buf.unfilled()))?;
                let n = buf.filled().len();
                out[..n].copy_from_slice(buf.filled());
                Poll::Ready(Ok(n))
            }
        }
        let data = b"nested reads".repeat(5000);
        let mut io = Io::new(Nested(Io::new(Cursor::new(data.clone()))));
        assert_eq!(read_all(&mut io, 1000), data);
    }

    #[test]
    fn writes_flush_and_shutdown_reach_the_stream() {
        let mut io = Io::new(Cursor::new(Vec::new()));
        let wrote = noop_cx(|cx| Pin::new(&mut io).poll_write(cx, b"abc"));
        assert!(matches!(wrote, Poll::Ready(Ok(3))));
        let bufs = [io::IoSlice::new(b"de"), io::IoSlice::new(b"f")];
        let wrote = noop_cx(|cx| Pin::new(&mut io).poll_write_vectored(cx, &bufs));
        assert!(matches!(wrote, Poll::Ready(Ok(n)) if n >= 2));
        assert!(noop_cx(|cx| Pin::new(&mut io).poll_flush(cx)).is_ready());
        assert!(noop_cx(|cx| Pin::new(&mut io).poll_shutdown(cx)).is_ready());
        assert!(io.into_inner().into_inner().starts_with(b"abcde"));
    }

    cfg_reactor! {
        /// A Unix socket whose reads are counted: each is a system call.
        struct CountedReads(
            std::os::unix::net::UnixStream,
            std::sync::Arc<std::sync::atomic::AtomicUsize>,
        );

        impl io::Read for CountedReads {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                self.0.read(out)
            }
        }

        // SAFETY: `CountedReads` never closes or replaces its socket's file descriptor while it is
        // borrowed: it only reads through it.
        unsafe impl async_io::IoSafe for CountedReads {}

        impl std::os::fd::AsFd for CountedReads {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.0.as_fd()
            }
        }

        /// After a read that returned less than it asked for, an `Io` from `from_async` waits for the
        /// socket to become readable instead of trying a read that fails (one or two failed reads per
        /// request before, under HTTP/1.1 keep-alive), and still gets the next data.
        #[test]
        fn from_async_does_not_read_an_empty_socket_after_a_short_read() {
            use std::io::Write as _;
            use std::sync::Arc;
            use std::sync::atomic::{AtomicUsize, Ordering};

            let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
            let reads = Arc::new(AtomicUsize::new(0));
            let stream = async_io::Async::new(CountedReads(a, reads.clone())).unwrap();
            let mut io = Io::from_async(stream);
            let poll = |io: &mut Io<_>| {
                let mut raw = vec![MaybeUninit::<u8>::uninit(); 64];
                let mut buf = ReadBuf::uninit(&mut raw);
                let polled = noop_cx(|cx| Pin::new(io).poll_read(cx, buf.unfilled()));
                polled.map(|r| r.map(|()| buf.filled().to_vec()))
            };
            b.write_all(b"one").unwrap();
            assert_eq!(
                poll(&mut io).map(Result::unwrap),
                Poll::Ready(b"one".to_vec())
            );
            assert_eq!(reads.load(Ordering::SeqCst), 1);
            // Short read: nothing is read until the socket is readable again.
            assert!(poll(&mut io).is_pending());
            assert!(poll(&mut io).is_pending());
            assert_eq!(reads.load(Ordering::SeqCst), 1, "read an empty socket");
            b.write_all(b"two").unwrap();
            let got = async_io::block_on(std::future::poll_fn(|cx| {
                let mut raw = vec![MaybeUninit::<u8>::uninit(); 64];
                let mut buf = ReadBuf::uninit(&mut raw);
                Pin::new(&mut io)
                    .poll_read(cx, buf.unfilled())
                    .map(|r| r.map(|()| buf.filled().to_vec()))
            }))
            .unwrap();
            assert_eq!(got, b"two");
            assert_eq!(reads.load(Ordering::SeqCst), 2);
        }
    }
}
