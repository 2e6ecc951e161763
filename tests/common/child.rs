//! Tests whose body runs in a child process: the test binary re-executed with one test selected,
//! so that a case that aborts the process or hangs fails that one test, not the whole suite.
//!
//! [`child_test!`] declares such a test. In the parent the test re-executes this binary with
//! [`CHILD_VAR`] naming the test and an exact name filter, waits at most its time limit, kills a
//! child that is still running, and fails with the child's output unless the child passed exactly
//! that one test. In the child the same test runs its body as an ordinary test.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Set in a child process to the name of the test it runs.
pub const CHILD_VAR: &str = "RONDO_CHILD_TEST";

/// The time limit of a [`child_test!`] that names none.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(30);

/// What a child process did.
pub struct ChildRun {
    /// `None` if it was still running at the limit and was killed.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl ChildRun {
    /// How the child ended, in words: "hung: ...", "aborted: ...", "failed: ..." or "exited: ...".
    pub fn verdict(&self, limit: Duration) -> String {
        match self.status {
            None => format!("hung: killed after {limit:?}"),
            Some(s) if s.success() => format!("exited: {s}"),
            Some(s) => {
                use std::os::unix::process::ExitStatusExt;
                match s.signal() {
                    Some(sig) => format!("aborted: killed by signal {sig}"),
                    None => format!("failed: {s}"),
                }
            }
        }
    }
}

/// Re-executes this test binary with `args` (libtest's arguments) and [`CHILD_VAR`] set to
/// `name`, and collects its output. A child still running after `limit` is killed. Both pipes are
/// read while the child runs, so a child that writes a lot never blocks on a full pipe.
pub fn run_child(name: &str, args: &[&str], limit: Duration) -> ChildRun {
    assert!(
        std::env::var_os(CHILD_VAR).is_none(),
        "a child process starts no child of its own"
    );
    let exe = std::env::current_exe().expect("cannot find the test binary to re-execute");
    let mut child = Command::new(exe)
        .args(args)
        .env(CHILD_VAR, name)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the child process");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    ChildRun {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Runs `body` when this process is the child for the test `name`; otherwise runs that test in a
/// child process and fails unless the child passed exactly that one test within `limit`.
pub fn in_child(name: &str, limit: Duration, body: impl FnOnce()) {
    if let Some(running) = std::env::var_os(CHILD_VAR) {
        assert_eq!(
            running.to_str(),
            Some(name),
            "the child runs the test it was started for"
        );
        body();
        return;
    }
    let run = run_child(
        name,
        &[
            name,
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ],
        limit,
    );
    let verdict = match run.status {
        Some(s) if s.success() && run.stdout.contains("test result: ok. 1 passed") => return,
        Some(s) if s.success() => "ran no test: check the test's name".to_string(),
        _ => run.verdict(limit),
    };
    panic!(
        "child test `{name}` {verdict}\n--- child stdout ---\n{}\n--- child stderr ---\n{}",
        run.stdout, run.stderr
    );
}

/// Declares a test whose body runs in a child process (see the module's documentation), with a
/// time limit of [`DEFAULT_LIMIT`] or the number of seconds given before the `fn`:
///
/// ```ignore
/// child_test! {
///     /// Documentation.
///     fn a_case() { ... }
/// }
/// child_test! {
///     120;
///     fn a_slow_case() { ... }
/// }
/// ```
#[allow(unused_macros)] // by the test files that declare no such test
macro_rules! child_test {
    ($(#[$attr:meta])* fn $name:ident() $body:block) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            common::child::in_child(stringify!($name), common::child::DEFAULT_LIMIT, || $body);
        }
    };
    ($secs:expr; $(#[$attr:meta])* fn $name:ident() $body:block) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            common::child::in_child(
                stringify!($name),
                std::time::Duration::from_secs($secs),
                || $body,
            );
        }
    };
}
