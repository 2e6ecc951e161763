//! Task names: a table from a task's id to its name, beside the tasks, so that a task's metadata
//! spends no byte on a name and an unnamed task pays nothing for the feature.
//!
//! A named task's entry is made by its spawner before the task is queued and removed as its
//! future is dropped; its metadata carries a flag saying it has one, so nobody looks up an
//! unnamed task. The table is split into shards by address, each a plain lock held only to insert,
//! copy or remove one entry (never while user code runs). An entry's key, the address of the
//! task's metadata, cannot be reused before the entry is gone: the allocation outlives the future.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

const SHARDS: usize = 16;

type Shard = Mutex<HashMap<usize, String>>;

static TABLE: LazyLock<[Shard; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Shard::default()));

fn shard(task: usize) -> MutexGuard<'static, HashMap<usize, String>> {
    // Metadata addresses are 8-aligned and allocations at least 64 bytes apart.
    TABLE[(task >> 6) % SHARDS]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Names the task `task` (its spawner, before the task is queued).
pub(crate) fn insert(task: usize, name: String) {
    shard(task).insert(task, name);
}

/// A copy of the task's name, if it has an entry.
pub(crate) fn get(task: usize) -> Option<String> {
    shard(task).get(&task).cloned()
}

/// Forgets the task's name as its future is dropped.
pub(crate) fn remove(task: usize) {
    let name = shard(task).remove(&task);
    // Freed outside the lock.
    drop(name);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn entries() -> usize {
        TABLE.iter().map(|s| s.lock().unwrap().len()).sum()
    }

    /// Every way a named task ends (completed, panicked, aborted while idle, refused by a
    /// cancelled group, a blocking closure) removes its name; a panicked task's error keeps a copy.
    #[test]
    fn a_named_task_s_end_removes_its_name() {
        let rt = crate::Runtime::builder().worker_threads(2).build().unwrap();
        let g = rt.group().build().unwrap();
        let before = entries();
        let named = || crate::task::Builder::new().name("n");
        let done = named().spawn_on(async { 1 }, rt.handle()).unwrap();
        let panicked = named()
            .spawn_on(async { panic!("p") }, rt.handle())
            .unwrap();
        let idle = named()
            .spawn_on(std::future::pending::<()>(), rt.handle())
            .unwrap();
        let blocking = named().spawn_blocking_on(|| 2, rt.handle()).unwrap();
        assert_eq!(rt.block_on(done).unwrap(), 1);
        assert_eq!(rt.block_on(blocking).unwrap(), 2);
        let err = rt.block_on(panicked).unwrap_err();
        assert_eq!(err.task_name(), Some("n"));
        idle.abort();
        assert!(rt.block_on(idle).unwrap_err().is_cancelled());
        g.cancel();
        let refused = named().group(&g).spawn(async {}).unwrap();
        assert!(rt.block_on(refused).unwrap_err().is_cancelled());
        assert_eq!(entries(), before, "every ended task's name is gone");
    }
}
