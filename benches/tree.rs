//! Tenant trees measured: nested shares at every level, connections inside tenants, CPU caps.
//!
//! 1. **Nested shares** (after Seastar's test of its nested groups): a three-level tree with
//!    random weights (fixed seed), every leaf backlogged with tasks that spin in 50 µs slices and
//!    count the CPU time each slice burned (their thread's CPU clock). Each group's share of the
//!    CPU is compared with its expected share (the product of its weight fractions down the tree)
//!    over every 100 ms window and over the whole run: the worst relative error
//!    (|measured ÷ expected − 1|) over all groups, leaves and inner ones, target ≤ 5%.
//! 2. **Tenants and connections**: tenant A with 32 connection groups against tenant B with 2,
//!    one backlogged task per connection: A's share of the CPU, target 50 ± 5%, whole run and
//!    worst 100 ms window. Flat groups (a group per connection) beside it for contrast.
//! 3. **Caps**: a group capped at 0.5 core alone (cores used per 1 s window, target 0.45–0.55),
//!    the same beside a busy uncapped sibling of lower weight (the sibling gets the rest), and a
//!    capped parent over uncapped children.
//!
//! Worker threads: 2, or `RONDO_BENCH_WORKERS`. Run length of scenario 1: 10 s, or
//! `RONDO_TREE_SECS`; the quantum: `RONDO_TREE_QUANTUM_US` (default 500); scenario 1 alone:
//! `RONDO_TREE_NESTED_ONLY=1`. Scenario 1 also prints the worst window's error in CPU time and in
//! quanta (a group's lag or lead on its share), which does not depend on how much of the machine
//! the runtime gets, and the worst error over the windows in which the tasks counted at least 80%
//! of the cores' time: a window in which other processes took the CPU owes every group less, so
//! the same lag is a larger relative error there. `RONDO_TREE_VERBOSE=1` prints each group's
//! expected share and, per window, the CPU time the tasks counted, the worst error and lag, the
//! active cores and the worker-count controller's sheds and restores so far, each leaf's error,
//! each leaf's error as the runtime charged it (its group's `busy`, which the workers flush up to
//! a quantum late), and what the system did to the process in that window: each leaf's *stalls*
//! (the wall time its tasks' slices lasted beyond their CPU time: the system preempted the worker
//! in the middle of the leaf's poll), the run-queue wait of the process's threads (runnable, not
//! running; the sum, the longest and its thread, and the worker threads that waited 1 ms or
//! more), their involuntary context switches and the machine's steal time. The sampling thread
//! reads those from `/proc`, and the groups' metrics, once per window, in verbose runs only; the
//! runtime and the tasks read none of them. Run with `cargo bench --bench tree`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{print_table, spin, thread_cpu, workers};

const SLICE: Duration = Duration::from_micros(50);
const WINDOW: Duration = Duration::from_millis(100);
const TASKS_PER_LEAF: usize = 4;

/// A slice's wall time beyond its CPU time that counts as the system having taken the CPU from
/// the slice's worker (nanoseconds): well above the clock reads' own cost.
const STALL: u64 = 20_000;

/// A backlogged task: spins in slices, adding the CPU time each slice burned to `total`, until
/// `stop`. A slice whose wall time exceeds its CPU time by more than [`STALL`] adds the excess to
/// `stalled`: the time the system preempted the worker in the middle of this task's poll.
async fn backlogged(total: Arc<AtomicU64>, stalled: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let before = thread_cpu();
        let wall = spin(SLICE);
        let burned = thread_cpu().saturating_sub(before);
        total.fetch_add(burned.as_nanos() as u64, Ordering::Relaxed);
        let lost = wall.saturating_sub(burned).as_nanos() as u64;
        if lost > STALL {
            stalled.fetch_add(lost, Ordering::Relaxed);
        }
        rondo::yield_now().await;
    }
}

/// The scheduler statistics of this process's threads (Linux's `/proc/self/task`), read by the
/// sampling thread once per window in verbose runs only: nothing on the runtime's path reads
/// them. Per thread (by id): its name, the time it waited on a run queue, runnable but not
/// running (field 2 of `schedstat`, nanoseconds), and its involuntary context switches, as of the
/// last window.
struct Threads {
    last: std::collections::HashMap<u32, (String, u64, u64)>,
    steal: u64,
}

/// One window's deltas of [`Threads`].
struct ThreadWindow {
    /// Run-queue wait summed over the threads, and the longest one's wait and name.
    wait_sum: u64,
    wait_max: u64,
    wait_name: String,
    /// Worker threads that waited 1 ms or more.
    waited_1ms: usize,
    /// Involuntary context switches summed over the threads.
    nvcsw: u64,
    /// The machine's steal time (the hypervisor running another guest), nanoseconds.
    steal: u64,
}

impl Threads {
    fn new() -> Threads {
        let mut t = Threads {
            last: Default::default(),
            steal: 0,
        };
        t.window();
        t
    }

    fn steal_ns() -> u64 {
        // The `cpu` line: user nice system idle iowait irq softirq steal, in clock ticks (100 Hz).
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines()
                    .next()
                    .and_then(|l| l.split_whitespace().nth(8))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map_or(0, |ticks| ticks * 10_000_000)
    }

    fn window(&mut self) -> ThreadWindow {
        let mut w = ThreadWindow {
            wait_sum: 0,
            wait_max: 0,
            wait_name: String::new(),
            waited_1ms: 0,
            nvcsw: 0,
            steal: 0,
        };
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return w;
        };
        for entry in dir.flatten() {
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let wait = std::fs::read_to_string(path.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
                .unwrap_or(0u64);
            let nvcsw = std::fs::read_to_string(path.join("status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                        .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0u64);
            let entry = self.last.entry(tid).or_insert_with(|| {
                let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
                (name.trim().to_string(), wait, nvcsw)
            });
            let dw = wait.saturating_sub(entry.1);
            w.wait_sum += dw;
            w.nvcsw += nvcsw.saturating_sub(entry.2);
            (entry.1, entry.2) = (wait, nvcsw);
            if dw >= 1_000_000 && entry.0.contains("worker") {
                w.waited_1ms += 1;
            }
            if dw > w.wait_max {
                w.wait_max = dw;
                w.wait_name = entry.0.clone();
            }
        }
        let steal = Threads::steal_ns();
        w.steal = steal.saturating_sub(self.steal);
        self.steal = steal;
        w
    }
}

/// A small deterministic generator for the random weights.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// One node of the measured tree: its group, its expected share, the counters of the leaves
/// below it (a leaf: its own).
struct Node {
    name: String,
    _group: rondo::Group,
    expected: f64,
    counters: Vec<Arc<AtomicU64>>,
    /// A leaf's preempted time in its tasks' polls (see `backlogged`); none for an inner node.
    stalled: Option<Arc<AtomicU64>>,
}

/// The leaves' counters read in one pass, so that every node's count (a sum of leaves') is of
/// the same instant: the sampling thread shares the cores with the workers and may be preempted
/// for milliseconds between two reads, which would shift service from one window to the next for
/// whichever nodes were read after the preemption.
struct Snapshot {
    leaves: Vec<f64>,
}

impl Snapshot {
    fn take(all: &[Arc<AtomicU64>]) -> Snapshot {
        Snapshot {
            leaves: all
                .iter()
                .map(|c| c.load(Ordering::Relaxed) as f64)
                .collect(),
        }
    }

    fn total(&self) -> f64 {
        self.leaves.iter().sum()
    }

    /// The count of `node`, whose leaves are `at` in `all`.
    fn of(&self, at: &[usize]) -> f64 {
        at.iter().map(|&i| self.leaves[i]).sum()
    }
}

/// What scenario 1 measured.
struct Nested {
    /// The worst relative error over the windows and over the whole run.
    window: f64,
    total: f64,
    /// The worst absolute error over the windows, in shares of the whole CPU.
    points: f64,
    /// The same in CPU time (nanoseconds): a group's lag or lead on its expected share within a
    /// window, which the quantum bounds (see `main`).
    lag_ns: f64,
    /// The CPU time the tasks counted per window, on average (nanoseconds): below the workers'
    /// whole capacity when the machine is shared.
    window_cpu_ns: f64,
    /// The node with the worst window, and the node count.
    name: String,
    count: usize,
    /// The windows over 5%, and how many of them had [`FULL`] of the cores' time or more.
    over: usize,
    over_full: usize,
    /// The worst relative error over the windows that had `FULL` of the cores' time or more.
    window_full: f64,
}

/// The share of the cores' time (the cores the workers can use, times the window) above which a
/// window counts as one in which the tasks had the machine to themselves: a window with less CPU
/// owes each group less service, so the same lag in CPU time is a larger relative error there.
const FULL: f64 = 0.8;

/// Scenario 1: builds the tree under `rt` and runs it for `secs`.
/// `capacity_ns`: the CPU time the workers could get in a window.
fn nested(rt: &rondo::Runtime, secs: u64, seed: u64, capacity_ns: f64) -> Nested {
    let mut rng = XorShift(seed);
    let mut weight = || 1 + (rng.next() % 4) as u32;
    let stop = Arc::new(AtomicBool::new(false));
    let mut nodes: Vec<Node> = Vec::new();
    let mut handles = Vec::new();
    // Level 1: 3 tenants; level 2: 2 children each; level 3: 2 leaves each.
    let top_w: Vec<u32> = (0..3).map(|_| weight()).collect();
    let top_sum: u32 = top_w.iter().sum();
    for (ti, &tw) in top_w.iter().enumerate() {
        let tenant = rt
            .group()
            .name(format!("t{ti}"))
            .weight(tw)
            .build()
            .unwrap();
        let t_share = tw as f64 / top_sum as f64;
        let mid_w: Vec<u32> = (0..2).map(|_| weight()).collect();
        let mid_sum: u32 = mid_w.iter().sum();
        let mut t_counters = Vec::new();
        for (mi, &mw) in mid_w.iter().enumerate() {
            let mid = tenant
                .child()
                .name(format!("t{ti}.{mi}"))
                .weight(mw)
                .build()
                .unwrap();
            let m_share = t_share * mw as f64 / mid_sum as f64;
            let leaf_w: Vec<u32> = (0..2).map(|_| weight()).collect();
            let leaf_sum: u32 = leaf_w.iter().sum();
            let mut m_counters = Vec::new();
            for (li, &lw) in leaf_w.iter().enumerate() {
                let leaf = mid
                    .child()
                    .name(format!("t{ti}.{mi}.{li}"))
                    .weight(lw)
                    .build()
                    .unwrap();
                let total = Arc::new(AtomicU64::new(0));
                let stalled = Arc::new(AtomicU64::new(0));
                for _ in 0..TASKS_PER_LEAF {
                    handles.push(leaf.spawn(backlogged(
                        total.clone(),
                        stalled.clone(),
                        stop.clone(),
                    )));
                }
                m_counters.push(total.clone());
                nodes.push(Node {
                    name: leaf.name().to_string(),
                    _group: leaf,
                    expected: m_share * lw as f64 / leaf_sum as f64,
                    counters: vec![total],
                    stalled: Some(stalled),
                });
            }
            t_counters.extend(m_counters.iter().cloned());
            nodes.push(Node {
                name: mid.name().to_string(),
                _group: mid,
                expected: m_share,
                counters: m_counters,
                stalled: None,
            });
        }
        nodes.push(Node {
            name: tenant.name().to_string(),
            _group: tenant,
            expected: t_share,
            counters: t_counters,
            stalled: None,
        });
    }
    let all: Vec<Arc<AtomicU64>> = nodes
        .iter()
        .filter(|n| n.counters.len() == 1)
        .flat_map(|n| n.counters.clone())
        .collect();
    // Each node's leaves, by index in `all`.
    let at: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            n.counters
                .iter()
                .filter_map(|c| all.iter().position(|a| Arc::ptr_eq(a, c)))
                .collect()
        })
        .collect();
    let counts = |snap: &Snapshot| -> Vec<f64> { at.iter().map(|a| snap.of(a)).collect() };
    std::thread::sleep(Duration::from_millis(300));
    let start = Snapshot::take(&all);
    let start_ns: Vec<f64> = counts(&start);
    let start_all = start.total();
    let mut last: Vec<f64> = start_ns.clone();
    let mut last_all = start_all;
    if std::env::var_os("RONDO_TREE_VERBOSE").is_some() {
        for n in &nodes {
            println!("   {} expects {:.4}", n.name, n.expected);
        }
    }
    let (mut worst_window, mut worst_name) = (0.0f64, String::new());
    let (mut over, mut over_full, mut window_full) = (0, 0, 0.0f64);
    // The worst absolute error, in shares of the whole CPU (percentage points / 100).
    let mut worst_points = 0.0f64;
    let mut worst_lag = 0.0f64;
    let windows = (secs * 1000 / WINDOW.as_millis() as u64).max(1);
    let verbose = std::env::var_os("RONDO_TREE_VERBOSE").is_some();
    let mut threads = verbose.then(Threads::new);
    let stalls = || -> Vec<u64> {
        nodes
            .iter()
            .filter_map(|n| n.stalled.as_ref())
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    };
    let mut last_stalls = stalls();
    // The service the runtime charged each leaf (its group's `busy`), beside what its tasks
    // counted: read once per window in verbose runs.
    let charged = || -> Vec<f64> {
        nodes
            .iter()
            .filter(|n| n.stalled.is_some())
            .map(|n| n._group.metrics().busy.as_nanos() as f64)
            .collect()
    };
    let mut last_charged = if verbose { charged() } else { Vec::new() };
    let mut next = Instant::now() + WINDOW;
    for _ in 0..windows {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += WINDOW;
        let snap = Snapshot::take(&all);
        let now_ns = counts(&snap);
        let now_all = snap.total();
        let window_all = now_all - last_all;
        if verbose {
            let shares: Vec<String> = nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.counters.len() == 1)
                .map(|(i, n)| {
                    format!(
                        "{:+.1}",
                        ((now_ns[i] - last[i]) / window_all / n.expected - 1.0) * 100.0
                    )
                })
                .collect();
            let m = rt.metrics();
            let worst = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| ((now_ns[i] - last[i]) / window_all / n.expected - 1.0).abs())
                .fold(0.0, f64::max);
            let lag = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (now_ns[i] - last[i] - n.expected * window_all).abs())
                .fold(0.0, f64::max);
            let now_stalls = stalls();
            let stalled: Vec<String> = now_stalls
                .iter()
                .zip(&last_stalls)
                .map(|(n, l)| format!("{:.1}", (n - l) as f64 / 1e6))
                .collect();
            last_stalls = now_stalls;
            let now_charged = charged();
            let charged_all: f64 = now_charged
                .iter()
                .zip(&last_charged)
                .map(|(n, l)| n - l)
                .sum();
            let charged_err: Vec<String> = nodes
                .iter()
                .filter(|n| n.stalled.is_some())
                .zip(now_charged.iter().zip(&last_charged))
                .map(|(n, (c, l))| {
                    format!("{:+.1}", ((c - l) / charged_all / n.expected - 1.0) * 100.0)
                })
                .collect();
            last_charged = now_charged;
            let t = threads.as_mut().map(Threads::window).unwrap();
            println!(
                "   window: {:.0} ms of CPU; worst {:.1}% (lag or lead {:.2} ms); cores {} sheds {} restores {}; leaves' errors %: {}; \
                 leaves' charged errors %: {}; leaves' stalls ms: {}; run-queue wait {:.1} ms, longest {:.2} ms ({}), workers >= 1 ms {}; \
                 involuntary switches {}; steal {:.0} ms",
                window_all / 1e6,
                worst * 100.0,
                lag / 1e6,
                m.worker_cores,
                m.worker_core_sheds,
                m.worker_core_restores,
                shares.join(" "),
                charged_err.join(" "),
                stalled.join(" "),
                t.wait_sum as f64 / 1e6,
                t.wait_max as f64 / 1e6,
                t.wait_name,
                t.waited_1ms,
                t.nvcsw,
                t.steal as f64 / 1e6,
            );
        }
        let full = window_all >= FULL * capacity_ns;
        let mut worst_here = 0.0f64;
        for (i, n) in nodes.iter().enumerate() {
            let v = now_ns[i];
            let share = (v - last[i]) / window_all;
            worst_points = worst_points.max((share - n.expected).abs());
            worst_lag = worst_lag.max((share - n.expected).abs() * window_all);
            let err = (share / n.expected - 1.0).abs();
            worst_here = worst_here.max(err);
            if err > worst_window {
                worst_window = err;
                worst_name = format!("{} ({:.3} for {:.3})", n.name, share, n.expected);
            }
            last[i] = v;
        }
        if worst_here > 0.05 {
            over += 1;
            over_full += usize::from(full);
        }
        if full {
            window_full = window_full.max(worst_here);
        }
        last_all = now_all;
    }
    let end = Snapshot::take(&all);
    let end_ns = counts(&end);
    let total_all = end.total() - start_all;
    let worst_total = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (((end_ns[i] - start_ns[i]) / total_all) / n.expected - 1.0).abs())
        .fold(0.0, f64::max);
    stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for h in handles {
            h.await.unwrap();
        }
    });
    Nested {
        window: worst_window,
        total: worst_total,
        points: worst_points,
        lag_ns: worst_lag,
        window_cpu_ns: total_all / windows as f64,
        name: worst_name,
        count: nodes.len(),
        over,
        over_full,
        window_full,
    }
}

/// Scenario 2: tenant A with `a` connections against tenant B with `b`, for `d`; as a tree or as
/// flat groups (one per connection). Returns A's whole-run share and its worst window's.
fn tenants(rt: &rondo::Runtime, a: usize, b: usize, d: Duration, tree: bool) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ta, tb) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut handles = Vec::new();
    let mut groups = Vec::new();
    let stalled = Arc::new(AtomicU64::new(0));
    for (n, total) in [(a, &ta), (b, &tb)] {
        let tenant = rt.group().build().unwrap();
        for _ in 0..n {
            let conn = if tree {
                tenant.child().build().unwrap()
            } else {
                rt.group().build().unwrap()
            };
            handles.push(conn.spawn(backlogged(total.clone(), stalled.clone(), stop.clone())));
            groups.push(conn);
        }
        groups.push(tenant);
    }
    let read = || {
        (
            ta.load(Ordering::Relaxed) as f64,
            tb.load(Ordering::Relaxed) as f64,
        )
    };
    std::thread::sleep(Duration::from_millis(300));
    let (a0, b0) = read();
    let (mut la, mut lb) = (a0, b0);
    let mut worst = 0.5f64;
    let windows = (d.as_millis() / WINDOW.as_millis()).max(1);
    for _ in 0..windows {
        std::thread::sleep(WINDOW);
        let (na, nb) = read();
        let share = (na - la) / ((na - la) + (nb - lb));
        if (share - 0.5).abs() > (worst - 0.5).abs() {
            worst = share;
        }
        (la, lb) = (na, nb);
    }
    let (a1, b1) = read();
    stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for h in handles {
            h.await.unwrap();
        }
    });
    ((a1 - a0) / ((a1 - a0) + (b1 - b0)), worst)
}

/// Cores a set of counters used in each of `windows` windows of `window`.
fn cores(counters: &[&Arc<AtomicU64>], window: Duration, windows: usize) -> Vec<f64> {
    let sum = || -> f64 {
        counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as f64)
            .sum()
    };
    let mut last = sum();
    (0..windows)
        .map(|_| {
            std::thread::sleep(window);
            let now = sum();
            let c = (now - last) / window.as_nanos() as f64;
            last = now;
            c
        })
        .collect()
}

/// Scenario 3: (capped alone, capped beside a sibling, the sibling, capped parent's subtree),
/// cores per 1 s window over `windows` windows.
fn caps(rt: &rondo::Runtime, windows: usize) -> [Vec<f64>; 4] {
    // The tasks run until their group is cancelled.
    let never = Arc::new(AtomicBool::new(false));
    let stalled = Arc::new(AtomicU64::new(0));
    let run = |groups: Vec<(rondo::Group, Arc<AtomicU64>)>| -> Vec<rondo::JoinHandle<()>> {
        groups
            .iter()
            .flat_map(|(g, t)| {
                (0..TASKS_PER_LEAF)
                    .map(|_| g.spawn(backlogged(t.clone(), stalled.clone(), never.clone())))
            })
            .collect()
    };
    let mut out: [Vec<f64>; 4] = Default::default();
    // Alone.
    {
        let g = rt.group().cpu_limit(0.5).build().unwrap();
        let t = Arc::new(AtomicU64::new(0));
        let hs = run(vec![(g.clone(), t.clone())]);
        std::thread::sleep(Duration::from_millis(300));
        out[0] = cores(&[&t], Duration::from_secs(1), windows);
        g.cancel();
        drop(hs);
    }
    // Beside a sibling.
    {
        let g = rt.group().weight(10).cpu_limit(0.5).build().unwrap();
        let s = rt.group().weight(1).build().unwrap();
        let (tg, ts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let hs = run(vec![(g.clone(), tg.clone()), (s.clone(), ts.clone())]);
        std::thread::sleep(Duration::from_millis(300));
        let sg = tg.load(Ordering::Relaxed);
        let ss = ts.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(windows as u64));
        let secs = windows as f64;
        out[1] = vec![(tg.load(Ordering::Relaxed) - sg) as f64 / 1e9 / secs];
        out[2] = vec![(ts.load(Ordering::Relaxed) - ss) as f64 / 1e9 / secs];
        g.cancel();
        s.cancel();
        drop(hs);
    }
    // A capped parent over two uncapped children.
    {
        let p = rt.group().cpu_limit(0.5).build().unwrap();
        let (a, b) = (
            p.child().build().unwrap(),
            p.child().weight(3).build().unwrap(),
        );
        let (ta, tb) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let hs = run(vec![(a, ta.clone()), (b, tb.clone())]);
        std::thread::sleep(Duration::from_millis(300));
        out[3] = cores(&[&ta, &tb], Duration::from_secs(1), windows);
        p.cancel();
        drop(hs);
    }
    out
}

fn fmt(v: &[f64]) -> String {
    let v: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
    v.join(" ")
}

fn main() {
    let n = workers();
    let secs: u64 = std::env::var("RONDO_TREE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    println!("tree bench: {n} workers on {} cores", common::cores());
    // `RONDO_TREE_QUANTUM_US`: the scheduling quantum (the runtime's default, 500 µs, if unset),
    // which bounds how finely a 100 ms window can be shared: a group's lag or lead within a
    // window is a few quanta, so its relative error there is those quanta over its share of the
    // window's CPU time.
    let quantum = std::env::var("RONDO_TREE_QUANTUM_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_micros);
    let mut builder = rondo::Runtime::builder().worker_threads(n);
    if let Some(q) = quantum {
        builder = builder.quantum(q);
    }
    let quantum = quantum.unwrap_or(Duration::from_micros(500));
    let rt = builder.build().unwrap();
    let mut rows: Vec<Vec<String>> = Vec::new();

    let capacity = n.min(common::cores()) as f64 * WINDOW.as_nanos() as f64;
    let m = nested(&rt, secs, 0x5eed_1234_abcd_0001, capacity);
    let lag_quanta = m.lag_ns / quantum.as_nanos() as f64;
    println!(
        "1. nested shares, {} groups on 3 levels, {secs} s: worst 100 ms window {:.1}% ({}), \
         {:.2} points of the CPU at worst, a lag or lead of {:.2} ms ({lag_quanta:.1} quanta of \
         {quantum:?}); whole run {:.1}%; the tasks counted {:.0} ms of CPU per window; {} windows \
         over 5%, {} of them with {:.0}% of the cores' time or more, where the worst is {:.1}%",
        m.count,
        m.window * 100.0,
        m.name,
        m.points * 100.0,
        m.lag_ns / 1e6,
        m.total * 100.0,
        m.window_cpu_ns / 1e6,
        m.over,
        m.over_full,
        FULL * 100.0,
        m.window_full * 100.0,
    );
    rows.push(vec![
        "1. nested shares: worst error, 100 ms windows".into(),
        format!("{:.1}%", m.window * 100.0),
        "≤ 5%".into(),
        (m.window <= 0.05).to_string(),
    ]);
    rows.push(vec![
        format!(
            "1. nested shares: worst error, 100 ms windows with {:.0}% of the cores' time",
            FULL * 100.0
        ),
        format!("{:.1}%", m.window_full * 100.0),
        "-".into(),
        "-".into(),
    ]);
    rows.push(vec![
        "1. nested shares: worst error, 100 ms windows, in points of the CPU".into(),
        format!("{:.2}", m.points * 100.0),
        "-".into(),
        "-".into(),
    ]);
    rows.push(vec![
        "1. nested shares: worst lag or lead in a window, in quanta".into(),
        format!("{lag_quanta:.1}"),
        "-".into(),
        "-".into(),
    ]);
    rows.push(vec![
        "1. nested shares: worst error, whole run".into(),
        format!("{:.1}%", m.total * 100.0),
        "≤ 5%".into(),
        (m.total <= 0.05).to_string(),
    ]);
    // `RONDO_TREE_NESTED_ONLY`: scenario 1 alone.
    if std::env::var_os("RONDO_TREE_NESTED_ONLY").is_some() {
        print_table(&["scenario", "rondo", "target", "met"], &rows);
        return;
    }

    let (share, worst) = tenants(&rt, 32, 2, Duration::from_secs(2), true);
    let (flat, _) = tenants(&rt, 32, 2, Duration::from_secs(1), false);
    println!(
        "2. tenant A (32 connections) vs B (2): A's share {:.1}% (worst 100 ms window {:.1}%); \
         with a flat group per connection {:.1}%",
        share * 100.0,
        worst * 100.0,
        flat * 100.0
    );
    rows.push(vec![
        "2. A (32 conns) vs B (2): A's share, whole run".into(),
        format!("{:.1}%", share * 100.0),
        "50 ± 5%".into(),
        ((share - 0.5).abs() <= 0.05).to_string(),
    ]);
    rows.push(vec![
        "2. A's share, worst 100 ms window".into(),
        format!("{:.1}%", worst * 100.0),
        "50 ± 5%".into(),
        ((worst - 0.5).abs() <= 0.05).to_string(),
    ]);
    rows.push(vec![
        "2. A's share with flat groups (contrast)".into(),
        format!("{:.1}%", flat * 100.0),
        "-".into(),
        "-".into(),
    ]);

    let [alone, beside, sibling, parent] = caps(&rt, 3);
    println!(
        "3. caps: 0.5 alone {} cores per 1 s; beside a busy sibling {} (sibling {}); capped parent's \
         subtree {}",
        fmt(&alone),
        fmt(&beside),
        fmt(&sibling),
        fmt(&parent)
    );
    let ok = |v: &[f64]| v.iter().all(|c| (0.45..=0.55).contains(c));
    rows.push(vec![
        "3. cap 0.5 alone: cores per 1 s window".into(),
        fmt(&alone),
        "0.45–0.55".into(),
        ok(&alone).to_string(),
    ]);
    rows.push(vec![
        "3. cap 0.5 beside a busy sibling (sibling)".into(),
        format!("{} ({})", fmt(&beside), fmt(&sibling)),
        "0.45–0.55 (rest)".into(),
        (ok(&beside)
            && sibling
                .iter()
                .all(|s| *s > n.min(common::cores()) as f64 - 0.65))
        .to_string(),
    ]);
    rows.push(vec![
        "3. capped parent's subtree: cores per 1 s window".into(),
        fmt(&parent),
        "0.45–0.55".into(),
        ok(&parent).to_string(),
    ]);
    println!();
    print_table(&["scenario", "rondo", "target", "met"], &rows);
}
