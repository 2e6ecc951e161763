//! A task dump of the tenant server under load: every live task with its group, state
//! (running, queued, idle), polls and time since its last poll.
//!
//! It starts the tenant server of `examples/tenant_server.rs` (each tenant a group, each
//! connection a child group) on a runtime built with `Builder::enable_task_dump`, drives it with
//! the flood load (tenant A: 32 connections on a 1 ms CPU endpoint; tenant B: 2 light ones), and
//! after `secs` seconds prints a count of the tasks by group and state, then the dump itself.
//!
//! ```sh
//! cargo run --release --features hyper --example dump            # dump after 2 s
//! cargo run --release --features hyper --example dump -- 5 40    # after 5 s, at most 40 lines
//! ```

#[path = "tenant/mod.rs"]
mod tenant;

use std::collections::BTreeMap;
use std::time::Duration;

use tenant::{Placement, RondoServer, TenantLoad, run_tenants};

/// The top-level group a connection's group hangs under, or the group itself.
fn tenant_of(groups: &[rondo::Group], id: u64) -> String {
    let Some(mut g) = groups.iter().find(|g| g.id() == id).cloned() else {
        return format!("group {id}");
    };
    while let Some(p) = g.parent() {
        g = p;
    }
    g.name().to_string()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    let max_lines: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20);
    let builder = rondo::Runtime::builder()
        .worker_threads(2)
        .enable_task_dump();
    let server = RondoServer::start_with(0, builder, Placement::Tree)?;
    let addr = server.addr;
    let load = TenantLoad {
        warmup: Duration::ZERO,
        ..TenantLoad::flood(Duration::from_secs(secs + 1))
    };
    let driver = std::thread::spawn(move || run_tenants(addr, &load));
    std::thread::sleep(Duration::from_secs(secs));

    let rt = server.runtime();
    let started = std::time::Instant::now();
    let dump = rt.dump()?;
    let took = started.elapsed();
    let groups = rt.groups();
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for t in dump.tasks() {
        let key = (tenant_of(&groups, t.group_id()), t.state().to_string());
        *counts.entry(key).or_default() += 1;
    }
    println!(
        "{} live tasks, dumped in {took:.1?} while the server ran; by tenant and state:",
        dump.tasks().len()
    );
    for ((tenant, state), n) in &counts {
        println!("  {tenant:<10} {state:<8} {n:>4}");
    }
    println!();
    let text = dump.to_string();
    let total = text.lines().count();
    for line in text.lines().take(max_lines + 1) {
        println!("{line}");
    }
    if total > max_lines + 1 {
        println!("... {} more", total - max_lines - 1);
    }
    drop(groups);
    let _ = driver.join();
    Ok(())
}
