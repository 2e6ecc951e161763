//! `#[rondo::main]` and `#[rondo::test]` used as a user would: each test checks the runtime the
//! macro built from inside the body it runs. The compile-fail cases are in `macros_ui.rs`.

use std::error::Error;
use std::num::ParseIntError;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

// A renamed dependency, as the `crate` option is for.
extern crate rondo as renamed_rondo;

mod common;

/// The number of distinct worker threads that run `tasks` spawned tasks, each of which waits
/// until all have started, so that every worker must take part.
async fn workers_seen(tasks: usize) -> usize {
    let started = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let started = started.clone();
            rondo::spawn(async move {
                started.fetch_add(1, Ordering::SeqCst);
                while started.load(Ordering::SeqCst) < tasks {
                    std::hint::spin_loop();
                }
                std::thread::current().id()
            })
        })
        .collect();
    let mut ids = Vec::new();
    for h in handles {
        ids.push(h.await.unwrap());
    }
    ids.sort_by_key(|id| format!("{id:?}"));
    ids.dedup();
    ids.len()
}

#[rondo::test]
async fn the_body_runs_inside_a_rondo_runtime() {
    let handle = rondo::Handle::try_current().expect("no runtime around the test body");
    let expected = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(handle.worker_count(), expected);
    assert_eq!(rondo::spawn(async { 6 * 7 }).await.unwrap(), 42);
}

#[rondo::test(worker_threads = 3)]
async fn worker_threads_sets_the_number_of_workers() {
    assert_eq!(rondo::Handle::current().worker_count(), 3);
    assert_eq!(workers_seen(3).await, 3);
}

#[rondo::test(flavor = "current_thread")]
async fn current_thread_has_exactly_one_worker() {
    assert_eq!(rondo::Handle::current().worker_count(), 1);
    let main_thread = std::thread::current().id();
    let worker = rondo::spawn(async { std::thread::current().id() })
        .await
        .unwrap();
    // The body is blocked on by the test's own thread; tasks run on the one worker.
    assert_ne!(worker, main_thread);
}

#[rondo::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_takes_a_worker_count() {
    assert_eq!(rondo::Handle::current().worker_count(), 2);
}

#[rondo::test]
async fn a_test_may_return_a_result() -> Result<(), Box<dyn Error>> {
    let n: u32 = "21".parse()?;
    let doubled = rondo::spawn(async move { n * 2 }).await?;
    assert_eq!(doubled, 42);
    Ok(())
}

/// Fails on purpose; `an_err_from_a_test_fails_it` runs it in a child process.
#[rondo::test]
#[ignore = "fails on purpose, run by an_err_from_a_test_fails_it"]
async fn returns_an_err() -> Result<(), String> {
    let v = rondo::spawn(async { 1 }).await.map_err(|e| e.to_string())?;
    Err(format!("the body's own error after {v}"))
}

#[test]
fn an_err_from_a_test_fails_it() {
    // This test binary, asked to run only the ignored test above.
    let limit = std::time::Duration::from_secs(30);
    let out = common::child::run_child(
        "returns_an_err",
        &["--ignored", "--exact", "returns_an_err", "--test-threads=1"],
        limit,
    );
    let stdout = &out.stdout;
    assert!(
        out.status.is_some_and(|s| !s.success()),
        "the Err did not fail the test ({}):\n{stdout}",
        out.verdict(limit)
    );
    assert!(stdout.contains("the body's own error after 1"), "{stdout}");
    assert!(stdout.contains("1 failed"), "{stdout}");
}

#[rondo::test]
#[should_panic(expected = "the body's own panic")]
async fn a_panic_in_the_body_fails_the_test() {
    rondo::yield_now().await;
    panic!("the body's own panic");
}

// The upper bound is the runtime builder's to enforce; the macro passes its message on.
#[rondo::test(worker_threads = 2000)]
#[should_panic(
    expected = "#[rondo::test] could not start its runtime: worker_threads must be at most 1024 (got 2000)"
)]
async fn too_many_workers_panic_with_the_builder_s_message() {}

#[rondo::test(crate = "renamed_rondo")]
async fn the_crate_option_names_a_renamed_dependency() {
    assert!(renamed_rondo::Handle::try_current().is_some());
}

// `#[rondo::main]` works on any function name, so the tests can call what it generates and see
// the body's value come back, `?` and `return` included.

#[rondo::main(worker_threads = 2)]
async fn parse_on_rondo() -> Result<u32, ParseIntError> {
    assert_eq!(rondo::Handle::current().worker_count(), 2);
    let parsed = rondo::spawn(async { "41".parse::<u32>() }).await.unwrap()?;
    Ok(parsed + 1)
}

#[rondo::main]
async fn fail_to_parse_on_rondo() -> Result<u32, ParseIntError> {
    let parsed = rondo::spawn(async { "forty-one".parse::<u32>() })
        .await
        .unwrap()?;
    Ok(parsed + 1)
}

#[rondo::main(flavor = "current_thread")]
async fn return_early() -> &'static str {
    if rondo::Handle::current().worker_count() == 1 {
        return "early";
    }
    "late"
}

#[test]
fn main_returns_the_body_s_value() {
    assert_eq!(parse_on_rondo(), Ok(42));
    assert!(fail_to_parse_on_rondo().is_err());
    assert_eq!(return_early(), "early");
}

#[test]
fn each_call_builds_and_shuts_down_its_own_runtime() {
    assert!(rondo::Handle::try_current().is_none());
    for _ in 0..3 {
        assert_eq!(parse_on_rondo(), Ok(42));
        assert!(rondo::Handle::try_current().is_none());
    }
}

// An inner attribute at the top of the body applies to the body. The macros once put it on the
// generated function, where it is not allowed: the test failed to compile.
#[rondo::test(worker_threads = 1)]
async fn an_inner_attribute_in_the_body_applies_to_the_body() {
    #![allow(unused_variables)]
    let unused = 1;
}

// The body may use `Self` in an associated function. The macros once moved it into a nested
// function, which cannot: this failed to compile.
struct App;

impl App {
    fn helper() -> u32 {
        3
    }

    #[rondo::main(worker_threads = 1)]
    async fn run() -> u32 {
        Self::helper()
    }
}

#[test]
fn main_on_an_associated_function_may_use_self() {
    assert_eq!(App::run(), 3);
}
