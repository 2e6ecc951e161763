//! Observing a runtime: task names and ids (`task::Builder`), the task hooks, runtime ids and
//! names, the list of a runtime's groups, `GroupMetrics`' one-line form and the per-group
//! Prometheus series. Multi-worker tests follow `RONDO_TEST_WORKERS` (see `common::rt`).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{builder, eventually, rt, watchdog};
use rondo::runtime::TaskMeta;
use rondo::task::Builder as TaskBuilder;

/// What the panic hook saw: the task's name and id, the group and the one-line report.
type Seen = Arc<Mutex<Vec<(Option<String>, Option<rondo::task::Id>, String, String)>>>;

fn recording_runtime(workers: usize) -> (rondo::Runtime, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let rt = builder(workers)
        .on_task_panic(move |p| {
            s.lock().unwrap().push((
                p.task_name().map(String::from),
                p.task_id(),
                p.group_name().to_string(),
                p.to_string(),
            ))
        })
        .build()
        .unwrap();
    (rt, seen)
}

#[test]
fn a_named_task_s_panic_shows_its_name_in_the_hook_and_in_its_join_error() {
    for workers in [1, 2] {
        let (rt, seen) = recording_runtime(workers);
        let g = rt.group().name("parsers").build().unwrap();
        let h = TaskBuilder::new()
            .name("parse-42")
            .group(&g)
            .spawn(async { panic!("bad byte") })
            .unwrap();
        let id = h.id();
        let err = rt.block_on(h).unwrap_err();
        assert!(err.is_panic());
        assert_eq!(err.task_name(), Some("parse-42"));
        assert_eq!(err.id(), id);
        assert_eq!(err.to_string(), "task 'parse-42' panicked: bad byte");
        assert_eq!(
            format!("{err:?}"),
            "JoinError::Panic(\"parse-42\", Some(\"bad byte\"))"
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let (name, task_id, group, line) = &seen[0];
        assert_eq!(name.as_deref(), Some("parse-42"));
        assert_eq!(*task_id, Some(id));
        assert_eq!(group, "parsers");
        assert_eq!(
            line,
            &format!("task 'parse-42' (id {id}) in group 'parsers' panicked: bad byte")
        );
    }
}

#[test]
fn an_unnamed_task_s_panic_reports_no_name_and_keeps_the_plain_message() {
    let (rt, seen) = recording_runtime(1);
    let h = rt.spawn(async { panic!("plain") });
    let id = h.id();
    let err = rt.block_on(h).unwrap_err();
    assert_eq!(err.task_name(), None);
    assert_eq!(err.to_string(), "task panicked: plain");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].0, None);
    assert_eq!(seen[0].1, Some(id));
    assert_eq!(
        seen[0].3,
        format!("task (id {id}) in group 'default' panicked: plain")
    );
}

#[test]
fn a_named_blocking_closure_carries_its_name_and_a_cancelled_task_its_id() {
    let (rt, seen) = recording_runtime(2);
    let h = TaskBuilder::new()
        .name("disk")
        .spawn_blocking_on(|| panic!("full"), rt.handle())
        .unwrap();
    let err = rt.block_on(h).unwrap_err();
    assert_eq!(err.to_string(), "task 'disk' panicked: full");
    assert_eq!(seen.lock().unwrap()[0].0.as_deref(), Some("disk"));
    let h = TaskBuilder::new()
        .name("sleeper")
        .spawn_on(std::future::pending::<()>(), rt.handle())
        .unwrap();
    let id = h.id();
    h.abort();
    let err = rt.block_on(h).unwrap_err();
    assert!(err.is_cancelled());
    // The name goes with the task's future; a cancelled task's error names it by id.
    assert_eq!(err.task_name(), None);
    assert_eq!(err.to_string(), "task was cancelled");
    assert_eq!(err.id(), id);
}

#[test]
fn the_builder_spawns_into_the_given_group_and_refuses_a_group_of_another_runtime() {
    let rt = rt(2);
    let g = rt.group().name("jobs").build().unwrap();
    let in_group = TaskBuilder::new()
        .group(&g)
        .spawn(async { rondo::current_group().unwrap().name().to_string() })
        .unwrap();
    assert_eq!(rt.block_on(in_group).unwrap(), "jobs");
    let blocking = TaskBuilder::new()
        .group(&g)
        .spawn_blocking(|| rondo::current_group().unwrap().name().to_string())
        .unwrap();
    assert_eq!(rt.block_on(blocking).unwrap(), "jobs");
    // Without a group: the caller's group, as `rondo::spawn`.
    let inherited = rt.block_on(g.spawn(async {
        TaskBuilder::new()
            .name("child")
            .spawn(async { rondo::current_group().unwrap().name().to_string() })
            .unwrap()
            .await
            .unwrap()
    }));
    assert_eq!(inherited.unwrap(), "jobs");
    let other = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    let err = TaskBuilder::new()
        .group(&g)
        .spawn_on(async {}, other.handle())
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("another runtime"), "{err}");
    let err = TaskBuilder::new()
        .group(&g)
        .spawn_blocking_on(|| (), other.handle())
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn live_tasks_have_distinct_ids() {
    let rt = rt(2);
    let handles: Vec<_> = (0..1000)
        .map(|_| rt.spawn(std::future::pending::<()>()))
        .collect();
    let ids: HashSet<_> = handles.iter().map(|h| h.id()).collect();
    assert_eq!(ids.len(), handles.len());
    for h in handles {
        h.abort();
        assert!(rt.block_on(h).unwrap_err().is_cancelled());
    }
}

/// Counts per hook, of tasks named "counted" only, and the ids each hook saw.
#[derive(Default)]
struct Counts {
    spawned: AtomicUsize,
    terminated: AtomicUsize,
    before: AtomicUsize,
    after: AtomicUsize,
    /// Polls begun and not ended, per task id: never above 1.
    in_poll: Mutex<HashMap<rondo::task::Id, usize>>,
    overlapping: AtomicUsize,
}

fn counting(workers: usize) -> (rondo::Runtime, Arc<Counts>) {
    let c = Arc::new(Counts::default());
    let (c1, c2, c3, c4) = (c.clone(), c.clone(), c.clone(), c.clone());
    let counted = |t: &TaskMeta<'_>| t.name() == Some("counted");
    let rt = builder(workers)
        .on_task_spawn(move |t| {
            if counted(t) {
                c1.spawned.fetch_add(1, Ordering::SeqCst);
            }
        })
        .on_task_terminate(move |t| {
            if counted(t) {
                c2.terminated.fetch_add(1, Ordering::SeqCst);
            }
        })
        .on_before_task_poll(move |t| {
            if counted(t) {
                c3.before.fetch_add(1, Ordering::SeqCst);
                let mut m = c3.in_poll.lock().unwrap();
                let n = m.entry(t.id()).or_default();
                *n += 1;
                if *n > 1 {
                    c3.overlapping.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
        .on_after_task_poll(move |t| {
            if counted(t) {
                *c4.in_poll.lock().unwrap().get_mut(&t.id()).unwrap() -= 1;
                c4.after.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .unwrap();
    (rt, c)
}

#[test]
fn the_hooks_run_once_per_spawn_poll_and_end() {
    const TASKS: usize = 200;
    const YIELDS: usize = 3;
    for workers in [1, 2, 4, 8] {
        watchdog(60, move || {
            let (rt, c) = counting(workers);
            let g = rt.group().name("hooked").build().unwrap();
            rt.block_on(async {
                let handles: Vec<_> = (0..TASKS)
                    .map(|_| {
                        TaskBuilder::new()
                            .name("counted")
                            .group(&g)
                            .spawn(async {
                                for _ in 0..YIELDS {
                                    rondo::yield_now().await;
                                }
                            })
                            .unwrap()
                    })
                    .collect();
                for h in handles {
                    h.await.unwrap();
                }
            });
            assert_eq!(c.spawned.load(Ordering::SeqCst), TASKS);
            // The end hook runs before the handle resolves.
            assert_eq!(c.terminated.load(Ordering::SeqCst), TASKS);
            let polls = TASKS * (YIELDS + 1);
            // The after-poll hook of a task's last poll may still run after its handle resolved.
            assert!(
                eventually(10, || c.after.load(Ordering::SeqCst) == polls),
                "after: {} of {polls}",
                c.after.load(Ordering::SeqCst)
            );
            assert_eq!(c.before.load(Ordering::SeqCst), polls);
            // One worker: each poll's hooks pair up. With several, a task that woke itself may
            // start its next poll on another worker before the last poll's after-hook ran.
            if workers == 1 {
                assert_eq!(c.overlapping.load(Ordering::SeqCst), 0);
            }
            assert!(c.in_poll.lock().unwrap().values().all(|&n| n == 0));
        });
    }
}

#[test]
fn a_cancelled_task_ends_once_and_its_drop_is_no_poll() {
    let (rt, c) = counting(2);
    let h = {
        let _in = rt.enter();
        TaskBuilder::new()
            .name("counted")
            .spawn(std::future::pending::<()>())
            .unwrap()
    };
    assert!(eventually(10, || c.after.load(Ordering::SeqCst) == 1));
    h.abort();
    assert!(rt.block_on(h).unwrap_err().is_cancelled());
    assert_eq!(c.spawned.load(Ordering::SeqCst), 1);
    assert_eq!(c.terminated.load(Ordering::SeqCst), 1);
    assert_eq!(c.before.load(Ordering::SeqCst), 1);
    // A task refused at its spawn (group cancelled) is spawned and ended, never polled.
    let g = rt.group().build().unwrap();
    g.cancel();
    let h = TaskBuilder::new()
        .name("counted")
        .group(&g)
        .spawn(async {})
        .unwrap();
    assert!(rt.block_on(h).unwrap_err().is_cancelled());
    assert_eq!(c.spawned.load(Ordering::SeqCst), 2);
    assert_eq!(c.terminated.load(Ordering::SeqCst), 2);
    assert_eq!(c.before.load(Ordering::SeqCst), 1);
}

#[test]
fn hooks_are_off_unless_set_and_belong_to_their_runtime() {
    let debug = format!("{:?}", rondo::Runtime::builder());
    for hook in [
        "on_task_spawn: false",
        "on_task_terminate: false",
        "on_before_task_poll: false",
        "on_after_task_poll: false",
    ] {
        assert!(debug.contains(hook), "{debug}");
    }
    let (hooked, c) = counting(1);
    let plain = rt(2);
    let h = TaskBuilder::new()
        .name("counted")
        .spawn_on(async { rondo::yield_now().await }, plain.handle())
        .unwrap();
    plain.block_on(h).unwrap();
    assert_eq!(c.spawned.load(Ordering::SeqCst), 0);
    assert_eq!(c.before.load(Ordering::SeqCst), 0);
    assert_eq!(c.terminated.load(Ordering::SeqCst), 0);
    drop(hooked);
}

#[test]
fn a_panicking_hook_takes_down_neither_the_task_nor_the_worker() {
    let rt = builder(2)
        .on_task_spawn(|_| panic!("spawn hook"))
        .on_before_task_poll(|_| panic!("before hook"))
        .on_after_task_poll(|_| panic!("after hook"))
        .on_task_terminate(|_| panic!("terminate hook"))
        .build()
        .unwrap();
    let sum = rt.block_on(async {
        let hs: Vec<_> = (0..100u64)
            .map(|i| rondo::spawn(async move { i }))
            .collect();
        let mut sum = 0;
        for h in hs {
            sum += h.await.unwrap();
        }
        sum
    });
    assert_eq!(sum, 4950);
    assert_eq!(rt.block_on(rt.spawn(async { 7 })).unwrap(), 7);
}

#[test]
fn runtime_ids_are_unique_and_stable() {
    let runtimes: Vec<_> = (0..8)
        .map(|_| rondo::Runtime::builder().worker_threads(1).build().unwrap())
        .collect();
    let ids: HashSet<_> = runtimes.iter().map(|r| r.handle().id()).collect();
    assert_eq!(ids.len(), runtimes.len());
    for r in &runtimes {
        let id = r.handle().id();
        assert_eq!(r.handle().clone().id(), id);
        assert_eq!(r.block_on(async { rondo::Handle::current().id() }), id);
        let inside = r.block_on(r.spawn(async { rondo::Handle::current().id() }));
        assert_eq!(inside.unwrap(), id);
        assert_eq!(id.to_string(), id.as_u64().to_string());
    }
}

#[test]
fn the_runtime_name_names_the_worker_and_blocking_threads() {
    let names = Arc::new(Mutex::new(Vec::new()));
    let n = names.clone();
    let rt = builder(2)
        .name("svc")
        .on_thread_start(move || {
            n.lock()
                .unwrap()
                .push(std::thread::current().name().unwrap().to_string())
        })
        .build()
        .unwrap();
    assert_eq!(rt.handle().name(), Some("svc"));
    let workers = rt.handle().worker_count();
    let mut started = names.lock().unwrap().clone();
    started.sort();
    let want: Vec<_> = (0..workers).map(|i| format!("svc-worker-{i}")).collect();
    assert_eq!(started, want);
    let on_worker =
        rt.block_on(rt.spawn(async { std::thread::current().name().unwrap().to_string() }));
    assert!(on_worker.unwrap().starts_with("svc-worker-"));
    let on_pool =
        rt.block_on(rt.spawn_blocking(|| std::thread::current().name().unwrap().to_string()));
    assert_eq!(on_pool.unwrap(), "svc-worker-blocking");
    // An explicit thread name wins over the runtime's.
    let rt = rondo::Runtime::builder()
        .worker_threads(1)
        .name("svc")
        .thread_name("io")
        .build()
        .unwrap();
    let on_worker =
        rt.block_on(rt.spawn(async { std::thread::current().name().unwrap().to_string() }));
    assert_eq!(on_worker.unwrap(), "io-0");
    assert_eq!(rt.handle().name(), Some("svc"));
    for bad in ["", "a\0b"] {
        let err = rondo::Runtime::builder().name(bad).build().unwrap_err();
        assert!(
            err.to_string().starts_with("name must be non-empty"),
            "{err}"
        );
    }
    assert_eq!(rondo::Runtime::new().unwrap().handle().name(), None);
}

fn sorted_names(groups: &[rondo::Group]) -> Vec<String> {
    let mut names: Vec<_> = groups.iter().map(|g| g.name().to_string()).collect();
    names.sort();
    names
}

#[test]
fn the_runtime_lists_its_live_groups() {
    let rt = rt(2);
    assert_eq!(sorted_names(&rt.groups()), ["default"]);
    let a = rt.group().name("a").build().unwrap();
    let b = rt.group().name("b").build().unwrap();
    let b2 = rt.group().name("b").build().unwrap();
    let listed = rt.handle().groups();
    assert_eq!(sorted_names(&listed), ["a", "b", "b", "default"]);
    let ids: HashSet<_> = listed.iter().map(|g| g.id()).collect();
    assert_eq!(ids.len(), 4, "groups of equal names have their own ids");
    assert!(ids.contains(&b.id()) && ids.contains(&b2.id()));
    drop(listed);
    // A group whose handles are gone stays listed while a task of it lives.
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let held = a.spawn(async move {
        let _ = rx.await;
    });
    drop(a);
    assert_eq!(sorted_names(&rt.groups()), ["a", "b", "b", "default"]);
    tx.send(()).unwrap();
    rt.block_on(held).unwrap();
    assert!(eventually(10, || sorted_names(&rt.groups()) == ["b", "b", "default"]));
    drop((b, b2));
    assert_eq!(sorted_names(&rt.groups()), ["default"]);
    // A listed handle is a real handle: it spawns into its group.
    let g = rt.group().name("c").build().unwrap();
    let listed = rt.groups().into_iter().find(|l| l.id() == g.id()).unwrap();
    let name =
        rt.block_on(listed.spawn(async { rondo::current_group().unwrap().name().to_string() }));
    assert_eq!(name.unwrap(), "c");
}

#[test]
fn group_metrics_display_as_one_line() {
    let rt = rt(1);
    let g = rt.group().name("api").weight(3).build().unwrap();
    rt.block_on(g.spawn(async { rondo::yield_now().await }))
        .unwrap();
    let _ = rt.block_on(g.spawn(async { panic!("x") }));
    rt.block_on(g.wait_idle());
    let m = g.metrics();
    let line = m.to_string();
    assert_eq!(line.lines().count(), 1, "{line}");
    let want = format!(
        "group 'api' (id {}, weight 3): tasks 2 spawned, 1 completed, 0 cancelled, 1 panicked, \
         0 unfinished; polls {}, busy {:.1?}, runnable 0, wait {:.1?}, p99 delay {}",
        g.id(),
        m.polls,
        m.busy,
        m.wait,
        m.schedule_delay_p99()
            .map_or("-".to_string(), |p| format!("{p:.1?}"))
    );
    assert_eq!(line, want);
}

/// One sample: metric name, labels (name, unescaped value), value.
type Sample = (String, Vec<(String, String)>, f64);

/// Checks the text against the exposition format (version 0.0.4) and returns its samples as
/// (metric name, labels, value).
fn parse_exposition(text: &str) -> Vec<Sample> {
    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    let mut samples = Vec::new();
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut helped = HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').expect(line);
            assert!(is_name(name), "{line}");
            assert!(helped.insert(name.to_string()), "HELP twice: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(
                typed.insert(name.to_string(), kind.to_string()).is_none(),
                "TYPE twice: {line}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{line}");
            }
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect(line);
                let mut labels = Vec::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                    assert!(is_name(&key), "label name: {line}");
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut v = String::new();
                    loop {
                        match chars.next().expect(line) {
                            '\\' => match chars.next().expect(line) {
                                'n' => v.push('\n'),
                                c @ ('\\' | '"') => v.push(c),
                                c => panic!("bad escape \\{c}: {line}"),
                            },
                            '"' => break,
                            '\n' => panic!("raw line feed: {line}"),
                            c => v.push(c),
                        }
                    }
                    labels.push((key, v));
                    match chars.next() {
                        Some(',') | None => {}
                        Some(c) => panic!("unexpected {c}: {line}"),
                    }
                }
                (name.to_string(), labels)
            }
        };
        assert!(is_name(&name), "{line}");
        // A histogram's samples are its name with `_bucket`, `_sum` or `_count`.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|base| typed.get(*base).is_some_and(|k| k == "histogram"));
        assert!(
            typed.contains_key(&name) || family.is_some(),
            "sample before its TYPE: {line}"
        );
        samples.push((name, labels, value));
    }
    samples
}

#[test]
fn prometheus_text_has_per_group_series_with_the_groups_values() {
    let rt = rt(2);
    let a = rt
        .group()
        .name("tenant \"a\"\\\nx")
        .weight(5)
        .build()
        .unwrap();
    let b1 = rt.group().name("same").build().unwrap();
    let b2 = rt.group().name("same").build().unwrap();
    for _ in 0..3 {
        rt.block_on(a.spawn(async { rondo::yield_now().await }))
            .unwrap();
    }
    let _ = rt.block_on(b1.spawn(async { panic!("x") }));
    let (started_tx, started_rx) = futures::channel::oneshot::channel::<()>();
    let parked = b2.spawn(async move {
        let _ = started_tx.send(());
        std::future::pending::<()>().await
    });
    rt.block_on(started_rx).unwrap();
    rt.block_on(a.wait_idle());
    rt.block_on(b1.wait_idle());
    let m = rt.metrics();
    assert_eq!(m.groups.len(), 4);
    let text = m.to_prometheus();
    let samples = parse_exposition(&text);
    let value = |metric: &str, g: &rondo::Group| {
        let found: Vec<_> = samples
            .iter()
            .filter(|(n, l, _)| {
                n == metric
                    && l.contains(&("group".to_string(), g.name().to_string()))
                    && l.contains(&("group_id".to_string(), g.id().to_string()))
            })
            .collect();
        assert_eq!(found.len(), 1, "{metric} of {}: {text}", g.name());
        found[0].2
    };
    let snap = |g: &rondo::Group| m.groups.iter().find(|s| s.id == g.id()).unwrap().clone();
    assert_eq!(value("rondo_group_weight", &a), 5.0);
    assert_eq!(value("rondo_group_spawned_total", &a), 3.0);
    assert_eq!(value("rondo_group_completed_total", &a), 3.0);
    assert_eq!(value("rondo_group_polls_total", &a), snap(&a).polls as f64);
    assert_eq!(
        value("rondo_group_busy_seconds_total", &a),
        format!("{:.9}", snap(&a).busy.as_secs_f64())
            .parse::<f64>()
            .unwrap()
    );
    assert_eq!(
        value("rondo_group_wait_seconds_total", &a),
        format!("{:.9}", snap(&a).wait.as_secs_f64())
            .parse::<f64>()
            .unwrap()
    );
    assert_eq!(value("rondo_group_panicked_total", &b1), 1.0);
    assert_eq!(value("rondo_group_unfinished_tasks", &b1), 0.0);
    assert_eq!(value("rondo_group_unfinished_tasks", &b2), 1.0);
    assert_eq!(value("rondo_group_cancelled_total", &b2), 0.0);
    assert_eq!(value("rondo_group_runnable_tasks", &b2), 0.0);
    // Every per-group metric has one sample per group.
    for metric in [
        "rondo_group_weight",
        "rondo_group_spawned_total",
        "rondo_group_completed_total",
        "rondo_group_cancelled_total",
        "rondo_group_panicked_total",
        "rondo_group_unfinished_tasks",
        "rondo_group_polls_total",
        "rondo_group_busy_seconds_total",
        "rondo_group_runnable_tasks",
        "rondo_group_wait_seconds_total",
    ] {
        let n = samples.iter().filter(|(n, _, _)| n == metric).count();
        assert_eq!(n, 4, "{metric}");
    }
    parked.abort();
    let _ = rt.block_on(parked);
}
