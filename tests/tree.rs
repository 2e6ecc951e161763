//! Tenant trees: nested groups share by weight at every level (`Group::child`).
//!
//! The share tests measure CPU time by spinning, so they run one at a time (`SERIAL`) with two
//! workers (a share is a share of two cores); the bounds are generous: the figures are measured in
//! `benches/fairness.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{spin, watchdog};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spins in 50 µs slices, yielding in between, adding the time spun to `total`, until `stop`.
async fn backlogged(total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        spin(Duration::from_micros(50));
        total.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        rondo::yield_now().await;
    }
}

/// A group under measurement: its tasks add what they spin to `total`.
struct Measured {
    group: rondo::Group,
    total: Arc<AtomicU64>,
}

impl Measured {
    fn new(group: rondo::Group) -> Self {
        Measured {
            group,
            total: Arc::new(AtomicU64::new(0)),
        }
    }

    fn spawn(&self, n: usize, stop: &Arc<AtomicBool>) -> Vec<rondo::JoinHandle<()>> {
        (0..n)
            .map(|_| {
                self.group
                    .spawn(backlogged(self.total.clone(), stop.clone()))
            })
            .collect()
    }

    fn ns(&self) -> f64 {
        self.total.load(Ordering::SeqCst) as f64
    }
}

/// Lets the tasks run for `d`, then stops them and waits for them.
fn run_for(rt: &rondo::Runtime, d: Duration, stop: &AtomicBool, hs: Vec<rondo::JoinHandle<()>>) {
    std::thread::sleep(d);
    stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for h in hs {
            h.await.unwrap();
        }
    });
}

fn two_workers() -> rondo::Runtime {
    rondo::Runtime::builder().worker_threads(2).build().unwrap()
}

/// Asserts that each measured group got its expected share of the total, within `tolerance`
/// (an absolute fraction of the whole).
fn assert_shares(groups: &[(&str, &Measured, f64)], tolerance: f64) {
    let total: f64 = groups.iter().map(|(_, m, _)| m.ns()).sum();
    assert!(total > 0.0, "nothing ran");
    let report: Vec<String> = groups
        .iter()
        .map(|(name, m, want)| format!("{name}: {:.3} (want {want:.3})", m.ns() / total))
        .collect();
    for (name, m, want) in groups {
        let got = m.ns() / total;
        assert!(
            (got - want).abs() <= tolerance,
            "{name} got {got:.3} of the CPU, expected {want:.3}: {}",
            report.join(", ")
        );
    }
}

#[test]
fn a_child_group_stays_within_its_tenants_share() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let tenant = rt.group().name("tenant").weight(5).build().unwrap();
        let neighbour = Measured::new(rt.group().name("neighbour").weight(1).build().unwrap());
        // The tenant's work runs in a child built from inside one of its tasks, as a request
        // that fans out does.
        let fan_out = rt
            .block_on(tenant.spawn(async {
                rondo::current_group()
                    .unwrap()
                    .child()
                    .name("fan-out")
                    .build()
                    .unwrap()
            }))
            .unwrap();
        assert_eq!(fan_out.parent().unwrap().name(), "tenant");
        let fan_out = Measured::new(fan_out);
        let mut hs = fan_out.spawn(8, &stop);
        hs.extend(neighbour.spawn(8, &stop));
        run_for(&rt, Duration::from_millis(600), &stop, hs);
        assert_shares(
            &[
                ("fan-out", &fan_out, 5.0 / 6.0),
                ("neighbour", &neighbour, 1.0 / 6.0),
            ],
            0.07,
        );
    });
}

#[test]
fn connections_do_not_buy_their_tenant_share() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let a = rt.group().name("a").build().unwrap();
        let b = rt.group().name("b").build().unwrap();
        let (ta, tb) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut hs = Vec::new();
        let mut conns = Vec::new();
        for (tenant, total, n) in [(&a, &ta, 32), (&b, &tb, 2)] {
            for _ in 0..n {
                let conn = tenant.child().build().unwrap();
                hs.push(conn.spawn(backlogged(total.clone(), stop.clone())));
                conns.push(conn);
            }
        }
        run_for(&rt, Duration::from_millis(600), &stop, hs);
        let (a_ns, b_ns) = (
            ta.load(Ordering::SeqCst) as f64,
            tb.load(Ordering::SeqCst) as f64,
        );
        let share = a_ns / (a_ns + b_ns);
        assert!(
            (share - 0.5).abs() <= 0.07,
            "tenant A (32 connections) got {share:.3} of the CPU against tenant B (2)"
        );
    });
}

#[test]
fn weights_multiply_down_four_levels() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        // Level 1: x (3) and y (1). Under x: x1 (1) and x2 (2). Under x2: x2a (1) and x2b (3).
        // Under x2b: deep (1) and deeper (1). Every leaf is busy, so the expected shares are the
        // products of the weight fractions on each path.
        let x = rt.group().name("x").weight(3).build().unwrap();
        let y = Measured::new(rt.group().name("y").weight(1).build().unwrap());
        let x1 = Measured::new(x.child().name("x1").weight(1).build().unwrap());
        let x2 = x.child().name("x2").weight(2).build().unwrap();
        let x2a = Measured::new(x2.child().name("x2a").weight(1).build().unwrap());
        let x2b = x2.child().name("x2b").weight(3).build().unwrap();
        let deep = Measured::new(x2b.child().name("deep").weight(1).build().unwrap());
        let deeper = Measured::new(x2b.child().name("deeper").weight(1).build().unwrap());
        let mut hs = Vec::new();
        for m in [&y, &x1, &x2a, &deep, &deeper] {
            hs.extend(m.spawn(4, &stop));
        }
        run_for(&rt, Duration::from_millis(1000), &stop, hs);
        let (fx, fy) = (0.75, 0.25);
        let (fx1, fx2) = (fx / 3.0, fx * 2.0 / 3.0);
        let (fx2a, fx2b) = (fx2 / 4.0, fx2 * 3.0 / 4.0);
        assert_shares(
            &[
                ("y", &y, fy),
                ("x1", &x1, fx1),
                ("x2a", &x2a, fx2a),
                ("deep", &deep, fx2b / 2.0),
                ("deeper", &deeper, fx2b / 2.0),
            ],
            0.05,
        );
    });
}

#[test]
fn tasks_of_a_group_with_children_compete_as_one_more_child_of_weight_one() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let parent = Measured::new(rt.group().name("parent").build().unwrap());
        let child = Measured::new(
            parent
                .group
                .child()
                .name("child")
                .weight(3)
                .build()
                .unwrap(),
        );
        let mut hs = parent.spawn(4, &stop);
        hs.extend(child.spawn(4, &stop));
        run_for(&rt, Duration::from_millis(600), &stop, hs);
        assert_shares(
            &[("parent's own", &parent, 0.25), ("child", &child, 0.75)],
            0.07,
        );
    });
}

#[test]
fn an_idle_sibling_leaves_its_share_to_the_busy_ones() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let tenant = rt.group().weight(1).build().unwrap();
        let other = Measured::new(rt.group().weight(1).build().unwrap());
        let busy = Measured::new(tenant.child().weight(1).build().unwrap());
        let _idle = tenant.child().weight(100).build().unwrap();
        let mut hs = busy.spawn(4, &stop);
        hs.extend(other.spawn(4, &stop));
        run_for(&rt, Duration::from_millis(500), &stop, hs);
        // The idle weight-100 child takes nothing: its busy sibling gets the tenant's half.
        assert_shares(&[("busy", &busy, 0.5), ("other", &other, 0.5)], 0.07);
    });
}

#[test]
fn a_tree_alone_uses_every_worker() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let tenant = rt.group().build().unwrap();
        let conn = tenant.child().build().unwrap();
        let req = conn.child().build().unwrap();
        let t = Instant::now();
        let hs: Vec<_> = (0..8)
            .map(|_| req.spawn(async { spin(Duration::from_millis(50)) }))
            .collect();
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
        });
        // 400 ms of work on two workers: about 200 ms, far less than one worker's 400.
        let took = t.elapsed();
        assert!(took < Duration::from_millis(340), "took {took:?}");
    });
}

#[test]
fn cancelling_a_group_cancels_its_subtree() {
    watchdog(30, || {
        let rt = common::rt(2);
        let tenant = rt.group().build().unwrap();
        let conn = tenant.child().build().unwrap();
        let req = conn.child().build().unwrap();
        let sibling = rt.group().build().unwrap();
        let hs: Vec<_> = [&tenant, &conn, &req]
            .iter()
            .map(|g| g.spawn(std::future::pending::<()>()))
            .collect();
        let safe = sibling.spawn(async { 7 });
        conn.cancel();
        assert!(!tenant.is_cancelled());
        assert!(conn.is_cancelled() && req.is_cancelled());
        let mut hs = hs.into_iter();
        let tenant_task = hs.next().unwrap();
        for h in hs {
            assert!(rt.block_on(h).unwrap_err().is_cancelled());
        }
        // Groups built (and tasks spawned) under a cancelled group afterwards are cancelled too.
        let late = req.child().build().unwrap();
        assert!(late.is_cancelled());
        assert!(
            rt.block_on(late.spawn(async {}))
                .unwrap_err()
                .is_cancelled()
        );
        tenant.cancel();
        assert!(rt.block_on(tenant_task).unwrap_err().is_cancelled());
        assert_eq!(rt.block_on(safe).unwrap(), 7);
    });
}

#[test]
fn wait_idle_waits_for_the_subtree() {
    watchdog(30, || {
        let rt = common::rt(2);
        let tenant = rt.group().build().unwrap();
        let conn = tenant.child().build().unwrap();
        let req = conn.child().build().unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        req.spawn(async move {
            rondo::time::sleep(Duration::from_millis(100)).await;
            d.fetch_add(1, Ordering::SeqCst);
        });
        assert!(tenant.is_empty(), "the tenant's own tasks");
        rt.block_on(tenant.wait_idle());
        assert_eq!(done.load(Ordering::SeqCst), 1, "wait_idle returned early");
    });
}

#[test]
fn a_child_keeps_its_parent_alive() {
    watchdog(30, || {
        let rt = common::rt(2);
        let tenant = rt.group().name("tenant").build().unwrap();
        let conn = tenant.child().name("conn").build().unwrap();
        drop(tenant);
        // The parent lives on through its child: its name, its share, its tasks.
        let parent = conn.parent().unwrap();
        assert_eq!(parent.name(), "tenant");
        assert_eq!(rt.block_on(parent.spawn(async { 1 })).unwrap(), 1);
        assert_eq!(rt.block_on(conn.spawn(async { 2 })).unwrap(), 2);
        assert_eq!(parent.children().len(), 1);
        let live = rt.metrics().groups_alive;
        drop(parent);
        drop(conn);
        assert!(
            common::eventually(10, || rt.metrics().groups_alive == live - 2),
            "the tree's groups were not freed"
        );
    });
}

#[test]
fn a_child_built_with_a_bad_setting_is_an_error() {
    let rt = common::rt(1);
    let g = rt.group().build().unwrap();
    let err = g.child().weight(0).build().unwrap_err();
    assert!(err.to_string().contains("weight"), "{err}");
    let err = g.child().max_concurrency(0).build().unwrap_err();
    assert!(err.to_string().contains("max_concurrency"), "{err}");
    assert!(g.children().is_empty());
}

#[test]
fn a_flat_group_with_queued_work_becomes_a_tree_without_losing_it() {
    watchdog(60, || {
        let rt = common::rt(2);
        for _ in 0..200 {
            let g = rt.group().build().unwrap();
            let hs: Vec<_> = (0..20)
                .map(|i| {
                    g.spawn(async move {
                        rondo::yield_now().await;
                        i
                    })
                })
                .collect();
            // The first child arrives while the group's tasks are queued and being picked.
            let c = g.child().build().unwrap();
            let ch = c.spawn(async { 100 });
            let sum: usize = rt.block_on(async {
                let mut sum = 0;
                for h in hs {
                    sum += h.await.unwrap();
                }
                sum + ch.await.unwrap()
            });
            assert_eq!(sum, 190 + 100);
        }
    });
}

#[test]
fn a_hundred_thousand_groups_in_a_tree_come_and_go() {
    watchdog(120, || {
        let rt = common::rt(2);
        let live = rt.metrics().groups_alive;
        let tenants: Vec<_> = (0..100).map(|_| rt.group().build().unwrap()).collect();
        let count = Arc::new(AtomicUsize::new(0));
        for round in 0..10 {
            let mut hs = Vec::new();
            let mut conns = Vec::new();
            for t in &tenants {
                for _ in 0..100 {
                    let conn = t.child().build().unwrap();
                    let c = count.clone();
                    hs.push(conn.spawn(async move {
                        rondo::yield_now().await;
                        c.fetch_add(1, Ordering::Relaxed);
                    }));
                    conns.push(conn);
                }
            }
            rt.block_on(async {
                for h in hs {
                    h.await.unwrap();
                }
            });
            assert_eq!(count.load(Ordering::SeqCst), (round + 1) * 10_000);
            drop(conns);
        }
        drop(tenants);
        assert!(
            common::eventually(10, || rt.metrics().groups_alive == live),
            "{} groups left of the tree",
            rt.metrics().groups_alive - live
        );
    });
}

/// CPU time per window: the measured group's self-counted service in each `window`, after
/// `warmup`, over `windows` windows, in cores.
fn cores_per_window(m: &Measured, warmup: Duration, window: Duration, windows: usize) -> Vec<f64> {
    std::thread::sleep(warmup);
    let mut last = m.ns();
    (0..windows)
        .map(|_| {
            std::thread::sleep(window);
            let now = m.ns();
            let cores = (now - last) / window.as_nanos() as f64;
            last = now;
            cores
        })
        .collect()
}

#[test]
fn a_capped_group_alone_stays_at_its_cap() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let capped = Measured::new(rt.group().cpu_limit(0.5).build().unwrap());
        let hs = capped.spawn(4, &stop);
        let cores = cores_per_window(
            &capped,
            Duration::from_millis(200),
            Duration::from_secs(1),
            2,
        );
        run_for(&rt, Duration::ZERO, &stop, hs);
        for c in &cores {
            assert!(
                (0.45..=0.55).contains(c),
                "used {cores:?} cores with a 0.5 cap"
            );
        }
        assert!(capped.group.metrics().throttled > Duration::from_millis(500));
    });
}

#[test]
fn a_capped_group_beside_a_busy_sibling_keeps_to_its_cap_and_the_sibling_gets_the_rest() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let capped = Measured::new(rt.group().weight(10).cpu_limit(0.5).build().unwrap());
        let free = Measured::new(rt.group().weight(1).build().unwrap());
        let mut hs = capped.spawn(4, &stop);
        hs.extend(free.spawn(4, &stop));
        std::thread::sleep(Duration::from_millis(200));
        let (c0, f0) = (capped.ns(), free.ns());
        std::thread::sleep(Duration::from_secs(1));
        let (c1, f1) = (capped.ns(), free.ns());
        run_for(&rt, Duration::ZERO, &stop, hs);
        let (c, f) = ((c1 - c0) / 1e9, (f1 - f0) / 1e9);
        assert!(
            (0.45..=0.55).contains(&c),
            "the capped group used {c:.3} cores"
        );
        assert!(
            f > 1.2,
            "the uncapped sibling used {f:.3} cores of the 1.5 left"
        );
    });
}

#[test]
fn a_capped_parent_bounds_its_subtree() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let tenant = rt.group().cpu_limit(0.5).build().unwrap();
        let a = Measured::new(tenant.child().build().unwrap());
        let b = Measured::new(a.group.child().weight(4).build().unwrap());
        let mut hs = a.spawn(4, &stop);
        hs.extend(b.spawn(4, &stop));
        std::thread::sleep(Duration::from_millis(200));
        let t0 = a.ns() + b.ns();
        std::thread::sleep(Duration::from_secs(1));
        let used = (a.ns() + b.ns() - t0) / 1e9;
        run_for(&rt, Duration::ZERO, &stop, hs);
        assert!(
            (0.45..=0.55).contains(&used),
            "the subtree used {used:.3} cores"
        );
        // Caps nest: a child's own cap above its parent's changes nothing.
        assert_eq!(tenant.cpu_limit(), Some(0.5));
    });
}

#[test]
fn removing_a_cap_lets_a_throttled_group_run_at_once() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let g = Measured::new(rt.group().cpu_limit(0.1).build().unwrap());
        let hs = g.spawn(4, &stop);
        std::thread::sleep(Duration::from_millis(300));
        g.group.set_cpu_limit(None).unwrap();
        assert_eq!(g.group.cpu_limit(), None);
        let before = g.ns();
        std::thread::sleep(Duration::from_millis(300));
        let cores = (g.ns() - before) / 0.3e9;
        run_for(&rt, Duration::ZERO, &stop, hs);
        assert!(
            cores > 1.5,
            "uncapped, the group used {cores:.3} cores of 2"
        );
    });
}

#[test]
fn a_cap_that_is_not_a_positive_finite_number_of_cores_is_an_error() {
    let rt = common::rt(1);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = rt.group().cpu_limit(bad).build().unwrap_err();
        assert_eq!(err.kind(), rondo::group::GroupErrorKind::InvalidCpuLimit);
        assert!(
            err.to_string().contains("finite number of cores above 0"),
            "{err}"
        );
        let g = rt.group().cpu_limit(1.0).build().unwrap();
        assert!(g.set_cpu_limit(Some(bad)).is_err());
        assert_eq!(g.cpu_limit(), Some(1.0), "a rejected cap changed the cap");
        assert!(g.child().cpu_limit(bad).build().is_err());
    }
}

#[test]
fn subtree_metrics_add_up_the_tree() {
    watchdog(30, || {
        let rt = common::rt(2);
        let tenant = rt.group().build().unwrap();
        let conns: Vec<_> = (0..3).map(|_| tenant.child().build().unwrap()).collect();
        let req = conns[0].child().build().unwrap();
        for g in conns.iter().chain([&req, &tenant]) {
            for _ in 0..2 {
                rt.block_on(g.spawn(async { spin(Duration::from_millis(2)) }))
                    .unwrap();
            }
        }
        rt.block_on(tenant.wait_idle());
        let m = tenant.subtree_metrics();
        assert_eq!((m.spawned, m.completed), (10, 10));
        assert_eq!(tenant.metrics().completed, 2);
        // Busy time is flushed when workers visit the scheduler or park.
        assert!(
            common::eventually(10, || tenant.subtree_metrics().busy
                >= Duration::from_millis(18)),
            "{:?}",
            tenant.subtree_metrics()
        );
        assert_eq!(m.name, tenant.name());
    });
}

#[test]
fn the_prometheus_output_carries_the_tree() {
    let rt = common::rt(1);
    let tenant = rt.group().name("tenant").cpu_limit(1.0).build().unwrap();
    let conn = tenant.child().name("conn").build().unwrap();
    let text = rt.metrics().to_prometheus();
    let conn_line = format!(
        "rondo_group_weight{{group=\"conn\",group_id=\"{}\",parent_id=\"{}\"}} 1",
        conn.id(),
        tenant.id()
    );
    assert!(text.contains(&conn_line), "{text}");
    let tenant_line = format!(
        "rondo_group_throttled_seconds_total{{group=\"tenant\",group_id=\"{}\"}} ",
        tenant.id()
    );
    assert!(text.contains(&tenant_line), "{text}");
    let m = conn.metrics();
    assert_eq!(m.parent, Some(tenant.id()));
}

/// Regression: with several trees served by two workers, a pick that took a short leaf queue
/// whole left the leaf's sibling the only choice of the next worker to descend, and a node's two
/// leaves got a worker each, whatever their weights (1:2 came out 49:51 with four other trees).
#[test]
fn leaves_keep_their_weights_while_other_trees_compete() {
    let _serial = serial();
    watchdog(60, || {
        let rt = two_workers();
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        let mut keep = Vec::new();
        for _ in 0..4 {
            let t = rt.group().build().unwrap();
            for _ in 0..2 {
                let m = t.child().build().unwrap();
                for w in [1, 2] {
                    let leaf = Measured::new(m.child().weight(w).build().unwrap());
                    hs.extend(leaf.spawn(4, &stop));
                    keep.push(leaf);
                }
            }
        }
        let tenant = rt.group().build().unwrap();
        let mid = tenant.child().build().unwrap();
        let light = Measured::new(mid.child().weight(1).build().unwrap());
        let heavy = Measured::new(mid.child().weight(2).build().unwrap());
        hs.extend(light.spawn(4, &stop));
        hs.extend(heavy.spawn(4, &stop));
        run_for(&rt, Duration::from_millis(1500), &stop, hs);
        let share = light.ns() / (light.ns() + heavy.ns());
        assert!(
            (share - 1.0 / 3.0).abs() <= 0.06,
            "the weight-1 leaf got {share:.3} of its node (expected 0.333)"
        );
    });
}

/// Regression: a capped group alone on a runtime of many workers stopped for good after a few
/// periods. Every worker parked while it was throttled; the one that throttled it parked after
/// the keeper had gone to sleep without that deadline, and no core woke when the quota returned.
#[test]
fn a_capped_group_alone_on_many_workers_runs_every_period() {
    let _serial = serial();
    watchdog(60, || {
        let rt = rondo::Runtime::builder()
            .worker_threads(16)
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let capped = Measured::new(rt.group().cpu_limit(0.5).build().unwrap());
        let hs = capped.spawn(4, &stop);
        std::thread::sleep(Duration::from_millis(300));
        for second in 0..3 {
            let before = capped.ns();
            std::thread::sleep(Duration::from_millis(400));
            let used = (capped.ns() - before) / 0.4e9;
            assert!(
                used > 0.25,
                "in stretch {second} the capped group used {used:.3} cores (cap 0.5)"
            );
        }
        run_for(&rt, Duration::ZERO, &stop, hs);
    });
}

/// Spins `poll` per poll, yielding in between, logging `id` for each poll, until `stop`.
async fn logged(id: u8, poll: Duration, log: Arc<Mutex<Vec<u8>>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        spin(poll);
        log.lock().unwrap().push(id);
        rondo::yield_now().await;
    }
}

/// The lengths of the runs of consecutive polls of `id` in `log`, sorted.
fn runs_of(log: &[u8], id: u8) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut run = 0;
    for &x in log {
        if x == id {
            run += 1;
        } else if run > 0 {
            runs.push(run);
            run = 0;
        }
    }
    if run > 0 {
        runs.push(run);
    }
    runs.sort_unstable();
    runs
}

#[test]
fn a_small_share_runs_in_shorter_slices_than_a_large_one() {
    // One worker and a quantum of 80 polls: two siblings of weights 1 and 15, one task each. A
    // worker serving a tree group ends its quantum after the group's slice, the quantum scaled
    // by its share of the workers (at least a sixteenth of it): the light sibling runs about 5
    // polls at a time, the heavy one about 75. Without slices, each would run whole quanta, the
    // light one 80 polls at a time. (What is counted is polls in a row, not time.)
    let _serial = serial();
    watchdog(60, || {
        let poll = Duration::from_micros(50);
        let quantum = Duration::from_millis(4);
        let rt = rondo::Runtime::builder()
            .worker_threads(1)
            .quantum(quantum)
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let tenant = rt.group().name("tenant").build().unwrap();
        let light = tenant.child().name("light").weight(1).build().unwrap();
        let heavy = tenant.child().name("heavy").weight(15).build().unwrap();
        let hs = vec![
            light.spawn(logged(1, poll, log.clone(), stop.clone())),
            heavy.spawn(logged(2, poll, log.clone(), stop.clone())),
        ];
        run_for(&rt, Duration::from_millis(500), &stop, hs);
        let log = log.lock().unwrap();
        let (light_runs, heavy_runs) = (runs_of(&log, 1), runs_of(&log, 2));
        assert!(
            light_runs.len() >= 5 && heavy_runs.len() >= 5,
            "too few runs to compare: light {light_runs:?}, heavy {heavy_runs:?}"
        );
        let median = |r: &[usize]| r[r.len() / 2];
        let whole_quantum = (quantum.as_nanos() / poll.as_nanos()) as usize;
        assert!(
            median(&light_runs) <= whole_quantum / 4,
            "the light sibling ran {} polls in a row (median), a whole quantum is {whole_quantum}: \
             {light_runs:?}",
            median(&light_runs)
        );
        assert!(
            median(&heavy_runs) >= 3 * median(&light_runs),
            "the heavy sibling's slices ({heavy_runs:?}) are not longer than the light one's \
             ({light_runs:?})"
        );
    });
}
