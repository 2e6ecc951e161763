//! Short versions of the tenant measurement of `examples/tenant_server.rs` (`--features hyper`):
//! hyper servers on rondo under one tenant's flood of CPU-heavy requests, and what the other
//! tenant's requests see. A test binary of their own, and one at a time (`SERIAL`): each loads
//! both cores for seconds, and a test beside them would change what they measure.

mod common;
#[path = "../examples/tenant/mod.rs"]
mod tenant;

use std::sync::Mutex;
use std::time::Duration;

use common::watchdog;

/// Held by each test for its whole run.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The tenant measurement, short: under tenant A's flood of CPU-heavy requests, tenant B's
/// occasional requests (as heavy as A's: 1 ms of CPU each) are answered much sooner with a group
/// per tenant than with one group for everything, both with connections placed in their tenant's
/// group and with each request's handler spawned into it.
///
/// With one group, B's handler, once it yields, queues behind A's (32 connections × 1 ms on 2
/// workers: many milliseconds); with groups, B's group is behind A's, so B's work gets the next
/// free worker. (A *light* request of B's, which never yields, runs soon in one group as well: the
/// worker looks at the group's global queue, where the reactor's thread puts B's wake, at every
/// quantum end.) The configurations run back to back in the same test, so load from elsewhere on
/// the machine slows all of them; the test asks for a 2× better median per connection and 1.5× per
/// request, well inside the difference groups make, and gives the comparison three tries before
/// failing.
#[test]
fn tenant_groups_shield_one_tenant_from_anothers_flood() {
    let _serial = serial();
    use tenant::Placement::{OneGroup, PerConnection, PerRequest};
    let load = tenant::TenantLoad {
        b_conns: 1,
        b_path: "/b/work",
        ..tenant::TenantLoad::flood(Duration::from_millis(1500))
    };
    let b_p50 = move |placement| {
        let s = tenant::RondoServer::start(2, placement).unwrap();
        let r = tenant::run_tenants(s.addr, &load).unwrap();
        assert!(
            r.b.len() >= 5,
            "too few B samples with {placement:?}: {r:?}"
        );
        assert!(r.a_requests > 0, "A was not served with {placement:?}");
        r.b_p50()
    };
    watchdog(180, move || {
        let mut tries = Vec::new();
        for _ in 0..3 {
            let (conn, req, one) = (b_p50(PerConnection), b_p50(PerRequest), b_p50(OneGroup));
            eprintln!(
                "B p50: group per connection {conn:?}, per request {req:?}, one group {one:?}"
            );
            tries.push((conn, req, one));
            // Per request, B's request waits for a worker up to three times (its connection, its
            // handler, its connection again), each behind up to one 1 ms poll of A's: a smaller
            // margin than per connection, which waits once.
            if one >= conn * 2 && one.as_secs_f64() >= req.as_secs_f64() * 1.5 {
                return;
            }
        }
        panic!("B's p50 (group per connection, per request, one group) per try: {tries:?}");
    });
}

/// Capping each tenant's group at one poll fewer than the workers (`max_concurrency`, the
/// example's `Placement::Reserved`) keeps a worker out of any one tenant's reach: A's 1 ms polls
/// never occupy both workers. With one poll of A's at a time, each at least 1 ms of CPU, A is
/// served at most 1,000 requests a second whatever the machine's load; B is still served. (What
/// the kept worker does for B's latency, B's p99 under A's flood falling from the 1 ms that A's
/// polls impose to about B's alone, is measured by `benches/http.rs`: it depends on the worker's
/// thread getting a CPU, which a test on a shared machine cannot promise.)
///
/// It also checks that every one of A's connections is in A's group: a connection whose tenant
/// the server failed to read from its first request would run in the default group, uncapped
/// (a request line may arrive in pieces: the server waits until the path's first segment is
/// there).
#[test]
fn a_tenant_capped_below_the_worker_count_never_holds_every_worker() {
    let _serial = serial();
    let load = tenant::TenantLoad::flood(Duration::from_millis(1500));
    watchdog(120, move || {
        let s = tenant::RondoServer::start(2, tenant::Placement::Reserved).unwrap();
        let r = tenant::run_tenants(s.addr, &load).unwrap();
        eprintln!(
            "B p50 {:?}, p99 {:?}, A {:.0} requests a second",
            r.b_p50(),
            r.b_p99(),
            r.a_per_sec()
        );
        assert!(r.b.len() >= 50, "too few B samples: {r:?}");
        assert!(r.a_requests > 0, "A was not served");
        assert!(
            r.a_per_sec() <= 1_100.0,
            "A served {:.0} requests a second on one worker's worth of polls",
            r.a_per_sec()
        );
    });
}
