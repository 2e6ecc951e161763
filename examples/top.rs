//! A live view of a running server's groups, refreshed every second, like `top`: each tenant and
//! its connection groups (the tree), their weight and cap, the share of the workers they used
//! over the last second, their runnable tasks, the time they waited for a worker or were held
//! back by their cap in that second, and the p99 of their waits in that second (the schedule
//! delay: from having runnable work and no worker to a worker taking it).
//!
//! It starts the tenant server of `examples/tenant_server.rs` (each tenant a group, each connection
//! a child group) with its load driver: tenant A floods a 1 ms CPU endpoint from 32 connections,
//! tenant B sends light requests from 2, and tenant A is capped at 1.5 cores after 3 s.
//!
//! ```sh
//! cargo run --release --features hyper --example top              # 10 refreshes
//! cargo run --release --features hyper --example top -- 30        # 30 refreshes
//! ```

#[path = "tenant/mod.rs"]
mod tenant;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rondo::group::ScheduleDelayHistogram;
use tenant::{Placement, RondoServer, TenantLoad, run_tenants};

/// One group's line: its place in the tree, then what it used in the last interval.
struct Line {
    depth: usize,
    name: String,
    weight: u32,
    cap: Option<f64>,
    children: usize,
    busy: Duration,
    runnable: usize,
    wait: Duration,
    throttled: Duration,
    /// The p99 of the waits that ended in the interval; `None` if none did.
    p99_delay: Option<Duration>,
}

fn depth(g: &rondo::Group) -> usize {
    let mut d = 0;
    let mut p = g.parent();
    while let Some(g) = p {
        d += 1;
        p = g.parent();
    }
    d
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let refreshes: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10);
    let workers = 2;
    let server = RondoServer::start(workers, Placement::Tree)?;
    let addr = server.addr;
    let load = TenantLoad {
        warmup: Duration::ZERO,
        ..TenantLoad::flood(Duration::from_secs(refreshes as u64 + 1))
    };
    let driver = std::thread::spawn(move || run_tenants(addr, &load));
    let rt = server.runtime();
    let mut last: HashMap<u64, (Duration, Duration, Duration, ScheduleDelayHistogram)> =
        HashMap::new();
    let mut at = Instant::now();
    for i in 0..refreshes {
        std::thread::sleep(Duration::from_secs(1));
        if i == 3 {
            if let Some(a) = server.group('a') {
                a.set_cpu_limit(Some(1.5))?;
            }
        }
        let elapsed = at.elapsed();
        at = Instant::now();
        let mut lines = Vec::new();
        for g in rt.groups() {
            // The tree's top two levels: tenants and their connections, summed per tenant
            // when the connections are many.
            let m = g.subtree_metrics();
            let (b0, w0, t0, d0) = last.remove(&g.id()).unwrap_or_default();
            let delays = m.schedule_delay.since(&d0);
            last.insert(
                g.id(),
                (m.busy, m.wait, m.throttled, m.schedule_delay.clone()),
            );
            if depth(&g) > 0 || m.name == "default" {
                continue;
            }
            lines.push(Line {
                depth: depth(&g),
                name: m.name.clone(),
                weight: m.weight,
                cap: g.cpu_limit(),
                children: g.children().len(),
                busy: m.busy.saturating_sub(b0),
                runnable: m.runnable,
                wait: m.wait.saturating_sub(w0),
                throttled: m.throttled.saturating_sub(t0),
                p99_delay: delays.p99(),
            });
        }
        lines.sort_by(|a, b| a.name.cmp(&b.name));
        println!(
            "\nrondo top: {} workers, {:.1} s since the last refresh",
            workers,
            elapsed.as_secs_f64()
        );
        println!(
            "{:<16} {:>6} {:>5} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "group",
            "weight",
            "cap",
            "conns",
            "cpu %",
            "runnable",
            "wait",
            "throttled",
            "p99 delay"
        );
        for l in &lines {
            let cpu = l.busy.as_secs_f64() / (elapsed.as_secs_f64() * workers as f64) * 100.0;
            println!(
                "{:<16} {:>6} {:>5} {:>6} {:>8.1}% {:>9} {:>7.0}ms {:>8.0}ms {:>10}",
                format!("{}{}", "  ".repeat(l.depth), l.name),
                l.weight,
                l.cap.map_or("-".to_string(), |c| format!("{c:.1}")),
                l.children,
                cpu,
                l.runnable,
                l.wait.as_secs_f64() * 1e3,
                l.throttled.as_secs_f64() * 1e3,
                l.p99_delay.map_or("-".to_string(), |d| format!("{d:.1?}")),
            );
        }
    }
    let report = driver.join().expect("load driver")?;
    println!(
        "\ntenant B: p50 {:.2} ms, p99 {:.2} ms over {} requests; tenant A {:.0} req/s",
        report.b_p50().as_secs_f64() * 1e3,
        report.b_p99().as_secs_f64() * 1e3,
        report.b.len(),
        report.a_per_sec()
    );
    Ok(())
}
