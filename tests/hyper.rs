//! hyper 1.x on rondo (`--features hyper`): an HTTP/1.1 server and client over async-io loopback
//! sockets with `rondo::hyper`'s executor and timer, hyper's timeouts through the timer, the
//! executor's choice of group, and a TCP round trip. The short versions of the tenant measurement
//! of `examples/tenant_server.rs` are in `tests/tenant.rs`.

mod common;
#[path = "../examples/tenant/mod.rs"]
mod tenant;

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_io::Async;
use futures::{AsyncReadExt, AsyncWriteExt};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1 as client_http1;
use hyper::client::conn::http2 as client_http2;
use hyper::rt::{Executor, Timer};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response};
use rondo::hyper::Io;
use rondo::hyper::{GroupExecutor, RondoExecutor, RondoTimer};

use common::watchdog;

/// Echoes the request's body, prefixed with its path.
async fn echo(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await?.to_bytes();
    let mut out = path.into_bytes();
    out.extend_from_slice(&body);
    Ok(Response::new(Full::new(Bytes::from(out))))
}

/// Binds a loopback listener and serves every connection with `builder` in its own task of the
/// current group; `done` receives each connection's outcome.
fn serve(
    rt: &rondo::Runtime,
    builder: http1::Builder,
    done: mpsc::Sender<Result<(), hyper::Error>>,
) -> SocketAddr {
    let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
    let addr = listener.get_ref().local_addr().unwrap();
    rt.spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (builder, done) = (builder.clone(), done.clone());
            rondo::spawn(async move {
                let r = builder
                    .serve_connection(Io::from_async(stream), service_fn(echo))
                    .await;
                let _ = done.send(r);
            });
        }
    });
    addr
}

/// A hyper HTTP/1.1 client connection on rondo: the connection's future runs as a task.
async fn connect(addr: SocketAddr) -> client_http1::SendRequest<Full<Bytes>> {
    let stream = Async::<TcpStream>::connect(addr).await.unwrap();
    let (send, conn) = client_http1::Builder::new()
        .handshake(Io::new(stream))
        .await
        .unwrap();
    rondo::spawn(async move {
        let _ = conn.await;
    });
    send
}

async fn post(
    send: &mut client_http1::SendRequest<Full<Bytes>>,
    path: &str,
    body: String,
) -> String {
    send.ready().await.unwrap();
    let req = Request::post(path)
        .header(hyper::header::HOST, "test")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A 2-worker runtime serving HTTP/1.1 echo (with rondo's timer) on loopback.
fn rt_serving_http1() -> (rondo::Runtime, SocketAddr) {
    let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    let (done, _outcomes) = mpsc::channel();
    let addr = serve(
        &rt,
        http1::Builder::new().timer(RondoTimer::new()).clone(),
        done,
    );
    (rt, addr)
}

/// Bodies of a few megabytes cross `rondo::hyper::Io` in many reads, each at most one scratch
/// buffer, both ways, intact.
#[test]
fn large_bodies_cross_the_io_adapter_intact() {
    watchdog(60, || {
        let (rt, addr) = rt_serving_http1();
        rt.block_on(async move {
            let mut send = connect(addr).await;
            for size in [0usize, 1, 16 * 1024 + 3, 3 << 20] {
                let body: String = (0..size)
                    .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
                    .collect();
                let reply = post(&mut send, "/big", body.clone()).await;
                assert_eq!(reply.len(), 4 + size);
                assert!(reply == format!("/big{body}"), "a {size}-byte body changed");
            }
        });
    });
}

#[test]
fn http1_server_and_client_on_rondo() {
    watchdog(60, || {
        let (rt, addr) = rt_serving_http1();
        // 8 keep-alive connections, 50 requests each, all in flight at once.
        let clients: Vec<_> = (0..8)
            .map(|c| {
                rt.spawn(async move {
                    let mut send = connect(addr).await;
                    for i in 0..50 {
                        let body = format!("client {c} request {i}");
                        let reply = post(&mut send, &format!("/c{c}"), body.clone()).await;
                        assert_eq!(reply, format!("/c{c}{body}"));
                    }
                })
            })
            .collect();
        for c in clients {
            rt.block_on(c).unwrap();
        }
    });
}

/// A connection closed `closed_after` from its start: no sooner than `timeout` (else the message
/// says it closed `early`), within 15 s, and the server reported a header-read timeout.
fn closed_by_the_timeout(
    closed_after: Duration,
    timeout: Duration,
    outcomes: &mpsc::Receiver<Result<(), hyper::Error>>,
    early: &str,
) {
    assert!(closed_after >= timeout, "closed {closed_after:?} {early}");
    assert!(
        closed_after < Duration::from_secs(15),
        "closed only after {closed_after:?}"
    );
    let err = outcomes
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .unwrap_err();
    assert!(
        err.is_timeout(),
        "the connection ended with {err:?}, not a timeout"
    );
}

#[test]
fn header_read_timeout_closes_a_silent_connection() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
        let timeout = Duration::from_millis(300);
        let (done, outcomes) = mpsc::channel();
        let builder = http1::Builder::new()
            .timer(RondoTimer::new())
            .header_read_timeout(timeout)
            .clone();
        let addr = serve(&rt, builder, done);

        // A client that sends nothing: the server closes the connection once the timeout passes,
        // never before.
        let start = Instant::now();
        let mut silent = TcpStream::connect(addr).unwrap();
        silent
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut buf = [0u8; 256];
        let n = silent.read(&mut buf).unwrap();
        let closed_after = start.elapsed();
        // hyper may answer with a 408 before closing; either way the connection ends.
        let _ = n;
        let mut rest = Vec::new();
        let _ = silent.read_to_end(&mut rest);
        closed_by_the_timeout(closed_after, timeout, &outcomes, "before the timeout");

        // A keep-alive connection: the second request's header timer is the first one, moved by
        // `RondoTimer::reset`. It must be moved later, or the connection would close 250 ms too
        // soon after the second request.
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let request = b"POST /k HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi";
        conn.write_all(request).unwrap();
        let n = conn.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        std::thread::sleep(Duration::from_millis(250));
        let second = Instant::now();
        conn.write_all(request).unwrap();
        let n = conn.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        let closed_after = second.elapsed();
        closed_by_the_timeout(
            closed_after,
            timeout,
            &outcomes,
            "after the second request: the timer was not moved",
        );
    });
}

#[test]
fn timer_reset_moves_its_own_sleep_and_replaces_others() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        rt.block_on(async {
            let timer = RondoTimer::new();
            // Its own sleep moves, earlier and later, and stays the same sleep.
            let mut s = timer.sleep(Duration::from_secs(3600));
            assert!(s.is::<rondo::time::Sleep>());
            let before = &*s as *const dyn hyper::rt::Sleep as *const u8;
            let start = Instant::now();
            timer.reset(&mut s, Instant::now() + Duration::from_millis(20));
            assert_eq!(&*s as *const dyn hyper::rt::Sleep as *const u8, before);
            s.as_mut().await;
            assert!(start.elapsed() >= Duration::from_millis(20));
            // Completed, then moved later: pending again until the new deadline.
            let again = Instant::now();
            timer.reset(&mut s, again + Duration::from_millis(30));
            s.as_mut().await;
            assert!(again.elapsed() >= Duration::from_millis(30));

            // A sleep of another timer is replaced by one of ours.
            let mut foreign = smol_hyper::rt::SmolTimer::new().sleep(Duration::from_secs(3600));
            assert!(!foreign.is::<rondo::time::Sleep>());
            let start = Instant::now();
            timer.reset(&mut foreign, Instant::now() + Duration::from_millis(5));
            assert!(foreign.is::<rondo::time::Sleep>());
            foreign.await;
            assert!(start.elapsed() >= Duration::from_millis(5));
            assert!(start.elapsed() < Duration::from_secs(60));
        });
    });
}

#[test]
fn executor_spawns_into_the_current_group() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
        let tenant = rt.group().name("tenant").build().unwrap();
        let (tx, rx) = mpsc::channel();
        // Called from a task of `tenant`, as hyper calls its executor from a connection's task.
        let tx2 = tx.clone();
        rt.block_on(tenant.spawn(async move {
            RondoExecutor::new().execute(async move {
                let g = rondo::current_group().unwrap();
                tx2.send(g.name().to_string()).unwrap();
            });
        }))
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), "tenant");
        rt.block_on(tenant.wait_idle());
        let m = tenant.metrics();
        assert_eq!((m.spawned, m.completed), (2, 2), "{m:?}");

        // From `block_on`, it spawns into the runtime's default group, not into `tenant`.
        let tx3 = tx.clone();
        rt.block_on(async move {
            RondoExecutor::new().execute(async move {
                tx3.send(rondo::current_group().unwrap().name().to_string())
                    .unwrap();
            });
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), "default");
        assert_eq!(tenant.metrics().spawned, 2);

        // A GroupExecutor spawns into its group from anywhere, here from a task of `tenant`.
        let other = rt.group().name("other").build().unwrap();
        let exec = GroupExecutor::new(other.clone());
        rt.block_on(tenant.spawn(async move {
            exec.execute(async move {
                tx.send(rondo::current_group().unwrap().name().to_string())
                    .unwrap();
            });
        }))
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), "other");
        rt.block_on(other.wait_idle());
        assert_eq!(other.metrics().completed, 1);
    });
}

/// The group of the task that polls the request's handler.
async fn whose(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let name = rondo::current_group().map_or("none".to_string(), |g| g.name().to_string());
    Ok(Response::new(Full::new(Bytes::from(name))))
}

/// HTTP/2 on both ends: hyper runs each stream's handler in a task it spawns through the server's
/// executor, and the client connection's background work through the client's. With
/// `RondoExecutor` the handlers run in the connection's group; with `GroupExecutor`, in its group.
#[test]
fn http2_streams_run_where_the_executor_spawns_them() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
        let tenant = rt.group().name("tenant").build().unwrap();
        let pinned = rt.group().name("pinned").build().unwrap();
        let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
        let addr = listener.get_ref().local_addr().unwrap();
        let (tenant2, pinned2) = (tenant.clone(), pinned.clone());
        rt.spawn(async move {
            // The first connection is served with RondoExecutor, the second with GroupExecutor,
            // both from a task of `tenant`.
            for round in 0..2 {
                let (stream, _) = listener.accept().await.unwrap();
                let pinned = pinned2.clone();
                tenant2.spawn(async move {
                    let io = Io::new(stream);
                    let served = if round == 0 {
                        http2::Builder::new(RondoExecutor::new())
                            .timer(RondoTimer::new())
                            .serve_connection(io, service_fn(whose))
                            .await
                    } else {
                        http2::Builder::new(GroupExecutor::new(pinned))
                            .timer(RondoTimer::new())
                            .serve_connection(io, service_fn(whose))
                            .await
                    };
                    served.unwrap();
                });
            }
        });
        for expected in ["tenant", "pinned"] {
            let names = rt.block_on(rt.spawn(async move {
                let stream = Async::<TcpStream>::connect(addr).await.unwrap();
                let (mut send, conn) = client_http2::Builder::new(RondoExecutor::new())
                    .timer(RondoTimer::new())
                    .handshake(Io::new(stream))
                    .await
                    .unwrap();
                rondo::spawn(async move {
                    let _ = conn.await;
                });
                // Several streams at once on the one connection.
                let requests: Vec<_> = (0..8)
                    .map(|_| {
                        let req = Request::get(format!("http://{addr}/"))
                            .body(Full::new(Bytes::new()))
                            .unwrap();
                        send.send_request(req)
                    })
                    .collect();
                let mut names = Vec::new();
                for r in requests {
                    let body = r.await.unwrap().into_body().collect().await.unwrap();
                    names.push(String::from_utf8(body.to_bytes().to_vec()).unwrap());
                }
                names
            }));
            assert_eq!(names.unwrap(), vec![expected; 8]);
        }
        assert!(tenant.metrics().spawned >= 2 + 8, "{:?}", tenant.metrics());
        assert!(pinned.metrics().spawned >= 8, "{:?}", pinned.metrics());
    });
}

/// Echo over async-io sockets on rondo: every byte comes back, and round trips take loopback
/// time, not timer or poll-interval time.
#[test]
fn tcp_round_trips_on_loopback() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
        let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
        let addr = listener.get_ref().local_addr().unwrap();
        rt.spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let mut lat = rt
            .block_on(rondo::spawn(async move {
                let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
                s.get_ref().set_nodelay(true).unwrap();
                let mut lat = Vec::new();
                for i in 0..1000u32 {
                    let msg = [i.to_le_bytes(); 16].concat();
                    let start = Instant::now();
                    s.write_all(&msg).await.unwrap();
                    let mut back = [0u8; 64];
                    s.read_exact(&mut back).await.unwrap();
                    lat.push(start.elapsed());
                    assert_eq!(&back[..], &msg[..]);
                }
                lat
            }))
            .unwrap();
        lat.sort_unstable();
        let p50 = tenant::percentile(&lat, 0.5);
        // A loopback round trip takes tens of microseconds; 20 ms leaves room for a loaded
        // machine but not for a wakeup that waits on a timer or a poll interval.
        assert!(p50 < Duration::from_millis(20), "p50 round trip {p50:?}");
    });
}
