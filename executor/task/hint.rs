//! The hint rondo adds to the report of a panic raised by code that needs tokio's runtime: crates
//! such as `reqwest` or `tokio::time` panic with tokio's "there is no reactor running, must be
//! called from the context of a Tokio 1.x runtime", which names neither rondo nor the remedy.
//!
//! The hint goes into the `Display` of the task's `JoinError` and of the `TaskPanic` the panic
//! hook sees, and, with no panic hook installed, onto stderr once per process after the message
//! the standard library's panic hook printed.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};

/// The line added after tokio's message.
pub(crate) const TOKIO_HINT: &str = "note: this code needs a tokio runtime; run it inside \
     `async_compat::Compat::new(async { .. })` (rondo's guide, \"tokio-bound crates\")";

/// Whether a panic message is tokio's for code run outside a tokio runtime (the reactor, timer
/// and spawn messages all say "Tokio 1.x").
pub(crate) fn needs_tokio(message: &str) -> bool {
    message.contains("Tokio 1.x")
}

/// Whether the hint has been printed to stderr in this process.
static PRINTED: AtomicBool = AtomicBool::new(false);

/// Prints the hint to stderr if `message` is tokio's and no earlier panic printed it.
pub(crate) fn print_once(message: Option<&str>) {
    if message.is_some_and(needs_tokio) && !PRINTED.swap(true, Ordering::Relaxed) {
        eprintln!("{TOKIO_HINT}");
    }
}

/// The message of a panic payload that is a string (`panic!` with a literal or a format).
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> Option<&str> {
    p.downcast_ref::<&'static str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
}
