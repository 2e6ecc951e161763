//! `Builder` and `BuildError`: validated runtime configuration.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::blocking::Pool;
use crate::group::PanicHook;
use crate::task::TaskPanic;
use crate::task::hooks::{TaskCallback, TaskHooks, TaskMeta};
use crate::worker::{Config, ThreadHook};

use super::Runtime;

/// The most worker threads one runtime may have.
pub const MAX_WORKERS: usize = 1024;
/// The shortest scheduling quantum [`Builder::quantum`] accepts.
pub const MIN_QUANTUM: Duration = Duration::from_micros(50);
/// The longest scheduling quantum [`Builder::quantum`] accepts.
pub const MAX_QUANTUM: Duration = Duration::from_millis(100);
/// The default scheduling quantum: the longest a worker serves one group while others wait.
pub const DEFAULT_QUANTUM: Duration = Duration::from_micros(500);

/// The default of [`Builder::max_blocking_threads`].
pub const DEFAULT_MAX_BLOCKING_THREADS: usize = 512;
/// The default of [`Builder::blocking_keep_alive`].
pub const DEFAULT_BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The default of [`Builder::stall_threshold`].
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_millis(5);
/// The default of [`Builder::max_rescue_threads`].
pub const DEFAULT_MAX_RESCUE_THREADS: usize = 16;

/// Threads a runtime may start beyond its workers, for the cores that nested `block_on` calls hand
/// over (each waiting `block_on` keeps its thread, mostly idle stack).
const MAX_EXTRA_THREADS: usize = 10_000;
/// How long a spare runtime thread waits for a core before it exits.
const SPARE_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Configures and builds a [`Runtime`].
///
/// ```
/// let rt = rondo::Runtime::builder()
///     .worker_threads(2)
///     .thread_name("my-pool")
///     .on_task_panic(|p| eprintln!("task panicked: {:?}", p.message()))
///     .build()
///     .unwrap();
/// assert_eq!(rt.block_on(async { 1 + 1 }), 2);
/// ```
pub struct Builder {
    worker_threads: Option<usize>,
    /// `None`: equal to the worker count.
    max_worker_threads: Option<usize>,
    thread_name: String,
    quantum: Duration,
    on_task_panic: Option<PanicHook>,
    on_thread_start: Option<ThreadHook>,
    on_thread_stop: Option<ThreadHook>,
    thread_stack_size: Option<usize>,
    max_blocking_threads: usize,
    blocking_keep_alive: Duration,
    stall_threshold: Duration,
    max_rescue_threads: usize,
    start_paused: bool,
    /// `None`: derived from `name` (`{name}-worker`), else `rondo-worker`.
    thread_name_set: Option<String>,
    name: Option<String>,
    task_hooks: TaskHooks,
}

/// The smallest stack [`Builder::thread_stack_size`] accepts: less cannot run the worker loop and
/// a task's poll safely.
pub const MIN_THREAD_STACK: usize = 64 * 1024;
/// The largest stack [`Builder::thread_stack_size`] accepts, 1 GiB: far more than any recursion
/// needs, while every worker and every blocking-pool thread (up to
/// [`Builder::max_blocking_threads`]) reserves that much address space. Larger sizes soon exceed
/// what the system can map, or what `pthread` accepts at all.
pub const MAX_THREAD_STACK: usize = 1 << 30;

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("worker_threads", &self.worker_threads)
            .field("max_worker_threads", &self.max_worker_threads)
            .field("thread_name", &self.thread_name)
            .field("quantum", &self.quantum)
            .field("on_task_panic", &self.on_task_panic.is_some())
            .field("on_thread_start", &self.on_thread_start.is_some())
            .field("on_thread_stop", &self.on_thread_stop.is_some())
            .field("thread_stack_size", &self.thread_stack_size)
            .field("max_blocking_threads", &self.max_blocking_threads)
            .field("blocking_keep_alive", &self.blocking_keep_alive)
            .field("stall_threshold", &self.stall_threshold)
            .field("max_rescue_threads", &self.max_rescue_threads)
            .field("name", &self.name)
            .field("on_task_spawn", &self.task_hooks.on_spawn.is_some())
            .field("on_task_terminate", &self.task_hooks.on_terminate.is_some())
            .field(
                "on_before_task_poll",
                &self.task_hooks.before_poll.is_some(),
            )
            .field("on_after_task_poll", &self.task_hooks.after_poll.is_some())
            .finish()
    }
}

impl Builder {
    /// A builder with the defaults: one worker per available core, threads named `rondo-worker-N`,
    /// a 500 µs scheduling quantum, no panic hook, a blocking pool of up to 512 threads that
    /// exit after 10 s idle, and starvation rescue after a 5 ms stall with up to 16 rescued
    /// threads.
    ///
    /// ```
    /// let rt = rondo::Builder::new().build().unwrap();
    /// assert!(rt.handle().worker_count() >= 1);
    /// ```
    pub fn new() -> Self {
        Builder {
            worker_threads: None,
            max_worker_threads: None,
            thread_name: "rondo-worker".to_string(),
            quantum: DEFAULT_QUANTUM,
            on_task_panic: None,
            on_thread_start: None,
            on_thread_stop: None,
            thread_stack_size: None,
            max_blocking_threads: DEFAULT_MAX_BLOCKING_THREADS,
            blocking_keep_alive: DEFAULT_BLOCKING_KEEP_ALIVE,
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            max_rescue_threads: DEFAULT_MAX_RESCUE_THREADS,
            start_paused: false,
            thread_name_set: None,
            name: None,
            task_hooks: TaskHooks::default(),
        }
    }

    /// tokio's name for [`Builder::new`]: every rondo runtime is a multi-threaded one.
    ///
    /// ```
    /// let rt = rondo::Builder::new_multi_thread()
    ///     .worker_threads(2)
    ///     .enable_all()
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(rt.block_on(async { 1 + 1 }), 2);
    /// ```
    pub fn new_multi_thread() -> Self {
        Builder::new()
    }

    /// tokio's current-thread builder, as rondo has it: a runtime with one worker thread. A
    /// deliberate difference: the tasks run on that worker, never on the thread that calls
    /// `block_on` (tokio's run on it), so a future given to `block_on` and the tasks it spawns
    /// may run at the same time. `#[rondo::test(flavor = "current_thread")]` builds the same.
    ///
    /// ```
    /// let rt = rondo::Builder::new_current_thread().enable_all().build().unwrap();
    /// assert_eq!(rt.handle().worker_count(), 1);
    /// assert_eq!(rt.block_on(rondo::spawn(async { 7 })).unwrap(), 7);
    /// ```
    pub fn new_current_thread() -> Self {
        Builder::new().worker_threads(1)
    }

    /// Accepted for tokio's builder chains; does nothing: every rondo runtime drives timers and,
    /// with the `io` feature, I/O.
    ///
    /// ```
    /// let rt = rondo::Builder::new().enable_all().build().unwrap();
    /// rt.block_on(rondo::time::sleep(std::time::Duration::from_millis(1)));
    /// ```
    pub fn enable_all(self) -> Self {
        self
    }

    /// Accepted for tokio's builder chains; does nothing (see [`Builder::enable_all`]).
    ///
    /// ```
    /// let rt = rondo::Builder::new().enable_io().build().unwrap();
    /// # drop(rt);
    /// ```
    pub fn enable_io(self) -> Self {
        self
    }

    /// Accepted for tokio's builder chains; does nothing (see [`Builder::enable_all`]).
    ///
    /// ```
    /// let rt = rondo::Builder::new().enable_time().build().unwrap();
    /// rt.block_on(rondo::time::sleep(std::time::Duration::from_millis(1)));
    /// ```
    pub fn enable_time(self) -> Self {
        self
    }

    /// The number of worker threads, 1 to [`MAX_WORKERS`]. Default: the CPUs the process may use,
    /// the smaller of its CPU affinity and its cgroup v2 `cpu.max` quota rounded up (1.5 CPUs
    /// give 2 workers), at least 1, as Go does since 1.25; a missing or unreadable limit is no
    /// limit. The environment variable `RONDO_CGROUP_ROOT` names another directory to read as the
    /// cgroup root (default `/sys/fs/cgroup`). tokio's default counts visible CPUs only.
    ///
    /// More workers than CPUs: every thread exists and counts as a worker, but the operating
    /// system shares the CPUs by thread, so a group with fewer running tasks than threads would
    /// get less than its weight. While the CPUs are saturated and the groups' shares drift, the
    /// worker-count controller runs fewer of the workers, down to the CPU count (never below),
    /// and brings them back once the shares stay even for a while (250 ms at first, doubled up
    /// to 4 s while a give-back has to be undone) or at once when polls block in the operating
    /// system. [`RuntimeMetrics`](crate::RuntimeMetrics) counts these decisions (`worker_core_sheds`,
    /// `worker_core_restores`). tokio runs all its workers always; a count within the CPUs
    /// behaves as tokio's.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(3).build().unwrap();
    /// assert_eq!(rt.handle().worker_count(), 3);
    /// let err = rondo::Runtime::builder().worker_threads(0).build().unwrap_err();
    /// assert!(err.to_string().contains("worker_threads"));
    /// ```
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.worker_threads = Some(n);
        self
    }

    /// The most workers that run at once, from [`worker_threads`](Self::worker_threads) to
    /// [`MAX_WORKERS`]. Default: equal to `worker_threads` (a fixed count).
    ///
    /// Above it, the runtime keeps that many cores (each with its thread, parked while unused)
    /// and runs `worker_threads` of them at first. A controller in the stall monitor's thread
    /// activates more when tasks wait to run while the running workers' polls are blocked in the
    /// operating system (a synchronous client called in a poll: a file read, a blocking driver,
    /// `std::thread::sleep`), two more cores per blocked poll, and retires them again, halving the
    /// surplus every 250 ms once fewer workers are awake than run. A poll that computes is not
    /// blocked: CPU-bound work never makes it add a core. Groups keep their weights and caps at
    /// any count. [`RuntimeMetrics`](crate::RuntimeMetrics) reports the count and the decisions.
    /// tokio has no such setting (its worker count is fixed); Go hands a processor to another
    /// thread at each blocking system call.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder()
    ///     .worker_threads(2)
    ///     .max_worker_threads(16)
    ///     .build()
    ///     .unwrap();
    /// let done = rt.block_on(async {
    ///     let tasks: Vec<_> = (0..64)
    ///         .map(|_| rondo::spawn(async { std::thread::sleep(std::time::Duration::from_millis(2)) }))
    ///         .collect();
    ///     for t in tasks {
    ///         t.await.unwrap();
    ///     }
    ///     64
    /// });
    /// assert_eq!(done, 64);
    /// assert!(rt.metrics().worker_cores_peak <= 16);
    /// let err = rondo::Runtime::builder()
    ///     .worker_threads(4)
    ///     .max_worker_threads(2)
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("max_worker_threads"));
    /// ```
    pub fn max_worker_threads(mut self, n: usize) -> Self {
        self.max_worker_threads = Some(n);
        self
    }

    /// The worker threads' name prefix; each thread is called `{name}-{index}`. Threads started
    /// later to take over a core whose thread blocks (`block_in_place`, a nested `block_on`, a
    /// stall rescue) are numbered on from the worker count. Blocking-pool threads are called
    /// `{name}-blocking`. Must be non-empty and contain no NUL byte.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().thread_name("db").worker_threads(1).build().unwrap();
    /// let name = rt.block_on(async {
    ///     rondo::spawn(async { std::thread::current().name().unwrap().to_string() }).await.unwrap()
    /// });
    /// assert_eq!(name, "db-0");
    /// ```
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name_set = Some(name.into());
        self
    }

    /// The scheduling quantum: the longest a worker keeps serving one group while another group
    /// with a smaller virtual runtime waits. Shorter means tighter fairness and more switching.
    /// Allowed: [`MIN_QUANTUM`] to [`MAX_QUANTUM`]; default [`DEFAULT_QUANTUM`] (500 µs).
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = rondo::Runtime::builder().quantum(Duration::from_millis(1)).build().unwrap();
    /// # drop(rt);
    /// assert!(rondo::Runtime::builder().quantum(Duration::from_secs(1)).build().is_err());
    /// ```
    pub fn quantum(mut self, quantum: Duration) -> Self {
        self.quantum = quantum;
        self
    }

    /// A hook that sees every task panic, detached tasks included, on the worker that caught it.
    /// The task's `JoinHandle` still receives the payload. A panic inside the hook is caught and
    /// ignored.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let s = seen.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_panic(move |_| { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// let r = rt.block_on(async { rondo::spawn(async { panic!("boom") }).await });
    /// assert!(r.unwrap_err().is_panic());
    /// assert_eq!(seen.load(Ordering::SeqCst), 1);
    /// ```
    pub fn on_task_panic(mut self, hook: impl Fn(&TaskPanic<'_>) + Send + Sync + 'static) -> Self {
        self.on_task_panic = Some(Arc::new(hook));
        self
    }

    /// A hook every runtime thread runs when it starts, before it runs any task or blocking
    /// closure, with the runtime current ([`Handle::current`](crate::Handle::current) works):
    /// worker threads, the threads started to take over a worker's queues (while a nested
    /// `block_on` waits, or a poll stalls), and blocking-pool threads (see
    /// [`Handle::spawn_blocking`](crate::Handle::spawn_blocking)). The runtime's internal stall
    /// monitor thread, which runs no user code, does not run it. A panic inside the hook is caught
    /// and ignored. [`build`](Self::build) returns once every worker thread has run it and gone
    /// idle, so the hook must not wait for what the builder's caller does after `build`.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let started = Arc::new(AtomicUsize::new(0));
    /// let s = started.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .worker_threads(2)
    ///     .on_thread_start(move || { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(rt.spawn(async {})).unwrap();
    /// drop(rt);
    /// assert_eq!(started.load(Ordering::SeqCst), 2);
    /// ```
    pub fn on_thread_start(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_thread_start = Some(Arc::new(hook));
        self
    }

    /// A hook every runtime thread that ran [`on_thread_start`](Self::on_thread_start) runs just
    /// before it exits: after the runtime shut down, or when a spare thread's or a blocking-pool
    /// thread's keep-alive ran out. A panic inside the hook is caught and ignored.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let stopped = Arc::new(AtomicUsize::new(0));
    /// let s = stopped.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .worker_threads(2)
    ///     .on_thread_stop(move || { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// drop(rt); // joins the workers
    /// assert_eq!(stopped.load(Ordering::SeqCst), 2);
    /// ```
    pub fn on_thread_stop(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_thread_stop = Some(Arc::new(hook));
        self
    }

    /// The stack size of every runtime thread, in bytes: worker threads, the threads that take
    /// over a worker's queues, and blocking-pool threads. Allowed: [`MIN_THREAD_STACK`] (64 KiB)
    /// to [`MAX_THREAD_STACK`] (1 GiB). Default: the standard library's (2 MiB, or
    /// `RUST_MIN_STACK`). Futures above 16 KiB are boxed when spawned, so only deep synchronous
    /// recursion inside a poll or a blocking closure needs more.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().thread_stack_size(8 << 20).build().unwrap();
    /// assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
    /// assert_eq!(rt.block_on(rt.spawn_blocking(|| 2)).unwrap(), 2);
    /// let err = rondo::Runtime::builder().thread_stack_size(1024).build().unwrap_err();
    /// assert!(err.to_string().contains("thread_stack_size"));
    /// let err = rondo::Runtime::builder().thread_stack_size(usize::MAX).build().unwrap_err();
    /// assert!(err.to_string().contains("thread_stack_size"));
    /// ```
    pub fn thread_stack_size(mut self, bytes: usize) -> Self {
        self.thread_stack_size = Some(bytes);
        self
    }

    /// The most blocking-pool threads (see [`Handle::spawn_blocking`](crate::Handle::spawn_blocking))
    /// that may run at once; closures beyond that wait for a thread. At least 1; default
    /// [`DEFAULT_MAX_BLOCKING_THREADS`] (512). Pool threads are started on demand and are not
    /// workers.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().max_blocking_threads(4).build().unwrap();
    /// assert_eq!(rt.block_on(rt.spawn_blocking(|| 1)).unwrap(), 1);
    /// let err = rondo::Runtime::builder().max_blocking_threads(0).build().unwrap_err();
    /// assert!(err.to_string().contains("max_blocking_threads"));
    /// ```
    pub fn max_blocking_threads(mut self, n: usize) -> Self {
        self.max_blocking_threads = n;
        self
    }

    /// How long a blocking-pool thread waits for a closure before it exits. Must be more than zero;
    /// default [`DEFAULT_BLOCKING_KEEP_ALIVE`] (10 s). A keep-alive longer than the clock can
    /// express ([`Duration::MAX`], say) never ends: idle pool threads stay until the runtime shuts
    /// down.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = rondo::Runtime::builder()
    ///     .blocking_keep_alive(Duration::from_millis(100))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(rt.block_on(rt.spawn_blocking(|| 2)).unwrap(), 2);
    /// let err = rondo::Runtime::builder().blocking_keep_alive(Duration::ZERO).build().unwrap_err();
    /// assert!(err.to_string().contains("blocking_keep_alive"));
    /// ```
    pub fn blocking_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.blocking_keep_alive = keep_alive;
        self
    }

    /// How long one poll may hold a worker while other tasks wait behind it before the runtime
    /// rescues them. A task that blocks its thread (a `std::thread::sleep`, a blocking read, a
    /// long computation) keeps the worker it runs on; the runtime's stall monitor notices a poll
    /// that has run this long while tasks wait in that worker's queues (or groups wait and every
    /// awake worker is stuck), and hands the worker's queues to another thread. The stuck poll
    /// finishes on its own thread, which then stays as a spare or exits. A stall is noticed
    /// between this threshold and 1.5 times it after it began. Must be more than zero; default
    /// [`DEFAULT_STALL_THRESHOLD`] (5 ms). A long threshold makes rescues rare; `spawn_blocking`
    /// and `block_in_place` remain the way to run known blocking code.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let rt = rondo::Runtime::builder()
    ///     .worker_threads(1)
    ///     .stall_threshold(Duration::from_millis(2))
    ///     .build()
    ///     .unwrap();
    /// let start = Instant::now();
    /// rt.block_on(async {
    ///     // Blocks the only worker for 500 ms; the task it spawned first still runs at once.
    ///     let blocker = rondo::spawn(async {
    ///         let quick = rondo::spawn(async { Instant::now() });
    ///         std::thread::sleep(Duration::from_millis(500));
    ///         quick
    ///     });
    ///     let quick = blocker.await.unwrap();
    ///     let ran_at = quick.await.unwrap();
    ///     assert!(ran_at - start < Duration::from_millis(400));
    /// });
    /// assert!(rt.metrics().rescues >= 1);
    /// let err = rondo::Runtime::builder().stall_threshold(Duration::ZERO).build().unwrap_err();
    /// assert!(err.to_string().contains("stall_threshold"));
    /// ```
    pub fn stall_threshold(mut self, threshold: Duration) -> Self {
        self.stall_threshold = threshold;
        self
    }

    /// The most rescued threads at once: threads still stuck in a poll whose worker was handed to
    /// another thread (see [`stall_threshold`](Self::stall_threshold)). Beyond it, the runtime
    /// waits for a stuck poll to return before it rescues another worker, so tasks that all block
    /// cannot make it start threads without bound. A rescued thread exits when its poll returns
    /// (or stays as the one spare thread). At least 1; default [`DEFAULT_MAX_RESCUE_THREADS`]
    /// (16).
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().max_rescue_threads(2).build().unwrap();
    /// assert_eq!(rt.block_on(rt.spawn(async { 1 })).unwrap(), 1);
    /// let err = rondo::Runtime::builder().max_rescue_threads(0).build().unwrap_err();
    /// assert!(err.to_string().contains("max_rescue_threads"));
    /// ```
    pub fn max_rescue_threads(mut self, n: usize) -> Self {
        self.max_rescue_threads = n;
        self
    }

    /// Validates the settings and starts the worker threads, and returns once every worker has
    /// come to its first park (idle, with the park counted in its metrics): on a loaded machine a
    /// new thread may not run for milliseconds, and a runtime returned before would have workers
    /// that have not started yet.
    ///
    /// # Errors
    /// A [`BuildError`] saying which setting is wrong and what is allowed, or that the operating
    /// system refused to start a thread.
    ///
    /// ```
    /// let rt = rondo::Builder::new().worker_threads(2).build().unwrap();
    /// assert_eq!(rt.block_on(async { 3 }), 3);
    /// let err = rondo::Builder::new().thread_name("").build().unwrap_err();
    /// assert!(err.to_string().contains("thread_name"));
    /// ```
    pub fn build(mut self) -> Result<Runtime, BuildError> {
        if let Some(err) = self.resolve_names() {
            return Err(err);
        }
        let start_paused = self.start_paused;
        let workers = match self.worker_threads {
            Some(0) => {
                return Err(BuildError::new(
                    "worker_threads must be at least 1 (got 0)".to_string(),
                ));
            }
            Some(n) if n > MAX_WORKERS => {
                return Err(BuildError::new(format!(
                    "worker_threads must be at most {MAX_WORKERS} (got {n})"
                )));
            }
            Some(n) => n,
            // The CPUs the process may use: affinity and the cgroup v2 quota (`worker::cpus`).
            None => crate::worker::cpus::default_worker_count(MAX_WORKERS),
        };
        // The CPUs the process may use, read again only when a count was given: more workers
        // than CPUs make the controller share the CPUs by weight (`worker::controller`, step 5).
        let cpus = match self.worker_threads {
            Some(n) if n > 1 => crate::worker::cpus::default_worker_count(MAX_WORKERS),
            _ => workers,
        };
        let max_workers = match self.max_worker_threads {
            None => workers,
            Some(n) if n < workers || n > MAX_WORKERS => {
                return Err(BuildError::new(format!(
                    "max_worker_threads must be at least worker_threads ({workers}) and at most \
                     {MAX_WORKERS} (got {n})"
                )));
            }
            Some(n) => n,
        };
        if self.thread_name.is_empty() || self.thread_name.contains('\0') {
            return Err(BuildError::new(format!(
                "thread_name must be non-empty and contain no NUL byte (got {:?})",
                self.thread_name
            )));
        }
        if self.quantum < MIN_QUANTUM || self.quantum > MAX_QUANTUM {
            return Err(BuildError::new(format!(
                "quantum must be between {MIN_QUANTUM:?} and {MAX_QUANTUM:?} (got {:?})",
                self.quantum
            )));
        }
        if self.max_blocking_threads == 0 {
            return Err(BuildError::new(
                "max_blocking_threads must be at least 1 (got 0)".to_string(),
            ));
        }
        if self.blocking_keep_alive.is_zero() {
            return Err(BuildError::new(
                "blocking_keep_alive must be more than zero (got 0 s)".to_string(),
            ));
        }
        if self.stall_threshold.is_zero() {
            return Err(BuildError::new(
                "stall_threshold must be more than zero (got 0 s)".to_string(),
            ));
        }
        if self.max_rescue_threads == 0 {
            return Err(BuildError::new(
                "max_rescue_threads must be at least 1 (got 0)".to_string(),
            ));
        }
        if let Some(n) = self
            .thread_stack_size
            .filter(|n| !(MIN_THREAD_STACK..=MAX_THREAD_STACK).contains(n))
        {
            return Err(BuildError::new(format!(
                "thread_stack_size must be between {MIN_THREAD_STACK} and {MAX_THREAD_STACK} \
                 bytes (64 KiB to 1 GiB) (got {n})"
            )));
        }
        let pool = Pool::new(
            self.max_blocking_threads,
            self.blocking_keep_alive,
            self.thread_name.clone(),
        )
        .with_stack_size(self.thread_stack_size);
        let rt = Runtime::start(
            Config {
                workers,
                max_workers,
                cpus,
                thread_name: self.thread_name,
                quantum: self.quantum,
                on_task_panic: self.on_task_panic,
                max_threads: max_workers + MAX_EXTRA_THREADS,
                spare_keep_alive: SPARE_KEEP_ALIVE,
                on_thread_start: self.on_thread_start,
                on_thread_stop: self.on_thread_stop,
                thread_stack_size: self.thread_stack_size,
                stall_threshold: self.stall_threshold,
                max_rescue_threads: self.max_rescue_threads,
                task_hooks: (!self.task_hooks.is_empty()).then(|| Box::new(self.task_hooks)),
                runtime_id: next_runtime_id(),
                runtime_name: self.name,
            },
            pool,
        )?;
        if start_paused {
            rt.handle().shared.timers().start_paused();
        }
        trace_event!(INFO, workers, "runtime started");
        Ok(rt)
    }

    /// Starts the runtime with its clock paused, as tokio's `Builder::start_paused`: the clock
    /// stands at the runtime's start and moves only by [`time::advance`](crate::time::advance)
    /// or by auto-advance (see [`time::pause`](crate::time::pause)). For tests. Unlike tokio, any
    /// number of workers is allowed. Default: false.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rondo::time::{Instant, sleep};
    ///
    /// let rt = rondo::Builder::new().start_paused(true).build().unwrap();
    /// rt.block_on(async {
    ///     let start = Instant::now();
    ///     sleep(Duration::from_secs(86_400)).await; // a day, in no real time
    ///     assert!(start.elapsed() >= Duration::from_secs(86_400));
    /// });
    /// ```
    pub fn start_paused(mut self, paused: bool) -> Self {
        self.start_paused = paused;
        self
    }
}

/// A runtime setting was invalid, or a worker thread could not be started.
///
/// Its message names the setting, the value given and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    message: String,
}

impl BuildError {
    pub(crate) fn new(message: String) -> Self {
        BuildError { message }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BuildError {}

/// Runtime names and task hooks (tokio's names: `name`, `on_task_spawn`, `on_task_terminate`,
/// `on_before_task_poll`, `on_after_task_poll`).
impl Builder {
    /// The runtime's name, returned by [`Handle::name`](crate::Handle::name). Unless
    /// [`thread_name`](Self::thread_name) is set, the worker threads are named after it:
    /// `{name}-worker-{index}`. Must be non-empty and contain no NUL byte. Default: none (threads
    /// named `rondo-worker-{index}`).
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().name("api").worker_threads(1).build().unwrap();
    /// assert_eq!(rt.handle().name(), Some("api"));
    /// let thread = rt.block_on(rt.spawn(async {
    ///     std::thread::current().name().unwrap().to_string()
    /// }));
    /// assert_eq!(thread.unwrap(), "api-worker-0");
    /// let err = rondo::Runtime::builder().name("").build().unwrap_err();
    /// assert!(err.to_string().contains("name"));
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A hook run for every task spawned onto the runtime, on the spawning thread, after the task
    /// exists and before it is queued (so before its first poll). Blocking closures
    /// ([`spawn_blocking`](crate::spawn_blocking)) are tasks too. A panic inside the hook is
    /// caught and ignored. While no runtime of the process has task hooks, a spawn pays one test.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let spawned = Arc::new(AtomicUsize::new(0));
    /// let s = spawned.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_spawn(move |_| { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(rt.spawn(async {})).unwrap();
    /// assert_eq!(spawned.load(Ordering::SeqCst), 1);
    /// ```
    pub fn on_task_spawn(mut self, hook: impl Fn(&TaskMeta<'_>) + Send + Sync + 'static) -> Self {
        self.task_hooks.on_spawn = Some(callback(hook));
        self
    }

    /// A hook run once for every task when it ends (completed, panicked or cancelled), on the
    /// thread that drops its future, after the future's destructor ran and before the task's
    /// [`JoinHandle`](crate::JoinHandle) resolves. A panic inside the hook is caught and ignored.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let ended = Arc::new(AtomicUsize::new(0));
    /// let e = ended.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_task_terminate(move |_| { e.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(rt.spawn(async {})).unwrap();
    /// assert_eq!(ended.load(Ordering::SeqCst), 1);
    /// ```
    pub fn on_task_terminate(
        mut self,
        hook: impl Fn(&TaskMeta<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.task_hooks.on_terminate = Some(callback(hook));
        self
    }

    /// A hook run on the worker just before each poll of a task, with the task's group current.
    /// Not run for a cancelled task, whose future is dropped without a poll. A panic inside the
    /// hook is caught and ignored. A task spawned while no runtime of the process has task hooks
    /// pays one test per poll. Not run for blocking closures
    /// ([`spawn_blocking`](crate::spawn_blocking)), which a pool thread runs, not a worker.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let polls = Arc::new(AtomicUsize::new(0));
    /// let p = polls.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_before_task_poll(move |_| { p.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(rt.spawn(async { rondo::yield_now().await })).unwrap();
    /// assert_eq!(polls.load(Ordering::SeqCst), 2);
    /// ```
    pub fn on_before_task_poll(
        mut self,
        hook: impl Fn(&TaskMeta<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.task_hooks.before_poll = Some(callback(hook));
        self
    }

    /// A hook run on the worker just after each poll of a task (also after the poll that
    /// completed it, which runs the task's [`on_task_terminate`](Self::on_task_terminate) hook
    /// first, so the task's handle may resolve before this hook runs). With several workers, a
    /// task woken during its poll may begin its next poll on another worker before this hook
    /// returns. A panic inside the hook is caught and ignored.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let polls = Arc::new(AtomicUsize::new(0));
    /// let p = polls.clone();
    /// let rt = rondo::Runtime::builder()
    ///     .on_after_task_poll(move |_| { p.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(rt.spawn(async { rondo::yield_now().await })).unwrap();
    /// drop(rt); // joins the workers: the last poll's hook has run
    /// assert_eq!(polls.load(Ordering::SeqCst), 2);
    /// ```
    pub fn on_after_task_poll(
        mut self,
        hook: impl Fn(&TaskMeta<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.task_hooks.after_poll = Some(callback(hook));
        self
    }

    /// Checks the runtime name and settles the threads' name prefix: the one given to
    /// `thread_name`, else `{name}-worker`, else `rondo-worker`.
    fn resolve_names(&mut self) -> Option<BuildError> {
        if let Some(name) = &self.name {
            if name.is_empty() || name.contains('\0') {
                return Some(BuildError::new(format!(
                    "name must be non-empty and contain no NUL byte (got {name:?})"
                )));
            }
        }
        self.thread_name = match (self.thread_name_set.take(), &self.name) {
            (Some(t), _) => t,
            (None, Some(name)) => format!("{name}-worker"),
            (None, None) => std::mem::take(&mut self.thread_name),
        };
        None
    }
}

fn callback(hook: impl Fn(&TaskMeta<'_>) + Send + Sync + 'static) -> TaskCallback {
    Arc::new(hook)
}

/// The next runtime's id: 1, 2, 3, ... in the process.
fn next_runtime_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The task dump switch (see [`Handle::dump`](crate::Handle::dump)).
impl Builder {
    /// Keeps a table of the runtime's live tasks, so that [`Handle::dump`](crate::Handle::dump)
    /// can list them (tokio's dumps are opt-in too). Without it, a spawn and a poll pay nothing
    /// for the dump and `dump` returns an error. With it, each spawn, wake, poll and task end
    /// updates the task's entry in a sharded table (one short lock of one shard), and the
    /// runtime's tasks take the out-of-line path that task hooks take.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().enable_task_dump().build().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.dump().unwrap().tasks().len(), 1);
    /// h.abort();
    /// assert!(rondo::Runtime::new().unwrap().dump().is_err());
    /// ```
    pub fn enable_task_dump(mut self) -> Self {
        self.task_hooks.dump = Some(Arc::new(crate::task::dump::DumpTable::new()));
        self
    }
}
