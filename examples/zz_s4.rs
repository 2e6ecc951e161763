use std::time::{Duration, Instant};
fn many_groups(rt: &rondo::Runtime, groups: usize, per_group: usize) -> (Duration, Duration) {
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
        let spawned = spawning.elapsed();
        for h in handles {
            h.await.expect("task failed");
        }
        if std::env::var("PH").is_ok() {
            eprintln!(
                "create {:.2} spawn {:.2} await {:.2}",
                (spawning - start).as_secs_f64() * 1e3,
                spawned.as_secs_f64() * 1e3,
                (start.elapsed() - (spawning - start) - spawned).as_secs_f64() * 1e3
            );
        }
        (start.elapsed(), spawned)
    })
}
fn cpu() -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let d = e.unwrap().path();
        let comm = std::fs::read_to_string(d.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let st = std::fs::read_to_string(d.join("schedstat")).unwrap_or_default();
        let ns: f64 = st
            .split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0.0);
        *m.entry(comm).or_insert(0.0) += ns;
    }
    m
}
fn main() {
    let w: usize = std::env::var("W")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let mode = std::env::var("MODE").unwrap_or_default();
    let rt = rondo::Runtime::builder().worker_threads(w).build().unwrap();
    let (mut m, mut o) = (vec![], vec![]);
    let c0 = cpu();
    for _ in 0..rounds {
        if mode != "one" {
            let (t, s) = many_groups(&rt, 10_000, 10);
            m.push((t.as_secs_f64() * 1e3, s.as_secs_f64() * 1e3));
        }
        if mode != "many" {
            let (t, s) = many_groups(&rt, 1, 100_000);
            o.push((t.as_secs_f64() * 1e3, s.as_secs_f64() * 1e3));
        }
    }
    let c1 = cpu();
    for (k, v) in &c1 {
        let d = v - c0.get(k).copied().unwrap_or(0.0);
        if d > 1e6 {
            eprintln!("  {k:20} {:.2} ms/round", d / 1e6 / rounds as f64);
        }
    }
    let med = |v: &mut Vec<(f64, f64)>| {
        if v.is_empty() {
            return (0.0, 0.0);
        }
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        v[v.len() / 2]
    };
    let (mm, ms) = med(&mut m);
    let (om, os) = med(&mut o);
    let mt = rt.metrics();
    let picks: u64 = mt.workers.iter().map(|w| w.picks).sum();
    let parks: u64 = mt.workers.iter().map(|w| w.parks).sum();
    let steals: u64 = mt.workers.iter().map(|w| w.steals).sum();
    let charge: u64 = mt.workers.iter().map(|w| w.charge_visits).sum();
    let empty: u64 = mt.workers.iter().map(|w| w.empty_picks).sum();
    println!(
        "many {mm:.1} ms (spawn {ms:.1})  one {om:.1} ms (spawn {os:.1})  ratio {:.2}  picks {picks} empty {empty} charge {charge} parks {parks} steals {steals}",
        mm / om.max(1e-9)
    );
}
