//! A group's schedule delay (`GroupMetrics::schedule_delay`): its waits for a worker, as a
//! histogram, in the metrics, their `Display` and the Prometheus text.

mod common;

use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;

use common::{spin, watchdog};

/// Wakes a task of `group` from outside the runtime `wakes` times, every 3 ms, and waits until it
/// has taken every wake.
fn woken_from_outside(rt: &rondo::Runtime, group: &rondo::Group, wakes: usize) {
    let (tx, mut rx) = mpsc::unbounded::<()>();
    let h = group.spawn(async move {
        let mut n = 0;
        while rx.next().await.is_some() {
            n += 1;
        }
        n
    });
    let sender = std::thread::spawn(move || {
        for _ in 0..wakes {
            std::thread::sleep(Duration::from_millis(3));
            tx.unbounded_send(()).unwrap();
        }
    });
    sender.join().unwrap();
    assert_eq!(rt.block_on(h).unwrap(), wakes);
}

/// One worker; a monitor that leaves long polls alone (they are the test's heavy sibling).
fn one_worker() -> rondo::Runtime {
    rondo::Runtime::builder()
        .worker_threads(1)
        .stall_threshold(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
fn a_group_behind_a_heavy_sibling_waits_longer_than_one_alone() {
    watchdog(60, || {
        let rt = one_worker();
        let alone = rt.group().name("alone").build().unwrap();
        woken_from_outside(&rt, &alone, 60);
        let alone = alone.metrics().schedule_delay;

        let light = rt.group().name("light").build().unwrap();
        let heavy = rt.group().name("heavy").build().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        // Polls of 20 ms each: a wake of the light group waits for the one under way to end.
        let hog = heavy.spawn(async move {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                spin(Duration::from_millis(20));
                rondo::yield_now().await;
            }
        });
        woken_from_outside(&rt, &light, 60);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        rt.block_on(hog).unwrap();
        let behind = light.metrics().schedule_delay;

        assert!(alone.count() > 0, "{alone:?}");
        assert!(behind.count() > 0, "{behind:?}");
        let (p_alone, p_behind) = (alone.p99().unwrap(), behind.p99().unwrap());
        // A wake lands at a random point of a 20 ms poll: most wait milliseconds.
        assert!(p_behind >= Duration::from_millis(8), "{behind:?}");
        assert!(p_behind > p_alone, "alone {alone:?}, behind {behind:?}");
        // The histogram's sum is the group's recorded wait.
        assert!(behind.sum() >= Duration::from_millis(8));
        assert!(light.metrics().wait >= behind.sum());
    });
}

#[test]
fn the_histogram_shows_in_display_and_in_the_subtree_total() {
    watchdog(60, || {
        let rt = one_worker();
        let tenant = rt.group().name("tenant").build().unwrap();
        let conn = tenant.child().name("conn").build().unwrap();
        woken_from_outside(&rt, &conn, 10);
        // A tree waits as one: its root's entry is what the rotation holds, so its waits are
        // recorded on the root.
        let m = tenant.metrics();
        let p99 = m.schedule_delay_p99().expect("waits were recorded");
        assert_eq!(Some(p99), m.schedule_delay.p99());
        assert!(
            m.to_string().ends_with(&format!("p99 delay {p99:.1?}")),
            "{m}"
        );
        // The subtree's histogram adds up its groups'.
        let sub = tenant.subtree_metrics().schedule_delay;
        let child = conn.metrics().schedule_delay;
        assert_eq!(sub.count(), m.schedule_delay.count() + child.count());
        assert_eq!(sub.sum(), m.schedule_delay.sum() + child.sum());

        let idle = rt.group().name("never-run").build().unwrap();
        assert!(idle.metrics().to_string().ends_with("p99 delay -"));
    });
}

#[test]
fn the_prometheus_histogram_is_cumulative_and_adds_up() {
    watchdog(60, || {
        let rt = one_worker();
        let g = rt.group().name("exported").build().unwrap();
        woken_from_outside(&rt, &g, 20);
        let metrics = rt.metrics();
        let text = metrics.to_prometheus();
        let h = &metrics
            .groups
            .iter()
            .find(|m| m.id == g.id())
            .unwrap()
            .schedule_delay;
        let name = "rondo_group_schedule_delay_seconds";
        assert!(text.contains(&format!("# TYPE {name} histogram")), "{text}");
        let labels = format!("group=\"exported\",group_id=\"{}\"", g.id());
        let value = |line: &str| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
        let buckets: Vec<(String, f64)> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket{{{labels},le=\"")))
            .map(|l| {
                let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
                (le.to_string(), value(l))
            })
            .collect();
        assert_eq!(buckets.len(), rondo::group::DELAY_BUCKETS, "{text}");
        // Upper bounds rise, the last is +Inf; counts are cumulative.
        assert_eq!(buckets[0].0, "0.000001");
        assert_eq!(buckets.last().unwrap().0, "+Inf");
        for pair in buckets.windows(2) {
            assert!(pair[0].1 <= pair[1].1, "{buckets:?}");
            if pair[1].0 != "+Inf" {
                let (a, b): (f64, f64) = (pair[0].0.parse().unwrap(), pair[1].0.parse().unwrap());
                assert!((b / a - 2.0).abs() < 1e-9, "{buckets:?}");
            }
        }
        let line = |suffix: &str| {
            let start = format!("{name}_{suffix}{{{labels}}} ");
            text.lines()
                .find(|l| l.starts_with(&start))
                .map(value)
                .unwrap_or_else(|| panic!("no {start} in {text}"))
        };
        let count = line("count");
        assert_eq!(count, buckets.last().unwrap().1);
        assert_eq!(count as u64, h.count());
        assert!(count >= 1.0);
        assert!((line("sum") - h.sum().as_secs_f64()).abs() < 1e-6);
    });
}
