//! `task::Builder`'s spawning methods: they choose where a named task runs (the current group or
//! runtime, a given runtime, a group, a blocking pool), so they stand in the runtime layer. The
//! builder itself is in `task/builder.rs`.

use std::future::Future;
use std::io;
use std::sync::Arc;

use super::{Handle, context, global};
use crate::blocking;
use crate::group::{Group, GroupInner, HostOf, spawn_named_in, with_current};
use crate::task::{Builder, JoinHandle};

impl<'a> Builder<'a> {
    /// The group the task goes to: the task then runs on that group's runtime, whatever the
    /// caller's. Default: the group [`rondo::spawn`](crate::spawn) would choose.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("jobs").build().unwrap();
    /// let h = rondo::task::Builder::new()
    ///     .name("job-1")
    ///     .group(&g)
    ///     .spawn(async { rondo::current_group().unwrap().name().to_string() })
    ///     .unwrap();
    /// assert_eq!(rt.block_on(h).unwrap(), "jobs");
    /// ```
    pub fn group(mut self, group: &'a Group) -> Self {
        self.group = Some(&group.inner);
        self
    }

    /// Spawns `future` as a task with this builder's name, into its group if one was given, else
    /// where [`rondo::spawn`](crate::spawn) spawns.
    ///
    /// # Errors
    /// None today: the `Result` is tokio's signature, kept so code written for tokio's builder
    /// compiles unchanged. (A cancelled group or a shut-down runtime gives a handle that resolves
    /// cancelled, as [`Group::spawn`] does.)
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::task::Builder::new().name("adder").spawn(async { 2 + 2 }).unwrap();
    ///     assert_eq!(h.await.unwrap(), 4);
    /// });
    /// ```
    pub fn spawn<F>(self, future: F) -> io::Result<JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if let Some(g) = self.group {
            return Ok(spawn_named_in(g, self.task_name(), future));
        }
        let mut future = Some(future);
        let in_group = with_current(|g| {
            g.map(|g| spawn_named_in(g, self.task_name(), future.take().unwrap()))
        });
        if let Some(h) = in_group {
            return Ok(h);
        }
        let future = future.take().unwrap();
        // Cloned out of the thread-local first, as `spawn_current` does.
        Ok(match context::current_handle() {
            Some(h) => spawn_named_in(&h.default_group, self.task_name(), future),
            None => spawn_named_in(&global().default_group, self.task_name(), future),
        })
    }

    /// Spawns `future` on the runtime of `handle`, as [`Handle::spawn`] does, with this builder's
    /// name.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if a [`group`](Self::group) of another runtime was given.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rondo::task::Builder::new().name("n").spawn_on(async { 5 }, rt.handle()).unwrap();
    /// assert_eq!(rt.block_on(h).unwrap(), 5);
    /// let other = rondo::Runtime::new().unwrap();
    /// let g = other.group().build().unwrap();
    /// let err = rondo::task::Builder::new().group(&g).spawn_on(async {}, rt.handle()).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn spawn_on<F>(self, future: F, handle: &Handle) -> io::Result<JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let group = self.group_on(handle)?;
        Ok(spawn_named_in(&group, self.task_name(), future))
    }

    /// Runs `f` on the blocking pool, as [`rondo::spawn_blocking`](crate::spawn_blocking) does,
    /// with this builder's name; in its group's runtime's pool if a group was given.
    ///
    /// # Errors
    /// None today (tokio's signature, as [`spawn`](Self::spawn)).
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::task::Builder::new().name("io").spawn_blocking(|| 3).unwrap();
    ///     assert_eq!(h.await.unwrap(), 3);
    /// });
    /// ```
    pub fn spawn_blocking<F, R>(self, f: F) -> io::Result<JoinHandle<R>>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        if let Some(g) = self.group {
            let pool = g.host().blocking();
            return Ok(blocking::spawn_named_blocking(pool, g, self.task_name(), f));
        }
        match context::current_handle() {
            Some(h) => self.spawn_blocking_on(f, &h),
            None => self.spawn_blocking_on(f, global()),
        }
    }

    /// Runs `f` on the blocking pool of `handle`'s runtime, as [`Handle::spawn_blocking`] does,
    /// with this builder's name.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if a [`group`](Self::group) of another runtime was given.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let h = rondo::task::Builder::new().name("b").spawn_blocking_on(|| 4, rt.handle()).unwrap();
    /// assert_eq!(rt.block_on(h).unwrap(), 4);
    /// ```
    pub fn spawn_blocking_on<F, R>(self, f: F, handle: &Handle) -> io::Result<JoinHandle<R>>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let group = self.group_on(handle)?;
        let pool = handle.shared.blocking();
        Ok(blocking::spawn_named_blocking(
            pool,
            &group,
            self.task_name(),
            f,
        ))
    }

    /// The group a task spawned on `handle` joins: the given one (which must be of that runtime),
    /// else the caller's if it is of that runtime, else the runtime's default group.
    fn group_on(&self, handle: &Handle) -> io::Result<Arc<GroupInner>> {
        let own = Arc::as_ptr(&handle.shared) as *const HostOf;
        if let Some(g) = self.group {
            if !std::ptr::eq(g.host_addr(), own) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "task::Builder: the group given to `group` belongs to another runtime than the \
                     handle given to `spawn_on`/`spawn_blocking_on`; pass that group's runtime's \
                     handle, or leave out one of the two",
                ));
            }
            return Ok(g.clone());
        }
        Ok(with_current(|g| match g {
            Some(g) if std::ptr::eq(g.host_addr(), own) => g.clone(),
            _ => handle.default_group.clone(),
        }))
    }
}
