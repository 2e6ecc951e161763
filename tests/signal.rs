//! `rondo::signal`: `ctrl_c` and Unix signals, each sent by the test process to itself. Every case
//! runs in a child process: once a handler is installed, the signal no longer ends the process,
//! and a signal sent before it would end it; the test harness is kept out of both.
#![cfg(not(any(loom, miri)))]

#[macro_use]
mod common;

use std::future::IntoFuture;
use std::pin::pin;
use std::time::Duration;

use common::rt;
use futures_lite::future::poll_once;
use rondo::signal::unix::{SignalKind, signal};

/// Sends `sig` to this process.
fn raise(sig: i32) {
    // SAFETY: `kill` with this process's id and a valid signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0);
}

child_test! {
    fn ctrl_c_receives_a_sigint_sent_to_the_process() {
        rt(2).block_on(async {
            let mut ctrl_c = pin!(rondo::signal::ctrl_c());
            // The first poll installs the handler; nothing has arrived yet.
            assert!(poll_once(ctrl_c.as_mut()).await.is_none());
            raise(libc::SIGINT);
            rondo::time::timeout(Duration::from_secs(10), ctrl_c)
                .await
                .expect("SIGINT was not received")
                .unwrap();
        });
    }
}

child_test! {
    /// Each listener receives its own kind; a second `recv` waits for a second signal.
    fn unix_signals_are_received_by_kind() {
        rt(2).block_on(async {
            let mut usr1 = signal(SignalKind::user_defined1()).unwrap();
            let mut term = signal(SignalKind::terminate()).unwrap();
            raise(libc::SIGUSR1);
            let got = rondo::time::timeout(Duration::from_secs(10), usr1.recv()).await;
            assert_eq!(got.unwrap(), Some(()));
            // SIGTERM has not been sent: its listener waits.
            assert!(poll_once(term.recv()).await.is_none());
            raise(libc::SIGTERM);
            let got = rondo::time::timeout(Duration::from_secs(10), term.recv()).await;
            assert_eq!(got.unwrap(), Some(()));
            raise(libc::SIGUSR1);
            let got = rondo::time::timeout(Duration::from_secs(10), usr1.recv()).await;
            assert_eq!(got.unwrap(), Some(()));
        });
    }
}

#[test]
fn signals_that_cannot_be_listened_for_are_errors() {
    for raw in [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, 0, -1, 1000] {
        let err = rondo::signal::unix::signal(SignalKind::from_raw(raw)).unwrap_err();
        assert!(err.to_string().contains(&raw.to_string()), "{err}");
    }
    assert_eq!(SignalKind::interrupt().as_raw_value(), libc::SIGINT);
    assert_eq!(SignalKind::terminate().as_raw_value(), libc::SIGTERM);
    assert_eq!(SignalKind::hangup().as_raw_value(), libc::SIGHUP);
}

child_test! {
    /// The pattern a `main` uses: serve until Ctrl-C, then finish what is in flight.
    #[cfg(feature = "hyper")]
    fn ctrl_c_shuts_a_server_down_gracefully() {
        use http_body_util::Full;
        use hyper::body::{Bytes, Incoming};
        use hyper::{Request, Response};
        use futures_lite::{AsyncReadExt, AsyncWriteExt};

        rt(2).block_on(async {
            let listener = rondo::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let svc = hyper::service::service_fn(|_: Request<Incoming>| async {
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from("up"))))
            });
            let server = rondo::spawn(
                rondo::hyper::serve(listener, svc)
                    .with_graceful_shutdown(async {
                        rondo::signal::ctrl_c().await.unwrap();
                    })
                    .into_future(),
            );
            // A request answered: the accept loop has polled the signal, so its handler is in.
            let mut s = rondo::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).await.unwrap();
            assert!(reply.ends_with("up"));
            raise(libc::SIGINT);
            rondo::time::timeout(Duration::from_secs(10), server)
                .await
                .expect("the server did not stop at SIGINT")
                .unwrap()
                .unwrap();
            assert!(rondo::net::TcpStream::connect(addr).await.is_err());
        });
    }
}
