//! `task::Builder` (tokio's name): a task's name and group, chosen before it is spawned.
//!
//! The builder stands in this layer with what it holds (a name, and the group a task goes to, as
//! this layer names a group); its spawning methods choose a runtime, a group or a blocking pool,
//! so they are an `impl` block in the runtime layer (`runtime/task_builder.rs`), as `JoinSet`'s
//! are.

use std::fmt;
use std::sync::Arc;

use super::meta::{OwnerOf, TaskName};

/// Spawns a task with a name, into a chosen group (tokio's `task::Builder`, plus
/// [`group`](Self::group)).
///
/// The name is shown to the task hooks ([`TaskMeta::name`](crate::runtime::TaskMeta::name)), to the
/// panic hook ([`TaskPanic::task_name`](crate::TaskPanic::task_name)) and in a panicked task's
/// [`JoinError`](crate::JoinError). It lives as long as the task's future, in a table beside the
/// tasks: an unnamed task spends nothing on names.
///
/// ```
/// rondo::block_on(async {
///     let h = rondo::task::Builder::new().name("fetch").spawn(async { 1 }).unwrap();
///     assert_eq!(h.await.unwrap(), 1);
/// });
/// ```
#[derive(Default, Clone, Copy)]
pub struct Builder<'a> {
    pub(crate) name: Option<&'a str>,
    pub(crate) group: Option<&'a Arc<OwnerOf>>,
}

impl<'a> Builder<'a> {
    /// A builder for an unnamed task in the group [`rondo::spawn`](crate::spawn) would choose.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::task::Builder::new().spawn(async { 2 }).unwrap();
    ///     assert_eq!(h.await.unwrap(), 2);
    /// });
    /// ```
    pub fn new() -> Self {
        Builder {
            name: None,
            group: None,
        }
    }

    /// The task's name.
    ///
    /// ```
    /// rondo::block_on(async {
    ///     let h = rondo::task::Builder::new().name("job").spawn(async { panic!("x") }).unwrap();
    ///     assert_eq!(h.await.unwrap_err().task_name(), Some("job"));
    /// });
    /// ```
    pub fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }

    /// The name as the task's metadata stores it.
    pub(crate) fn task_name(&self) -> Option<TaskName> {
        self.name.map(|n| TaskName(n.to_string()))
    }
}

impl fmt::Debug for Builder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("group", &self.group.is_some())
            .finish()
    }
}
