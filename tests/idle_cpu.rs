//! An idle runtime parks its workers: the process uses about no CPU while nothing is queued.
//! Alone in its own test binary so no other test's threads are measured.

#![cfg(target_os = "linux")]

use std::time::Duration;

/// User + system CPU time of this process, in clock ticks (from /proc/self/stat).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, i.e. 11 and 12 after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn idle_workers_use_no_cpu() {
    let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    // Wake everything once, then let it settle.
    rt.block_on(async {
        let hs: Vec<_> = (0..1000).map(|i| rondo::spawn(async move { i })).collect();
        for h in hs {
            h.await.unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    let before = cpu_ticks();
    std::thread::sleep(Duration::from_millis(200));
    let used = cpu_ticks() - before;
    // Clock ticks are 10 ms on Linux: allow two ticks of noise (the test thread itself, the kernel).
    assert!(
        used <= 2,
        "idle runtime used {used} clock ticks of CPU in 200 ms"
    );
    drop(rt);
}
