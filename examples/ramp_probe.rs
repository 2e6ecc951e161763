use std::time::{Duration, Instant};
fn spin(d: Duration) {
    let e = Instant::now() + d;
    while Instant::now() < e {}
}
fn main() {
    for k in 0..6 {
        let rt = rondo::Runtime::builder()
            .worker_threads(if k % 2 == 0 { 2 } else { 64 })
            .max_worker_threads(64)
            .build()
            .unwrap();
        let h = rt.handle().clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let start = Instant::now();
        let probe = std::thread::spawn(move || {
            let mut v = vec![];
            let mut last = 0;
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                let c = h.metrics().worker_cores;
                if c != last {
                    v.push((start.elapsed().as_micros(), c));
                    last = c;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            v
        });
        let d = rt.block_on(async {
            let t = Instant::now();
            let tasks: Vec<_> = (0..2000)
                .map(|_| {
                    rondo::spawn(async {
                        std::thread::sleep(Duration::from_millis(1));
                        spin(Duration::from_micros(20));
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            t.elapsed()
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        println!("{:?} {:?}", d, probe.join().unwrap());
    }
}
