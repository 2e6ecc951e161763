//! [`ToSocketAddrs`]: the addresses a socket may be bound or connected to, and their resolution.
//!
//! A value names either addresses known at once (a `SocketAddr`, an `(ip, port)` pair, a string
//! that parses as a socket address) or a host name and port that the system resolver must look up.
//! The lookup is a blocking call (`getaddrinfo`), so it runs on rondo's blocking pool.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What a [`ToSocketAddrs`] value names: addresses known now, or a host name to look up.
#[derive(Debug)]
pub enum Resolve {
    /// Known without a lookup.
    Ready(Vec<SocketAddr>),
    /// A host name and a port, for the system resolver.
    Host(String, u16),
    /// A `"host:port"` string that is not a literal address, for the system resolver.
    HostPort(String),
}

mod sealed {
    /// Keeps [`ToSocketAddrs`](super::ToSocketAddrs) implemented only here, as tokio's is.
    pub trait Sealed {
        /// What the value names.
        fn resolve(&self) -> super::Resolve;
    }
}

/// The addresses a socket may be bound or connected to, as in tokio: a [`SocketAddr`] (or a V4 or
/// V6 one), an `(IpAddr, u16)` pair (or with an `Ipv4Addr` or `Ipv6Addr`), a `(&str, u16)` or
/// `(String, u16)` pair of host and port, a `"host:port"` string (`&str`, `String`), or a slice
/// of `SocketAddr`s; and a reference to any of them.
///
/// A literal address is used as it is. A host name is resolved with the system resolver on
/// rondo's blocking pool (see the [module docs](crate::net)). The trait is sealed: it cannot be
/// implemented outside rondo.
///
/// ```
/// use rondo::net::TcpListener;
///
/// rondo::block_on(async {
///     // A host name, resolved on the blocking pool.
///     let by_name = TcpListener::bind(("localhost", 0)).await.unwrap();
///     assert!(by_name.local_addr().unwrap().ip().is_loopback());
///     // A literal address, parsed in place.
///     let by_addr = TcpListener::bind("127.0.0.1:0").await.unwrap();
///     assert!(by_addr.local_addr().unwrap().port() > 0);
/// });
/// ```
pub trait ToSocketAddrs: sealed::Sealed {}

impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {
    fn resolve(&self) -> Resolve {
        (**self).resolve()
    }
}
impl<T: sealed::Sealed + ?Sized> ToSocketAddrs for &T {}

macro_rules! ready_addrs {
    ($($ty:ty => |$v:ident| $addrs:expr;)*) => {
        $(
            impl sealed::Sealed for $ty {
                fn resolve(&self) -> Resolve {
                    let $v = self;
                    Resolve::Ready($addrs)
                }
            }
            impl ToSocketAddrs for $ty {}
        )*
    };
}

ready_addrs! {
    SocketAddr => |a| vec![*a];
    SocketAddrV4 => |a| vec![SocketAddr::V4(*a)];
    SocketAddrV6 => |a| vec![SocketAddr::V6(*a)];
    (IpAddr, u16) => |a| vec![SocketAddr::new(a.0, a.1)];
    (Ipv4Addr, u16) => |a| vec![SocketAddr::new(IpAddr::V4(a.0), a.1)];
    (Ipv6Addr, u16) => |a| vec![SocketAddr::new(IpAddr::V6(a.0), a.1)];
    [SocketAddr] => |a| a.to_vec();
    Vec<SocketAddr> => |a| a.clone();
}

impl<const N: usize> sealed::Sealed for [SocketAddr; N] {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(self.to_vec())
    }
}
impl<const N: usize> ToSocketAddrs for [SocketAddr; N] {}

impl sealed::Sealed for str {
    fn resolve(&self) -> Resolve {
        match self.parse::<SocketAddr>() {
            Ok(addr) => Resolve::Ready(vec![addr]),
            Err(_) => Resolve::HostPort(self.to_owned()),
        }
    }
}
impl ToSocketAddrs for str {}

impl sealed::Sealed for String {
    fn resolve(&self) -> Resolve {
        self.as_str().resolve()
    }
}
impl ToSocketAddrs for String {}

impl sealed::Sealed for (&str, u16) {
    fn resolve(&self) -> Resolve {
        match self.0.parse::<IpAddr>() {
            Ok(ip) => Resolve::Ready(vec![SocketAddr::new(ip, self.1)]),
            Err(_) => Resolve::Host(self.0.to_owned(), self.1),
        }
    }
}
impl ToSocketAddrs for (&str, u16) {}

impl sealed::Sealed for (String, u16) {
    fn resolve(&self) -> Resolve {
        (self.0.as_str(), self.1).resolve()
    }
}
impl ToSocketAddrs for (String, u16) {}

/// The addresses `addr` names, looked up on the blocking pool when it holds a host name.
pub(crate) async fn resolve<A: ToSocketAddrs>(addr: A) -> io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs as _;
    let lookup: Box<dyn FnOnce() -> io::Result<Vec<SocketAddr>> + Send> =
        match sealed::Sealed::resolve(&addr) {
            Resolve::Ready(addrs) => return Ok(addrs),
            Resolve::Host(host, port) => {
                Box::new(move || Ok((host.as_str(), port).to_socket_addrs()?.collect()))
            }
            Resolve::HostPort(s) => Box::new(move || Ok(s.to_socket_addrs()?.collect())),
        };
    match crate::spawn_blocking(lookup).await {
        Ok(result) => result,
        Err(e) => Err(io::Error::other(format!("the name lookup did not finish: {e}"))),
    }
}

/// Runs `attempt` on each address `addr` names, in order, and returns the first success, or the
/// last error (an `InvalidInput` error if `addr` names no address).
pub(crate) async fn each_addr<A, T, F, Fut>(addr: A, mut attempt: F) -> io::Result<T>
where
    A: ToSocketAddrs,
    F: FnMut(SocketAddr) -> Fut,
    Fut: Future<Output = io::Result<T>>,
{
    let mut last = None;
    for a in resolve(addr).await? {
        match attempt(a).await {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any address",
        )
    }))
}

/// Resolves `host` to its addresses, as tokio's `lookup_host`: a `"host:port"` string, a
/// `(host, port)` pair or any other [`ToSocketAddrs`]. A host name is looked up with the system
/// resolver on rondo's blocking pool, counted as a task of the caller's group.
///
/// ```
/// rondo::block_on(async {
///     let addrs: Vec<_> = rondo::net::lookup_host("localhost:80").await.unwrap().collect();
///     assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 80));
///     assert!(rondo::net::lookup_host("no port here").await.is_err());
/// });
/// ```
pub async fn lookup_host<A: ToSocketAddrs>(
    host: A,
) -> io::Result<impl Iterator<Item = SocketAddr>> {
    Ok(resolve(host).await?.into_iter())
}
