//! `AbortHandle` (tokio's `task::AbortHandle`): aborts a task, and tells whether it finished,
//! without the task's `JoinHandle`.
//!
//! # Protocol
//! An abort handle reaches its task through a shared *cell*; the task's allocation must be alive
//! whenever the cell touches it. Three states, changed only under the cell's lock:
//! 1. `Borrowed`: the `JoinHandle` lives, and its reference keeps the allocation alive. The cell
//!    reads the task through a copy of that reference which it never drops (it owns nothing).
//! 2. `Owned`: the `JoinHandle` was dropped while the task was unfinished and an abort handle
//!    existed: instead of detaching, the `JoinHandle` moved into the cell, whose reference keeps
//!    the allocation alive. The cell drops it, detaching the task as a dropped `JoinHandle`
//!    does, when the last abort handle goes. (The output of a task that completes meanwhile is
//!    dropped then, not when the task completes; so is the waker of a poll of the `JoinHandle`
//!    that returned `Pending`, unless the task completes first.)
//! 3. `Done`: the `JoinHandle` was dropped with the task finished, or with no abort handle left.
//!
//! `JoinHandle::abort_handle` makes the cell (or finds it) in a process-wide table keyed by the
//! task's id, sharded by address, and marks its `JoinHandle`; the marked handle, as it is
//! dropped, takes the cell out of the table and moves it from `Borrowed` to `Owned` or `Done`.
//! The id cannot pass to another task before that: the `JoinHandle` keeps the allocation.
//!
//! `abort` marks the task aborted and copies its waker (if it is idle) under the cell's lock, and
//! wakes it after releasing the lock: a wake may drop the task's future (a runtime shutting down
//! refuses it), whose destructor may drop this very task's `JoinHandle`, which takes the lock.

use std::collections::HashMap;
use std::fmt;
use std::mem::ManuallyDrop;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::ptr::NonNull;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use async_task::FallibleTask;

use super::JoinHandle;
use super::future::TaskOutput;
use super::hooks::Id;
use super::meta::TaskMeta;

/// Aborts a task without its [`JoinHandle`] (tokio's `task::AbortHandle`), from
/// [`JoinHandle::abort_handle`] or [`JoinSet::spawn`](crate::task::JoinSet::spawn). Cloneable,
/// `Send` and `Sync`; it does not keep the task from being detached, and dropping it does
/// nothing to the task.
///
/// While an abort handle exists, a dropped `JoinHandle` of an unfinished task hands its hold on
/// the task to the abort handles: the task runs on, detached, and an output it produces meanwhile
/// is dropped with the last abort handle (tokio drops it when the task completes).
///
/// ```
/// rondo::block_on(async {
///     let h = rondo::spawn(std::future::pending::<()>());
///     let abort = h.abort_handle();
///     assert_eq!(abort.id(), h.id());
///     abort.abort();
///     assert!(h.await.unwrap_err().is_cancelled());
///     assert!(abort.is_finished());
/// });
/// ```
#[derive(Clone)]
pub struct AbortHandle {
    cell: Arc<Cell>,
}

/// What the abort handles of one task share (see the module docs).
struct Cell {
    id: Id,
    held: Mutex<Held>,
    /// Makes the `Owned` state from the `JoinHandle` moved into a `Box` (its type erased): made
    /// where the output type is known to be `Send + 'static`.
    own: unsafe fn(*mut ()) -> Erased,
}

enum Held {
    Borrowed {
        meta: NonNull<TaskMeta>,
        task: Erased,
    },
    Owned {
        meta: NonNull<TaskMeta>,
        task: Erased,
    },
    Done,
}

/// A task reference with its output type erased: a non-owning copy (`Borrowed`) or a boxed
/// `JoinHandle` (`Owned`).
struct Erased {
    ptr: *mut (),
    is_finished: unsafe fn(*const ()) -> bool,
    free: unsafe fn(*mut ()),
}

impl Erased {
    fn is_finished(&self) -> bool {
        // SAFETY: `ptr` is what the functions were made for, alive until `free` (see `Held`).
        unsafe { (self.is_finished)(self.ptr) }
    }
}

impl Drop for Erased {
    fn drop(&mut self) {
        // SAFETY: `ptr` is what `free` was made for, and this is its only release.
        unsafe { (self.free)(self.ptr) }
    }
}

type Borrowed<T> = ManuallyDrop<FallibleTask<TaskOutput<T>, TaskMeta>>;

/// A non-owning copy of the handle's task reference (the `Borrowed` state).
///
/// # Safety
/// The copy must only be read while `handle` lives, and never dropped as a task reference (it is
/// freed as a `ManuallyDrop`).
unsafe fn borrowed<T: Send + 'static>(task: &FallibleTask<TaskOutput<T>, TaskMeta>) -> Erased {
    // SAFETY: a bitwise copy of the reference, kept in `ManuallyDrop` so it never releases the
    // task; it is read (through `&`) only while the original lives (the caller's contract).
    let copy: Box<Borrowed<T>> = Box::new(ManuallyDrop::new(unsafe { std::ptr::read(task) }));
    unsafe fn is_finished<T>(p: *const ()) -> bool {
        // SAFETY: `p` is a live `Box<Borrowed<T>>` whose original reference lives.
        unsafe { (*(p as *const Borrowed<T>)).is_finished() }
    }
    unsafe fn free<T>(p: *mut ()) {
        // SAFETY: `p` came from `Box::into_raw`; the copy inside is not dropped.
        drop(unsafe { Box::from_raw(p as *mut Borrowed<T>) });
    }
    Erased {
        ptr: Box::into_raw(copy) as *mut (),
        is_finished: is_finished::<T>,
        free: free::<T>,
    }
}

/// The `Owned` state from a boxed `JoinHandle<T>`.
///
/// # Safety
/// `p` must come from `Box::<JoinHandle<T>>::into_raw`.
unsafe fn owned<T: Send + 'static>(p: *mut ()) -> Erased {
    unsafe fn is_finished<T>(p: *const ()) -> bool {
        // SAFETY: `p` is a live `Box<JoinHandle<T>>`.
        unsafe { (*(p as *const JoinHandle<T>)).is_finished() }
    }
    unsafe fn free<T>(p: *mut ()) {
        // SAFETY: `p` came from `Box::into_raw`; dropping the handle detaches the task.
        drop(unsafe { Box::from_raw(p as *mut JoinHandle<T>) });
    }
    Erased {
        ptr: p,
        is_finished: is_finished::<T>,
        free: free::<T>,
    }
}

// SAFETY: the cell only reads the task's metadata (`Sync`) and its state (atomics), and drops a
// `JoinHandle<T>` of a `T: Send` (`own` is only made for such), from whichever thread drops it
// last; everything mutable is behind the lock.
unsafe impl Send for Cell {}
// SAFETY: as for `Send`: every access goes through the lock.
unsafe impl Sync for Cell {}

impl UnwindSafe for AbortHandle {}
impl RefUnwindSafe for AbortHandle {}

const SHARDS: usize = 16;

type Shard = Mutex<HashMap<usize, Arc<Cell>>>;

/// The cells of the tasks that have abort handles and a live `JoinHandle`, by task id.
static CELLS: LazyLock<[Shard; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Shard::default()));

fn shard(task: usize) -> MutexGuard<'static, HashMap<usize, Arc<Cell>>> {
    // Nothing panics while a shard is locked: a poisoned one is whole.
    CELLS[(task >> 6) % SHARDS]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

impl Cell {
    fn lock(&self) -> MutexGuard<'_, Held> {
        // Nothing panics while the cell is locked (the functions it calls only read atomics).
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The abort handle of the task `handle` holds, made on first use (see the module docs).
pub(crate) fn of<T: Send + 'static>(handle: &JoinHandle<T>) -> AbortHandle {
    let task = handle.task_id();
    let mut cells = shard(task);
    if let Some(cell) = cells.get(&task) {
        return AbortHandle { cell: cell.clone() };
    }
    let Some(reference) = handle.task_ref() else {
        // Only a dropping handle has no task reference; `&handle` rules that out.
        unreachable!("a JoinHandle borrowed by a caller holds its task");
    };
    let cell = Arc::new(Cell {
        id: handle.id(),
        held: Mutex::new(Held::Borrowed {
            meta: handle.meta_ptr(),
            // SAFETY: the state leaves `Borrowed` (and this copy is freed) when the handle is
            // dropped, before its reference goes: the handle is marked below.
            task: unsafe { borrowed::<T>(reference) },
        }),
        own: owned::<T>,
    });
    cells.insert(task, cell.clone());
    handle.mark_abortable();
    AbortHandle { cell }
}

/// A marked `JoinHandle` is being dropped: moves its cell out of `Borrowed`. Returns true if the
/// cell took the handle (then the caller must not release the task), false if the caller
/// releases it as usual.
///
/// `boxed` moves the handle's parts into a `Box<JoinHandle<T>>` and returns it type-erased; it is
/// called only if the cell takes them.
pub(crate) fn handle_dropped(
    task: usize,
    finished: bool,
    boxed: impl FnOnce() -> (NonNull<TaskMeta>, *mut ()),
) -> bool {
    let Some(cell) = shard(task).remove(&task) else {
        return false;
    };
    let mut held = cell.lock();
    // No abort handle is left (and none can be made, the `JoinHandle` being gone): nobody needs
    // the task any more.
    if finished || Arc::strong_count(&cell) == 1 {
        let old = std::mem::replace(&mut *held, Held::Done);
        drop(held);
        drop(old);
        return false;
    }
    let (meta, ptr) = boxed();
    // SAFETY: `ptr` is a `Box<JoinHandle<T>>` for the `T` that `own` was made for (the cell is
    // this task's, made by `of::<T>` from this handle).
    let task = unsafe { (cell.own)(ptr) };
    let old = std::mem::replace(&mut *held, Held::Owned { meta, task });
    drop(held);
    drop(old);
    true
}

impl AbortHandle {
    /// Aborts the task, as [`JoinHandle::abort`] does: a queued task is dropped without running,
    /// a running one at its next suspension point, always by a worker. Does nothing if the task
    /// already finished.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(std::future::pending::<()>());
    ///     let abort = h.abort_handle();
    ///     drop(h); // the task runs on, detached
    ///     assert!(!abort.is_finished());
    ///     abort.abort();
    ///     while !abort.is_finished() {
    ///         rondo::yield_now().await;
    ///     }
    /// });
    /// ```
    pub fn abort(&self) {
        let waker = match &*self.cell.lock() {
            Held::Borrowed { meta, .. } | Held::Owned { meta, .. } => {
                // SAFETY: in these states a reference keeps the task's allocation alive while
                // the lock is held (see the module docs).
                unsafe { meta.as_ref() }.abort_deferred()
            }
            Held::Done => None,
        };
        // Woken with the lock released (see the module docs).
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// True once the task has completed, panicked or been cancelled (as
    /// [`JoinHandle::is_finished`]).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(async { 1 });
    ///     let abort = h.abort_handle();
    ///     assert_eq!(h.await.unwrap(), 1);
    ///     assert!(abort.is_finished());
    /// });
    /// ```
    pub fn is_finished(&self) -> bool {
        match &*self.cell.lock() {
            Held::Borrowed { task, .. } | Held::Owned { task, .. } => task.is_finished(),
            Held::Done => true,
        }
    }

    /// The task's id, as [`JoinHandle::id`] returns it.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::spawn(async {});
    ///     assert_eq!(h.abort_handle().id(), h.id());
    /// });
    /// ```
    pub fn id(&self) -> Id {
        self.cell.id
    }
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("id", &self.cell.id)
            .finish()
    }
}
