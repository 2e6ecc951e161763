//! [`UdpSocket`]: datagrams on async-io's reactor, with tokio's names.

use std::fmt;
use std::io;
use std::net::SocketAddr;

use async_io::Async;

use super::addr::{ToSocketAddrs, each_addr, resolve};

/// A UDP socket, as tokio's `UdpSocket`. Every method takes `&self`, so an `Arc<UdpSocket>` sends
/// and receives from several tasks at once.
///
/// ```
/// use rondo::net::UdpSocket;
///
/// rondo::block_on(async {
///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
///     a.send_to(b"ping", b.local_addr().unwrap()).await.unwrap();
///     let mut buf = [0; 16];
///     let (n, from) = b.recv_from(&mut buf).await.unwrap();
///     assert_eq!((&buf[..n], from), (&b"ping"[..], a.local_addr().unwrap()));
/// });
/// ```
pub struct UdpSocket {
    inner: Async<std::net::UdpSocket>,
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UdpSocket")
            .field(self.inner.get_ref())
            .finish()
    }
}

impl UdpSocket {
    /// Binds a socket to `addr` (see [`ToSocketAddrs`]); each resolved address is tried in turn.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind(("localhost", 0)).await.unwrap();
    ///     assert!(s.local_addr().unwrap().ip().is_loopback());
    /// });
    /// ```
    pub async fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpSocket> {
        each_addr(addr, |a| async move {
            Ok(UdpSocket {
                inner: Async::<std::net::UdpSocket>::bind(a)?,
            })
        })
        .await
    }

    /// Wraps a standard library socket (made non-blocking here), as tokio's `from_std`.
    ///
    /// ```
    /// let std_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    /// let s = rondo::net::UdpSocket::from_std(std_socket).unwrap();
    /// assert!(s.local_addr().is_ok());
    /// ```
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        Ok(UdpSocket {
            inner: Async::new(socket)?,
        })
    }

    /// Sets the peer that [`send`](UdpSocket::send) sends to and the only one
    /// [`recv`](UdpSocket::recv) receives from. A host name is resolved on rondo's blocking pool;
    /// each address is tried in turn.
    ///
    /// ```
    /// use rondo::net::UdpSocket;
    ///
    /// rondo::block_on(async {
    ///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     a.connect(b.local_addr().unwrap()).await.unwrap();
    ///     assert_eq!(a.peer_addr().unwrap(), b.local_addr().unwrap());
    /// });
    /// ```
    pub async fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        each_addr(addr, |a| async move { self.inner.get_ref().connect(a) }).await
    }

    /// Sends a datagram to `target`, as tokio's `send_to`: a host name is resolved on rondo's
    /// blocking pool and the datagram goes to its first address.
    ///
    /// ```
    /// use rondo::net::UdpSocket;
    ///
    /// rondo::block_on(async {
    ///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     assert_eq!(a.send_to(b"hey", b.local_addr().unwrap()).await.unwrap(), 3);
    /// });
    /// ```
    pub async fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], target: A) -> io::Result<usize> {
        match resolve(target).await?.first() {
            Some(addr) => self.inner.send_to(buf, *addr).await,
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no addresses to send data to",
            )),
        }
    }

    /// Receives a datagram, returning its length and its sender's address. A datagram longer
    /// than `buf` is cut to its length.
    ///
    /// ```
    /// use rondo::net::UdpSocket;
    ///
    /// rondo::block_on(async {
    ///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     a.send_to(b"1", b.local_addr().unwrap()).await.unwrap();
    ///     let mut buf = [0; 8];
    ///     assert_eq!(b.recv_from(&mut buf).await.unwrap(), (1, a.local_addr().unwrap()));
    /// });
    /// ```
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.recv_from(buf).await
    }

    /// Sends a datagram to the connected peer (see [`connect`](UdpSocket::connect)).
    ///
    /// ```
    /// use rondo::net::UdpSocket;
    ///
    /// rondo::block_on(async {
    ///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     a.connect(b.local_addr().unwrap()).await.unwrap();
    ///     b.connect(a.local_addr().unwrap()).await.unwrap();
    ///     a.send(b"ok").await.unwrap();
    ///     let mut buf = [0; 8];
    ///     assert_eq!(b.recv(&mut buf).await.unwrap(), 2);
    /// });
    /// ```
    pub async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.inner.send(buf).await
    }

    /// Receives a datagram from the connected peer (see [`connect`](UdpSocket::connect)).
    ///
    /// ```
    /// use rondo::net::UdpSocket;
    ///
    /// rondo::block_on(async {
    ///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     b.connect(a.local_addr().unwrap()).await.unwrap();
    ///     a.send_to(b"abc", b.local_addr().unwrap()).await.unwrap();
    ///     let mut buf = [0; 8];
    ///     let n = b.recv(&mut buf).await.unwrap();
    ///     assert_eq!(&buf[..n], b"abc");
    /// });
    /// ```
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.recv(buf).await
    }

    /// Receives a datagram without removing it from the queue; returns its length and sender.
    ///
    /// ```
    /// use rondo::net::UdpSocket;
    ///
    /// rondo::block_on(async {
    ///     let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     a.send_to(b"p", b.local_addr().unwrap()).await.unwrap();
    ///     let mut buf = [0; 8];
    ///     assert_eq!(b.peek_from(&mut buf).await.unwrap().0, 1);
    ///     assert_eq!(b.recv_from(&mut buf).await.unwrap().0, 1); // still there
    /// });
    /// ```
    pub async fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.peek_from(buf).await
    }

    /// The address the socket is bound to.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     assert_ne!(s.local_addr().unwrap().port(), 0);
    /// });
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The connected peer's address; an error if the socket is not connected.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     assert!(s.peer_addr().is_err());
    /// });
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().peer_addr()
    }

    /// Sets `SO_BROADCAST`: whether datagrams may be sent to a broadcast address.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     s.set_broadcast(true).unwrap();
    ///     assert!(s.broadcast().unwrap());
    /// });
    /// ```
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.inner.get_ref().set_broadcast(on)
    }

    /// Whether `SO_BROADCAST` is set.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     assert!(!s.broadcast().unwrap());
    /// });
    /// ```
    pub fn broadcast(&self) -> io::Result<bool> {
        self.inner.get_ref().broadcast()
    }

    /// Sets the time-to-live of the socket's IP packets.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     s.set_ttl(9).unwrap();
    ///     assert_eq!(s.ttl().unwrap(), 9);
    /// });
    /// ```
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.get_ref().set_ttl(ttl)
    }

    /// The time-to-live of the socket's IP packets.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let s = rondo::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    ///     assert!(s.ttl().unwrap() > 0);
    /// });
    /// ```
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.get_ref().ttl()
    }
}
