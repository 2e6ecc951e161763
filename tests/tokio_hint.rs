//! A task that panics because it ran tokio-bound code outside a tokio runtime: rondo's report of
//! the panic adds one line pointing to the remedy (the guide's "tokio-bound crates").
// tokio does not build under `--cfg loom`.
#![cfg(not(loom))]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What rondo adds after tokio's message.
const REMEDY: &str = "async_compat::Compat::new(async { .. })";

/// A future that panics with tokio's own message: tokio's timer, created and polled on rondo.
async fn tokio_sleep() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[test]
fn join_error_of_tokio_bound_code_names_the_remedy() {
    let rt = rondo::Runtime::new().unwrap();
    let err = rt.block_on(rt.spawn(tokio_sleep())).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("Tokio 1.x runtime"), "{text}");
    assert!(text.contains(REMEDY), "{text}");
    assert!(text.contains("tokio-bound crates"), "{text}");
}

#[test]
fn panic_hook_report_of_tokio_bound_code_names_the_remedy() {
    let seen = Arc::new(Mutex::new(String::new()));
    let s = seen.clone();
    let rt = rondo::Runtime::builder()
        .on_task_panic(move |p| *s.lock().unwrap() = p.to_string())
        .build()
        .unwrap();
    let _ = rt.block_on(rt.spawn(tokio_sleep()));
    let text = seen.lock().unwrap().clone();
    assert!(text.contains("Tokio 1.x runtime"), "{text}");
    assert!(text.contains(REMEDY), "{text}");
}

#[test]
fn other_panics_get_no_hint() {
    let rt = rondo::Runtime::new().unwrap();
    let err = rt
        .block_on(rt.spawn(async { panic!("a tokio-free failure") }))
        .unwrap_err();
    assert_eq!(err.to_string(), "task panicked: a tokio-free failure");
}

/// Run in a child process by `stderr_names_the_remedy_once` (ignored otherwise): two
/// tokio-bound panics, no panic hook.
#[test]
#[ignore = "run in a child process by stderr_names_the_remedy_once"]
fn child_two_tokio_bound_panics() {
    let rt = rondo::Runtime::new().unwrap();
    for _ in 0..2 {
        assert!(rt.block_on(rt.spawn(tokio_sleep())).is_err());
    }
}

#[test]
fn stderr_names_the_remedy_once() {
    let limit = Duration::from_secs(30);
    let out = common::child::run_child(
        "child_two_tokio_bound_panics",
        &[
            "--ignored",
            "--exact",
            "child_two_tokio_bound_panics",
            "--nocapture",
        ],
        limit,
    );
    assert!(
        out.status.is_some_and(|s| s.success()),
        "{}: {}",
        out.verdict(limit),
        out.stderr
    );
    // The standard library's panic hook prints tokio's message for each panic; rondo's note
    // follows the first.
    let stderr = &out.stderr;
    assert_eq!(stderr.matches("Tokio 1.x runtime").count(), 2, "{stderr}");
    assert_eq!(stderr.matches(REMEDY).count(), 1, "{stderr}");
}
