//! HTTP on rondo, tokio and smol: hyper 1.x HTTP/1.1 servers with the same routes
//! (`examples/tenant/mod.rs`), measured in interleaved rounds.
//!
//! For each server, per round:
//! - **hello req/s**: 64 keep-alive connections request `/hello` back to back (with `wrk` when it is
//!   installed, else a Rust client of 64 threads in this process);
//! - **CPU/req** and **switches/req**: the server's threads' CPU time (utime + stime) and context
//!   switches (voluntary + involuntary) during that window, per request, read from
//!   `/proc/self/task/*` for the threads named `srv-*` plus async-io's reactor thread (`async-io`,
//!   which rondo and smol use and tokio does not), so the load client's threads are not counted;
//! - **light p50** and **light csw/req**: one connection sending 40 requests a second; the
//!   server's context switches per request meanwhile, counted as above (they include the wakes
//!   a runtime makes between requests, such as rondo's reactor passes while I/O is recent);
//! - **tenant B p50/p99**: the tenant workload of `examples/tenant_server.rs` (tenant A floods a
//!   1 ms CPU endpoint from 32 connections, tenant B sends light requests from 2), with A idle
//!   ("alone") and with A's flood; and, as "B steps", with A flooding an endpoint that burns the
//!   same 1 ms in ten slices with a yield between them (a handler written for a cooperative
//!   runtime). With 1 ms polls on both workers, a request of B that arrives waits for the first of
//!   them to end: about 0.9 ms at the 99th percentile, whatever the scheduler.
//!
//! rondo runs four ways for the tenant rows (a group per connection, a group per request, one
//! group, and a group per connection with each tenant's group kept off one worker by
//! `max_concurrency(workers - 1)`, which removes that wait); the other rows use a group per
//! connection. smol is `async-executor` run by N threads that each drive the async-io reactor
//! while waiting (what `smol` does), with smol-hyper's timer.
//!
//! `cargo bench --features hyper --bench http`. Worker threads: `RONDO_BENCH_WORKERS` (default 2).
//! Rounds: `HTTP_BENCH_ROUNDS` (default 3); seconds per measurement: `HTTP_BENCH_SECS` (default 2).
//! Servers: `HTTP_BENCH_SERVERS`, a comma-separated subset of `conn`, `tokio`, `smol`, `request`,
//! `one`, `reserved`, `tree` (default: all, in that order). Rows: `HTTP_BENCH_ROWS`, a
//! comma-separated subset of `hello`, `light`, `alone`, `flood`, `steps` (default: all). With
//! `HTTP_BENCH_THREADS=1` the hello and light rows also print each server thread's voluntary and
//! involuntary switches per request, to attribute them (worker, monitor, async-io's thread).
//! With `TENANT_TRACE=1` each rondo tenant run also prints where B's requests spent their time
//! (`examples/tenant/mod.rs`, `trace`: reactor dispatch, run queues, the rest) and which thread
//! dispatched their wakes.
//! The whole run takes about 40 s per round with the defaults (2 minutes in all), plus the build.

#[path = "../examples/tenant/mod.rs"]
mod tenant;

use std::io;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tenant::{Placement, RondoServer, SmolServer, TenantLoad, ThreadUsage, TokioServer};

/// The threads whose CPU and context switches count as the server's.
const SERVER_THREADS: &[&str] = &["srv-", "async-io"];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number (got {v:?})")),
        Err(_) => default,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Rondo(Placement),
    Tokio,
    Smol,
}

impl Kind {
    /// The name `HTTP_BENCH_SERVERS` selects the server by.
    fn key(self) -> &'static str {
        match self {
            Kind::Rondo(Placement::PerConnection) => "conn",
            Kind::Rondo(Placement::PerRequest) => "request",
            Kind::Rondo(Placement::OneGroup) => "one",
            Kind::Rondo(Placement::Reserved) => "reserved",
            Kind::Rondo(Placement::Tree) => "tree",
            Kind::Tokio => "tokio",
            Kind::Smol => "smol",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Rondo(Placement::PerConnection) => "rondo (group per connection)",
            Kind::Rondo(Placement::PerRequest) => "rondo (group per request)",
            Kind::Rondo(Placement::OneGroup) => "rondo (one group)",
            Kind::Rondo(Placement::Reserved) => "rondo (per connection, a worker kept)",
            Kind::Rondo(Placement::Tree) => "rondo (tree: tenant, child per connection)",
            Kind::Tokio => "tokio",
            Kind::Smol => "smol",
        }
    }

    /// Starts the server; it runs until the returned guard drops.
    fn start(self, workers: usize) -> io::Result<(SocketAddr, Box<dyn std::any::Any>)> {
        Ok(match self {
            Kind::Rondo(p) => {
                let s = RondoServer::start(workers, p)?;
                (s.addr, Box::new(s))
            }
            Kind::Tokio => {
                let s = TokioServer::start(workers)?;
                (s.addr, Box::new(s))
            }
            Kind::Smol => {
                let s = SmolServer::start(workers)?;
                (s.addr, Box::new(s))
            }
        })
    }
}

/// One round's numbers for one server; `None` where the row does not apply.
#[derive(Default, Clone)]
struct Row {
    req_per_sec: Option<f64>,
    cpu_per_req: Option<Duration>,
    switches_per_req: Option<f64>,
    light_p50: Option<Duration>,
    light_switches: Option<f64>,
    b_alone: Option<(Duration, Duration)>,
    b_flood: Option<(Duration, Duration)>,
    a_per_sec: Option<f64>,
    /// B under A's flood of the yielding heavy endpoint (`/a/steps`).
    b_flood_steps: Option<(Duration, Duration)>,
}

/// Hello-world throughput with `wrk`: the requests it completed, and the server's usage meanwhile.
fn flood_wrk(addr: SocketAddr, secs: f64) -> io::Result<(u64, Duration, ThreadUsage)> {
    let before = ThreadUsage::sample(SERVER_THREADS);
    let out = Command::new("wrk")
        .args(["-t2", "-c64", &format!("-d{}s", secs.ceil() as u64)])
        .arg(format!("http://{addr}/hello"))
        .output()?;
    let usage = ThreadUsage::sample(SERVER_THREADS).since(before);
    let text = String::from_utf8_lossy(&out.stdout);
    // "  123456 requests in 2.00s, 9.87MB read"
    let line = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .ok_or_else(|| io::Error::other(format!("unexpected wrk output: {text}")))?;
    let mut words = line.split_whitespace();
    let requests: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    let took = words
        .nth(2)
        .and_then(|w| {
            w.trim_end_matches(',')
                .strip_suffix('s')?
                .parse::<f64>()
                .ok()
        })
        .map_or(Duration::from_secs_f64(secs), Duration::from_secs_f64);
    Ok((requests, took, usage))
}

/// Hello-world throughput with the Rust client: 64 threads, one keep-alive connection each.
fn flood_rust(addr: SocketAddr, secs: f64) -> io::Result<(u64, Duration, ThreadUsage)> {
    let mut before = ThreadUsage::default();
    let mut usage = ThreadUsage::default();
    let (requests, took) = tenant::run_flood(
        addr,
        64,
        Duration::from_millis(300),
        Duration::from_secs_f64(secs),
        |starting| {
            if starting {
                before = ThreadUsage::sample(SERVER_THREADS);
            } else {
                usage = ThreadUsage::sample(SERVER_THREADS).since(before);
            }
        },
    )?;
    Ok((requests, took, usage))
}

/// The rows of the table `HTTP_BENCH_ROWS` selects.
#[derive(Clone, Copy)]
struct Rows {
    hello: bool,
    light: bool,
    alone: bool,
    flood: bool,
    steps: bool,
    /// Print the light row's switches per thread.
    threads: bool,
}

impl Rows {
    fn from_env() -> io::Result<Rows> {
        let threads = std::env::var("HTTP_BENCH_THREADS").is_ok_and(|v| v.trim() == "1");
        let Ok(list) = std::env::var("HTTP_BENCH_ROWS") else {
            return Ok(Rows {
                hello: true,
                light: true,
                alone: true,
                flood: true,
                steps: true,
                threads,
            });
        };
        let mut rows = Rows {
            hello: false,
            light: false,
            alone: false,
            flood: false,
            steps: false,
            threads,
        };
        for key in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            match key {
                "hello" => rows.hello = true,
                "light" => rows.light = true,
                "alone" => rows.alone = true,
                "flood" => rows.flood = true,
                "steps" => rows.steps = true,
                _ => {
                    return Err(io::Error::other(format!(
                        "HTTP_BENCH_ROWS: unknown row {key:?} \
                         (known: hello, light, alone, flood, steps)"
                    )));
                }
            }
        }
        Ok(rows)
    }
}

/// One server thread's context switches: (name, voluntary, involuntary), from `/proc/self/task`.
fn thread_switches() -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let name = comm.trim_end().to_string();
        if !SERVER_THREADS.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let tid = task.file_name().to_string_lossy().into_owned();
        out.push((
            format!("{name}[{tid}]"),
            field("voluntary_ctxt_switches:"),
            field("nonvoluntary_ctxt_switches:"),
        ));
    }
    out
}

/// Prints each server thread's switches per request between two [`thread_switches`] samples.
fn print_thread_switches(
    kind: Kind,
    row: &str,
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    requests: usize,
) {
    let n = requests.max(1) as f64;
    println!("  {} {row}: switches per request by thread:", kind.name());
    for (name, vol, invol) in after {
        let (v0, i0) = before
            .iter()
            .find(|(b, _, _)| b == name)
            .map_or((0, 0), |&(_, v, i)| (v, i));
        println!(
            "    {name:<24} voluntary {:>7.2}  involuntary {:>7.2}",
            (vol - v0) as f64 / n,
            (invol - i0) as f64 / n
        );
    }
}

fn measure(kind: Kind, workers: usize, secs: f64, wrk: bool, rows: Rows) -> io::Result<Row> {
    let mut row = Row::default();
    let tenant_flood = TenantLoad::flood(Duration::from_secs_f64(secs));
    let tenant_alone = TenantLoad {
        a_conns: 0,
        ..tenant_flood.clone()
    };
    let full = kind == Kind::Rondo(Placement::PerConnection)
        || kind == Kind::Rondo(Placement::Tree)
        || !matches!(kind, Kind::Rondo(_));
    if full && (rows.hello || rows.light || rows.alone) {
        let (addr, server) = kind.start(workers)?;
        if rows.hello {
            let threads_before = thread_switches();
            let (requests, took, usage) = if wrk {
                flood_wrk(addr, secs)?
            } else {
                flood_rust(addr, secs)?
            };
            let requests = requests.max(1);
            if rows.threads {
                let n = usize::try_from(requests).unwrap_or(usize::MAX);
                print_thread_switches(kind, "hello", &threads_before, &thread_switches(), n);
            }
            row.req_per_sec = Some(requests as f64 / took.as_secs_f64());
            row.cpu_per_req = Some(usage.cpu / u32::try_from(requests).unwrap_or(u32::MAX));
            row.switches_per_req = Some(usage.switches as f64 / requests as f64);
        }
        if rows.light {
            let threads_before = thread_switches();
            let before = ThreadUsage::sample(SERVER_THREADS);
            let light = tenant::run_paced(addr, 40, Duration::from_secs_f64(secs))?;
            let usage = ThreadUsage::sample(SERVER_THREADS).since(before);
            if rows.threads {
                print_thread_switches(
                    kind,
                    "light",
                    &threads_before,
                    &thread_switches(),
                    light.len(),
                );
            }
            row.light_p50 = Some(tenant::percentile(&light, 0.5));
            row.light_switches = Some(usage.switches as f64 / light.len().max(1) as f64);
        }
        if rows.alone {
            let alone = tenant::run_tenants(addr, &tenant_alone)?;
            row.b_alone = Some((alone.b_p50(), alone.b_p99()));
        }
        drop(server);
    }
    // A fresh server for the flood, so that connections from the rows above are gone.
    if rows.flood {
        let (addr, server) = kind.start(workers)?;
        let flood = tenant::run_tenants(addr, &tenant_flood)?;
        row.b_flood = Some((flood.b_p50(), flood.b_p99()));
        row.a_per_sec = Some(flood.a_per_sec());
        drop(server);
    }
    if full && rows.steps {
        let (addr, server) = kind.start(workers)?;
        let steps = TenantLoad {
            a_path: "/a/steps",
            ..tenant_flood
        };
        let flood = tenant::run_tenants(addr, &steps)?;
        row.b_flood_steps = Some((flood.b_p50(), flood.b_p99()));
        drop(server);
    }
    Ok(row)
}

/// The median of `v`: the middle value, or the mean of the two middle values (`mid`) for an even
/// count.
fn median<T: Copy + PartialOrd>(mut v: Vec<T>, mid: fn(T, T) -> T) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        mid(v[n / 2 - 1], v[n / 2])
    })
}

fn mid_f64(a: f64, b: f64) -> f64 {
    (a + b) / 2.0
}

fn mid_duration(a: Duration, b: Duration) -> Duration {
    (a + b) / 2
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3))
}

fn us(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1} µs", d.as_secs_f64() * 1e6))
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn print_table(rows: &[(Kind, Row)]) {
    println!(
        "{:<38} {:>9} {:>10} {:>8} {:>9} {:>9} {:>19} {:>19} {:>8} {:>19}",
        "server",
        "req/s",
        "CPU/req",
        "csw/req",
        "light p50",
        "light csw",
        "B alone p50/p99",
        "B flood p50/p99",
        "A req/s",
        "B steps p50/p99"
    );
    for (kind, r) in rows {
        let pair = |p: Option<(Duration, Duration)>| match p {
            Some((a, b)) => format!("{} / {}", ms(Some(a)), ms(Some(b))),
            None => "-".into(),
        };
        println!(
            "{:<38} {:>9} {:>10} {:>8} {:>9} {:>9} {:>19} {:>19} {:>8} {:>19}",
            kind.name(),
            num(r.req_per_sec, 0),
            us(r.cpu_per_req),
            num(r.switches_per_req, 2),
            ms(r.light_p50),
            num(r.light_switches, 2),
            pair(r.b_alone),
            pair(r.b_flood),
            num(r.a_per_sec, 0),
            pair(r.b_flood_steps),
        );
    }
}

fn main() -> io::Result<()> {
    let workers: usize = env_or("RONDO_BENCH_WORKERS", 2);
    let rounds: usize = env_or("HTTP_BENCH_ROUNDS", 3);
    let secs: f64 = env_or("HTTP_BENCH_SECS", 2.0);
    let wrk = Command::new("wrk").arg("--version").output().is_ok();
    let rows = Rows::from_env()?;
    let all_kinds = [
        Kind::Rondo(Placement::PerConnection),
        Kind::Tokio,
        Kind::Smol,
        Kind::Rondo(Placement::PerRequest),
        Kind::Rondo(Placement::OneGroup),
        Kind::Rondo(Placement::Reserved),
        Kind::Rondo(Placement::Tree),
    ];
    let kinds: Vec<Kind> = match std::env::var("HTTP_BENCH_SERVERS") {
        Ok(list) => {
            let mut kinds = Vec::new();
            for key in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                let Some(&kind) = all_kinds.iter().find(|k| k.key() == key) else {
                    let known: Vec<&str> = all_kinds.iter().map(|k| k.key()).collect();
                    return Err(io::Error::other(format!(
                        "HTTP_BENCH_SERVERS: unknown server {key:?} (known: {})",
                        known.join(", ")
                    )));
                };
                kinds.push(kind);
            }
            if kinds.is_empty() {
                return Err(io::Error::other("HTTP_BENCH_SERVERS names no server"));
            }
            kinds
        }
        Err(_) => all_kinds.to_vec(),
    };
    println!(
        "HTTP/1.1 hello world and the tenant workload; {workers} worker threads per server, \
         {rounds} interleaved rounds of {secs} s per measurement; load client: {}.",
        if wrk {
            "wrk -t2 -c64"
        } else {
            "64 Rust client threads (wrk not installed)"
        }
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at start: {}", load.trim());
    }
    let mut all: Vec<Vec<Row>> = vec![Vec::new(); kinds.len()];
    for round in 1..=rounds {
        let mut this = Vec::new();
        for (i, &kind) in kinds.iter().enumerate() {
            let row = measure(kind, workers, secs, wrk, rows)?;
            all[i].push(row.clone());
            this.push((kind, row));
        }
        println!("\nround {round}:");
        print_table(&this);
    }
    let medians: Vec<(Kind, Row)> = kinds
        .iter()
        .zip(all)
        .map(|(&kind, rows)| {
            let pick = |f: &dyn Fn(&Row) -> Option<(Duration, Duration)>| {
                let p50 = median(
                    rows.iter().filter_map(|r| f(r).map(|p| p.0)).collect(),
                    mid_duration,
                );
                let p99 = median(
                    rows.iter().filter_map(|r| f(r).map(|p| p.1)).collect(),
                    mid_duration,
                );
                p50.zip(p99)
            };
            let row = Row {
                req_per_sec: median(rows.iter().filter_map(|r| r.req_per_sec).collect(), mid_f64),
                cpu_per_req: median(
                    rows.iter().filter_map(|r| r.cpu_per_req).collect(),
                    mid_duration,
                ),
                switches_per_req: median(
                    rows.iter().filter_map(|r| r.switches_per_req).collect(),
                    mid_f64,
                ),
                light_p50: median(
                    rows.iter().filter_map(|r| r.light_p50).collect(),
                    mid_duration,
                ),
                light_switches: median(
                    rows.iter().filter_map(|r| r.light_switches).collect(),
                    mid_f64,
                ),
                b_alone: pick(&|r| r.b_alone),
                b_flood: pick(&|r| r.b_flood),
                a_per_sec: median(rows.iter().filter_map(|r| r.a_per_sec).collect(), mid_f64),
                b_flood_steps: pick(&|r| r.b_flood_steps),
            };
            (kind, row)
        })
        .collect();
    println!("\nmedian of {rounds} rounds:");
    print_table(&medians);
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at end: {}", load.trim());
    }
    Ok(())
}
