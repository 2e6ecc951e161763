//! Why rondo exists, in one run: a small batch of work that arrives behind a flood.
//!
//! A flood of 20,000 tasks, each 20 µs of CPU work, is spawned; 5 ms later a small batch of 200
//! such tasks arrives. The program measures how long each batch takes from its first spawn to its
//! last completion, first on rondo with each batch in its own group, then on tokio's multi-thread
//! runtime, which serves every task from one FIFO. Both runtimes get the same two worker threads
//! and exactly the same tasks.
//!
//! On tokio the small batch waits behind the whole flood. On rondo the two groups share the
//! workers equally while both have work, so the small batch needs about its own 4 ms of work on
//! half the workers, and the flood is barely slowed down.
//!
//! Besides the table it draws, with plotters, an SVG chart of how many tasks of each batch had
//! completed over time on each runtime, to `target/fairness.svg` or the path given as the only
//! argument: `cargo run --release --example fairness -- docs/fairness.svg`.
//!
//! Run it with `cargo run --release --example fairness`.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use plotters::prelude::*;

/// Worker threads for both runtimes. Fixed at two so the demo tells the same story on any machine:
/// with many more workers the flood would drain before the small batch even arrived.
const WORKERS: usize = 2;
const FLOOD_TASKS: usize = 20_000;
const SMALL_TASKS: usize = 200;
/// The CPU work of one task, done by busy-waiting (a sleep would free the worker).
const WORK: Duration = Duration::from_micros(20);
/// How long after the flood's first spawn the small batch arrives.
const SMALL_ARRIVES_AFTER: Duration = Duration::from_millis(5);

/// How long each batch took, from its first spawn to its last task's completion, and when each
/// of its tasks completed.
struct Outcome {
    flood: Duration,
    small: Duration,
    /// Completion times of the flood's tasks, sorted, since the flood's first spawn.
    flood_done: Vec<Duration>,
    /// Completion times of the small batch's tasks, sorted, on the same clock.
    small_done: Vec<Duration>,
    /// When the small batch's first task was spawned, on the same clock.
    small_start: Duration,
}

/// One completion time per task of a batch, in nanoseconds since the scenario's clock started.
/// Each task writes only its own slot, so recording adds no contention between the workers.
struct Completions(Vec<AtomicU64>);

impl Completions {
    fn new(tasks: usize) -> Arc<Self> {
        Arc::new(Completions((0..tasks).map(|_| AtomicU64::new(0)).collect()))
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut times: Vec<Duration> = (self.0.iter())
            .map(|t| Duration::from_nanos(t.load(Ordering::Relaxed)))
            .collect();
        times.sort_unstable();
        times
    }
}

/// One task: 20 µs of CPU work, then record in slot `index` of `done` when it finished.
async fn job(done: Arc<Completions>, index: usize, clock: Instant) {
    let start = Instant::now();
    while start.elapsed() < WORK {
        std::hint::spin_loop();
    }
    done.0[index].store(clock.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// The scenario, independent of the runtime: `spawn_flood` and `spawn_small` spawn one job into
/// the flood's or the small batch's place, and `wait_all` waits for every spawned task.
fn run_scenario<H>(
    spawn_flood: impl Fn(Arc<Completions>, usize, Instant) -> H,
    spawn_small: impl Fn(Arc<Completions>, usize, Instant) -> H,
    wait_all: impl FnOnce(Vec<H>),
) -> Outcome {
    let clock = Instant::now();
    let flood_done = Completions::new(FLOOD_TASKS);
    let small_done = Completions::new(SMALL_TASKS);
    let mut handles = Vec::with_capacity(FLOOD_TASKS + SMALL_TASKS);

    for i in 0..FLOOD_TASKS {
        handles.push(spawn_flood(flood_done.clone(), i, clock));
    }
    if let Some(rest) = SMALL_ARRIVES_AFTER.checked_sub(clock.elapsed()) {
        thread::sleep(rest);
    }
    let small_start = clock.elapsed();
    for i in 0..SMALL_TASKS {
        handles.push(spawn_small(small_done.clone(), i, clock));
    }
    wait_all(handles);

    let flood_done = flood_done.sorted();
    let small_done = small_done.sorted();
    Outcome {
        flood: *flood_done.last().expect("the flood has tasks"),
        small: *small_done.last().expect("the small batch has tasks") - small_start,
        flood_done,
        small_done,
        small_start,
    }
}

/// rondo: the flood and the small batch each get a group of equal weight.
fn on_rondo() -> Outcome {
    let rt = rondo::Runtime::builder()
        .worker_threads(WORKERS)
        .build()
        .expect("cannot start rondo");
    let flood = rt.group().name("flood").build().expect("group");
    let small = rt.group().name("small").build().expect("group");
    run_scenario(
        |done, i, clock| flood.spawn(job(done, i, clock)),
        |done, i, clock| small.spawn(job(done, i, clock)),
        |handles| {
            rt.block_on(async {
                for h in handles {
                    h.await.expect("task failed");
                }
            })
        },
    )
}

/// tokio: the same tasks, spawned the same way; there is one queue for everything.
fn on_tokio() -> Outcome {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .build()
        .expect("cannot start tokio");
    let handle = rt.handle();
    run_scenario(
        |done, i, clock| handle.spawn(job(done, i, clock)),
        |done, i, clock| handle.spawn(job(done, i, clock)),
        |handles| {
            rt.block_on(async {
                for h in handles {
                    h.await.expect("task failed");
                }
            })
        },
    )
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Where the chart goes: the only argument if there is one, else `target/fairness.svg` in the
/// crate, wherever the example is run from.
fn chart_path() -> Result<PathBuf, String> {
    let mut args = std::env::args_os().skip(1);
    let path = match args.next() {
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fairness.svg"),
        Some(arg) => PathBuf::from(arg),
    };
    if args.next().is_some() {
        return Err(
            "usage: fairness [CHART.svg] (one optional argument: where to write the chart, \
                    target/fairness.svg by default)"
                .to_string(),
        );
    }
    if path.extension().is_none_or(|e| e != "svg") {
        return Err(format!(
            "the chart is an SVG file, so its path must end in .svg (got {})",
            path.display()
        ));
    }
    Ok(path)
}

/// At most this many points per line: a smooth curve at the chart's width, and a small SVG.
const MAX_POINTS: usize = 500;

/// The cumulative completions of one batch as (ms since the flood's first spawn, tasks done),
/// from zero at the moment the batch was spawned.
fn curve(done: &[Duration], spawned_at: Duration) -> Vec<(f64, f64)> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let step = done.len().div_ceil(MAX_POINTS);
    let mut points = vec![(ms(spawned_at), 0.0)];
    for (i, &t) in done.iter().enumerate() {
        let count = i + 1;
        if count % step == 0 || count == done.len() {
            points.push((ms(t), count as f64));
        }
    }
    points
}

const RONDO_COLOR: RGBColor = RGBColor(0x1f, 0x6f, 0xb4);
const TOKIO_COLOR: RGBColor = RGBColor(0xe0, 0x6c, 0x10);

/// Two panels on one time axis: the small batch above, the flood below, each with rondo's and
/// tokio's cumulative completions.
fn draw_chart(path: &Path, rondo: &Outcome, tokio: &Outcome) -> Result<(), Box<dyn Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let end_ms = [rondo.flood, tokio.flood, rondo.small_start + rondo.small]
        .into_iter()
        .chain([tokio.small_start + tokio.small])
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        * 1e3
        * 1.04;

    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "Tasks completed over time on {WORKERS} workers: rondo's two groups vs tokio's one \
             queue"
        ),
        ("sans-serif", 22),
    )?;
    let (top, bottom) = root.split_vertically(340);
    let panels = [
        (
            &top,
            format!(
                "small batch: {SMALL_TASKS} tasks, spawned {} ms after the flood",
                SMALL_ARRIVES_AFTER.as_millis()
            ),
            SMALL_TASKS,
            &rondo.small_done,
            rondo.small_start,
            &tokio.small_done,
            tokio.small_start,
            SeriesLabelPosition::MiddleMiddle,
        ),
        (
            &bottom,
            format!("flood: {FLOOD_TASKS} tasks"),
            FLOOD_TASKS,
            &rondo.flood_done,
            Duration::ZERO,
            &tokio.flood_done,
            Duration::ZERO,
            SeriesLabelPosition::UpperLeft,
        ),
    ];
    for (area, caption, tasks, rondo_done, rondo_start, tokio_done, tokio_start, legend) in panels {
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end_ms, 0.0..tasks as f64 * 1.08)?;
        chart
            .configure_mesh()
            .x_desc("ms since the flood's first spawn")
            .y_desc("tasks completed")
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|ms| format!("{ms:.0}"))
            .y_label_formatter(&|n| format!("{n:.0}"))
            .draw()?;
        for (name, color, done, start) in [
            (
                "rondo, each batch in its own group",
                RONDO_COLOR,
                rondo_done,
                rondo_start,
            ),
            (
                "tokio, one queue for both",
                TOKIO_COLOR,
                tokio_done,
                tokio_start,
            ),
        ] {
            chart
                .draw_series(LineSeries::new(curve(done, start), color.stroke_width(3)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
        }
        chart
            .configure_series_labels()
            .position(legend)
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.4))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let chart = chart_path().unwrap_or_else(|message| {
        eprintln!("{message}");
        std::process::exit(2);
    });
    println!(
        "A flood of {FLOOD_TASKS} tasks × {} µs of CPU work arrives; {} ms later, a small batch of \
         {SMALL_TASKS} tasks × {} µs.",
        WORK.as_micros(),
        SMALL_ARRIVES_AFTER.as_millis(),
        WORK.as_micros()
    );
    println!(
        "Both runtimes use {WORKERS} worker threads ({} cores available).",
        thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();

    let rondo = on_rondo();
    let tokio = on_tokio();

    // With half of the workers to itself, the small batch's work takes this long.
    let ideal = (WORK * SMALL_TASKS as u32).mul_f64(2.0 / WORKERS as f64);
    println!(
        "{:<22}{:>22}{:>22}",
        "", "rondo (two groups)", "tokio (one queue)"
    );
    println!(
        "{:<22}{:>22}{:>22}",
        "flood batch finished",
        ms(rondo.flood),
        ms(tokio.flood)
    );
    println!(
        "{:<22}{:>22}{:>22}",
        "small batch finished",
        ms(rondo.small),
        ms(tokio.small)
    );
    println!(
        "(times from each batch's first spawn; the small batch's fair-share ideal is {})",
        ms(ideal)
    );
    println!();

    let sooner = tokio.small.as_secs_f64() / rondo.small.as_secs_f64();
    let flood_cost = rondo.flood.as_secs_f64() / tokio.flood.as_secs_f64();
    if sooner > 1.0 {
        println!(
            "rondo finished the small batch {sooner:.0}× sooner than tokio, while its flood took \
             {flood_cost:.2}× as long as tokio's."
        );
    } else {
        println!(
            "This run did not show the effect: rondo's small batch took {:.2}× as long as tokio's \
             (flood {flood_cost:.2}×).",
            1.0 / sooner
        );
    }

    draw_chart(&chart, &rondo, &tokio)?;
    // Relative to where the demo was started, when it is inside it, so the line stays short.
    let cwd = std::env::current_dir().unwrap_or_default();
    let shown = chart.strip_prefix(&cwd).unwrap_or(&chart);
    println!(
        "Chart of the tasks completed over time: {}",
        shown.display()
    );
    Ok(())
}
