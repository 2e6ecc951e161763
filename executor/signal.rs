//! Signals, with tokio's names: [`ctrl_c`], and on Unix [`unix::signal`] with
//! [`unix::SignalKind`]. Enabled by the `signal` feature.
//!
//! The handlers come from the async-signal crate: a signal handler that writes the signal's
//! number to a pipe, whose read end is a socket in async-io's reactor (driven by rondo's idle
//! workers). No thread of its own, and nothing is installed until the first listener is created.
//!
//! As in tokio, listening for a signal replaces its default action for the rest of the process:
//! after the first [`ctrl_c`], a `SIGINT` no longer ends the process, whether or not anybody is
//! still listening. A signal that arrives while nobody listens is lost; one that arrives several
//! times before a listener looks may be seen once.
//!
//! # Graceful shutdown
//!
//! A server stops on `Ctrl-C` by handing `ctrl_c()` to
//! `rondo::hyper::serve(..).with_graceful_shutdown(..)` (feature `hyper`), which stops accepting
//! and waits for the requests in flight; [`shutdown_on`] does the same for any future: it
//! resolves at the first of the signal and the future's own end. Tasks still running when the
//! runtime shuts down (when `#[rondo::main]`'s function returns, or the runtime is dropped) are
//! dropped; [`Runtime::shutdown_timeout`] bounds the wait for polls blocked in user code.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! let rt = rondo::Runtime::new().unwrap();
//! let work = async {
//!     loop {
//!         rondo::time::sleep(Duration::from_secs(1)).await;
//!     }
//! };
//! // Returns when Ctrl-C is pressed (the work loop never ends on its own).
//! rt.block_on(rondo::signal::shutdown_on(rondo::signal::ctrl_c(), work));
//! // Tasks the work spawned get five seconds to finish their current polls.
//! rt.shutdown_timeout(Duration::from_secs(5));
//! ```
//!
//! [`Runtime::shutdown_timeout`]: crate::Runtime::shutdown_timeout

use std::future::Future;
use std::io;

use futures_lite::StreamExt;

/// Waits for `Ctrl-C` (`SIGINT` on Unix), as tokio's `ctrl_c`.
///
/// The handler is installed at the first poll, and from then on `SIGINT` no longer ends the
/// process (see the [module docs](self)). An error means the handler could not be installed.
///
/// ```
/// use std::time::Duration;
///
/// rondo::block_on(async {
///     // Nobody presses Ctrl-C here: the wait times out.
///     let waited = rondo::time::timeout(Duration::from_millis(10), rondo::signal::ctrl_c()).await;
///     assert!(waited.is_err());
/// });
/// ```
pub async fn ctrl_c() -> io::Result<()> {
    let mut signals = async_signal::Signals::new([async_signal::Signal::Int])?;
    match signals.next().await {
        Some(got) => got.map(drop),
        None => Err(io::Error::other("the signal stream ended")),
    }
}

/// Runs `work` until `signal` resolves, and returns `Some` of `work`'s output if it finished
/// first, `None` if the signal came first (then `work` is dropped). The signal's own output (an
/// `io::Result` for [`ctrl_c`]) is dropped: an error installing the handler counts as a signal
/// never received.
///
/// ```
/// use std::time::Duration;
///
/// rondo::block_on(async {
///     let quick = rondo::signal::shutdown_on(std::future::pending::<()>(), async { 7 }).await;
///     assert_eq!(quick, Some(7));
///     let stopped = rondo::signal::shutdown_on(
///         rondo::time::sleep(Duration::from_millis(5)),
///         std::future::pending::<()>(),
///     )
///     .await;
///     assert_eq!(stopped, None);
/// });
/// ```
pub async fn shutdown_on<S, F>(signal: S, work: F) -> Option<F::Output>
where
    S: Future,
    F: Future,
{
    let signal = async {
        // A signal that failed to install never arrives.
        let _ = signal.await;
        None
    };
    futures_lite::future::or(async { Some(work.await) }, signal).await
}

/// Unix signals, as tokio's `tokio::signal::unix`.
#[cfg(unix)]
pub mod unix {
    use std::io;
    use std::task::{Context, Poll};

    use async_signal::Signal as Sig;
    use futures_lite::Stream;

    /// A kind of signal to listen for, as tokio's `SignalKind`.
    ///
    /// ```
    /// use rondo::signal::unix::SignalKind;
    ///
    /// assert_eq!(SignalKind::interrupt().as_raw_value(), 2);
    /// assert_eq!(SignalKind::from_raw(15), SignalKind::terminate());
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SignalKind(i32);

    /// Every signal async-signal can listen for, by number.
    const KNOWN: &[Sig] = &[
        Sig::Hup,
        Sig::Int,
        Sig::Quit,
        Sig::Ill,
        Sig::Trap,
        Sig::Abort,
        Sig::Bus,
        Sig::Fpe,
        Sig::Kill,
        Sig::Usr1,
        Sig::Segv,
        Sig::Usr2,
        Sig::Pipe,
        Sig::Alarm,
        Sig::Term,
        Sig::Child,
        Sig::Cont,
        Sig::Stop,
        Sig::Tstp,
        Sig::Ttin,
        Sig::Ttou,
        Sig::Urg,
        Sig::Xcpu,
        Sig::Xfsz,
        Sig::Vtalarm,
        Sig::Prof,
        Sig::Winch,
        Sig::Io,
        Sig::Sys,
    ];

    /// Signals no handler may be installed for, or that mean a fault in the process itself.
    const FORBIDDEN: &[Sig] = &[
        Sig::Kill,
        Sig::Stop,
        Sig::Ill,
        Sig::Fpe,
        Sig::Segv,
        Sig::Bus,
    ];

    impl SignalKind {
        /// The signal of this number (`libc::SIGINT` and so on), as tokio's `from_raw`.
        ///
        /// ```
        /// let k = rondo::signal::unix::SignalKind::from_raw(10);
        /// assert_eq!(k.as_raw_value(), 10);
        /// ```
        pub const fn from_raw(signum: i32) -> SignalKind {
            SignalKind(signum)
        }

        /// The signal's number.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::hangup().as_raw_value(), 1);
        /// ```
        pub const fn as_raw_value(&self) -> i32 {
            self.0
        }

        /// `SIGALRM`.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::alarm().as_raw_value(), 14);
        /// ```
        pub const fn alarm() -> SignalKind {
            SignalKind(Sig::Alarm as i32)
        }

        /// `SIGCHLD`.
        ///
        /// ```
        /// assert!(rondo::signal::unix::SignalKind::child().as_raw_value() > 0);
        /// ```
        pub const fn child() -> SignalKind {
            SignalKind(Sig::Child as i32)
        }

        /// `SIGHUP`.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::hangup().as_raw_value(), 1);
        /// ```
        pub const fn hangup() -> SignalKind {
            SignalKind(Sig::Hup as i32)
        }

        /// `SIGINT`.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::interrupt().as_raw_value(), 2);
        /// ```
        pub const fn interrupt() -> SignalKind {
            SignalKind(Sig::Int as i32)
        }

        /// `SIGIO`.
        ///
        /// ```
        /// assert!(rondo::signal::unix::SignalKind::io().as_raw_value() > 0);
        /// ```
        pub const fn io() -> SignalKind {
            SignalKind(Sig::Io as i32)
        }

        /// `SIGPIPE`.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::pipe().as_raw_value(), 13);
        /// ```
        pub const fn pipe() -> SignalKind {
            SignalKind(Sig::Pipe as i32)
        }

        /// `SIGQUIT`.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::quit().as_raw_value(), 3);
        /// ```
        pub const fn quit() -> SignalKind {
            SignalKind(Sig::Quit as i32)
        }

        /// `SIGTERM`.
        ///
        /// ```
        /// assert_eq!(rondo::signal::unix::SignalKind::terminate().as_raw_value(), 15);
        /// ```
        pub const fn terminate() -> SignalKind {
            SignalKind(Sig::Term as i32)
        }

        /// `SIGUSR1`.
        ///
        /// ```
        /// assert!(rondo::signal::unix::SignalKind::user_defined1().as_raw_value() > 0);
        /// ```
        pub const fn user_defined1() -> SignalKind {
            SignalKind(Sig::Usr1 as i32)
        }

        /// `SIGUSR2`.
        ///
        /// ```
        /// assert!(rondo::signal::unix::SignalKind::user_defined2().as_raw_value() > 0);
        /// ```
        pub const fn user_defined2() -> SignalKind {
            SignalKind(Sig::Usr2 as i32)
        }

        /// `SIGWINCH`.
        ///
        /// ```
        /// assert!(rondo::signal::unix::SignalKind::window_change().as_raw_value() > 0);
        /// ```
        pub const fn window_change() -> SignalKind {
            SignalKind(Sig::Winch as i32)
        }

        fn to_async_signal(self) -> io::Result<Sig> {
            let sig = KNOWN.iter().copied().find(|s| *s as i32 == self.0);
            match sig {
                Some(s) if !FORBIDDEN.contains(&s) => Ok(s),
                Some(_) => Err(io::Error::other(format!(
                    "signal {} cannot be listened for: SIGKILL and SIGSTOP cannot be caught, and \
                     SIGILL, SIGFPE, SIGSEGV and SIGBUS mean a fault in the process",
                    self.0
                ))),
                None => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "signal {} is not a signal rondo can listen for; use the SignalKind \
                         constructors or a standard signal number",
                        self.0
                    ),
                )),
            }
        }
    }

    impl From<i32> for SignalKind {
        fn from(signum: i32) -> SignalKind {
            SignalKind::from_raw(signum)
        }
    }

    /// A listener for one kind of signal, from [`signal`], as tokio's `Signal`.
    ///
    /// ```
    /// use rondo::signal::unix::{SignalKind, signal};
    ///
    /// rondo::block_on(async {
    ///     let mut usr1 = signal(SignalKind::user_defined1()).unwrap();
    ///     let me = std::process::id();
    ///     std::process::Command::new("kill").args(["-USR1", &me.to_string()]).status().unwrap();
    ///     assert_eq!(usr1.recv().await, Some(()));
    /// });
    /// ```
    #[derive(Debug)]
    pub struct Signal {
        signals: async_signal::Signals,
    }

    /// Listens for signals of `kind`, as tokio's `signal`. From this call on, the signal's
    /// default action (ending the process, for most) no longer happens in this process.
    ///
    /// Errors: `kind` is a signal that cannot be caught (`SIGKILL`, `SIGSTOP`), one that means a
    /// fault in the process (`SIGILL`, `SIGFPE`, `SIGSEGV`, `SIGBUS`), or not a signal number;
    /// or the handler could not be installed.
    ///
    /// ```
    /// use rondo::signal::unix::{SignalKind, signal};
    ///
    /// rondo::block_on(async {
    ///     assert!(signal(SignalKind::hangup()).is_ok());
    ///     assert!(signal(SignalKind::from_raw(9)).is_err()); // SIGKILL
    ///     assert!(signal(SignalKind::from_raw(-3)).is_err());
    /// });
    /// ```
    pub fn signal(kind: SignalKind) -> io::Result<Signal> {
        Ok(Signal {
            signals: async_signal::Signals::new([kind.to_async_signal()?])?,
        })
    }

    impl Signal {
        /// Waits for the next signal. `None` would mean no more can arrive, which does not
        /// happen while the listener lives; the `Option` is tokio's signature.
        ///
        /// ```
        /// use rondo::signal::unix::{SignalKind, signal};
        ///
        /// rondo::block_on(async {
        ///     let mut usr2 = signal(SignalKind::user_defined2()).unwrap();
        ///     let me = std::process::id().to_string();
        ///     std::process::Command::new("kill").args(["-USR2", &me]).status().unwrap();
        ///     usr2.recv().await.unwrap();
        /// });
        /// ```
        pub async fn recv(&mut self) -> Option<()> {
            std::future::poll_fn(|cx| self.poll_recv(cx)).await
        }

        /// Polls for the next signal, as tokio's `poll_recv`; `Pending` registers `cx`'s waker.
        ///
        /// ```
        /// use std::future::poll_fn;
        /// use rondo::signal::unix::{SignalKind, signal};
        ///
        /// rondo::block_on(async {
        ///     let mut winch = signal(SignalKind::window_change()).unwrap();
        ///     let me = std::process::id().to_string();
        ///     std::process::Command::new("kill").args(["-WINCH", &me]).status().unwrap();
        ///     poll_fn(|cx| winch.poll_recv(cx)).await.unwrap();
        /// });
        /// ```
        pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>> {
            loop {
                match std::task::ready!(std::pin::Pin::new(&mut self.signals).poll_next(cx)) {
                    Some(Ok(_)) => return Poll::Ready(Some(())),
                    // An interrupted read of the handler's pipe: read again.
                    Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // The pipe broke: no signal can arrive any more.
                    Some(Err(_)) | None => return Poll::Ready(None),
                }
            }
        }
    }
}
