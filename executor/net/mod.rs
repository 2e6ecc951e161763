//! TCP, UDP and Unix sockets on async-io's reactor, with tokio's names. Enabled by the `io`
//! feature (on by default).
//!
//! rondo writes no reactor: each socket here is an `async_io::Async` of the standard library's
//! socket, registered with async-io's reactor, which rondo's idle workers drive (a parked worker
//! sleeps in it and dispatches readiness events). What this module adds over async-io's sockets:
//!
//! - **Host names.** [`TcpListener::bind`], [`TcpStream::connect`], [`UdpSocket::bind`],
//!   [`UdpSocket::connect`] and [`UdpSocket::send_to`] take anything [`ToSocketAddrs`]: a
//!   [`SocketAddr`](std::net::SocketAddr), an `(ip, port)` pair, or a `"host:port"` string. A literal address is parsed
//!   in place; a host name is resolved with the system resolver on rondo's blocking pool
//!   ([`spawn_blocking`](crate::spawn_blocking)), so the lookup is counted as a task of the
//!   caller's group and never blocks a worker. `connect` tries each resolved address in turn and
//!   returns the last error if none accepts.
//! - **tokio's listen backlog.** Listeners are created with a backlog of [`BACKLOG`] (1,024, as
//!   tokio's), not the 128 of the standard library's `bind`: a burst of connects beyond the
//!   backlog overflows the kernel's accept queue, and each connect that overflows waits a SYN
//!   retry (a second or more).
//! - **Half-close.** [`TcpStream::shutdown`], and `close` through futures-io's `AsyncWriteExt`,
//!   shut the write side down (the peer reads end of file) while reads go on, as tokio's
//!   `shutdown` does. async-io's own `close` only flushes.
//! - **Owned halves without a lock.** [`TcpStream::into_split`] and `UnixStream::into_split`
//!   share the socket by `Arc`: async-io's reads and writes take `&self`, so the halves are used
//!   from two tasks at once with no lock between them.
//!
//! Streams and halves implement futures-io's `AsyncRead` and `AsyncWrite` (use them through
//! `futures_lite::AsyncReadExt` and `AsyncWriteExt`, or the `futures` crate's), and
//! `rondo::hyper::Io` (feature `hyper`) adapts them to hyper.
//!
//! The sockets work outside any runtime too (with a `block_on` of any executor), except that a
//! host name is then resolved on the global runtime's blocking pool.
//!
//! ```
//! use futures_lite::{AsyncReadExt, AsyncWriteExt};
//! use rondo::net::{TcpListener, TcpStream};
//!
//! rondo::block_on(async {
//!     let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     let server = rondo::spawn(async move {
//!         let (mut stream, _peer) = listener.accept().await.unwrap();
//!         let mut buf = [0; 4];
//!         stream.read_exact(&mut buf).await.unwrap();
//!         stream.write_all(&buf).await.unwrap();
//!     });
//!     let mut client = TcpStream::connect(addr).await.unwrap();
//!     client.write_all(b"ping").await.unwrap();
//!     let mut echo = [0; 4];
//!     client.read_exact(&mut echo).await.unwrap();
//!     assert_eq!(&echo, b"ping");
//!     server.await.unwrap();
//! });
//! ```

mod addr;
mod tcp;
mod udp;
#[cfg(unix)]
pub mod unix;

pub use addr::{ToSocketAddrs, lookup_host};
pub use tcp::{OwnedReadHalf, OwnedWriteHalf, ReuniteError, TcpListener, TcpStream};
pub use udp::UdpSocket;
#[cfg(unix)]
pub use unix::{UnixListener, UnixStream};

/// The listen backlog of the listeners this module creates: the length of the kernel's queue of
/// connections that completed their handshake and wait for `accept`. The same as tokio's; the
/// kernel caps it at its own limit (`net.core.somaxconn` on Linux).
pub const BACKLOG: i32 = 1024;
