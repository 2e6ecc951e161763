//! Fairness invariants with generous bounds (the figures are measured in `benches/fairness.rs`).
//!
//! These tests measure CPU shares by spinning, so they run one at a time (`SERIAL`) in their own
//! test binary: sharing two cores with other tests' runtimes would make the OS, not rondo, decide
//! the shares.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{rt, spin, watchdog};

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn a_small_group_behind_a_flood_finishes_long_before_the_flood() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let rt = rt(2);
        let flood = rt.group().name("flood").build().unwrap();
        let small = rt.group().name("small").build().unwrap();
        let flood_done = Arc::new(AtomicUsize::new(0));
        let flood_handles: Vec<_> = (0..4000)
            .map(|_| {
                let d = flood_done.clone();
                flood.spawn(async move {
                    spin(Duration::from_micros(50));
                    d.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(5));
        let small_handles: Vec<_> = (0..50)
            .map(|_| small.spawn(async { spin(Duration::from_micros(50)) }))
            .collect();
        rt.block_on(async {
            for h in small_handles {
                h.await.unwrap();
            }
        });
        let at_small_done = flood_done.load(Ordering::SeqCst);
        rt.block_on(async {
            for h in flood_handles {
                h.await.unwrap();
            }
        });
        // FIFO would finish the small group after all 4000; a fair split within a few quanta.
        assert!(
            at_small_done < 3000,
            "the small group waited for {at_small_done} of 4000 flood tasks"
        );
    });
}

/// Spins in `chunk` slices, yielding in between, adding the time spun to `total`, until `stop`.
async fn backlogged(chunk: Duration, total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        spin(chunk);
        total.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        rondo::yield_now().await;
    }
}

#[test]
fn weights_and_task_counts_shape_cpu_shares() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(120, || {
        let rt = rt(2);
        let stop = Arc::new(AtomicBool::new(false));
        // Weight 1 with long polls and many tasks vs weight 4 with short polls and one task per
        // worker: time is charged, not polls or tasks.
        let light = rt.group().weight(1).build().unwrap();
        let heavy = rt.group().weight(4).build().unwrap();
        let (lt, ht) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut hs = Vec::new();
        for _ in 0..100 {
            hs.push(light.spawn(backlogged(
                Duration::from_micros(200),
                lt.clone(),
                stop.clone(),
            )));
        }
        for _ in 0..2 {
            hs.push(heavy.spawn(backlogged(
                Duration::from_micros(20),
                ht.clone(),
                stop.clone(),
            )));
        }
        std::thread::sleep(Duration::from_millis(400));
        stop.store(true, Ordering::SeqCst);
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
        });
        let (l, h) = (
            lt.load(Ordering::SeqCst) as f64,
            ht.load(Ordering::SeqCst) as f64,
        );
        // Ideal is 4×; FIFO by count would give the light group ~50× the heavy one's polls.
        assert!(h > 1.5 * l, "heavy group got {h} ns vs light {l} ns");
    });
}
