//! The `tracing` feature: what rondo records, collected by a subscriber of the test's own.

// A blocking task returns the handle of the task it spawned before it blocked, to await it after.
#![allow(clippy::async_yields_async)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One of rondo's spans as the collector saw it.
#[derive(Clone, Debug, Default)]
struct SpanSeen {
    name: &'static str,
    /// Its fields as `name=value ` text, recorded ones appended.
    fields: String,
    /// Its place in the record of spans (a closed span's id is reused by the registry), and
    /// the name and place of its parent, if it has one.
    id: usize,
    parent: Option<(&'static str, usize)>,
    enters: u64,
    exits: u64,
    closed: bool,
}

/// Every event's message and fields, as text, and every span rondo opened.
#[derive(Clone, Default)]
struct Collect {
    events: Arc<Mutex<Vec<String>>>,
    spans: Arc<Mutex<Spans>>,
}

/// Every span seen, in order, and where each open one is by its id.
#[derive(Default)]
struct Spans {
    open: HashMap<u64, usize>,
    seen: Vec<SpanSeen>,
}

impl Spans {
    fn get_mut(&mut self, id: &Id) -> Option<&mut SpanSeen> {
        let i = *self.open.get(&id.into_u64())?;
        Some(&mut self.seen[i])
    }
}

impl Collect {
    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// The spans named `name` whose fields contain every one of `words`.
    fn spans(&self, name: &str, words: &[&str]) -> Vec<SpanSeen> {
        self.spans
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| s.name == name && words.iter().all(|w| s.fields.contains(w)))
            .cloned()
            .collect()
    }
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collect {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "rondo" {
            let mut f = Fields(String::new());
            event.record(&mut f);
            self.events.lock().unwrap().push(f.0);
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().target() != "rondo" {
            return;
        }
        let mut f = Fields(String::new());
        attrs.record(&mut f);
        let mut spans = self.spans.lock().unwrap();
        let parent = ctx.span(id).and_then(|s| {
            s.parent()
                .and_then(|p| Some((p.name(), *spans.open.get(&p.id().into_u64())?)))
        });
        let seen = SpanSeen {
            id: spans.seen.len(),
            name: attrs.metadata().name(),
            fields: f.0,
            parent,
            ..SpanSeen::default()
        };
        spans.open.insert(id.into_u64(), seen.id);
        spans.seen.push(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(s) = self.spans.lock().unwrap().get_mut(id) {
            let mut f = Fields(String::new());
            values.record(&mut f);
            s.fields.push_str(&f.0);
        }
    }

    fn on_enter(&self, id: &Id, _: Context<'_, S>) {
        if let Some(s) = self.spans.lock().unwrap().get_mut(id) {
            s.enters += 1;
        }
    }

    fn on_exit(&self, id: &Id, _: Context<'_, S>) {
        if let Some(s) = self.spans.lock().unwrap().get_mut(id) {
            s.exits += 1;
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some(s) = spans.get_mut(&id) {
            s.closed = true;
        }
        spans.open.remove(&id.into_u64());
    }
}

/// The process-wide collector: workers record on their own threads, so a thread's default
/// subscriber would miss them. Tests tell their records apart by group names and runtime ids.
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
    let events = collect.events();
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
    let events = collect.events();
    assert!(
        events
            .iter()
            .any(|e| e.contains("throttled by its cpu cap") && e.contains("capped")),
        "{events:#?}"
    );
}

#[test]
fn a_task_span_is_entered_for_each_poll_and_closed_when_the_task_ends() {
    let collect = collector();
    let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    let g = rt.group().name("spanned").build().unwrap();
    let h = rondo::task::Builder::new()
        .name("three-polls")
        .group(&g)
        .spawn(async {
            rondo::yield_now().await;
            rondo::yield_now().await;
        })
        .unwrap();
    let id = h.id();
    rt.block_on(h).unwrap();
    rt.block_on(g.wait_idle());
    let spans = collect.spans(
        "runtime.spawn",
        &[
            "task.name=\"three-polls\"",
            "group=\"spanned\"",
            &format!("group.id={}", g.id()),
            &format!("task.id={}", id.as_u64()),
        ],
    );
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let span = &spans[0];
    // Three polls: the span is entered around each.
    assert_eq!(span.enters, 3, "{span:?}");
    assert_eq!(span.enters, span.exits, "{span:?}");
    // No parent: spawned inside `block_on`, not nested under what was entered there.
    assert_eq!(span.parent, None, "{span:?}");
    assert!(span.closed, "the task ended: {span:?}");
}

#[test]
fn an_unfinished_task_span_stays_open() {
    let collect = collector();
    let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    let g = rt.group().name("pending-task").build().unwrap();
    let h = g.spawn(std::future::pending::<()>());
    let open = || collect.spans("runtime.spawn", &["group=\"pending-task\""]);
    assert!(
        wait_until(|| open().first().is_some_and(|s| s.enters >= 1)),
        "{:#?}",
        open()
    );
    assert!(!open()[0].closed, "{:#?}", open());
    h.abort();
    rt.block_on(g.wait_idle());
    assert!(wait_until(|| open()[0].closed), "aborted: {:#?}", open());
}

#[test]
fn the_runtime_and_its_worker_threads_have_spans() {
    let collect = collector();
    let rt = rondo::Runtime::builder()
        .worker_threads(2)
        .name("spanned-rt")
        .build()
        .unwrap();
    let id = rt.handle().id().as_u64();
    let rid = format!("runtime.id={id} ");
    rt.block_on(rt.spawn(async {})).unwrap();
    let runtime = || collect.spans("runtime", &[&rid]);
    assert_eq!(runtime().len(), 1, "{:#?}", runtime());
    assert!(runtime()[0].fields.contains("runtime.name=\"spanned-rt\""));
    assert!(runtime()[0].fields.contains("workers=2"));
    assert!(!runtime()[0].closed);
    let workers = || collect.spans("runtime.worker", &[&rid]);
    assert!(wait_until(|| workers().len() >= 2), "{:#?}", workers());
    drop(rt);
    assert!(runtime()[0].closed, "{:#?}", runtime());
    let runtime_span = runtime()[0].id;
    let shutdown: Vec<_> = collect
        .spans("runtime.shutdown", &[])
        .into_iter()
        .filter(|s| s.parent == Some(("runtime", runtime_span)))
        .collect();
    assert_eq!(shutdown.len(), 1, "{shutdown:#?}");
    assert!(
        shutdown[0].enters == 1 && shutdown[0].closed,
        "{shutdown:#?}"
    );
    // The worker threads were joined by the shutdown: their spans ended with them.
    assert!(workers().iter().all(|w| w.closed), "{:#?}", workers());
}

#[test]
fn a_stall_rescue_runs_in_its_span() {
    let collect = collector();
    let rt = rondo::Runtime::builder()
        .worker_threads(1)
        .stall_threshold(Duration::from_millis(10))
        .build()
        .unwrap();
    let rid = format!("runtime.id={} ", rt.handle().id().as_u64());
    rt.block_on(async {
        let blocker = rondo::spawn(async {
            // Queued behind the stuck poll: the work the rescue is for.
            let quick = rondo::spawn(async {});
            std::thread::sleep(Duration::from_millis(200));
            quick
        });
        blocker.await.unwrap().await.unwrap();
    });
    assert!(rt.metrics().rescues >= 1);
    let rescues = collect.spans("stall.rescue", &[&rid, "worker=0"]);
    assert!(!rescues.is_empty(), "{rescues:#?}");
    assert!(
        rescues.iter().all(|s| s.enters == 1 && s.closed),
        "{rescues:#?}"
    );
}

/// Polls `f` every millisecond for up to 5 s.
fn wait_until(f: impl Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    f()
}
