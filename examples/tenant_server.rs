//! A multi-tenant HTTP server: one tenant's flood of CPU-heavy requests, and what it does to
//! another tenant's light requests, on rondo with a group per tenant, on rondo with everything in
//! one group, and on tokio.
//!
//! The server (in `examples/tenant/mod.rs`) is hyper 1.x HTTP/1.1 over async-io sockets, served
//! with `rondo::hyper`'s timer. The tenant is in the path: `/a/...` is tenant A, `/b/...` tenant
//! B; `/a/work` burns 1 ms of CPU, `/b/hello` answers at once. A connection's tenant is known only
//! once its first request arrives, and a task cannot move between groups, so the rondo server
//! places work in two ways:
//! - **per connection**: a light task peeks at the connection's first request line (without
//!   taking it from the socket) and spawns the connection into that tenant's group; its handlers
//!   run inline. Later requests on the connection are charged to the same tenant.
//! - **per request**: connections run in the default group, and each request's handler is spawned
//!   into its tenant's group and awaited (`group.spawn(handler).await`), so the CPU it burns is
//!   charged to its tenant whatever the connection carries. It costs two more trips through the
//!   run queues per request.
//! - **tree**: each tenant a group and each connection a child group of its tenant
//!   (`Group::child`), placed as per connection: tenants share by weight however many
//!   connections each opens, and a tenant's connections share its part among themselves.
//! - **per connection, a worker kept**: as per connection, with each tenant's group built with
//!   `max_concurrency(workers - 1)`, so that no tenant's polls hold every worker at once. Groups
//!   share the workers' time by weight, but a poll is never interrupted: with A's 1 ms polls on
//!   both workers, a request of B waits for one of them to end. Keeping a worker out of any one
//!   tenant's reach removes that wait, and costs A the kept worker's share when B is idle.
//!
//! The heavy handler yields once before it burns its CPU, on every server: otherwise hyper's
//! connection task goes on to the connection's next request within the same poll, and one poll
//! runs for many milliseconds (see `respond` in `examples/tenant/mod.rs`).
//!
//! The load driver, in the same process, is blocking clients on threads: 32 keep-alive
//! connections from A hit `/a/work` as fast as they are answered, while 2 connections from B send
//! a light request every 5 ms. It prints B's latency (p50, p99) and A's throughput for each
//! server, all with 2 worker threads, and B's latency with A idle for reference.
//!
//! ```sh
//! cargo run --release --features hyper --example tenant_server                  # the comparison, ~20 s
//! cargo run --release --features hyper --example tenant_server -- --secs 10     # longer windows
//! cargo run --release --features hyper --example tenant_server -- serve 8080    # just serve
//! ```
//!
//! `serve` listens on 127.0.0.1 only; try `curl 127.0.0.1:8080/b/hello`. The measured window per
//! server is `--secs` (or `TENANT_SECS`), default 3; `--workers N` changes the worker count and
//! `--a-conns N` tenant A's connection count.

#[path = "tenant/mod.rs"]
mod tenant;

use std::error::Error;
use std::time::Duration;

use tenant::Placement::{self, OneGroup, PerConnection, PerRequest, Reserved, Tree};
use tenant::{RondoServer, TenantLoad, TenantReport, TokioServer, run_tenants};

struct Options {
    secs: f64,
    workers: usize,
    a_conns: usize,
    serve: Option<u16>,
}

fn options() -> Result<Options, Box<dyn Error>> {
    let mut o = Options {
        secs: match std::env::var("TENANT_SECS") {
            Ok(v) => v.parse()?,
            Err(_) => 3.0,
        },
        workers: 2,
        a_conns: 32,
        serve: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--secs" => o.secs = args.next().ok_or("--secs needs a number")?.parse()?,
            "--workers" => o.workers = args.next().ok_or("--workers needs a number")?.parse()?,
            "--a-conns" => o.a_conns = args.next().ok_or("--a-conns needs a number")?.parse()?,
            "serve" => o.serve = Some(args.next().map_or(Ok(8080), |p| p.parse())?),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if !(o.secs > 0.0 && o.secs <= 3600.0) {
        return Err("--secs must be between 0 and 3600".into());
    }
    Ok(o)
}

fn main() -> Result<(), Box<dyn Error>> {
    let o = options()?;
    if let Some(port) = o.serve {
        return serve(port, o.workers);
    }
    let flood = TenantLoad {
        a_conns: o.a_conns,
        warmup: Duration::from_millis(500),
        ..TenantLoad::flood(Duration::from_secs_f64(o.secs))
    };
    let alone = TenantLoad {
        a_conns: 0,
        ..flood.clone()
    };
    println!(
        "Tenant A: {} connections flooding /a/work (1 ms of CPU each). Tenant B: {} connections, \
         a light request every {:?}.\n{} worker threads per server; {:.1} s measured per row.\n",
        flood.a_conns, flood.b_conns, flood.b_pause, o.workers, o.secs
    );
    println!(
        "{:<38} {:>10} {:>10} {:>10} {:>12}",
        "server", "B p50", "B p99", "B reqs", "A req/s"
    );
    let rows: [(&str, &TenantLoad, Server); 8] = [
        (
            "rondo, tree (tenant > connection), A idle",
            &alone,
            Server::Rondo(Tree),
        ),
        (
            "rondo, tree (tenant > connection)",
            &flood,
            Server::Rondo(Tree),
        ),
        (
            "rondo, groups per connection, A idle",
            &alone,
            Server::Rondo(PerConnection),
        ),
        (
            "rondo, groups per connection",
            &flood,
            Server::Rondo(PerConnection),
        ),
        (
            "rondo, per connection, a worker kept",
            &flood,
            Server::Rondo(Reserved),
        ),
        (
            "rondo, groups per request",
            &flood,
            Server::Rondo(PerRequest),
        ),
        ("rondo, one group", &flood, Server::Rondo(OneGroup)),
        ("tokio", &flood, Server::Tokio),
    ];
    for (name, load, server) in rows {
        let r = server.run(o.workers, load)?;
        println!(
            "{:<38} {:>10} {:>10} {:>10} {:>12.0}",
            name,
            ms(r.b_p50()),
            ms(r.b_p99()),
            r.b.len(),
            r.a_per_sec()
        );
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Server {
    Rondo(Placement),
    Tokio,
}

impl Server {
    fn run(self, workers: usize, load: &TenantLoad) -> Result<TenantReport, Box<dyn Error>> {
        Ok(match self {
            Server::Rondo(placement) => {
                let s = RondoServer::start(workers, placement)?;
                run_tenants(s.addr, load)?
            }
            Server::Tokio => {
                let s = TokioServer::start(workers)?;
                run_tenants(s.addr, load)?
            }
        })
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Serves until the process is killed (a tree: each tenant a group, each connection a child
/// group), printing each tenant's group metrics every 5 s.
fn serve(port: u16, workers: usize) -> Result<(), Box<dyn Error>> {
    let server = RondoServer::start_on(port, workers, Tree)?;
    println!(
        "serving on http://{} (tenant A: /a/..., tenant B: /b/...)",
        server.addr
    );
    loop {
        std::thread::sleep(Duration::from_secs(5));
        for t in ['a', 'b'] {
            if let Some(g) = server.group(t) {
                let m = g.metrics();
                // Each connection runs in a child group of its tenant's.
                println!(
                    "{}: {} connections open, {:?} waited, {:?} throttled",
                    m.name,
                    g.children().len(),
                    m.wait,
                    m.throttled
                );
            }
        }
    }
}
