//! `rondo::hyper::serve`: graceful shutdown (a request in flight at the signal completes, an idle
//! keep-alive connection closes, new connections are refused), accept errors (the process out of
//! file descriptors), HTTP/2 with prior knowledge, an axum router served in one line, and the
//! placement hook.
#![cfg(not(any(loom, miri)))]

#[macro_use]
mod common;

use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{rt, watchdog};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, Version};
use rondo::hyper::{Io, RondoExecutor, serve};
use rondo::net::{TcpListener, TcpStream};
use rondo::sync::Semaphore;

type Reply = Result<Response<Full<Bytes>>, Infallible>;

fn text(s: impl Into<String>) -> Reply {
    Ok(Response::new(Full::new(Bytes::from(s.into()))))
}

/// One HTTP/1.1 request on a new connection that the client closes after the response.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).await?;
    Ok(reply)
}

/// Waits for a permit of `s` and keeps none.
async fn take(s: &Semaphore) {
    s.acquire().await.unwrap().forget();
}

#[test]
fn graceful_shutdown_finishes_requests_in_flight_and_refuses_new_connections() {
    watchdog(60, || {
        rt(2).block_on(async {
            let started = Arc::new(Semaphore::new(0));
            let release = Arc::new(Semaphore::new(0));
            let stop = Arc::new(Semaphore::new(0));
            let svc = {
                let (started, release) = (started.clone(), release.clone());
                service_fn(move |req: Request<Incoming>| {
                    let (started, release) = (started.clone(), release.clone());
                    async move {
                        if req.uri().path() == "/slow" {
                            started.add_permits(1);
                            take(&release).await;
                            return text("slow done");
                        }
                        text("fast")
                    }
                })
            };
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let signal = {
                let stop = stop.clone();
                async move { take(&stop).await }
            };
            let server = rondo::spawn(
                serve(listener, svc)
                    .with_graceful_shutdown(signal)
                    .into_future(),
            );

            // An idle keep-alive connection: graceful shutdown closes it instead of waiting.
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut idle, idle_conn) = hyper::client::conn::http1::handshake(Io::from_tcp(stream))
                .await
                .unwrap();
            let idle_conn = rondo::spawn(idle_conn);
            let r = idle
                .send_request(Request::get("/fast").body(Empty::<Bytes>::new()).unwrap())
                .await
                .unwrap();
            assert_eq!(r.into_body().collect().await.unwrap().to_bytes(), "fast");

            // A request in flight at the signal.
            let slow = rondo::spawn(get(addr, "/slow"));
            take(&started).await;
            stop.add_permits(1);

            // New connections are refused once the loop has stopped.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match TcpStream::connect(addr).await {
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                    other => {
                        assert!(Instant::now() < deadline, "still accepting: {other:?}");
                        rondo::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
            // The idle connection was closed by the server, long before hyper's 30 s header
            // timeout would have closed it.
            rondo::time::timeout(Duration::from_secs(10), idle_conn)
                .await
                .expect("the idle keep-alive connection stayed open")
                .unwrap()
                .unwrap();
            // The server waits for the request in flight.
            rondo::time::sleep(Duration::from_millis(50)).await;
            assert!(!server.is_finished(), "resolved with a request in flight");
            assert!(!slow.is_finished());
            release.add_permits(1);
            let reply = slow.await.unwrap().unwrap();
            assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
            assert!(reply.ends_with("slow done"), "{reply}");
            rondo::time::timeout(Duration::from_secs(10), server)
                .await
                .expect("the server did not resolve after its last request")
                .unwrap()
                .unwrap();
        })
    });
}

/// Lowers this process's soft limit of open files to `n`.
fn set_nofile(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n as libc::rlim_t,
        rlim_max: libc::RLIM_INFINITY,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both pointers are to live `rlimit` values.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    let lim = libc::rlimit {
        rlim_max: old.rlim_max,
        ..lim
    };
    // SAFETY: `lim` is a live `rlimit`.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

child_test! {
    /// With every file descriptor taken, `accept` fails with `EMFILE` while a connection waits in
    /// the backlog. The server backs off and keeps accepting; once descriptors are free again the
    /// waiting connection is served.
    fn accept_errors_back_off_and_the_server_goes_on() {
        let rt = rt(2);
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let served = Arc::new(AtomicUsize::new(0));
            let svc = {
                let served = served.clone();
                service_fn(move |_: Request<Incoming>| {
                    served.fetch_add(1, Ordering::SeqCst);
                    async { text("served after EMFILE") }
                })
            };
            let server = rondo::spawn(serve(listener, svc).into_future());
            // The client's socket exists before the descriptors run out.
            let client = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .unwrap();
            set_nofile(256);
            let mut fillers = Vec::new();
            let exhausted = loop {
                match std::fs::File::open("/dev/null") {
                    Ok(f) => fillers.push(f),
                    Err(e) => break e,
                }
            };
            assert_eq!(exhausted.raw_os_error(), Some(libc::EMFILE));
            // The handshake completes into the backlog; the server's accept fails.
            client.connect(&addr.into()).unwrap();
            rondo::time::sleep(Duration::from_millis(300)).await;
            assert!(!server.is_finished(), "the accept loop ended at EMFILE");
            assert_eq!(served.load(Ordering::SeqCst), 0);
            drop(fillers);
            let mut client = std::net::TcpStream::from(client);
            let reply = rondo::spawn_blocking(move || {
                use std::io::{Read, Write};
                client
                    .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut reply = String::new();
                client.read_to_string(&mut reply).unwrap();
                reply
            })
            .await
            .unwrap();
            assert!(reply.ends_with("served after EMFILE"), "{reply}");
            assert!(!server.is_finished());
            // Later connections are served as usual.
            assert!(get(addr, "/").await.unwrap().ends_with("served after EMFILE"));
            server.abort();
        });
    }
}

#[test]
fn http2_with_prior_knowledge_and_http1_on_one_listener() {
    watchdog(30, || {
        let rt = rt(2);
        let tenant = rt.group().name("h2-tenant").build().unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let svc = service_fn(|req: Request<Incoming>| async move {
                let group = rondo::current_group().unwrap();
                text(format!("{:?} in {}", req.version(), group.name()))
            });
            let server = rondo::spawn(
                serve(listener, svc)
                    .place(move |_| Some(tenant.clone()))
                    .into_future(),
            );
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(RondoExecutor::new(), Io::from_tcp(stream))
                    .await
                    .unwrap();
            rondo::spawn(conn);
            // Several streams at once: hyper spawns each through the connection's executor.
            let mut replies = Vec::new();
            for _ in 0..4 {
                let req = Request::get("http://x/")
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                replies.push(send.send_request(req));
            }
            for reply in replies {
                let r = reply.await.unwrap();
                assert_eq!(r.version(), Version::HTTP_2);
                let body = r.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(body, "HTTP/2.0 in h2-tenant");
            }
            let reply = get(addr, "/").await.unwrap();
            assert!(reply.ends_with("HTTP/1.1 in h2-tenant"), "{reply}");
            server.abort();
        })
    });
}

#[test]
fn an_axum_router_served_in_one_line() {
    use axum::routing::get as route_get;
    watchdog(30, || {
        rt(2).block_on(async {
            let app = axum::Router::new()
                .route("/", route_get(|| async { "axum on rondo" }))
                .route(
                    "/n/{n}",
                    route_get(
                        |axum::extract::Path(n): axum::extract::Path<u32>| async move {
                            format!("{}", n * 2)
                        },
                    ),
                );
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = rondo::spawn(serve(listener, app).into_future());
            assert!(get(addr, "/").await.unwrap().ends_with("axum on rondo"));
            assert!(get(addr, "/n/21").await.unwrap().ends_with("42"));
            assert!(
                get(addr, "/missing")
                    .await
                    .unwrap()
                    .starts_with("HTTP/1.1 404")
            );
            server.abort();
        })
    });
}

/// The hook's group runs the connection's task: `current_group()` inside the handler. `None`
/// leaves the connection in the serving task's group; a hook that panics costs its connection
/// only.
#[test]
fn placement_hook_puts_each_connection_into_its_group() {
    watchdog(30, || {
        let rt = rt(2);
        let tenant = rt.group().name("tenant-a").weight(3).build().unwrap();
        let front = rt.group().name("front").build().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let server = {
            let calls = calls.clone();
            front.spawn(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let svc = service_fn(|_: Request<Incoming>| async {
                    text(rondo::current_group().unwrap().name().to_string())
                });
                let serving = serve(listener, svc).place(move |peer: SocketAddr| {
                    assert!(peer.ip().is_loopback());
                    match calls.fetch_add(1, Ordering::SeqCst) {
                        0 => Some(tenant.clone()),
                        1 => None,
                        2 => panic!("a placement hook that panics"),
                        _ => Some(tenant.clone()),
                    }
                });
                let server = rondo::spawn(serving.into_future());
                (addr, server)
            })
        };
        let (addr, server) = rt.block_on(server).unwrap();
        rt.block_on(async {
            assert!(get(addr, "/").await.unwrap().ends_with("tenant-a"));
            assert!(get(addr, "/").await.unwrap().ends_with("front"));
            // The third connection's hook panicked: closed unserved.
            assert_eq!(get(addr, "/").await.unwrap_or_default(), "");
            assert!(get(addr, "/").await.unwrap().ends_with("tenant-a"));
            assert!(!server.is_finished());
            server.abort();
        });
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    });
}

/// An HTTP/2 connection open at the signal is told to go away (`GOAWAY`) and closed once its
/// streams are done; the server then resolves.
#[test]
fn graceful_shutdown_closes_an_http2_connection() {
    watchdog(60, || {
        rt(2).block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stop = Arc::new(Semaphore::new(0));
            let signal = {
                let stop = stop.clone();
                async move { take(&stop).await }
            };
            let svc = service_fn(|_: Request<Incoming>| async { text("h2") });
            let server = rondo::spawn(
                serve(listener, svc)
                    .with_graceful_shutdown(signal)
                    .into_future(),
            );
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(RondoExecutor::new(), Io::from_tcp(stream))
                    .await
                    .unwrap();
            let conn = rondo::spawn(conn);
            let req = Request::get("http://x/")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let r = send.send_request(req).await.unwrap();
            assert_eq!(r.into_body().collect().await.unwrap().to_bytes(), "h2");
            stop.add_permits(1);
            rondo::time::timeout(Duration::from_secs(10), server)
                .await
                .expect("the server waited for an idle HTTP/2 connection")
                .unwrap()
                .unwrap();
            // The client's connection ended too.
            rondo::time::timeout(Duration::from_secs(10), conn)
                .await
                .expect("the HTTP/2 connection stayed open")
                .unwrap()
                .unwrap();
        })
    });
}
