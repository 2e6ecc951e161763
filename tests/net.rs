//! `rondo::net`: binding and connecting by host name, tokio's listen backlog under a burst of
//! connects, half-close, owned halves used from two tasks at once, UDP and Unix sockets, and name
//! resolution counted in the caller's group.
#![cfg(not(any(loom, miri)))]

mod common;

use std::time::{Duration, Instant};

use common::{rt, watchdog};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use rondo::net::{TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};

#[test]
fn bind_by_host_name() {
    watchdog(30, || {
        rt(2).block_on(async {
            let listener = TcpListener::bind("localhost:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            assert!(addr.ip().is_loopback(), "{addr}");
            assert_ne!(addr.port(), 0);
            let listener = TcpListener::bind(("localhost", 0)).await.unwrap();
            assert!(listener.local_addr().unwrap().ip().is_loopback());
            // A name that does not resolve is an error, not a panic or a hang.
            let err = TcpListener::bind("no-such-host.invalid:80")
                .await
                .unwrap_err();
            assert!(!err.to_string().is_empty());
            let err = TcpListener::bind("missing a port").await.unwrap_err();
            assert!(!err.to_string().is_empty());
        })
    });
}

#[test]
fn connect_by_host_name() {
    watchdog(30, || {
        rt(2).block_on(async {
            // Bound to IPv4 only: if "localhost" resolves to ::1 first, that address is refused
            // and the next one is tried.
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let mut client = TcpStream::connect(("localhost", port)).await.unwrap();
            let mut client2 = TcpStream::connect(format!("localhost:{port}"))
                .await
                .unwrap();
            let (mut server, peer) = listener.accept().await.unwrap();
            let (mut server2, _) = listener.accept().await.unwrap();
            assert!(peer.ip().is_loopback());
            client.write_all(b"by name").await.unwrap();
            client2.write_all(b"by name").await.unwrap();
            let mut buf = [0; 7];
            server.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"by name");
            server2.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"by name");
        })
    });
}

/// The lookup runs as a blocking task of the caller's group.
#[test]
fn name_lookup_is_counted_in_the_callers_group() {
    watchdog(30, || {
        let rt = rt(2);
        let group = rt.group().name("resolver").build().unwrap();
        let before = group.metrics().spawned;
        let found = rt
            .block_on(group.spawn(async {
                rondo::net::lookup_host(("localhost", 80))
                    .await
                    .unwrap()
                    .count()
            }))
            .unwrap();
        assert!(found > 0);
        // The task itself and the lookup's blocking task.
        assert_eq!(group.metrics().spawned - before, 2);
        // A literal address needs no lookup.
        let before = group.metrics().spawned;
        rt.block_on(group.spawn(async {
            rondo::net::lookup_host("127.0.0.1:80")
                .await
                .unwrap()
                .count()
        }))
        .unwrap();
        assert_eq!(group.metrics().spawned - before, 1);
    });
}

/// 600 connects at once to a listener that accepts none of them until all are done: each
/// completes its handshake into the backlog at once. With the standard library's backlog of 128
/// the connects beyond it wait for a SYN retry, a second or more.
#[test]
fn a_burst_of_600_connects_fits_the_backlog() {
    watchdog(60, || {
        rt(2).block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let connects: Vec<_> = (0..600)
                .map(|_| {
                    rondo::spawn(async move {
                        let start = Instant::now();
                        // A connect past the backlog would wait for the accepts below.
                        let limit = Duration::from_secs(2);
                        let stream = rondo::time::timeout(limit, TcpStream::connect(addr)).await;
                        (start.elapsed(), stream.ok().map(Result::unwrap))
                    })
                })
                .collect();
            let mut streams = Vec::new();
            let mut slowest = Duration::ZERO;
            for c in connects {
                let (took, stream) = c.await.unwrap();
                slowest = slowest.max(took);
                streams.extend(stream);
            }
            assert!(
                slowest < Duration::from_secs(1),
                "a connect took {slowest:?}: the backlog overflowed"
            );
            for _ in 0..600 {
                listener.accept().await.unwrap();
            }
        })
    });
}

#[test]
fn shutdown_half_closes_the_write_side() {
    watchdog(30, || {
        rt(2).block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            client.write_all(b"request").await.unwrap();
            client.shutdown().await.unwrap();
            // The server reads to end of file: the client's shutdown arrived as EOF.
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"request");
            // The other direction still works.
            server.write_all(b"response").await.unwrap();
            server.close().await.unwrap(); // futures-io's close half-closes too
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            assert_eq!(back, b"response");
        })
    });
}

/// The halves are used from two tasks at the same time: a writer sending 4 MiB while the reader
/// receives the echo. With a lock shared by the halves, the reader waiting for data would keep the
/// writer out (or the writer, blocked on a full buffer, the reader), and the transfer would stall.
#[test]
fn owned_halves_work_from_two_tasks_at_once() {
    watchdog(60, || {
        rt(2).block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let echo = rondo::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                let (mut rd, mut wr) = stream.into_split();
                futures_lite::io::copy(&mut rd, &mut wr).await.unwrap()
            });
            const LEN: usize = 4 << 20;
            let (mut rd, mut wr) = TcpStream::connect(addr).await.unwrap().into_split();
            let writer = rondo::spawn(async move {
                let chunk = vec![7u8; 64 << 10];
                for _ in 0..LEN / chunk.len() {
                    wr.write_all(&chunk).await.unwrap();
                }
                // Dropping the write half shuts the write side down: the echo's copy ends.
            });
            let reader = rondo::spawn(async move {
                let mut total = 0;
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = rd.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return total;
                    }
                    assert!(buf[..n].iter().all(|&b| b == 7));
                    total += n;
                }
            });
            writer.await.unwrap();
            assert_eq!(reader.await.unwrap(), LEN);
            assert_eq!(echo.await.unwrap(), LEN as u64);
        })
    });
}

#[test]
fn halves_reunite_only_with_their_own() {
    watchdog(30, || {
        rt(1).block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (rd1, wr1) = TcpStream::connect(addr).await.unwrap().into_split();
            let (rd2, wr2) = TcpStream::connect(addr).await.unwrap().into_split();
            let rondo::net::ReuniteError(rd1, wr2) = rd1.reunite(wr2).unwrap_err();
            let mut s1 = rd1.reunite(wr1).unwrap();
            let _s2 = rd2.reunite(wr2).unwrap();
            // Reuniting did not shut the write side down.
            let (mut server, _) = listener.accept().await.unwrap();
            s1.write_all(b"x").await.unwrap();
            let mut b = [0];
            server.read_exact(&mut b).await.unwrap();
        })
    });
}

#[test]
fn nodelay_and_addresses() {
    watchdog(30, || {
        rt(1).block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let client = TcpStream::connect(addr).await.unwrap();
            let (server, peer) = listener.accept().await.unwrap();
            assert_eq!(client.peer_addr().unwrap(), addr);
            assert_eq!(client.local_addr().unwrap(), peer);
            assert_eq!(server.peer_addr().unwrap(), peer);
            client.set_nodelay(true).unwrap();
            assert!(client.nodelay().unwrap());
            client.set_nodelay(false).unwrap();
            assert!(!client.nodelay().unwrap());
        })
    });
}

#[test]
fn udp_round_trip() {
    watchdog(30, || {
        rt(2).block_on(async {
            let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let server_addr = server.local_addr().unwrap();
            let echo = rondo::spawn(async move {
                let mut buf = [0; 64];
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                server.send_to(&buf[..n], from).await.unwrap();
            });
            let client = UdpSocket::bind(("localhost", 0)).await.unwrap();
            client
                .connect(("localhost", server_addr.port()))
                .await
                .unwrap();
            assert_eq!(client.peer_addr().unwrap(), server_addr);
            client.send(b"datagram").await.unwrap();
            let mut buf = [0; 64];
            let n = client.recv(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"datagram");
            echo.await.unwrap();
        })
    });
}

#[test]
fn unix_socket_round_trip() {
    watchdog(30, || {
        let path = std::env::temp_dir().join(format!("rondo-net-test-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let p = path.clone();
        rt(2).block_on(async move {
            let listener = UnixListener::bind(&p).unwrap();
            let server = rondo::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                let (mut rd, mut wr) = stream.into_split();
                futures_lite::io::copy(&mut rd, &mut wr).await.unwrap()
            });
            let mut client = UnixStream::connect(&p).await.unwrap();
            client.write_all(b"over a unix socket").await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = String::new();
            client.read_to_string(&mut back).await.unwrap();
            assert_eq!(back, "over a unix socket");
            assert_eq!(server.await.unwrap(), 18);
        });
        std::fs::remove_file(&path).unwrap();
    });
}
