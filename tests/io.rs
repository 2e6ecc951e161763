//! I/O with the `io` feature: workers drive the async-io reactor. TCP echo round trips, I/O while
//! a worker is blocked, timers while a core sleeps in the reactor, and shutdown. Where readiness
//! wakes are dispatched is tested in `tests/io_dispatch.rs`, alone in its process.
#![cfg(not(any(loom, miri)))]

mod common;

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use async_io::Async;
use common::{DropCount, rt, rt_at_least, watchdog};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

const MS: Duration = Duration::from_millis(1);

/// Starts an echo server on the current runtime: one task accepts, one task per connection
/// echoes until the peer closes.
async fn echo_server() -> SocketAddr {
    let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
    let addr = listener.get_ref().local_addr().unwrap();
    rondo::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            rondo::spawn(async move {
                let mut buf = [0u8; 256];
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).await.unwrap();
                }
            });
        }
    });
    addr
}

/// `rounds` round trips of 64 bytes on one connection; each reply must equal the request.
async fn client(addr: SocketAddr, id: u8, rounds: usize) {
    let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
    let mut buf = [0u8; 64];
    for i in 0..rounds {
        let msg = [id.wrapping_add(i as u8); 64];
        s.write_all(&msg).await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, msg, "round trip {i} of client {id}");
    }
}

#[test]
fn echo_round_trips_sequential_and_concurrent() {
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            let rt = rt(workers);
            rt.block_on(async {
                let addr = echo_server().await;
                // Sequential: one connection, many round trips, from a task.
                rondo::spawn(client(addr, 0, 500)).await.unwrap();
                // Concurrent: several connections at once.
                let hs: Vec<_> = (0..16u8)
                    .map(|id| rondo::spawn(client(addr, id, 100)))
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            });
        });
    }
}

#[test]
fn many_short_connections() {
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            let rt = rt(workers);
            rt.block_on(async {
                let addr = echo_server().await;
                for id in 0..100u8 {
                    rondo::spawn(client(addr, id, 2)).await.unwrap();
                }
            });
        });
    }
}

/// Two workers, one blocked in `std::thread::sleep` for 3 s: TCP round trips on the other one
/// still complete promptly, whoever held the reactor before.
#[test]
fn io_keeps_flowing_while_a_worker_is_blocked() {
    watchdog(60, || {
        let rt = rt_at_least(2, 2);
        rt.block_on(async {
            let addr = echo_server().await;
            let mut s = Async::<TcpStream>::connect(addr).await.unwrap();
            let mut buf = [0u8; 64];
            // Warm up: the connection is served, the workers park (one in the reactor).
            s.write_all(&[1; 64]).await.unwrap();
            s.read_exact(&mut buf).await.unwrap();
            rondo::time::sleep(20 * MS).await;
            let blocker = rondo::spawn(async {
                std::thread::sleep(Duration::from_secs(3));
            });
            // Let the blocker start on a worker.
            rondo::time::sleep(50 * MS).await;
            let start = Instant::now();
            let mut worst = Duration::ZERO;
            for i in 0..20u8 {
                let t = Instant::now();
                s.write_all(&[i; 64]).await.unwrap();
                s.read_exact(&mut buf).await.unwrap();
                assert_eq!(buf, [i; 64]);
                worst = worst.max(t.elapsed());
            }
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "20 round trips took {:?} (worst {worst:?}) while a worker was blocked",
                start.elapsed()
            );
            blocker.await.unwrap();
        });
    });
}

/// A timer armed from a foreign thread while every worker is idle (one core in the reactor,
/// without a deadline) wakes that core in time.
#[test]
fn a_timer_armed_from_outside_interrupts_the_reactor() {
    for workers in [1, 2] {
        watchdog(30, move || {
            let rt = rt(workers);
            // Give the runtime a socket to wait on, so its keeper sleeps in the reactor.
            let (tx, addr) = {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = l.local_addr().unwrap();
                (l, addr)
            };
            let waiter = rt.spawn(async move {
                let s = Async::<TcpStream>::connect(addr).await.unwrap();
                s.readable().await.unwrap();
            });
            let (peer, _) = tx.accept().unwrap();
            for _ in 0..5 {
                std::thread::sleep(30 * MS);
                let start = Instant::now();
                let _g = rt.enter();
                futures_lite::future::block_on(rondo::time::sleep(5 * MS));
                let took = start.elapsed();
                assert!(took >= 5 * MS, "{took:?}");
                assert!(
                    took < 250 * MS,
                    "{workers} workers: a 5 ms sleep took {took:?}"
                );
                // And one armed by a task that a foreign spawn woke.
                std::thread::sleep(30 * MS);
                let took = futures_lite::future::block_on(rt.spawn(async {
                    let start = Instant::now();
                    rondo::time::sleep(5 * MS).await;
                    start.elapsed()
                }))
                .unwrap();
                assert!(took >= 5 * MS && took < 250 * MS, "{took:?}");
            }
            peer.shutdown(Shutdown::Both).unwrap();
            futures_lite::future::block_on(waiter).unwrap();
        });
    }
}

/// async-io's own timers work inside tasks (the reactor fires them, whoever holds it).
#[test]
fn async_io_timers_fire_in_tasks() {
    watchdog(30, || {
        let rt = rt(2);
        rt.block_on(async {
            let hs: Vec<_> = (0..20u64)
                .map(|i| {
                    rondo::spawn(async move {
                        let start = Instant::now();
                        async_io::Timer::after(Duration::from_millis(i % 5 + 1)).await;
                        start.elapsed()
                    })
                })
                .collect();
            for (i, h) in hs.into_iter().enumerate() {
                let took = h.await.unwrap();
                assert!(took >= Duration::from_millis(i as u64 % 5 + 1));
                assert!(took < Duration::from_secs(1), "{took:?}");
            }
        });
    });
}

/// Dropping a runtime whose keeper sleeps in the reactor wakes it: the drop returns and the
/// waiting task's future is dropped.
#[test]
fn shutdown_while_a_worker_sleeps_in_the_reactor_does_not_hang() {
    for workers in [1, 2, 4] {
        watchdog(30, move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let drops = DropCount::new();
            let rt = rt(workers);
            let g = drops.guard();
            rt.spawn(async move {
                let _g = g;
                let s = Async::<TcpStream>::connect(addr).await.unwrap();
                // Never readable: the peer writes nothing.
                s.readable().await.unwrap();
            });
            let (_peer, _) = l.accept().unwrap();
            // Long enough for every worker to park.
            std::thread::sleep(50 * MS);
            let start = Instant::now();
            drop(rt);
            assert!(start.elapsed() < Duration::from_secs(5));
            assert_eq!(drops.get(), 1);
        });
    }
}

/// Create and drop runtimes that did I/O: each drop returns, and no runtime thread is left.
#[test]
fn runtimes_that_did_io_leave_no_thread_behind() {
    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
    }
    watchdog(60, || {
        // The first runtime starts async-io's own thread, which lives for the process.
        {
            let rt = rt(2);
            rt.block_on(async {
                let addr = echo_server().await;
                client(addr, 0, 1).await;
            });
        }
        let before = threads();
        for _ in 0..20 {
            let rt = rt(2);
            rt.block_on(async {
                let addr = echo_server().await;
                client(addr, 0, 3).await;
            });
            drop(rt);
        }
        // Other tests of this file run runtimes meanwhile: compare with some slack, which a leak
        // of two threads per runtime (40) exceeds.
        let after = threads();
        assert!(
            after < before + 20,
            "threads: {before} before, {after} after"
        );
    });
}
