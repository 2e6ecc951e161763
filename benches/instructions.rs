//! Fixed workloads of rondo alone, for instruction counts under callgrind (which count the same
//! on a busy machine as on a quiet one), 20 repetitions each, 1 worker unless
//! `RONDO_BENCH_WORKERS` says otherwise:
//!
//! ```text
//! cargo bench --no-run --bench instructions
//! RONDO_ICOUNT=yield valgrind --tool=callgrind target/release/deps/instructions-<hash> --bench
//! ```
//!
//! `RONDO_ICOUNT` is one of remote, local, yield, chain, pingpong (the shapes of `compare`'s
//! workloads), or all.
//!
//! Built with the `tracing` feature, `RONDO_ICOUNT_SUBSCRIBER=enabled` installs a subscriber that
//! enables every span and event and does nothing with them, so the counts include building each
//! record (the cost a real subscriber adds on top is its own); without it no subscriber is
//! installed, and every callsite is disabled.

use std::time::Instant;
fn chain(n: u32, tx: futures::channel::oneshot::Sender<()>) {
    if n == 0 {
        let _ = tx.send(());
        return;
    }
    drop(rondo::spawn(async move { chain(n - 1, tx) }));
}
fn main() {
    // `cargo bench` passes `--bench`; the workload and worker count come from the environment.
    let which = std::env::var("RONDO_ICOUNT").unwrap_or_else(|_| "all".to_string());
    let workers: usize = std::env::var("RONDO_BENCH_WORKERS")
        .ok()
        .map(|s| s.parse().expect("RONDO_BENCH_WORKERS must be a number"))
        .unwrap_or(1);
    let all = ["remote", "local", "yield", "chain", "pingpong"];
    let selected: Vec<&str> =
        if which == "all" {
            all.to_vec()
        } else {
            vec![all.into_iter().find(|w| *w == which).unwrap_or_else(|| {
                panic!("RONDO_ICOUNT must be one of {all:?} or all (got {which})")
            })]
        };
    if std::env::var("RONDO_ICOUNT_SUBSCRIBER").is_ok_and(|s| s == "enabled") {
        install_enabled_subscriber();
    }
    for which in selected {
        run(which, workers);
    }
}

#[cfg(feature = "tracing")]
fn install_enabled_subscriber() {
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, subscriber::Interest};

    /// Enables everything, keeps nothing.
    struct Enabled;

    impl tracing::Subscriber for Enabled {
        fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
            Interest::always()
        }
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    tracing::subscriber::set_global_default(Enabled).expect("the first global subscriber");
}

#[cfg(not(feature = "tracing"))]
fn install_enabled_subscriber() {
    panic!("RONDO_ICOUNT_SUBSCRIBER needs the `tracing` feature");
}

fn run(which: &str, workers: usize) {
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap();
    let t = Instant::now();
    for _ in 0..20 {
        match which {
            "remote" => rt.block_on(async {
                let hs: Vec<_> = (0..10_000).map(|_| rt.spawn(async {})).collect();
                for h in hs {
                    h.await.unwrap();
                }
            }),
            "local" => rt
                .block_on(rt.spawn(async {
                    let hs: Vec<_> = (0..10_000).map(|_| rondo::spawn(async {})).collect();
                    for h in hs {
                        h.await.unwrap();
                    }
                }))
                .unwrap(),
            "yield" => rt.block_on(async {
                let hs: Vec<_> = (0..200)
                    .map(|_| {
                        rt.spawn(async {
                            for _ in 0..1000 {
                                rondo::yield_now().await
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            }),
            "chain" => rt.block_on(async {
                let (tx, rx) = futures::channel::oneshot::channel();
                rt.spawn(async move { chain(1000, tx) });
                rx.await.unwrap();
            }),
            "pingpong" => rt.block_on(async {
                use futures::{SinkExt, StreamExt};
                let hs: Vec<_> = (0..100)
                    .map(|_| {
                        let (mut atx, mut arx) = futures::channel::mpsc::channel::<u32>(1);
                        let (mut btx, mut brx) = futures::channel::mpsc::channel::<u32>(1);
                        rt.spawn(async move {
                            while let Some(v) = arx.next().await {
                                if btx.send(v).await.is_err() {
                                    break;
                                }
                            }
                        });
                        rt.spawn(async move {
                            for i in 0..100 {
                                atx.send(i).await.unwrap();
                                brx.next().await.unwrap();
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            }),
            _ => unreachable!(),
        }
    }
    eprintln!("{which}: {:?}", t.elapsed());
}
