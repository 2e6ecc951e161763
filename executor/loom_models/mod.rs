//! The loom models, one module per area: `runtime` (the runtime's lock-free protocols), `sync`
//! (the sync primitives' acquire / release / cancel races), `blocking` (the blocking pool),
//! `rescue` (starvation rescue's claim), `handoff` (the core hand-off's rendezvous), `clock`
//! (the paused clock's auto-advance), `workers` (the active count) and `delay` (a group's
//! schedule-delay record). They drive the crate's own types, built under `--cfg loom` so that
//! their atomics and locks are loom's (`shim.rs`).
//!
//! Run them with `RUSTFLAGS="--cfg loom" cargo test --release --lib` (or `--lib loom_models::sync`
//! for one module); `scripts/verify` runs them all.
//!
//! This module holds the setup they share: how a model explores its interleavings, and the helpers
//! of more than one model module.

mod blocking;
mod clock;
mod delay;
mod handoff;
mod rescue;
mod runtime;
mod sync;
mod workers;

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use loom::thread;

/// The preemptions per execution [`model_bounded`] allows.
const PREEMPTIONS: usize = 3;

/// Explores every interleaving of `f`: `loom::model`, with loom's defaults (its `LOOM_*`
/// variables apply, `LOOM_LOG` included).
fn model(f: impl Fn() + Sync + Send + 'static) {
    loom::model(f);
}

/// Explores every interleaving of `f` with at most [`PREEMPTIONS`] preemptions per execution: for
/// models that, unbounded, have more interleavings than a run can visit (three or four threads,
/// the lock-free queues of the blocking pool and the runtime, the two-thread models whose
/// unbounded runs take minutes).
fn model_bounded(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(PREEMPTIONS);
    b.check(f);
}

/// Explores every interleaving of `f`, unless `RONDO_LOOM_PREEMPTIONS` bounds the preemptions per
/// execution. `scripts/verify --ci` sets it, so that CI ends in its time: unbounded, the slowest
/// sync models run for 6 to 24 minutes each on a 2-core machine, and a bound of a few
/// preemptions still finds a wake that a cancelled waiter fails to pass on within a second.
/// `scripts/verify` without `--ci` runs them unbounded.
fn model_bounded_in_ci(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = std::env::var("RONDO_LOOM_PREEMPTIONS").ok().map(|v| {
        v.parse()
            .expect("RONDO_LOOM_PREEMPTIONS must be a whole number of preemptions")
    });
    b.check(f);
}

/// A keep-alive that never ends within a model: a waiting thread parks until it is claimed, and a
/// model's own clock never moves that far.
const FOREVER: Duration = Duration::from_secs(24 * 3600);

/// A minimal executor on loom's thread parking (loom's own `future` module needs a feature this
/// crate does not enable).
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unparker(loom::thread::Thread);
    impl std::task::Wake for Unparker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unparker(thread::current())));
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
            return v;
        }
        thread::park();
    }
}

/// Polls a future once with a no-op waker.
fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    f.poll(&mut Context::from_waker(&waker))
}
