//! The crate's configuration helpers, declared first in `lib.rs` so that every module sees them.
//!
//! Workers drive async-io's reactor (`worker::reactor`) with the `io` feature, outside loom
//! (async-io does not build there) and Miri (which lacks the reactor's system calls). That one
//! condition is written here only: items and statements name it through [`cfg_reactor!`] and
//! [`cfg_not_reactor!`].
//!
//! The `tracing` feature's records go through [`trace_event!`] and [`trace_span!`] (and code
//! that handles a span itself through [`cfg_tracing!`]): without the feature each expands to
//! nothing, so no field, call or argument evaluation is compiled in.

/// Compiles the items given only where workers drive async-io's reactor: feature `io`, neither
/// loom nor Miri (see the module docs). In a function, `cfg_reactor! {{ statements }}` compiles
/// the block of statements only there.
macro_rules! cfg_reactor {
    ({ $($body:tt)* }) => {
        #[cfg(all(feature = "io", not(loom), not(miri)))]
        {
            $($body)*
        }
    };
    ($($item:item)*) => {
        $(
            #[cfg(all(feature = "io", not(loom), not(miri)))]
            $item
        )*
    };
}

/// Compiles the items given only where workers do not drive async-io's reactor: the complement
/// of [`cfg_reactor!`], with the same two forms.
macro_rules! cfg_not_reactor {
    ({ $($body:tt)* }) => {
        #[cfg(not(all(feature = "io", not(loom), not(miri))))]
        {
            $($body)*
        }
    };
    ($($item:item)*) => {
        $(
            #[cfg(not(all(feature = "io", not(loom), not(miri))))]
            $item
        )*
    };
}

/// A `tracing` event with the `tracing` feature (`trace_event!(Level, fields..., "message")`, as
/// `tracing::event!` takes them, target `rondo`); nothing at all without it, not even its
/// arguments' evaluation.
macro_rules! trace_event {
    ($level:ident, $($arg:tt)+) => {
        #[cfg(feature = "tracing")]
        {
            ::tracing::event!(target: "rondo", ::tracing::Level::$level, $($arg)+);
        }
    };
}

/// Enters a `tracing` span (`trace_span!(Level, "name", fields...)`, as `tracing::span!` takes
/// them, target `rondo`) for the rest of the enclosing block, with the `tracing` feature; nothing
/// at all without it.
macro_rules! trace_span {
    ($level:ident, $name:expr $(, $($field:tt)+)?) => {
        #[cfg(feature = "tracing")]
        let _entered = ::tracing::span!(
            target: "rondo",
            ::tracing::Level::$level,
            $name
            $(, $($field)+)?
        )
        .entered();
    };
}

/// Compiles the items given, or in a function the block of statements given
/// (`cfg_tracing! {{ statements }}`), only with the `tracing` feature.
macro_rules! cfg_tracing {
    ({ $($body:tt)* }) => {
        #[cfg(feature = "tracing")]
        {
            $($body)*
        }
    };
    ($($item:item)*) => {
        $(
            #[cfg(feature = "tracing")]
            $item
        )*
    };
}
