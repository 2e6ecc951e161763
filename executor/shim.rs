//! The std-or-loom facade.
//!
//! Every synchronisation type the runtime's lock-free protocols use comes from here, so the same code
//! is model-checked by loom (`RUSTFLAGS="--cfg loom"`) and runs on std types otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub(crate) use std::sync::TryLockError;

/// Locks a mutex, ignoring poisoning: the runtime never panics while holding its own locks, and a
/// user panic can only unwind through code that holds none.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
