//! Whom a wake from outside the runtime wakes with the `io` feature: a core parked in its parker,
//! not the keeper waiting in the reactor. In a file of its own, so that its runtime is the only
//! one in the process and its keeper takes the reactor (after another test's runtime, async-io's
//! thread may hold it until the next readiness event).
#![cfg(not(any(loom, miri)))]

mod common;

use std::time::Duration;

use common::{builder, watchdog};

const MS: Duration = Duration::from_millis(1);

/// How many threads of this process whose name starts with `prefix` are blocked waiting in epoll
/// now (`epoll_wait`, `epoll_pwait` or `epoll_pwait2` on x86-64 Linux, per `/proc`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn threads_in_epoll(prefix: &str) -> usize {
    const EPOLL_WAITS: [&str; 3] = ["232", "281", "441"];
    let tasks = std::fs::read_dir("/proc/self/task").expect("this process's threads");
    tasks
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?;
            let call = std::fs::read_to_string(dir.join("syscall")).ok()?;
            let nr = call.split_whitespace().next()?.to_string();
            (name.starts_with(prefix) && EPOLL_WAITS.contains(&nr.as_str())).then_some(())
        })
        .count()
}

/// A plain thread spawns a task while both workers sleep, one in its parker and the keeper in the
/// reactor: the worker woken is the one in its parker, and the keeper stays in the reactor
/// (waking it there interrupts its wait, and async-io's thread, queued for the reactor after its
/// back-off, takes the reactor as it leaves). The task looks while it runs. Before, the keeper
/// was woken for every such spawn: no worker in epoll in any round.
#[cfg(all(target_os = "linux", target_arch = "x86_64", feature = "io"))]
#[test]
fn a_spawn_from_a_plain_thread_leaves_the_keeper_in_the_reactor() {
    const ROUNDS: usize = 20;
    watchdog(60, || {
        let rt = builder(2).thread_name("kp-wake").build().unwrap();
        let mut in_epoll = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            // Both workers park between rounds.
            std::thread::sleep(20 * MS);
            let (tx, rx) = std::sync::mpsc::channel();
            rt.spawn(async move {
                let _ = tx.send(threads_in_epoll("kp-wake"));
            });
            in_epoll.push(rx.recv_timeout(Duration::from_secs(10)).unwrap());
        }
        let kept = in_epoll.iter().filter(|&&n| n > 0).count();
        eprintln!("workers in epoll per round: {in_epoll:?}");
        // A loaded machine may leave a worker awake past a round's pause: most rounds, not all.
        assert!(
            kept * 4 >= ROUNDS * 3,
            "the keeper left the reactor for a plain thread's spawn in {} of {ROUNDS} rounds \
             (workers in epoll per round: {in_epoll:?})",
            ROUNDS - kept
        );
    });
}
