//! Task-local values: [`task_local!`](crate::task_local) declares a [`LocalKey`], whose value is
//! set for the duration of a future's polls by [`LocalKey::scope`].
//!
//! The value lives in a thread-local slot while the scoped future is being polled, and goes back
//! into the scope's future after each poll (a drop guard swaps it back, so a panicking poll
//! restores it too). A task moving between workers takes its value along, since the value is
//! stored in the task's future between polls.

use std::cell::RefCell;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Declares task-local keys: `static NAME: Type;` items, each a [`LocalKey`]`<Type>`, with
/// optional attributes and visibility, as `thread_local!` takes them.
///
/// ```
/// rondo::task_local! {
///     /// The request being served.
///     pub static REQUEST_ID: u64;
///     static USER: String;
/// }
///
/// rondo::block_on(REQUEST_ID.scope(7, async {
///     assert_eq!(REQUEST_ID.get(), 7);
///     assert!(USER.try_with(|u| u.len()).is_err());
/// }));
/// ```
#[macro_export]
macro_rules! task_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty; $($rest:tt)*) => {
        $crate::__task_local_key!($(#[$attr])* $vis $name, $t);
        $crate::task_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty) => {
        $crate::__task_local_key!($(#[$attr])* $vis $name, $t);
    };
}

/// One key of [`task_local!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __task_local_key {
    ($(#[$attr:meta])* $vis:vis $name:ident, $t:ty) => {
        $(#[$attr])*
        $vis static $name: $crate::task::LocalKey<$t> = {
            ::std::thread_local! {
                static SLOT: ::std::cell::RefCell<::std::option::Option<$t>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }
            $crate::task::LocalKey::__from_thread_local(&SLOT)
        };
    };
}

/// A task-local key, declared with [`task_local!`](crate::task_local).
///
/// [`scope`](LocalKey::scope) runs a future with a value set; inside it,
/// [`with`](LocalKey::with), [`try_with`](LocalKey::try_with) and [`get`](LocalKey::get) read the
/// value. Scopes nest: an inner scope of the same key shadows the outer value until it ends.
///
/// ```
/// rondo::task_local! { static DEPTH: u32; }
///
/// rondo::block_on(DEPTH.scope(1, async {
///     DEPTH.scope(2, async { assert_eq!(DEPTH.get(), 2) }).await;
///     assert_eq!(DEPTH.get(), 1);
/// }));
/// ```
pub struct LocalKey<T: 'static> {
    slot: &'static std::thread::LocalKey<RefCell<Option<T>>>,
}

/// Returned by [`LocalKey::try_with`] outside a scope of the key (or while the thread's locals
/// are being destroyed).
///
/// ```
/// rondo::task_local! { static NAME: &'static str; }
/// let err = NAME.try_with(|_| ()).unwrap_err();
/// assert!(err.to_string().contains("not set"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessError {
    _private: (),
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "task-local value not set: it is only set inside `LocalKey::scope` or `sync_scope`",
        )
    }
}

impl Error for AccessError {}

impl<T: 'static> LocalKey<T> {
    #[doc(hidden)]
    pub const fn __from_thread_local(
        slot: &'static std::thread::LocalKey<RefCell<Option<T>>>,
    ) -> Self {
        LocalKey { slot }
    }

    /// A future that polls `future` with this key set to `value`; the future's output is its
    /// output. The value is dropped with the returned future.
    ///
    /// ```
    /// rondo::task_local! { static TENANT: String; }
    ///
    /// let h = rondo::spawn(TENANT.scope("acme".to_string(), async {
    ///     rondo::yield_now().await;
    ///     TENANT.with(|t| t.clone())
    /// }));
    /// assert_eq!(rondo::block_on(h).unwrap(), "acme");
    /// ```
    pub fn scope<F: Future>(&'static self, value: T, future: F) -> TaskLocalFuture<T, F> {
        TaskLocalFuture {
            key: self,
            value: Some(value),
            future: Some(future),
        }
    }

    /// Runs `f` with this key set to `value`, and returns what `f` returns.
    ///
    /// # Panics
    /// If called inside [`with`](LocalKey::with) of the same key (the value is borrowed there).
    ///
    /// ```
    /// rondo::task_local! { static LEVEL: u8; }
    /// let doubled = LEVEL.sync_scope(21, || LEVEL.get() * 2);
    /// assert_eq!(doubled, 42);
    /// assert!(LEVEL.try_with(|_| ()).is_err());
    /// ```
    pub fn sync_scope<F: FnOnce() -> R, R>(&'static self, value: T, f: F) -> R {
        let mut value = Some(value);
        let _entered = Entered::enter(self, &mut value);
        f()
    }

    /// Runs `f` on a reference to the value.
    ///
    /// # Panics
    /// Outside a [`scope`](LocalKey::scope) or [`sync_scope`](LocalKey::sync_scope) of this key,
    /// with a message saying so; [`try_with`](LocalKey::try_with) returns an error instead.
    ///
    /// ```
    /// rondo::task_local! { static NAME: String; }
    /// rondo::block_on(NAME.scope("ann".into(), async {
    ///     assert_eq!(NAME.with(|n| n.len()), 3);
    /// }));
    /// ```
    #[track_caller]
    pub fn with<F: FnOnce(&T) -> R, R>(&'static self, f: F) -> R {
        match self.try_with(f) {
            Ok(r) => r,
            Err(_) => panic!(
                "a task-local value was read outside its scope: set it with \
                 `LocalKey::scope` or `sync_scope` before calling `with` or `get`"
            ),
        }
    }

    /// Runs `f` on a reference to the value, or returns an [`AccessError`] outside a
    /// [`scope`](LocalKey::scope) or [`sync_scope`](LocalKey::sync_scope) of this key.
    ///
    /// ```
    /// rondo::task_local! { static N: i32; }
    /// assert!(N.try_with(|n| *n).is_err());
    /// assert_eq!(N.sync_scope(5, || N.try_with(|n| *n)), Ok(5));
    /// ```
    pub fn try_with<F: FnOnce(&T) -> R, R>(&'static self, f: F) -> Result<R, AccessError> {
        let err = AccessError { _private: () };
        self.slot
            .try_with(|slot| {
                let value = slot.try_borrow().map_err(|_| err)?;
                value.as_ref().map(f).ok_or(err)
            })
            .unwrap_or(Err(err))
    }
}

impl<T: Copy + 'static> LocalKey<T> {
    /// A copy of the value.
    ///
    /// # Panics
    /// Outside a scope of this key, as [`with`](LocalKey::with).
    ///
    /// ```
    /// rondo::task_local! { static ID: u32; }
    /// assert_eq!(ID.sync_scope(9, || ID.get()), 9);
    /// ```
    #[track_caller]
    pub fn get(&'static self) -> T {
        self.with(|v| *v)
    }

    /// A copy of the value, or an [`AccessError`] outside a scope of this key.
    ///
    /// ```
    /// rondo::task_local! { static ID: u32; }
    /// assert!(ID.try_get().is_err());
    /// assert_eq!(ID.sync_scope(4, || ID.try_get()), Ok(4));
    /// ```
    pub fn try_get(&'static self) -> Result<T, AccessError> {
        self.try_with(|v| *v)
    }
}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

/// The key's value is in its thread-local slot while this lives; the drop puts it back into
/// the scope's storage, and the slot's previous value (an outer scope's, or none) back into the
/// slot.
struct Entered<'a, T: 'static> {
    key: &'static LocalKey<T>,
    value: &'a mut Option<T>,
}

impl<'a, T: 'static> Entered<'a, T> {
    #[track_caller]
    fn enter(key: &'static LocalKey<T>, value: &'a mut Option<T>) -> Self {
        swap(key, value);
        Entered { key, value }
    }
}

impl<T: 'static> Drop for Entered<'_, T> {
    fn drop(&mut self) {
        swap(self.key, self.value);
    }
}

/// Swaps `value` with the key's slot.
#[track_caller]
fn swap<T: 'static>(key: &'static LocalKey<T>, value: &mut Option<T>) {
    let swapped = key.slot.try_with(|slot| match slot.try_borrow_mut() {
        Ok(mut slot) => {
            std::mem::swap(&mut *slot, value);
            true
        }
        Err(_) => false,
    });
    match swapped {
        Ok(true) => {}
        Ok(false) => panic!(
            "a task-local scope was entered or left while the value was borrowed by `with` \
             of the same key"
        ),
        Err(_) => panic!(
            "a task-local scope was entered or left while the thread's locals were being \
             destroyed"
        ),
    }
}

pin_project_lite::pin_project! {
    /// A future with a task-local value set while it is polled; made by [`LocalKey::scope`].
    ///
    /// The inner future is also dropped with the value set, so its destructor can read it.
    #[must_use = "futures do nothing unless polled"]
    pub struct TaskLocalFuture<T: 'static, F> {
        key: &'static LocalKey<T>,
        value: Option<T>,
        // `None` once dropped (see the drop below).
        #[pin]
        future: Option<F>,
    }

    impl<T: 'static, F> PinnedDrop for TaskLocalFuture<T, F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.future.is_none() {
                return;
            }
            // The inner future is dropped in place with the value set, if the slot can take it;
            // at thread teardown, or inside `with` of the same key, it is dropped without.
            let free = this.key.slot.try_with(|slot| slot.try_borrow_mut().is_ok());
            if free == Ok(true) {
                let _entered = Entered::enter(this.key, this.value);
                this.future.set(None);
            } else {
                this.future.set(None);
            }
        }
    }
}

impl<T: 'static, F> TaskLocalFuture<T, F> {
    /// Takes the value out of the scope: `None` if it was taken already. The future may be
    /// unfinished; from then on it runs without the value (`with` inside it panics, `try_with`
    /// fails).
    ///
    /// ```
    /// rondo::task_local! { static ID: u32; }
    /// let mut scoped = std::pin::pin!(ID.scope(7, async { ID.try_get().is_ok() }));
    /// assert_eq!(scoped.as_mut().take_value(), Some(7));
    /// assert_eq!(scoped.as_mut().take_value(), None);
    /// assert!(!rondo::block_on(scoped));
    /// ```
    pub fn take_value(self: Pin<&mut Self>) -> Option<T> {
        self.project().value.take()
    }
}

impl<T: 'static, F: Future> Future for TaskLocalFuture<T, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = Entered::enter(this.key, this.value);
        this.future
            .as_pin_mut()
            .expect("a TaskLocalFuture polled after its future was dropped")
            .poll(cx)
    }
}

impl<T: fmt::Debug + 'static, F> fmt::Debug for TaskLocalFuture<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskLocalFuture")
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}
