//! `Handle::dump` and `Runtime::dump`: a snapshot of the runtime's live tasks, from the table a
//! runtime built with [`Builder::enable_task_dump`](crate::Builder::enable_task_dump) keeps
//! (`task::dump` states the protocol).

use crate::task::dump::{Dump, DumpError};

use super::{Handle, Runtime};

impl Handle {
    /// Lists every live task of the runtime: its id, name, group, state (running, queued, idle),
    /// how many polls began and how long ago the last one began. See [`Dump`]; its `Display` is
    /// a table, one line per task.
    ///
    /// Safe to call from anywhere, a task of the runtime included (that task shows as running):
    /// it locks one shard of the table at a time, so workers wait at most for one shard's copy.
    /// Each task's line is consistent; the dump as a whole is not one instant's picture.
    ///
    /// Unlike tokio's (`Handle::dump`, unstable and behind a build flag), it is synchronous,
    /// carries no backtraces, and returns an error on a runtime built without
    /// [`Builder::enable_task_dump`](crate::Builder::enable_task_dump), which keeps no table so
    /// that its spawns and polls pay nothing for it.
    ///
    /// ```
    /// use rondo::runtime::TaskState;
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let waiting = rondo::task::Builder::new()
    ///     .name("waiting")
    ///     .spawn_on(std::future::pending::<()>(), rt.handle())
    ///     .unwrap();
    /// // Its first poll returns `Pending`: it shows idle from then on.
    /// let dump = rt.block_on(async {
    ///     loop {
    ///         let dump = rondo::Handle::current().dump().unwrap();
    ///         if dump.tasks()[0].state() == TaskState::Idle {
    ///             break dump;
    ///         }
    ///         rondo::yield_now().await;
    ///     }
    /// });
    /// assert_eq!((dump.tasks()[0].name(), dump.tasks()[0].polls()), (Some("waiting"), 1));
    /// println!("{dump}");
    /// waiting.abort();
    /// assert!(rondo::Runtime::new().unwrap().handle().dump().is_err());
    /// ```
    pub fn dump(&self) -> Result<Dump, DumpError> {
        match self
            .shared
            .config()
            .task_hooks
            .as_ref()
            .and_then(|h| h.dump.as_ref())
        {
            Some(table) => Ok(table.snapshot()),
            None => Err(DumpError::disabled()),
        }
    }
}

impl Runtime {
    /// Lists every live task of the runtime; see [`Handle::dump`].
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// assert!(rt.dump().unwrap().tasks().is_empty());
    /// ```
    pub fn dump(&self) -> Result<Dump, DumpError> {
        self.handle().dump()
    }
}
