//! What the stall monitor asks the operating system about a runtime thread whose poll has held
//! its core past the threshold: is the thread blocked (sleeping, waiting for a lock or a system
//! call), or was it runnable, and then did it run or only wait for a CPU?
//!
//! A thread that was preempted in the middle of a poll looks stuck to the monitor, but a rescue
//! thread would compete for the same CPUs the preempted one waits for: on a machine with more
//! busy threads than cores it adds threads, thread switches and cold caches, and serves nothing
//! sooner. So the monitor rescues a poll only if its thread is blocked, or ran on a CPU for at
//! least half the time it watched it.
//!
//! On Linux the answers come from `/proc/self/task/<tid>/stat` (the state letter) and
//! `schedstat` (the thread's time on a CPU). Elsewhere, or when `/proc` cannot be read, there is no
//! answer and every stalled poll counts as stuck, as if all threads were blocked.

use std::time::Instant;

/// This thread's kernel thread id, or 0 where unknown.
pub(crate) fn current_tid() -> u32 {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // `/proc/thread-self` links to `<pid>/task/<tid>`.
        if let Ok(path) = std::fs::read_link("/proc/thread-self") {
            if let Some(tid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse().ok())
            {
                return tid;
            }
        }
    }
    0
}

/// A thread's total time on a CPU at one moment: the baseline a later look compares with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CpuTime {
    pub(crate) on_cpu_ns: u64,
    /// When it was read.
    pub(crate) at: Instant,
}

/// One thread's `/proc` files, opened once and read again (one `pread` each) at every look: the
/// monitor looks at the same few threads whenever a poll spans one of its ticks, which under load
/// (a worker preempted in the middle of a poll) is hundreds of times a second, and opening the
/// files each time cost it several system calls per file.
pub(crate) struct ThreadFiles {
    tid: u32,
    #[cfg(all(target_os = "linux", not(miri)))]
    stat: std::fs::File,
    #[cfg(all(target_os = "linux", not(miri)))]
    sched: std::fs::File,
}

impl ThreadFiles {
    /// Opens thread `tid`'s files; `None` where unknown (`tid` 0, no `/proc`, a thread that has
    /// exited).
    pub(crate) fn open(tid: u32) -> Option<ThreadFiles> {
        if tid == 0 {
            return None;
        }
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let open = |name: &str| std::fs::File::open(format!("/proc/self/task/{tid}/{name}"));
            return Some(ThreadFiles {
                tid,
                stat: open("stat").ok()?,
                sched: open("schedstat").ok()?,
            });
        }
        #[allow(unreachable_code)]
        None
    }

    /// The thread these files describe.
    pub(crate) fn tid(&self) -> u32 {
        self.tid
    }

    /// The thread's time on a CPU now (`schedstat` only).
    pub(crate) fn cpu_time(&self) -> Option<CpuTime> {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let mut buf = [0u8; 128];
            let sched = read_at_start(&self.sched, &mut buf)?;
            return Some(CpuTime {
                on_cpu_ns: parse_on_cpu(sched)?,
                at: Instant::now(),
            });
        }
        #[allow(unreachable_code)]
        None
    }

    /// Whether the thread is blocked now: neither running nor waiting for a CPU (`stat` only).
    pub(crate) fn blocked(&self) -> Option<bool> {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            // The command name is at most 16 bytes: the state letter is well inside the buffer.
            let mut buf = [0u8; 128];
            return parse_blocked(read_at_start(&self.stat, &mut buf)?);
        }
        #[allow(unreachable_code)]
        None
    }
}

/// Reads a `/proc` file from its start again (the kernel regenerates it for a read at offset 0).
#[cfg(all(target_os = "linux", not(miri)))]
fn read_at_start<'a>(f: &std::fs::File, buf: &'a mut [u8]) -> Option<&'a str> {
    use std::os::unix::fs::FileExt;
    let n = f.read_at(buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()
}

/// Whether a thread was mostly preempted from `earlier` to `now`: it is not `blocked` now, and it
/// ran on a CPU for less than half that time.
///
/// The kernel adds to a running thread's CPU time at its clock ticks (every 1 to 10 ms) and at
/// thread switches, so a thread that ran all along may show up to a tick less: it counts as
/// preempted until the time watched is about twice a tick. Blocked threads are never preempted:
/// they are stuck.
pub(crate) fn preempted(blocked: bool, earlier: &CpuTime, now: &CpuTime) -> bool {
    let ran = now.on_cpu_ns.saturating_sub(earlier.on_cpu_ns);
    let watched = now.at.saturating_duration_since(earlier.at).as_nanos();
    !blocked && u128::from(ran) * 2 < watched
}

/// Whether `stat` shows a blocked thread: the state letter follows the command name, which is in
/// parentheses and may contain anything, so it is found after the last `)`. Any state but `R`
/// (running or waiting for a CPU) is blocked.
#[cfg(any(test, all(target_os = "linux", not(miri))))]
fn parse_blocked(stat: &str) -> Option<bool> {
    let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
    Some(state != "R")
}

/// The time on a CPU from `schedstat` (`on-CPU waiting slices`).
#[cfg(any(test, all(target_os = "linux", not(miri))))]
fn parse_on_cpu(sched: &str) -> Option<u64> {
    sched.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_stat_and_schedstat() {
        assert_eq!(parse_blocked("4242 (srv (x) 1) R 1 2 3"), Some(false));
        assert_eq!(parse_blocked("4242 (w) S 1 2 3"), Some(true));
        assert_eq!(parse_blocked("garbage"), None);
        assert_eq!(parse_on_cpu("1000 5000 7\n"), Some(1000));
        assert_eq!(parse_on_cpu("x 2 3"), None);
    }

    #[test]
    fn a_runnable_thread_that_ran_under_half_the_time_was_preempted() {
        let t0 = Instant::now();
        let at = |on_cpu_ns, ms| CpuTime {
            on_cpu_ns,
            at: t0 + Duration::from_millis(ms),
        };
        let before = at(1_000_000, 0);
        // 4 ms watched: ran 1 ms, or nothing moved.
        assert!(preempted(false, &before, &at(2_000_000, 4)));
        assert!(preempted(false, &before, &at(1_000_000, 4)));
        // Ran 3 of 4 ms.
        assert!(!preempted(false, &before, &at(4_000_000, 4)));
        // Blocked threads are stuck whatever their history.
        assert!(!preempted(true, &before, &at(1_000_000, 4)));
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn a_sleeping_thread_is_blocked_and_this_one_runs() {
        let me = ThreadFiles::open(current_tid()).unwrap();
        assert_eq!(me.blocked(), Some(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(current_tid()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let files = ThreadFiles::open(tid).unwrap();
        assert_eq!(files.tid(), tid);
        assert_eq!(files.blocked(), Some(true));
        t.join().unwrap();
        // An exited thread's files read nothing: no answer rather than a stale one. `join`
        // returns once the thread has cleared its id, which can be a moment before the kernel
        // has finished the thread and its files go empty: wait for that, bounded.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while files.blocked().is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(files.blocked(), None);
        assert!(files.cpu_time().is_none());
    }

    /// The files stay open between looks: each read must show the thread's state now, not what
    /// the first read saw.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn files_opened_once_show_fresh_figures_at_each_read() {
        let me = ThreadFiles::open(current_tid()).unwrap();
        let first = me.cpu_time().unwrap();
        let start = Instant::now();
        let mut later = first;
        // Spin until the kernel's accounting (updated at its clock ticks) shows it, within 5 s.
        while later.on_cpu_ns == first.on_cpu_ns && start.elapsed() < Duration::from_secs(5) {
            std::hint::spin_loop();
            later = me.cpu_time().unwrap();
        }
        assert!(
            later.on_cpu_ns > first.on_cpu_ns,
            "{first:?} then {later:?}"
        );
        assert!(later.at > first.at);
    }
}
