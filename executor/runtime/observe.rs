//! What a runtime tells about itself: its id and name, and the list of its live groups.

use std::fmt;
use std::num::NonZeroU64;

use super::{Handle, Runtime};
use crate::group::{Group, Host};

/// A runtime's id (tokio's `runtime::Id`): unique among the runtimes of the process, never reused.
///
/// ```
/// let a = rondo::Runtime::new().unwrap();
/// let b = rondo::Runtime::new().unwrap();
/// assert_ne!(a.handle().id(), b.handle().id());
/// assert_eq!(a.handle().id(), a.handle().clone().id());
/// println!("runtime {}", a.handle().id());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(NonZeroU64);

impl Id {
    /// The id as a number.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// assert!(rt.handle().id().as_u64() >= 1);
    /// ```
    pub fn as_u64(&self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.0)
    }
}

impl Handle {
    /// The runtime's id, unique in the process and the same through every handle.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let id = rt.block_on(async { rondo::Handle::current().id() });
    /// assert_eq!(id, rt.handle().id());
    /// ```
    pub fn id(&self) -> Id {
        Id(NonZeroU64::new(self.shared.config().runtime_id).unwrap_or(NonZeroU64::MIN))
    }

    /// The name given to [`Builder::name`](crate::Builder::name), or `None`.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().name("edge").build().unwrap();
    /// assert_eq!(rt.handle().name(), Some("edge"));
    /// assert_eq!(rondo::Runtime::new().unwrap().handle().name(), None);
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.shared.config().runtime_name.as_deref()
    }

    /// Every group alive on this runtime now, the default group included, as handles (a
    /// snapshot, in no particular order). A group is alive while a handle to it or one of its
    /// tasks exists; a handle in this list keeps its group alive, so drop the list when done.
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let g = rt.group().name("tenant-a").build().unwrap();
    /// let mut names: Vec<String> =
    ///     rt.handle().groups().iter().map(|g| g.name().to_string()).collect();
    /// names.sort();
    /// assert_eq!(names, ["default", "tenant-a"]);
    /// drop(g);
    /// assert_eq!(rt.handle().groups().len(), 1);
    /// ```
    pub fn groups(&self) -> Vec<Group> {
        Host::groups(&*self.shared)
            .snapshot()
            .into_iter()
            .map(|inner| Group { inner })
            .collect()
    }
}

impl Runtime {
    /// Every group alive on this runtime now; see [`Handle::groups`].
    ///
    /// ```
    /// let rt = rondo::Runtime::new().unwrap();
    /// let _g = rt.group().build().unwrap();
    /// assert_eq!(rt.groups().len(), 2);
    /// ```
    pub fn groups(&self) -> Vec<Group> {
        self.handle().groups()
    }
}
