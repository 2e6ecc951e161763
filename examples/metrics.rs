//! Prints a runtime's metrics every second while a mixed workload runs, then the same snapshot in
//! the Prometheus text format.
//!
//! ```text
//! cargo run --release --example metrics
//! ```

use std::time::{Duration, Instant};

fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn main() {
    let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
    let batch = rt.group().name("batch").weight(1).build().unwrap();
    let interactive = rt.group().name("interactive").weight(4).build().unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    // A batch group that floods the workers with CPU-bound tasks...
    let flood = batch.spawn(async move {
        while Instant::now() < until {
            let hs: Vec<_> = (0..200)
                .map(|_| rondo::spawn(async { spin(Duration::from_micros(50)) }))
                .collect();
            for h in hs {
                h.await.unwrap();
            }
        }
    });
    // ...and an interactive group with short bursts of message passing.
    let chatty = interactive.spawn(async move {
        while Instant::now() < until {
            let (tx, rx) = futures::channel::oneshot::channel::<u32>();
            let h = rondo::spawn(async move { tx.send(1).unwrap() });
            rx.await.unwrap();
            h.await.unwrap();
            rondo::yield_now().await;
        }
    });
    for second in 1..=3 {
        std::thread::sleep(Duration::from_secs(1));
        println!("after {second} s:\n{}\n", rt.metrics());
    }
    rt.block_on(async {
        flood.await.unwrap();
        chatty.await.unwrap();
    });
    for g in [&batch, &interactive] {
        let m = g.metrics();
        println!(
            "group {:<12} weight {} busy {:>8.1?} polls {}",
            m.name, m.weight, m.busy, m.polls
        );
    }
    println!("\n{}", rt.metrics().to_prometheus());
}
