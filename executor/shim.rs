//! The std-or-loom facade.
//!
//! Every synchronisation type the runtime's lock-free protocols use comes from here, so the same code
//! is model-checked by loom (`RUSTFLAGS="--cfg loom"`) and runs on std types otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub(crate) use std::sync::TryLockError;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std`'s `UnsafeCell` behind loom's interface: access goes through closures, so that under loom
/// every access to the cell is checked for a race.
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a pointer for reading the value.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a pointer for writing the value.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Locks a mutex, ignoring poisoning: the runtime never panics while holding its own locks, and a
/// user panic can only unwind through code that holds none.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The cheap half of an asymmetric fence pair (see `worker::lent`): orders a thread's store before
/// its next load against a [`heavy_barrier`] on another thread. Costs nothing at run time: the
/// heavy side makes every running thread execute a full fence. loom models it as a SeqCst fence.
#[cfg(loom)]
#[inline]
pub(crate) fn light_barrier() {
    fence(Ordering::SeqCst);
}

/// See the non-loom version; loom models it as a SeqCst fence.
#[cfg(loom)]
pub(crate) fn heavy_barrier() -> bool {
    fence(Ordering::SeqCst);
    true
}

/// See the loom version: a compiler fence, so the compiler keeps the store before the load.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn light_barrier() {
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The expensive half of an asymmetric fence pair: on return, every thread of the process has
/// executed a full memory fence since the call began (Linux `membarrier`), so for any thread that
/// stored then loaded across a [`light_barrier`], either its load saw what this thread stored
/// before the call, or this thread's loads after the call see its store. False if the system
/// offers no such barrier (then the caller must not rely on it).
#[cfg(not(loom))]
pub(crate) fn heavy_barrier() -> bool {
    membarrier::run()
}

/// Registers this process for [`heavy_barrier`] ahead of its first use (the registration may
/// wait for a grace period); true if it is available.
#[cfg(not(loom))]
pub(crate) fn prepare_heavy_barrier() -> bool {
    membarrier::mode() != 0
}

#[cfg(loom)]
#[allow(dead_code)]
pub(crate) fn prepare_heavy_barrier() -> bool {
    true
}

#[cfg(all(
    not(loom),
    not(miri),
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod membarrier {
    use std::ffi::c_long;
    use std::sync::OnceLock;

    #[cfg(target_arch = "x86_64")]
    const SYS_MEMBARRIER: c_long = 324;
    #[cfg(target_arch = "aarch64")]
    const SYS_MEMBARRIER: c_long = 283;
    const CMD_QUERY: c_long = 0;
    const CMD_GLOBAL: c_long = 1;
    const CMD_PRIVATE_EXPEDITED: c_long = 8;
    const CMD_REGISTER_PRIVATE_EXPEDITED: c_long = 16;

    unsafe extern "C" {
        fn syscall(num: c_long, ...) -> c_long;
    }

    fn membarrier(cmd: c_long) -> c_long {
        // SAFETY: membarrier(cmd, flags, cpu_id) takes three integers and reads or writes no
        // memory of this process; an unknown command fails with an error code.
        unsafe { syscall(SYS_MEMBARRIER, cmd, 0 as c_long, 0 as c_long) }
    }

    /// The command to use: the expedited one (an interrupt to each CPU running this process, a
    /// few microseconds) if registration succeeds, else the global one (waits for a scheduler
    /// grace period, milliseconds), else 0 (none: kernels before 4.3, or a sandbox that forbids
    /// the call).
    pub(super) fn mode() -> c_long {
        static MODE: OnceLock<c_long> = OnceLock::new();
        *MODE.get_or_init(|| {
            if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0 {
                CMD_PRIVATE_EXPEDITED
            } else {
                let supported = membarrier(CMD_QUERY);
                if supported > 0 && supported & CMD_GLOBAL != 0 {
                    CMD_GLOBAL
                } else {
                    0
                }
            }
        })
    }

    pub(super) fn run() -> bool {
        let cmd = mode();
        cmd != 0 && membarrier(cmd) == 0
    }
}

/// No `membarrier` here (another system, or Miri, which does not emulate the call): claims always
/// withdraw, so there is no rescue.
#[cfg(all(
    not(loom),
    any(
        miri,
        not(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        ))
    )
))]
mod membarrier {
    pub(super) fn mode() -> i64 {
        0
    }
    pub(super) fn run() -> bool {
        false
    }
}

/// Lets another thread run while waiting for it (loom: a modelled yield).
#[cfg(loom)]
pub(crate) fn spin_yield() {
    loom::thread::yield_now();
}

/// Lets another thread run while waiting for it.
#[cfg(not(loom))]
pub(crate) fn spin_yield() {
    std::thread::yield_now();
}
