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

/// What the operating system says about one thread at one moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// It is blocked: neither running nor waiting for a CPU.
    pub(crate) blocked: bool,
    /// Its total time on a CPU.
    pub(crate) on_cpu_ns: u64,
    /// When the sample was taken.
    pub(crate) at: Instant,
}

impl Sample {
    /// Thread `tid` of this process now; `None` where unknown (`tid` 0, no `/proc`, a thread that
    /// has exited).
    pub(crate) fn of(tid: u32) -> Option<Sample> {
        if tid == 0 {
            return None;
        }
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
            let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
            return parse(&stat, &sched, Instant::now());
        }
        #[allow(unreachable_code)]
        None
    }

    /// Whether the thread was mostly preempted from `earlier` to `self`: it is not blocked, and it
    /// ran on a CPU for less than half that time.
    ///
    /// The kernel adds to a running thread's CPU time at its clock ticks (every 1 to 10 ms) and at
    /// thread switches, so a thread that ran all along may show up to a tick less: it counts as
    /// preempted until the time watched is about twice a tick. Blocked threads are never
    /// preempted: they are stuck.
    pub(crate) fn preempted_since(&self, earlier: &Sample) -> bool {
        let ran = self.on_cpu_ns.saturating_sub(earlier.on_cpu_ns);
        let watched = self.at.saturating_duration_since(earlier.at).as_nanos();
        !self.blocked && u128::from(ran) * 2 < watched
    }
}

/// Parses `stat` (the state letter follows the command name, which is in parentheses and may
/// contain anything, so it is found after the last `)`) and `schedstat` (`on-CPU waiting slices`).
#[cfg(any(test, all(target_os = "linux", not(miri))))]
fn parse(stat: &str, sched: &str, at: Instant) -> Option<Sample> {
    let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
    let on_cpu_ns = sched.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        blocked: state != "R",
        on_cpu_ns,
        at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_stat_and_schedstat() {
        let now = Instant::now();
        let s = parse("4242 (srv (x) 1) R 1 2 3", "1000 5000 7\n", now).unwrap();
        assert!(!s.blocked);
        assert_eq!(s.on_cpu_ns, 1000);
        let s = parse("4242 (w) S 1 2 3", "1 2 3", now).unwrap();
        assert!(s.blocked);
        assert!(parse("garbage", "1 2 3", now).is_none());
        assert!(parse("1 (w) R", "x 2 3", now).is_none());
    }

    #[test]
    fn a_runnable_thread_that_ran_under_half_the_time_was_preempted() {
        let t0 = Instant::now();
        let at = |blocked, on_cpu_ns, ms| Sample {
            blocked,
            on_cpu_ns,
            at: t0 + Duration::from_millis(ms),
        };
        let before = at(false, 1_000_000, 0);
        // 4 ms watched: ran 1 ms, or nothing moved.
        assert!(at(false, 2_000_000, 4).preempted_since(&before));
        assert!(at(false, 1_000_000, 4).preempted_since(&before));
        // Ran 3 of 4 ms.
        assert!(!at(false, 4_000_000, 4).preempted_since(&before));
        // Blocked threads are stuck whatever their history.
        assert!(!at(true, 1_000_000, 4).preempted_since(&before));
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn a_sleeping_thread_is_blocked_and_this_one_runs() {
        let me = current_tid();
        assert_ne!(me, 0);
        assert!(!Sample::of(me).unwrap().blocked);
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(current_tid()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(Sample::of(tid).unwrap().blocked);
        t.join().unwrap();
    }
}
