//! `RuntimeMetrics`: a snapshot of what a runtime is doing, with a plain-text table and the
//! Prometheus text format for export.

use std::fmt;
use std::time::Duration;

use crate::group::{Group, GroupMetrics, Host, ScheduleDelayHistogram};
use crate::worker::Shared;

/// A snapshot of a runtime's counters, from [`Runtime::metrics`](crate::Runtime::metrics) or
/// [`Handle::metrics`](crate::Handle::metrics).
///
/// Each worker publishes its counters when it parks and at the end of each quantum, so a busy
/// worker's figures are at most a quantum old and an idle one's are exact. New fields may be
/// added in minor releases.
///
/// ```
/// let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
/// rt.block_on(rt.spawn(async {})).unwrap();
/// let m = rt.metrics();
/// assert_eq!(m.workers.len(), 2);
/// assert!(m.groups_alive >= 1);
/// println!("{m}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeMetrics {
    /// One entry per worker, by index.
    pub workers: Vec<WorkerMetrics>,
    /// Tasks waiting in the groups' global queues and in the scheduler's lane.
    pub global_queue_depth: usize,
    /// Groups alive (the default group included).
    pub groups_alive: usize,
    /// Groups with queued work waiting for a worker to pick them (listed, or with a task in the
    /// lane).
    pub groups_runnable: usize,
    /// Runtime threads alive: workers, threads waiting in a nested `block_on`, and spares.
    pub threads: usize,
    /// Spare threads waiting for a worker's queues to be handed to them.
    pub spare_threads: usize,
    /// Blocking-pool threads alive (running a `spawn_blocking` closure or waiting for one).
    pub blocking_threads: usize,
    /// Timers armed and not yet dropped (a [`Sleep`](crate::time::Sleep) registers on its first
    /// poll and unregisters when dropped).
    pub timers: usize,
    /// Timers fired since the runtime started.
    pub timers_fired: u64,
    /// Times the runtime fired a batch of timers: timers whose slack windows overlap share one.
    pub timer_wakeups: u64,
    /// Times a worker stuck in one poll had its queues handed to another thread (see
    /// [`Builder::stall_threshold`](crate::Builder::stall_threshold)).
    pub rescues: u64,
    /// Times a thread handed its worker's queues to another thread before blocking, in
    /// [`block_in_place`](crate::block_in_place) or a nested [`block_on`](crate::block_on) that
    /// waits (at most once per poll for `block_in_place`).
    pub hand_offs: u64,
    /// Times the stall monitor woke up; it does not while every worker is parked.
    pub monitor_wakeups: u64,
    /// Every group alive at the snapshot, the default group included, by id (see
    /// [`Group::metrics`](crate::Group::metrics)).
    pub groups: Vec<GroupMetrics>,
    /// Workers running now (active cores): from
    /// [`Builder::worker_threads`](crate::Builder::worker_threads) (or
    /// [`worker_cpus`](Self::worker_cpus) if fewer) to
    /// [`worker_cores_max`](Self::worker_cores_max), as the worker-count controller sets it.
    pub worker_cores: usize,
    /// The most workers that may run at once
    /// ([`Builder::max_worker_threads`](crate::Builder::max_worker_threads)); `workers` has one
    /// entry for each.
    pub worker_cores_max: usize,
    /// The most workers that ran at once since the runtime started.
    pub worker_cores_peak: usize,
    /// Decisions of the controller to add workers; reason: polls were blocked in the operating
    /// system while tasks waited to run.
    pub worker_core_adds: u64,
    /// Workers those decisions added.
    pub worker_cores_added: u64,
    /// Decisions of the controller to retire workers; reason: over a window, fewer workers were
    /// awake than ran.
    pub worker_core_retires: u64,
    /// Workers those decisions retired.
    pub worker_cores_retired: u64,
    /// Decisions of the controller to retire workers for the groups' shares; reason: the CPUs
    /// were saturated while a group ran ahead of its share (the operating system shares the CPUs
    /// by thread, so more workers would only run more of that group).
    pub worker_core_sheds: u64,
    /// Workers those decisions retired.
    pub worker_cores_shed: u64,
    /// The CPUs the process may use, as read at build (its CPU affinity and cgroup v2 quota):
    /// with more [`worker_threads`](crate::Builder::worker_threads) than CPUs, sheds may take
    /// [`worker_cores`](Self::worker_cores) down to this.
    pub worker_cpus: usize,
    /// Decisions of the controller to bring workers shed below
    /// [`Builder::worker_threads`](crate::Builder::worker_threads) back; reason: the groups'
    /// shares stayed even for a hold (250 ms, doubled after each give-back that had to be shed
    /// again, up to 4 s).
    pub worker_core_restores: u64,
    /// Workers those decisions brought back.
    pub worker_cores_restored: u64,
}

/// One worker's counters since the runtime started (see [`RuntimeMetrics`]).
///
/// ```
/// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
/// rt.block_on(rt.spawn(async {})).unwrap();
/// // Exported at the crate root beside `RuntimeMetrics`.
/// let w: &rondo::WorkerMetrics = &rt.metrics().workers[0];
/// assert!(w.local_queue_depth <= 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerMetrics {
    /// Task polls.
    pub polls: u64,
    /// Successful steals from other workers' local queues.
    pub steals: u64,
    /// Times the worker went to sleep for lack of work.
    pub parks: u64,
    /// Tasks taken from the LIFO slot.
    pub lifo_hits: u64,
    /// Visits to the group scheduler that took work: one per pick, however many groups it took
    /// (a pick may take several one-shot groups that are due at once).
    pub picks: u64,
    /// Visits to the group scheduler that found nothing to take (another worker took the group
    /// first). Each takes a lock of the scheduler (one shard's) for nothing; a figure far above
    /// `picks` means workers contend there.
    pub empty_picks: u64,
    /// Tasks taken from the scheduler's lane: tasks woken from outside the workers whose groups
    /// were idle and at the scheduler's floor, which run without a scheduler visit (see
    /// ARCHITECTURE.md).
    pub lane_takes: u64,
    /// Tasks in its local queue now.
    pub local_queue_depth: usize,
    /// Time spent serving groups (service segments), idle time excluded.
    pub busy: Duration,
}

impl RuntimeMetrics {
    pub(crate) fn collect(shared: &Shared) -> Self {
        let workers = shared
            .cores()
            .iter()
            .map(|c| {
                let n = c.counts.read();
                WorkerMetrics {
                    polls: n.polls,
                    steals: n.steals,
                    parks: n.parks,
                    lifo_hits: n.lifo_hits,
                    picks: n.picks,
                    empty_picks: n.empty_picks,
                    lane_takes: n.lane_takes,
                    local_queue_depth: c.local.len(),
                    busy: Duration::from_nanos(n.busy_ns),
                }
            })
            .collect();
        let groups = shared.groups().snapshot();
        let cores = shared.monitor().core_counts().snapshot();
        let (threads, spare_threads, rescues) = shared.threads().counts();
        let mut group_metrics: Vec<GroupMetrics> = groups
            .iter()
            .map(|g| Group { inner: g.clone() }.metrics())
            .collect();
        group_metrics.sort_unstable_by_key(|m| m.id);
        RuntimeMetrics {
            workers,
            global_queue_depth: groups.iter().map(|g| g.queued()).sum::<usize>()
                + shared.scheduler().lane_len(),
            groups_alive: shared.groups().live(),
            groups_runnable: groups
                .iter()
                .filter(|g| g.is_listed() || g.has_task_in_lane())
                .count(),
            threads,
            spare_threads,
            blocking_threads: shared.blocking().threads(),
            timers: shared.timers().live(),
            timers_fired: shared.timers().fired(),
            timer_wakeups: shared.timers().wakeups(),
            rescues,
            hand_offs: shared.hand_offs(),
            monitor_wakeups: shared.monitor().wakeups(),
            groups: group_metrics,
            worker_cores: shared.idle().active(),
            worker_cores_max: shared.cores().len(),
            worker_cores_peak: cores.peak.max(shared.config().workers),
            worker_core_adds: cores.adds,
            worker_cores_added: cores.added,
            worker_core_retires: cores.retires,
            worker_cores_retired: cores.retired,
            worker_core_sheds: cores.sheds,
            worker_cores_shed: cores.shed,
            worker_cpus: shared.config().cpus,
            worker_core_restores: cores.restores,
            worker_cores_restored: cores.restored,
        }
    }

    /// The snapshot in the Prometheus text exposition format (version 0.0.4), every metric named
    /// `rondo_*`, per-worker series labelled `worker="N"`, per-group series (`rondo_group_*`)
    /// labelled `group="name",group_id="N"` (the id keeps groups of equal names apart; a name's
    /// backslashes, double quotes and line feeds are escaped), and a nested group's series also
    /// `parent_id="N"`, so the tenant tree can be rebuilt from the series. Each group's schedule
    /// delays ([`GroupMetrics::schedule_delay`]) are the histogram
    /// `rondo_group_schedule_delay_seconds` (`_bucket` by `le`, `_sum`, `_count`). Serve it from any HTTP
    /// endpoint, or write it to a file for a node exporter's textfile collector.
    ///
    /// ```
    /// let rt = rondo::Runtime::builder().worker_threads(1).build().unwrap();
    /// rt.block_on(rt.spawn(async {})).unwrap();
    /// let text = rt.metrics().to_prometheus();
    /// assert!(text.contains("# TYPE rondo_worker_polls_total counter"));
    /// assert!(text.contains("rondo_groups_alive 1"));
    /// assert!(text.contains("# TYPE rondo_group_schedule_delay_seconds histogram"));
    /// ```
    pub fn to_prometheus(&self) -> String {
        use fmt::Write;
        let mut out = String::new();
        type Series = (
            &'static str,
            &'static str,
            &'static str,
            fn(&WorkerMetrics) -> String,
        );
        let per_worker: [Series; 9] = [
            ("rondo_worker_polls_total", "counter", "Task polls.", |w| {
                w.polls.to_string()
            }),
            (
                "rondo_worker_steals_total",
                "counter",
                "Successful steals from other workers.",
                |w| w.steals.to_string(),
            ),
            (
                "rondo_worker_parks_total",
                "counter",
                "Times the worker went to sleep.",
                |w| w.parks.to_string(),
            ),
            (
                "rondo_worker_lifo_hits_total",
                "counter",
                "Tasks taken from the LIFO slot.",
                |w| w.lifo_hits.to_string(),
            ),
            (
                "rondo_worker_picks_total",
                "counter",
                "Visits to the group scheduler that took work.",
                |w| w.picks.to_string(),
            ),
            (
                "rondo_worker_empty_picks_total",
                "counter",
                "Visits to the group scheduler that found nothing to take.",
                |w| w.empty_picks.to_string(),
            ),
            (
                "rondo_worker_lane_takes_total",
                "counter",
                "Tasks taken from the scheduler's lane (woken from outside, group idle at the floor).",
                |w| w.lane_takes.to_string(),
            ),
            (
                "rondo_worker_local_queue_depth",
                "gauge",
                "Tasks in the worker's local queue.",
                |w| w.local_queue_depth.to_string(),
            ),
            (
                "rondo_worker_busy_seconds_total",
                "counter",
                "Time spent serving groups.",
                |w| format!("{:.9}", w.busy.as_secs_f64()),
            ),
        ];
        for (name, kind, help, value) in per_worker {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (i, w) in self.workers.iter().enumerate() {
                let _ = writeln!(out, "{name}{{worker=\"{i}\"}} {}", value(w));
            }
        }
        let runtime = [
            (
                "rondo_global_queue_depth",
                "Tasks waiting in the groups' global queues.",
                self.global_queue_depth,
            ),
            ("rondo_groups_alive", "Groups alive.", self.groups_alive),
            (
                "rondo_groups_runnable",
                "Groups with queued work not yet picked.",
                self.groups_runnable,
            ),
            ("rondo_threads", "Runtime threads alive.", self.threads),
            (
                "rondo_spare_threads",
                "Spare threads waiting for a worker's queues.",
                self.spare_threads,
            ),
            (
                "rondo_blocking_threads",
                "Blocking-pool threads alive.",
                self.blocking_threads,
            ),
            ("rondo_timers", "Timers armed and not dropped.", self.timers),
        ];
        for (name, help, v) in runtime {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let counters = [
            (
                "rondo_timers_fired_total",
                "Timers fired.",
                self.timers_fired,
            ),
            (
                "rondo_timer_wakeups_total",
                "Batches of timers fired.",
                self.timer_wakeups,
            ),
            (
                "rondo_rescues_total",
                "Workers stuck in one poll whose queues were handed to another thread.",
                self.rescues,
            ),
            (
                "rondo_hand_offs_total",
                "Workers whose queues a thread handed to another before it blocked.",
                self.hand_offs,
            ),
            (
                "rondo_monitor_wakeups_total",
                "Times the stall monitor woke up.",
                self.monitor_wakeups,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        let worker_cores = [
            (
                "rondo_worker_cores",
                "gauge",
                "Workers running now.",
                self.worker_cores as u64,
            ),
            (
                "rondo_worker_cores_max",
                "gauge",
                "The most workers that may run at once.",
                self.worker_cores_max as u64,
            ),
            (
                "rondo_worker_cores_peak",
                "gauge",
                "The most workers that ran at once.",
                self.worker_cores_peak as u64,
            ),
            (
                "rondo_worker_core_adds_total",
                "counter",
                "Decisions to add workers (polls blocked while tasks waited).",
                self.worker_core_adds,
            ),
            (
                "rondo_worker_cores_added_total",
                "counter",
                "Workers added.",
                self.worker_cores_added,
            ),
            (
                "rondo_worker_core_retires_total",
                "counter",
                "Decisions to retire workers (fewer awake than running over a window).",
                self.worker_core_retires,
            ),
            (
                "rondo_worker_cores_retired_total",
                "counter",
                "Workers retired.",
                self.worker_cores_retired,
            ),
            (
                "rondo_worker_core_sheds_total",
                "counter",
                "Decisions to retire workers for the groups' shares (CPUs saturated, a group \
                 ahead).",
                self.worker_core_sheds,
            ),
            (
                "rondo_worker_cores_shed_total",
                "counter",
                "Workers retired for the groups' shares.",
                self.worker_cores_shed,
            ),
            (
                "rondo_worker_cpus",
                "gauge",
                "The CPUs the process may use, as read at build.",
                self.worker_cpus as u64,
            ),
            (
                "rondo_worker_core_restores_total",
                "counter",
                "Decisions to bring workers shed below worker_threads back (shares even for a \
                 hold).",
                self.worker_core_restores,
            ),
            (
                "rondo_worker_cores_restored_total",
                "counter",
                "Workers brought back after sheds.",
                self.worker_cores_restored,
            ),
        ];
        for (name, kind, help, v) in worker_cores {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        self.write_groups(&mut out);
        out
    }

    /// The per-group series of [`to_prometheus`](Self::to_prometheus).
    fn write_groups(&self, out: &mut String) {
        use fmt::Write;
        type Series = (
            &'static str,
            &'static str,
            &'static str,
            fn(&GroupMetrics) -> String,
        );
        let per_group: [Series; 11] = [
            ("rondo_group_weight", "gauge", "The group's weight.", |g| {
                g.weight.to_string()
            }),
            (
                "rondo_group_spawned_total",
                "counter",
                "Tasks spawned into the group.",
                |g| g.spawned.to_string(),
            ),
            (
                "rondo_group_completed_total",
                "counter",
                "Tasks that ran to completion.",
                |g| g.completed.to_string(),
            ),
            (
                "rondo_group_cancelled_total",
                "counter",
                "Tasks dropped before completing.",
                |g| g.cancelled.to_string(),
            ),
            (
                "rondo_group_panicked_total",
                "counter",
                "Tasks that panicked.",
                |g| g.panicked.to_string(),
            ),
            (
                "rondo_group_unfinished_tasks",
                "gauge",
                "Tasks spawned and not yet finished.",
                |g| g.unfinished.to_string(),
            ),
            (
                "rondo_group_polls_total",
                "counter",
                "Polls of the group's tasks.",
                |g| g.polls.to_string(),
            ),
            (
                "rondo_group_busy_seconds_total",
                "counter",
                "Worker time spent serving the group.",
                |g| format!("{:.9}", g.busy.as_secs_f64()),
            ),
            (
                "rondo_group_runnable_tasks",
                "gauge",
                "Tasks runnable and not running.",
                |g| g.runnable.to_string(),
            ),
            (
                "rondo_group_wait_seconds_total",
                "counter",
                "Time the group had queued work no worker had picked up.",
                |g| format!("{:.9}", g.wait.as_secs_f64()),
            ),
            (
                "rondo_group_throttled_seconds_total",
                "counter",
                "Time the group's CPU cap held it back.",
                |g| format!("{:.9}", g.throttled.as_secs_f64()),
            ),
        ];
        for (name, kind, help, value) in per_group {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for g in &self.groups {
                // The tree: a nested group names its parent.
                let parent = match g.parent {
                    Some(p) => format!(",parent_id=\"{p}\""),
                    None => String::new(),
                };
                let _ = writeln!(
                    out,
                    "{name}{{group=\"{}\",group_id=\"{}\"{parent}}} {}",
                    LabelValue(&g.name),
                    g.id,
                    value(g)
                );
            }
        }
        self.write_delay_histograms(out);
    }

    /// The per-group histogram `rondo_group_schedule_delay_seconds` of
    /// [`to_prometheus`](Self::to_prometheus): cumulative `_bucket` series by upper bound `le`
    /// (powers of two of microseconds, then `+Inf`), `_sum` and `_count`
    /// ([`GroupMetrics::schedule_delay`]).
    fn write_delay_histograms(&self, out: &mut String) {
        use fmt::Write;
        let name = "rondo_group_schedule_delay_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} How long the group waited with runnable work before a worker took it, \
             per wait.\n# TYPE {name} histogram"
        );
        for g in &self.groups {
            let labels = match g.parent {
                Some(p) => format!(
                    "group=\"{}\",group_id=\"{}\",parent_id=\"{p}\"",
                    LabelValue(&g.name),
                    g.id
                ),
                None => format!("group=\"{}\",group_id=\"{}\"", LabelValue(&g.name), g.id),
            };
            let h = &g.schedule_delay;
            let mut cumulative = 0;
            for (i, &c) in h.counts().iter().enumerate() {
                cumulative += c;
                let le = match ScheduleDelayHistogram::bucket_range(i) {
                    Some(r) if r.end != Duration::MAX => r.end.as_secs_f64().to_string(),
                    _ => "+Inf".to_string(),
                };
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
            }
            let _ = writeln!(
                out,
                "{name}_sum{{{labels}}} {:.9}\n{name}_count{{{labels}}} {cumulative}",
                h.sum().as_secs_f64()
            );
        }
    }
}

/// A label value in the exposition format: backslash, double quote and line feed escaped.
struct LabelValue<'a>(&'a str);

impl fmt::Display for LabelValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A plain table: one line per worker, then the runtime-wide figures.
impl fmt::Display for RuntimeMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>6} {:>12} {:>10} {:>10} {:>12} {:>10} {:>11} {:>10} {:>6} {:>12}",
            "worker",
            "polls",
            "steals",
            "parks",
            "lifo hits",
            "picks",
            "empty picks",
            "lane takes",
            "queue",
            "busy"
        )?;
        for (i, w) in self.workers.iter().enumerate() {
            writeln!(
                f,
                "{:>6} {:>12} {:>10} {:>10} {:>12} {:>10} {:>11} {:>10} {:>6} {:>12}",
                i,
                w.polls,
                w.steals,
                w.parks,
                w.lifo_hits,
                w.picks,
                w.empty_picks,
                w.lane_takes,
                w.local_queue_depth,
                format!("{:.1?}", w.busy)
            )?;
        }
        write!(
            f,
            "global queue {} · groups {} alive, {} runnable · threads {} ({} spare) · blocking threads {} \
             · timers {} ({} fired in {} wakeups) · rescues {} · hand-offs {} · monitor wakeups {}",
            self.global_queue_depth,
            self.groups_alive,
            self.groups_runnable,
            self.threads,
            self.spare_threads,
            self.blocking_threads,
            self.timers,
            self.timers_fired,
            self.timer_wakeups,
            self.rescues,
            self.hand_offs,
            self.monitor_wakeups
        )?;
        // Only where the count changed (`Builder::max_worker_threads`, more workers than CPUs).
        if self.worker_cores_max > self.worker_cores
            || self.worker_core_adds > 0
            || self.worker_core_sheds > 0
        {
            write!(
                f,
                " · worker cores {} of {} (peak {}; {} added in {} decisions for blocked polls, {} \
                 retired in {} for idle ones, {} in {} for shares, {} back in {} after even \
                 shares; {} CPUs)",
                self.worker_cores,
                self.worker_cores_max,
                self.worker_cores_peak,
                self.worker_cores_added,
                self.worker_core_adds,
                self.worker_cores_retired,
                self.worker_core_retires,
                self.worker_cores_shed,
                self.worker_core_sheds,
                self.worker_cores_restored,
                self.worker_core_restores,
                self.worker_cpus
            )?;
        }
        Ok(())
    }
}

impl RuntimeMetrics {
    /// The number of worker threads, tokio's `RuntimeMetrics::num_workers`: every worker the
    /// runtime has, one per entry of [`workers`](Self::workers), so an index below it is a valid
    /// worker index. With [`Builder::max_worker_threads`](crate::Builder::max_worker_threads)
    /// above `worker_threads`, all those threads exist from the start and this is the maximum
    /// ([`worker_cores_max`](Self::worker_cores_max)), as
    /// [`Handle::worker_count`](crate::runtime::Handle::worker_count) reports; how many of them
    /// run now is [`worker_cores`](Self::worker_cores). (tokio's count is fixed, so it has no such
    /// difference.)
    ///
    /// ```
    /// let rt = rondo::Runtime::builder()
    ///     .worker_threads(2)
    ///     .max_worker_threads(8)
    ///     .build()
    ///     .unwrap();
    /// let m = rt.metrics();
    /// assert_eq!(m.num_workers(), 8);
    /// assert_eq!(m.num_workers(), rt.handle().worker_count());
    /// assert_eq!(m.worker_cores, 2);
    /// ```
    pub fn num_workers(&self) -> usize {
        self.workers.len()
    }
}
