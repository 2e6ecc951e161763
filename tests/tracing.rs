//! The `tracing` feature: what rondo records, collected by a subscriber of the test's own.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every event's message and fields, as text.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl<S: Subscriber> Layer<S> for Collect {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "rondo" {
            let mut f = Fields(String::new());
            event.record(&mut f);
            self.0.lock().unwrap().push(f.0);
        }
    }
}

/// The process-wide collector: workers record on their own threads, so a thread's default
/// subscriber would miss them. Tests tell their events apart by group names.
fn collector() -> Collect {
    static COLLECT: std::sync::OnceLock<Collect> = std::sync::OnceLock::new();
    COLLECT
        .get_or_init(|| {
            let collect = Collect::default();
            tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(collect.clone()),
            )
            .unwrap();
            collect
        })
        .clone()
}

#[test]
fn runtime_group_and_task_lifecycles_are_recorded() {
    let collect = collector();
    {
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let tenant = rt.group().name("tenant-a").build().unwrap();
        let conn = tenant.child().name("conn-1").build().unwrap();
        rt.block_on(conn.spawn(async {})).unwrap();
        tenant.cancel();
        drop(rt);
    }
    let events = collect.0.lock().unwrap().clone();
    let has = |words: &[&str]| events.iter().any(|e| words.iter().all(|w| e.contains(w)));
    assert!(has(&["runtime started", "workers=1"]), "{events:#?}");
    assert!(has(&["group created", "tenant-a"]), "{events:#?}");
    assert!(has(&["group created", "conn-1", "parent="]), "{events:#?}");
    assert!(has(&["task spawned", "conn-1"]), "{events:#?}");
    assert!(has(&["group cancelled", "tenant-a"]), "{events:#?}");
    assert!(has(&["group cancelled", "conn-1"]), "{events:#?}");
    assert!(has(&["runtime shutting down"]), "{events:#?}");
}

#[test]
fn a_throttled_group_is_recorded() {
    let collect = collector();
    {
        let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
        let capped = rt.group().name("capped").cpu_limit(0.05).build().unwrap();
        // 30 ms of work against a 5 ms quota per period: throttled at least once.
        rt.block_on(capped.spawn(async {
            for _ in 0..30 {
                let end = std::time::Instant::now() + std::time::Duration::from_millis(1);
                while std::time::Instant::now() < end {}
                rondo::yield_now().await;
            }
        }))
        .unwrap();
    }
    let events = collect.0.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e.contains("throttled by its cpu cap") && e.contains("capped")),
        "{events:#?}"
    );
}
