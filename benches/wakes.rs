//! Wakes that cross group boundaries (issue 10): rondo with its tasks spread over many groups,
//! against tokio and async-executor running the same tasks ungrouped.
//!
//! Rows:
//! - cross-group ping-pong: 512 pairs × 100 round trips over `mpsc::channel(1)`, each pair's two
//!   tasks in two different groups of 64 (rondo); the same pairs in one group for reference;
//! - foreign wakes: one plain thread wakes 1,024 tasks × 50 times through bounded channels
//!   (`mpsc::channel(1)`), the tasks spread over 1, 64 or 1,024 groups;
//! - shared service: 1,000 client tasks in 100 groups each send 20 requests to one server task in
//!   a group of its own and await each reply;
//! - a group per task: 1,000 tasks each run 20 short tasks one after the other, each in a group
//!   created for it and released when it ends (rondo's group per connection); the peers spawn the
//!   same tasks without groups, so the row is what a group costs on top of a spawn.
//!
//! Every runtime gets the same number of worker threads (2, or `RONDO_BENCH_WORKERS`). Rounds are
//! interleaved (rondo, tokio, async-executor, then the next round); each figure is the median of
//! `ROUNDS` rounds after one unmeasured warm-up round.
//!
//! Run with `cargo bench --bench wakes`; `WAKES_ROWS=group` runs only the rows whose name contains
//! `group` (any text works).

mod common;

use std::time::{Duration, Instant};

use futures::channel::{mpsc, oneshot};
use futures::{SinkExt, StreamExt};

use common::{AePool, BlockOn, RondoGroup, Spawner, Tokio, cores, median, print_table, workers};

const ROUNDS: usize = 7;
const PAIRS: usize = 512;
const TRIPS: usize = 100;
const PING_GROUPS: usize = 64;
const WOKEN_TASKS: usize = 1_024;
const WAKES_PER_TASK: usize = 50;
const CLIENTS: usize = 1_000;
const CLIENT_GROUPS: usize = 100;
const REQUESTS: usize = 20;

/// Ping-pong pairs; pair `i` has its ping task in `sps[2i % n]` and its pong task in
/// `sps[(2i + 1) % n]`, so with more than one spawner every pair crosses a boundary.
async fn ping_pong<S: Spawner>(sps: Vec<S>) -> Duration {
    let start = Instant::now();
    let n = sps.len();
    let mut pings = Vec::with_capacity(PAIRS);
    for i in 0..PAIRS {
        let (mut to_pong, mut pong_rx) = mpsc::channel::<usize>(1);
        let (mut to_ping, mut ping_rx) = mpsc::channel::<usize>(1);
        sps[(2 * i + 1) % n].spawn_detached(async move {
            while let Some(v) = pong_rx.next().await {
                if to_ping.send(v).await.is_err() {
                    break;
                }
            }
        });
        pings.push(sps[(2 * i) % n].spawn(async move {
            for t in 0..TRIPS {
                to_pong.send(t).await.expect("pong gone");
                assert_eq!(ping_rx.next().await, Some(t));
            }
        }));
    }
    for p in pings {
        p.await;
    }
    start.elapsed()
}

/// `WOKEN_TASKS` tasks, task `i` in `sps[i % n]`, each receiving `WAKES_PER_TASK` messages that
/// one plain thread sends round-robin; timed from the first send until every task has finished.
async fn foreign_wakes<S: Spawner>(sps: Vec<S>) -> Duration {
    let n = sps.len();
    let mut senders = Vec::with_capacity(WOKEN_TASKS);
    let mut tasks = Vec::with_capacity(WOKEN_TASKS);
    let (ready_tx, mut ready_rx) = mpsc::unbounded::<()>();
    for i in 0..WOKEN_TASKS {
        let (tx, mut rx) = mpsc::channel::<usize>(1);
        senders.push(tx);
        let ready = ready_tx.clone();
        tasks.push(sps[i % n].spawn(async move {
            let _ = ready.unbounded_send(());
            let mut got = 0;
            while rx.next().await.is_some() {
                got += 1;
            }
            assert_eq!(got, WAKES_PER_TASK);
        }));
    }
    // Every task waits in its channel before the clock starts.
    for _ in 0..WOKEN_TASKS {
        ready_rx.next().await;
    }
    let start = Instant::now();
    let waker = std::thread::spawn(move || {
        futures::executor::block_on(async move {
            for round in 0..WAKES_PER_TASK {
                for tx in &mut senders {
                    tx.send(round).await.expect("task gone");
                }
            }
        })
    });
    for t in tasks {
        t.await;
    }
    let elapsed = start.elapsed();
    waker.join().expect("the waking thread panicked");
    elapsed
}

/// `CLIENTS` clients, client `i` in `clients[i % n]`, each sending `REQUESTS` requests to one
/// server task (spawned by `server`) and awaiting each reply.
async fn shared_service<S: Spawner>(server: S, clients: Vec<S>) -> Duration {
    let start = Instant::now();
    let (to_server, mut requests) = mpsc::channel::<(usize, oneshot::Sender<usize>)>(64);
    let served = server.spawn(async move {
        let mut count = 0;
        while let Some((v, reply)) = requests.next().await {
            let _ = reply.send(v + 1);
            count += 1;
        }
        count
    });
    let n = clients.len();
    let mut handles = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        let mut to_server = to_server.clone();
        handles.push(clients[i % n].spawn(async move {
            for r in 0..REQUESTS {
                let (tx, rx) = oneshot::channel();
                to_server.send((r, tx)).await.expect("server gone");
                assert_eq!(rx.await, Ok(r + 1));
            }
        }));
    }
    drop(to_server);
    for h in handles {
        h.await;
    }
    assert_eq!(served.await, CLIENTS * REQUESTS);
    start.elapsed()
}

/// `CLIENTS` tasks each run `REQUESTS` short tasks in turn, each in a new group (rondo).
async fn group_per_task<S: Spawner>(spawner: S) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let s = spawner.clone();
            spawner.spawn(async move {
                for r in 0..REQUESTS {
                    assert_eq!(s.spawn_in_new_group(async move { r + 1 }).await, r + 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.await;
    }
    start.elapsed()
}

#[derive(Clone, Copy, PartialEq)]
enum Row {
    PingPongCross,
    PingPongOneGroup,
    Foreign(usize),
    SharedService,
    GroupPerTask,
}

impl Row {
    const ALL: [Row; 7] = [
        Row::PingPongCross,
        Row::PingPongOneGroup,
        Row::Foreign(1),
        Row::Foreign(64),
        Row::Foreign(1_024),
        Row::SharedService,
        Row::GroupPerTask,
    ];

    fn name(self) -> String {
        match self {
            Row::PingPongCross => {
                format!("ping-pong, each pair across 2 of {PING_GROUPS} groups (ns/round trip)")
            }
            Row::PingPongOneGroup => "ping-pong, every pair in one group (ns/round trip)".into(),
            Row::Foreign(1) => "foreign wakes, tasks in the default group (ns/wake)".into(),
            Row::Foreign(g) => format!("foreign wakes, tasks in {g} groups (ns/wake)"),
            Row::SharedService => format!(
                "shared service, clients in {CLIENT_GROUPS} groups, server in its own (ns/request)"
            ),
            Row::GroupPerTask => {
                "a group per task: create, spawn into it, await, release (ns/task)".into()
            }
        }
    }

    fn ops(self) -> usize {
        match self {
            Row::PingPongCross | Row::PingPongOneGroup => PAIRS * TRIPS,
            Row::Foreign(_) => WOKEN_TASKS * WAKES_PER_TASK,
            Row::SharedService | Row::GroupPerTask => CLIENTS * REQUESTS,
        }
    }

    /// Runs the row with the given spawners: `groups[0]` alone, or the first `k` of them.
    fn run<S: Spawner, R: BlockOn>(self, rt: &R, groups: &[S]) -> Duration {
        let first = |k: usize| groups[..k.min(groups.len())].to_vec();
        match self {
            Row::PingPongCross => rt.run(ping_pong(first(PING_GROUPS))),
            Row::PingPongOneGroup => rt.run(ping_pong(first(1))),
            Row::Foreign(k) => rt.run(foreign_wakes(first(k))),
            Row::SharedService => {
                // The server in a group of its own, the clients in the next `CLIENT_GROUPS`.
                let server = groups[groups.len() - 1].clone();
                rt.run(shared_service(server, first(CLIENT_GROUPS)))
            }
            Row::GroupPerTask => rt.run(group_per_task(groups[0].clone())),
        }
    }
}

fn main() {
    let n = workers();
    println!(
        "wakes across groups: rondo (grouped) vs tokio and async-executor (ungrouped), {n} worker \
         threads each, {} cores available, median of {ROUNDS} interleaved rounds",
        cores()
    );
    let rondo = common::rondo_runtime(n);
    // The default group first (the one-group rows), then 1,024 more; the last is the server's.
    let default = rondo.block_on(rondo.spawn(async { rondo::current_group() }));
    let mut groups = vec![RondoGroup(
        default.expect("task").expect("a task runs in a group"),
    )];
    groups.extend(
        (1..=WOKEN_TASKS)
            .map(|i| RondoGroup(rondo.group().name(format!("g{i}")).build().expect("group"))),
    );
    let tokio = common::tokio_runtime(n);
    let ae = AePool::new(n);
    let ae_spawner = [ae.spawner()];
    let started = Instant::now();
    let mut rows = Vec::new();
    let only = std::env::var("WAKES_ROWS").ok();
    for row in Row::ALL {
        if only
            .as_ref()
            .is_some_and(|o| !row.name().contains(o.as_str()))
        {
            continue;
        }
        let mut ns = [Vec::new(), Vec::new(), Vec::new()];
        for round in 0..=ROUNDS {
            let per_op = |d: Duration| d.as_nanos() as f64 / row.ops() as f64;
            let taken = [
                per_op(match row {
                    // The rows with groups skip the default group, so every task is grouped.
                    Row::PingPongOneGroup | Row::Foreign(1) => row.run(&rondo, &groups[..1]),
                    _ => row.run(&rondo, &groups[1..]),
                }),
                per_op(row.run(&tokio, &[Tokio])),
                per_op(row.run(&ae, &ae_spawner)),
            ];
            // Round 0 warms caches, allocators and thread pools up; it is not counted.
            if round > 0 {
                for (v, t) in ns.iter_mut().zip(taken) {
                    v.push(t);
                }
            }
        }
        let [r, t, a] = ns.map(|v| median(&v));
        rows.push(vec![
            row.name(),
            format!("{r:.0}"),
            format!("{t:.0}"),
            format!("{a:.0}"),
            format!("{:.2}", r / t.min(a)),
        ]);
    }
    println!();
    print_table(
        &[
            "workload",
            "rondo",
            "tokio",
            "async-executor",
            "rondo ÷ best peer",
        ],
        &rows,
    );
    println!("total time {:.1} s", started.elapsed().as_secs_f64());
}
