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

/// Adapts a `futures-io` stream (an `async_io::Async<TcpStream>`, a `UnixStream`, a TLS stream)
/// to [`hyper::rt::Read`] and [`hyper::rt::Write`], for hyper's servers and clients.
///
/// hyper reads into memory it has not initialized, and a `futures-io` read must be given
/// initialized bytes. Zeroing hyper's read buffer before every read (8 KiB or more, and also for
/// a read that finds nothing) costs more than the read usually brings in, so `Io` reads into a
/// buffer of its thread that was zeroed once, and copies only the bytes that arrived. Writes go
/// straight through.
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
///         .serve_connection(Io::new(stream), service_fn(hello))
///         .await
/// });
/// let mut client = TcpStream::connect(addr).unwrap();
/// client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
/// let mut reply = String::new();
/// client.read_to_string(&mut reply).unwrap();
/// assert!(reply.ends_with("hello"));
/// rt.block_on(server).unwrap().unwrap();
/// ```
#[derive(Debug)]
pub struct Io<T> {
    inner: T,
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
        Io { inner }
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
        let want = buf.remaining().min(SCRATCH);
        let inner = Pin::new(&mut self.inner);
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
        match (shared, read) {
            (Ok(Some(polled)), _) => polled,
            // The thread's buffer is in use (a stream that reads through another `Io` inside its
            // own read) or gone (thread teardown): a buffer of this read's own.
            (_, Some(f)) => f(&mut vec![0; want], &mut buf),
            (_, None) => unreachable!("the read ran, so it returned its result"),
        }
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
}
