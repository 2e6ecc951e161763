//! rondo against tokio's multi-thread runtime and async-executor on the core workloads (issue 2).
//!
//! Every runtime gets the same number of worker threads (2, or `RONDO_BENCH_WORKERS`). The runs
//! are interleaved: for each workload, round r runs rondo, then tokio, then async-executor, then
//! round r + 1, so a burst of machine noise hits all three alike. Each figure is the best of
//! `ROUNDS` rounds, after one unmeasured warm-up round.
//!
//! Run with `cargo bench --bench compare`.

mod common;

use std::time::{Duration, Instant};

use common::{AePool, Rondo, Tokio, Workload, cores, print_table, workers};

const ROUNDS: usize = 7;

struct Runtimes {
    rondo: rondo::Runtime,
    tokio: tokio::runtime::Runtime,
    ae: AePool,
}

#[derive(Clone, Copy)]
enum Which {
    Rondo,
    Tokio,
    AsyncExecutor,
}

impl Runtimes {
    fn run(&self, which: Which, w: Workload) -> Duration {
        match which {
            Which::Rondo => self.rondo.block_on(w.run(Rondo)),
            Which::Tokio => self.tokio.block_on(w.run(Tokio)),
            Which::AsyncExecutor => self.ae.block_on(w.run(self.ae.spawner())),
        }
    }
}

fn ns_per_op(d: Duration, ops: usize) -> f64 {
    d.as_nanos() as f64 / ops as f64
}

fn main() {
    let n = workers();
    println!(
        "rondo vs tokio vs async-executor: {n} worker threads each, {} cores available, best of \
         {ROUNDS} interleaved rounds",
        cores()
    );
    let rts = Runtimes {
        rondo: common::rondo_runtime(n),
        tokio: common::tokio_runtime(n),
        ae: AePool::new(n),
    };
    let order = [Which::Rondo, Which::Tokio, Which::AsyncExecutor];
    let started = Instant::now();
    let mut rows = Vec::new();
    for w in Workload::ALL {
        let mut best = [f64::INFINITY; 3];
        for round in 0..=ROUNDS {
            for (i, which) in order.iter().enumerate() {
                let ns = ns_per_op(rts.run(*which, w), w.ops());
                // Round 0 warms caches, allocators and thread pools up; it is not counted.
                if round > 0 {
                    best[i] = best[i].min(ns);
                }
            }
        }
        let peer = best[1].min(best[2]);
        rows.push(vec![
            format!("{} (ns/{})", w.name(), w.unit()),
            format!("{:.0}", best[0]),
            format!("{:.0}", best[1]),
            format!("{:.0}", best[2]),
            format!("{:.2}", best[0] / peer),
        ]);
    }
    println!();
    print_table(
        &[
            "workload",
            "rondo ns/op",
            "tokio ns/op",
            "async-executor ns/op",
            "rondo ÷ best peer",
        ],
        &rows,
    );
    println!();
    println!(
        "spawn_many_*: {} empty tasks; yield_many: {} tasks × {} yields; ping_pong: {} pairs × {} \
         round trips over futures::channel::mpsc::channel(1); chained_spawn: {} hops; \
         spawn_yield_once: {} tasks that yield once.",
        common::SPAWN_MANY,
        common::YIELD_TASKS,
        common::YIELDS_PER_TASK,
        common::PING_PONG_PAIRS,
        common::ROUND_TRIPS,
        common::CHAIN_LEN,
        common::SPAWN_MANY
    );
    println!("total time {:.1} s", started.elapsed().as_secs_f64());
}
