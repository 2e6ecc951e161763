//! Fairness groups measured (issue 4): rondo with groups, and where a scenario applies, tokio's
//! multi-thread runtime and async-executor, which run everything from one FIFO.
//!
//! 1. Small behind big: a flood of 20,000 × 20 µs in group A, 5 ms later 200 × 20 µs in group B.
//!    Figure: B's completion time ÷ its fair-share ideal (its CPU time on half the CPUs the workers
//!    can use: half the workers, or half the cores when there are more workers than cores). Best
//!    of 3.
//! 2. Weighted shares: weights 1 : 2 : 4, 8 tasks each spinning 50, 20 and 5 µs per poll, 2 s.
//!    Figure: the largest |CPU share − wanted share| ÷ wanted share, where the wanted shares are
//!    the weight shares under the cap that a group of 8 tasks keeps at most 8 workers busy (at 16
//!    workers: 16.7% : 33.3% : 50%). One run.
//! 3. Count gaming: 1,000 always-runnable tasks in A, 1 in B, equal weights, 2 s. Figure: B's CPU
//!    share ÷ its fair share. One run.
//! 4. Many groups: 10,000 groups × 10 empty tasks vs 100,000 tasks in one group, group creation
//!    included. Figure: ratio of the medians of 7 interleaved rounds of each.
//! 5. Overhead: the core spawn_many and yield_many workloads in a non-default group vs the default
//!    group. Figure: ratio of the medians of 15 interleaved rounds (they take milliseconds).
//!
//! Scenarios 4 and 5 compare rondo with itself, so their figures are ratios of medians, not of
//! bests: on a 2-core machine, where the spawning thread shares the cores with both workers, one
//! round of the same workload can take anywhere from 1× to 2× another, and the best of a few
//! rounds is an extreme value that one lucky round decides. The bests are printed too.
//!
//! Spinning is a busy-wait on `Instant`, never a sleep, so it uses a worker like real CPU work.
//! Worker threads: 2, or `RONDO_BENCH_WORKERS`. Run with `cargo bench --bench fairness`;
//! `RONDO_FAIRNESS_ONLY=N` runs scenario N alone (4: both its flat and its tree form).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{
    AePool, BlockOn, RondoGroup, Spawner, Workload, cores, median, print_table, spin, workers,
};

const FLOOD_TASKS: usize = 20_000;
const SMALL_TASKS: usize = 200;
const TASK_SPIN: Duration = Duration::from_micros(20);
const SMALL_DELAY: Duration = Duration::from_millis(5);

const SHARE_WARMUP: Duration = Duration::from_millis(200);
const SHARE_RUN: Duration = Duration::from_secs(2);

const MANY_GROUPS: usize = 10_000;
const TASKS_PER_GROUP: usize = 10;
/// Rounds of scenario 4; each runs the many-groups case, then the one-group case.
const MANY_ROUNDS: usize = 7;
/// Measured rounds of scenario 5 (after one warm-up round); each runs both groups.
const OVERHEAD_ROUNDS: usize = 15;

/// One row of the final table. `None` means "does not apply".
struct Row {
    scenario: String,
    rondo: f64,
    tokio: Option<f64>,
    ae: Option<f64>,
    target: &'static str,
    met: bool,
}

// ---------------------------------------------------------------------------------------------
// 1. Small behind big
// ---------------------------------------------------------------------------------------------

struct Batches {
    /// From the flood's first spawn to its last completion.
    flood: Duration,
    /// From the small batch's first spawn to its last completion.
    small: Duration,
}

/// Spawns the flood through `flood` and, 5 ms later, the small batch through `small`, all from
/// the calling thread; each task spins 20 µs and records when it finished.
fn small_behind_big<S: Spawner>(rt: &impl BlockOn, flood: &S, small: &S) -> Batches {
    let base = Instant::now();
    let flood_last = Arc::new(AtomicU64::new(0));
    let small_last = Arc::new(AtomicU64::new(0));
    let task = |last: &Arc<AtomicU64>| {
        let last = last.clone();
        async move {
            spin(TASK_SPIN);
            last.fetch_max(base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    };
    let mut handles = Vec::with_capacity(FLOOD_TASKS + SMALL_TASKS);
    for _ in 0..FLOOD_TASKS {
        handles.push(flood.spawn(task(&flood_last)));
    }
    if let Some(rest) = SMALL_DELAY.checked_sub(base.elapsed()) {
        thread::sleep(rest);
    }
    let small_start = base.elapsed();
    for _ in 0..SMALL_TASKS {
        handles.push(small.spawn(task(&small_last)));
    }
    rt.run(async {
        for h in handles {
            h.await;
        }
    });
    let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
    Batches {
        flood: ns(&flood_last),
        small: ns(&small_last).saturating_sub(small_start),
    }
}

/// The small batch's completion time if it had half the CPUs the workers can use to itself. With
/// more workers than cores (the oversubscribed runs), half the workers share half the cores: 16
/// workers on 2 cores give the batch one core's time, not eight cores'.
fn fair_ideal(workers: usize) -> Duration {
    (TASK_SPIN * SMALL_TASKS as u32).mul_f64(2.0 / workers.min(cores()) as f64)
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. Always-backlogged groups
// ---------------------------------------------------------------------------------------------

/// A set of always-runnable tasks: each loops { spin `spin`; yield } until told to stop.
struct Backlog<S> {
    spawner: S,
    tasks: usize,
    spin: Duration,
}

/// Runs the backlogs together; returns the spin time each one accumulated during `SHARE_RUN`
/// (after a `SHARE_WARMUP`), and calls `at_edges` at the start and end of the measured window.
fn backlogged<S: Spawner>(
    rt: &impl BlockOn,
    sets: &[Backlog<S>],
    mut at_edges: impl FnMut(),
) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let spun: Vec<Arc<AtomicU64>> = sets.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut handles = Vec::new();
    // Spawn round-robin across the sets so that no set gets a head start in a FIFO.
    let most = sets.iter().map(|s| s.tasks).max().unwrap_or(0);
    for i in 0..most {
        for (set, acc) in sets.iter().zip(&spun) {
            if i >= set.tasks {
                continue;
            }
            let (stop, acc, d) = (stop.clone(), acc.clone(), set.spin);
            handles.push(set.spawner.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let e = spin(d);
                    acc.fetch_add(e.as_nanos() as u64, Ordering::Relaxed);
                    S::yield_now().await;
                }
            }));
        }
    }
    thread::sleep(SHARE_WARMUP);
    let before: Vec<u64> = spun.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    at_edges();
    thread::sleep(SHARE_RUN);
    let after: Vec<u64> = spun.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    at_edges();
    stop.store(true, Ordering::Relaxed);
    rt.run(async {
        for h in handles {
            h.await;
        }
    });
    before
        .iter()
        .zip(&after)
        .map(|(b, a)| Duration::from_nanos(a - b))
        .collect()
}

fn shares(times: &[Duration]) -> Vec<f64> {
    let total: f64 = times.iter().map(Duration::as_secs_f64).sum();
    times.iter().map(|t| t.as_secs_f64() / total).collect()
}

const WEIGHTS: [u32; 3] = [1, 2, 4];
const WEIGHTED_SPIN_US: [u64; 3] = [50, 20, 5];
const WEIGHTED_TASKS: usize = 8;

/// The shares of the CPU that groups of these weights should get when each group `i` can keep at
/// most `tasks[i]` of the CPUs busy (a task runs on one CPU at a time): the CPUs the `workers`
/// can use (no more than the machine's) are shared by weight, a group whose share exceeds its cap
/// gets its cap, and the rest is shared again among the others. Shares are of the CPU actually
/// used.
fn capped_shares(weights: &[u32], tasks: &[usize], workers: usize) -> Vec<f64> {
    let mut alloc = vec![0.0; weights.len()];
    let mut open: Vec<usize> = (0..weights.len()).collect();
    let mut capacity = workers.min(cores()) as f64;
    loop {
        let total: f64 = open.iter().map(|&i| f64::from(weights[i])).sum();
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| capacity * f64::from(weights[i]) / total > tasks[i] as f64)
            .collect();
        if capped.is_empty() {
            for &i in &open {
                alloc[i] = capacity * f64::from(weights[i]) / total;
            }
            break;
        }
        for &i in &capped {
            alloc[i] = tasks[i] as f64;
            capacity -= alloc[i];
        }
        open.retain(|i| !capped.contains(i));
    }
    let used: f64 = alloc.iter().sum();
    alloc.iter().map(|a| a / used).collect()
}

/// The wanted shares of the weighted scenario at this worker count.
fn weighted_wanted(workers: usize) -> Vec<f64> {
    capped_shares(&WEIGHTS, &[WEIGHTED_TASKS; 3], workers)
}

/// The largest relative error between measured shares and the wanted ones.
fn weighted_error(measured: &[f64], wanted: &[f64]) -> f64 {
    measured
        .iter()
        .zip(wanted)
        .map(|(m, want)| (m - want).abs() / want)
        .fold(0.0, f64::max)
}

fn weighted_sets<S: Clone>(spawners: [S; 3]) -> Vec<Backlog<S>> {
    spawners
        .into_iter()
        .zip(WEIGHTED_SPIN_US)
        .map(|(spawner, us)| Backlog {
            spawner,
            tasks: WEIGHTED_TASKS,
            spin: Duration::from_micros(us),
        })
        .collect()
}

const GAMING_CROWD: usize = 1_000;
const GAMING_SPIN: Duration = Duration::from_micros(10);

fn gaming_sets<S: Clone>(crowd: S, single: S) -> Vec<Backlog<S>> {
    vec![
        Backlog {
            spawner: crowd,
            tasks: GAMING_CROWD,
            spin: GAMING_SPIN,
        },
        Backlog {
            spawner: single,
            tasks: 1,
            spin: GAMING_SPIN,
        },
    ]
}

/// The single task's fair share of the consumed CPU: half, but never more than one CPU.
fn gaming_fair_share(workers: usize) -> f64 {
    capped_shares(&[1, 1], &[GAMING_CROWD, 1], workers)[1]
}

/// `metrics().busy` of each group, for the cross-check.
fn busy(groups: &[rondo::Group]) -> Vec<Duration> {
    groups.iter().map(|g| g.metrics().busy).collect()
}

fn fmt_shares(s: &[f64]) -> String {
    s.iter()
        .map(|x| format!("{:.1}%", x * 100.0))
        .collect::<Vec<_>>()
        .join(" : ")
}

// ---------------------------------------------------------------------------------------------
// 4. Many groups
// ---------------------------------------------------------------------------------------------

struct ManyTimes {
    /// Group creation, spawning and running, to the last task awaited.
    total: Duration,
    /// Spawning and running only.
    run: Duration,
}

fn minimum(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Creates `groups` groups, spawns `per_group` empty tasks into each from the `block_on` thread,
/// drops the group handles and awaits every task.
fn many_groups(rt: &rondo::Runtime, groups: usize, per_group: usize) -> ManyTimes {
    rt.block_on(async {
        let start = Instant::now();
        let gs: Vec<rondo::Group> = (0..groups)
            .map(|_| rt.group().build().expect("group"))
            .collect();
        let spawning = Instant::now();
        let mut handles = Vec::with_capacity(groups * per_group);
        for g in &gs {
            for _ in 0..per_group {
                handles.push(g.spawn(async {}));
            }
        }
        drop(gs);
        for h in handles {
            h.await.expect("task failed");
        }
        ManyTimes {
            total: start.elapsed(),
            run: spawning.elapsed(),
        }
    })
}

/// [`many_groups`] as a tree: `tenants` top-level groups with `per_tenant` child groups each
/// (a connection group per task set), `per_group` empty tasks in each child.
fn many_groups_tree(
    rt: &rondo::Runtime,
    tenants: usize,
    per_tenant: usize,
    per_group: usize,
) -> ManyTimes {
    rt.block_on(async {
        let start = Instant::now();
        let ts: Vec<rondo::Group> = (0..tenants)
            .map(|_| rt.group().build().expect("group"))
            .collect();
        let gs: Vec<rondo::Group> = ts
            .iter()
            .flat_map(|t| (0..per_tenant).map(move |_| t.child().build().expect("group")))
            .collect();
        let spawning = Instant::now();
        let mut handles = Vec::with_capacity(gs.len() * per_group);
        for g in &gs {
            for _ in 0..per_group {
                handles.push(g.spawn(async {}));
            }
        }
        drop(gs);
        drop(ts);
        for h in handles {
            h.await.expect("task failed");
        }
        ManyTimes {
            total: start.elapsed(),
            run: spawning.elapsed(),
        }
    })
}

/// Tenants × connection groups of scenario 4's tree form.
const TREE_TENANTS: usize = 100;
const TREE_CONNECTIONS: usize = 100;

// ---------------------------------------------------------------------------------------------

/// The one scenario to run, from `RONDO_FAIRNESS_ONLY` (1 to 5), or `None` for all of them.
fn only() -> Option<u32> {
    let v = std::env::var("RONDO_FAIRNESS_ONLY").ok()?;
    match v.trim().parse::<u32>() {
        Ok(n @ 1..=5) => Some(n),
        _ => panic!("RONDO_FAIRNESS_ONLY must be a scenario number from 1 to 5, got {v:?}"),
    }
}

fn main() {
    let n = workers();
    let bench_start = Instant::now();
    println!(
        "rondo fairness groups: {n} worker threads per runtime, {} cores available",
        cores()
    );
    let rondo_rt = common::rondo_runtime(n);
    let tokio_rt = common::tokio_runtime(n);
    // `Tokio` spawns with `tokio::spawn`, which needs the runtime's context on this thread.
    let _tokio_context = tokio_rt.enter();
    let tokio_sp = common::Tokio;
    let ae = AePool::new(n);
    let ae_sp = ae.spawner();
    let mut rows = Vec::new();
    let only = only();
    let runs = |scenario: u32| only.is_none_or(|o| o == scenario);

    // 1. Small behind big.
    if runs(1) {
        println!();
        println!(
            "1. small behind big: {FLOOD_TASKS} × {} µs in A, {} ms later {SMALL_TASKS} × {} µs in B \
         (ideal for B: {:.1} ms); best of 3",
            TASK_SPIN.as_micros(),
            SMALL_DELAY.as_millis(),
            TASK_SPIN.as_micros(),
            fair_ideal(n).as_secs_f64() * 1e3
        );
        let mut best = [f64::INFINITY; 3];
        for round in 1..=3 {
            let a = RondoGroup(rondo_rt.group().name("flood").build().expect("group"));
            let b = RondoGroup(rondo_rt.group().name("small").build().expect("group"));
            let results = [
                small_behind_big(&rondo_rt, &a, &b),
                small_behind_big(&tokio_rt, &tokio_sp, &tokio_sp),
                small_behind_big(&ae, &ae_sp, &ae_sp),
            ];
            for (i, r) in results.iter().enumerate() {
                best[i] = best[i].min(r.small.as_secs_f64() / fair_ideal(n).as_secs_f64());
            }
            println!(
                "   round {round}: B / A done after  rondo {:.1} / {:.1} ms,  tokio {:.1} / {:.1} ms,  \
             async-executor {:.1} / {:.1} ms",
                results[0].small.as_secs_f64() * 1e3,
                results[0].flood.as_secs_f64() * 1e3,
                results[1].small.as_secs_f64() * 1e3,
                results[1].flood.as_secs_f64() * 1e3,
                results[2].small.as_secs_f64() * 1e3,
                results[2].flood.as_secs_f64() * 1e3,
            );
        }
        rows.push(Row {
            scenario: "1. small behind big: B time ÷ fair ideal".into(),
            rondo: best[0],
            tokio: Some(best[1]),
            ae: Some(best[2]),
            target: "≤ 2.0",
            met: best[0] <= 2.0,
        });
    }
    // 2. Weighted shares.
    if runs(2) {
        println!();
        println!(
            "2. weighted shares: weights {WEIGHTS:?}, {WEIGHTED_TASKS} tasks each spinning \
         {WEIGHTED_SPIN_US:?} µs per poll, {} s",
            SHARE_RUN.as_secs()
        );
        let groups: Vec<rondo::Group> = WEIGHTS
            .iter()
            .map(|w| {
                rondo_rt
                    .group()
                    .name(format!("weight-{w}"))
                    .weight(*w)
                    .build()
                    .expect("group")
            })
            .collect();
        let mut busy_edges = Vec::new();
        let spawners = [0, 1, 2].map(|i| RondoGroup(groups[i].clone()));
        let r_times = backlogged(&rondo_rt, &weighted_sets(spawners), || {
            busy_edges.push(busy(&groups))
        });
        let busy_delta: Vec<Duration> = busy_edges[1]
            .iter()
            .zip(&busy_edges[0])
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let t_times = backlogged(&tokio_rt, &weighted_sets([tokio_sp; 3]), || {});
        let a_times = backlogged(&ae, &weighted_sets([ae_sp; 3]), || {});
        let (r_sh, t_sh, a_sh) = (shares(&r_times), shares(&t_times), shares(&a_times));
        // With more workers than a group has tasks, the heaviest group cannot use its whole share.
        let wanted = weighted_wanted(n);
        println!(
            "   CPU shares (want {} with {n} workers and {WEIGHTED_TASKS} tasks per group): rondo {} \
         (metrics().busy: {}),  tokio {},  async-executor {}",
            fmt_shares(&wanted),
            fmt_shares(&r_sh),
            fmt_shares(&shares(&busy_delta)),
            fmt_shares(&t_sh),
            fmt_shares(&a_sh)
        );
        let r_err = weighted_error(&r_sh, &wanted);
        println!(
            "   (metrics().busy gives an error of {:.1}%)",
            weighted_error(&shares(&busy_delta), &wanted) * 100.0
        );
        rows.push(Row {
            scenario: "2. weighted shares 1:2:4: max share error".into(),
            rondo: r_err,
            tokio: Some(weighted_error(&t_sh, &wanted)),
            ae: Some(weighted_error(&a_sh, &wanted)),
            target: "≤ 0.05",
            met: r_err <= 0.05,
        });
        drop(groups);
    }
    // 3. Count gaming.
    if runs(3) {
        println!();
        let fair = gaming_fair_share(n);
        println!(
            "3. count gaming: {GAMING_CROWD} tasks in A, 1 in B, equal weights, each spinning {} µs \
         per poll, {} s; B's fair share of the CPU used: {:.0}%",
            GAMING_SPIN.as_micros(),
            SHARE_RUN.as_secs(),
            fair * 100.0
        );
        let crowd = rondo_rt.group().name("crowd").build().expect("group");
        let single = rondo_rt.group().name("single").build().expect("group");
        let pair = [crowd.clone(), single.clone()];
        let mut busy_edges = Vec::new();
        let r_times = backlogged(
            &rondo_rt,
            &gaming_sets(RondoGroup(crowd), RondoGroup(single)),
            || busy_edges.push(busy(&pair)),
        );
        let busy_delta: Vec<Duration> = busy_edges[1]
            .iter()
            .zip(&busy_edges[0])
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let t_times = backlogged(&tokio_rt, &gaming_sets(tokio_sp, tokio_sp), || {});
        let a_times = backlogged(&ae, &gaming_sets(ae_sp, ae_sp), || {});
        let (r_sh, t_sh, a_sh) = (shares(&r_times), shares(&t_times), shares(&a_times));
        println!(
            "   B's share: rondo {:.1}% (metrics().busy: {:.1}%),  tokio {:.2}%,  async-executor {:.2}%",
            r_sh[1] * 100.0,
            shares(&busy_delta)[1] * 100.0,
            t_sh[1] * 100.0,
            a_sh[1] * 100.0
        );
        let r_fig = r_sh[1] / fair;
        rows.push(Row {
            scenario: "3. count gaming: B share ÷ fair share".into(),
            rondo: r_fig,
            tokio: Some(t_sh[1] / fair),
            ae: Some(a_sh[1] / fair),
            target: "0.9–1.1",
            met: (0.9..=1.1).contains(&r_fig),
        });
        drop(pair);
    }
    // 4. Many groups.
    if runs(4) {
        println!();
        println!(
            "4. many groups: {MANY_GROUPS} groups × {TASKS_PER_GROUP} empty tasks vs {} tasks in one \
         group, spawned from block_on and all awaited; median of {MANY_ROUNDS} interleaved rounds",
            MANY_GROUPS * TASKS_PER_GROUP
        );
        let (mut many_total, mut many_run, mut one_total, mut one_run) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut tree_total = Vec::new();
        for _ in 0..MANY_ROUNDS {
            let many = many_groups(&rondo_rt, MANY_GROUPS, TASKS_PER_GROUP);
            let tree = many_groups_tree(&rondo_rt, TREE_TENANTS, TREE_CONNECTIONS, TASKS_PER_GROUP);
            tree_total.push(tree.total.as_secs_f64());
            let one = many_groups(&rondo_rt, 1, MANY_GROUPS * TASKS_PER_GROUP);
            many_total.push(many.total.as_secs_f64());
            many_run.push(many.run.as_secs_f64());
            one_total.push(one.total.as_secs_f64());
            one_run.push(one.run.as_secs_f64());
        }
        let ms = |v: &[f64]| {
            let v: Vec<String> = v.iter().map(|x| format!("{:.1}", x * 1e3)).collect();
            v.join(" ")
        };
        println!("   many groups, ms per round: {}", ms(&many_total));
        println!("   one group, ms per round:   {}", ms(&one_total));
        println!(
            "   best: many groups {:.1} ms ({:.1} ms without creating the groups), one group {:.1} ms; \
         groups alive afterwards: {}",
            minimum(&many_total) * 1e3,
            minimum(&many_run) * 1e3,
            minimum(&one_total) * 1e3,
            rondo_rt.handle().group_count()
        );
        println!(
            "   ratios: best {:.2}, median {:.2}, best without group creation {:.2}",
            minimum(&many_total) / minimum(&one_total),
            median(&many_total) / median(&one_total),
            minimum(&many_run) / minimum(&one_run)
        );
        let fig = median(&many_total) / median(&one_total);
        rows.push(Row {
            scenario: "4. 10,000 groups vs 1 group (incl. creation): median time ratio".into(),
            rondo: fig,
            tokio: None,
            ae: None,
            target: "≤ 1.2",
            met: fig <= 1.2,
        });
        println!(
            "   as a tree ({TREE_TENANTS} tenants × {TREE_CONNECTIONS} connection groups), ms per \
         round: {}",
            ms(&tree_total)
        );
        let fig = median(&tree_total) / median(&one_total);
        rows.push(Row {
        scenario: format!(
            "4t. {TREE_TENANTS} tenants × {TREE_CONNECTIONS} groups vs 1 group: median time ratio"
        ),
        rondo: fig,
        tokio: None,
        ae: None,
        target: "≤ 1.2",
        met: fig <= 1.2,
    });
    }
    // 5. Overhead of a non-default group.
    if runs(5) {
        println!();
        println!(
            "5. overhead: core workloads in a non-default group vs the default group (both through \
         Group::spawn); median of {OVERHEAD_ROUNDS} interleaved rounds (best in brackets)"
        );
        let default = RondoGroup(
            rondo_rt
                .block_on(rondo_rt.spawn(async { rondo::current_group() }))
                .expect("task failed")
                .expect("a task has a group"),
        );
        let custom = RondoGroup(rondo_rt.group().name("custom").build().expect("group"));
        for w in [
            Workload::SpawnManyRemote,
            Workload::SpawnManyLocal,
            Workload::YieldMany,
        ] {
            let (mut ds, mut cs) = (Vec::new(), Vec::new());
            for round in 0..=OVERHEAD_ROUNDS {
                let td = rondo_rt.block_on(w.run(default.clone())).as_secs_f64();
                let tc = rondo_rt.block_on(w.run(custom.clone())).as_secs_f64();
                if round > 0 {
                    ds.push(td);
                    cs.push(tc);
                }
            }
            let (d, c) = (median(&ds), median(&cs));
            let ops = w.ops() as f64;
            println!(
                "   {}: default {:.0} ({:.0}) ns/{}, custom group {:.0} ({:.0}) ns/{}; ratio of bests {:.3}",
                w.name(),
                d * 1e9 / ops,
                minimum(&ds) * 1e9 / ops,
                w.unit(),
                c * 1e9 / ops,
                minimum(&cs) * 1e9 / ops,
                w.unit(),
                minimum(&cs) / minimum(&ds)
            );
            rows.push(Row {
                scenario: format!("5. {} in a group ÷ default group (medians)", w.name()),
                rondo: c / d,
                tokio: None,
                ae: None,
                target: "≤ 1.1",
                met: c / d <= 1.1,
            });
        }
    }
    println!();
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.3}"));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.scenario.clone(),
                format!("{:.3}", r.rondo),
                opt(r.tokio),
                opt(r.ae),
                r.target.to_string(),
                if r.met { "yes" } else { "NO" }.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "scenario",
            "rondo",
            "tokio",
            "async-executor",
            "target (rondo)",
            "met?",
        ],
        &table,
    );
    println!();
    println!("total time {:.1} s", bench_start.elapsed().as_secs_f64());
}
