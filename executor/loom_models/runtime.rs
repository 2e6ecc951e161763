//! loom models of the runtime's lock-free protocols.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models::runtime`.

// The local-queue models document their owner-only pushes and pops with one `SAFETY` comment per
// model (the model's thread owns the queue), not one per `unsafe` block.
#![allow(clippy::undocumented_unsafe_blocks)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::fair::inbox::Inbox;
use crate::fair::lane::Lane;
use crate::group::listed::{LaneEntry, LaneFlag, ListFlag, Listing};
use crate::group::queue::GroupQueue;
use crate::worker::idle::{Idle, Search, Stopped};
use crate::worker::local::LocalQueue;
use crate::worker::parker::Parker;

// `model_bounded`: the three-thread models, and the two-thread ones whose unbounded runs take
// minutes.
use super::{model, model_bounded};

/// A group queue (the runtime's own type), its list flag, and the "in rotation" bit the scheduler
/// lock protects.
struct Group {
    queue: GroupQueue<u32>,
    flag: ListFlag,
    in_rotation: Mutex<bool>,
}

/// The queue tiers a listing model runs with: cold throughout, promoted by the second push, hot
/// from the start.
const TIERS: [(u32, usize); 3] = [(u32::MAX, usize::MAX), (u32::MAX, 1), (0, usize::MAX)];

impl Group {
    fn new((contended, len): (u32, usize)) -> Arc<Group> {
        Arc::new(Group {
            queue: GroupQueue::with_promotion(contended, len),
            flag: ListFlag::default(),
            in_rotation: Mutex::new(false),
        })
    }

    fn push(&self, v: u32) {
        self.queue.push(v).unwrap();
        if self.flag.after_push() == Listing::Insert {
            *self.in_rotation.lock().unwrap() = true;
        }
    }

    /// The scheduler's pick (`Scheduler::pick_and_take`): under the rotation's lock it takes a
    /// task and, if that left the queue empty (`take_batch`'s count), unlists the group; after
    /// the lock it re-checks the queue and lists the group again if a push slipped in.
    fn take_and_unlist(&self) {
        let unlisted = {
            let mut rot = self.in_rotation.lock().unwrap();
            let mut batch = Vec::new();
            let left = self
                .queue
                .take_batch(|_| 1, &mut batch)
                .map_or(0, |(_, left)| left);
            if *rot && left == 0 {
                *rot = false;
                self.flag.clear();
                true
            } else {
                false
            }
        };
        if unlisted && self.flag.after_clear(|| self.queue.is_empty()) == Listing::Insert {
            *self.in_rotation.lock().unwrap() = true;
        }
    }
}

/// A worker drains the last task and unlists the group while a spawner pushes a new one: the new
/// task must never sit in a queue whose group is out of the rotation.
#[test]
fn listing_never_strands_a_task() {
    for tier in TIERS {
        listing_never_strands_a_task_with(tier);
    }
}

fn listing_never_strands_a_task_with(tier: (u32, usize)) {
    model(move || {
        let g = Group::new(tier);
        g.push(1);
        assert!(*g.in_rotation.lock().unwrap());

        let worker = {
            let g = g.clone();
            thread::spawn(move || g.take_and_unlist())
        };
        let spawner = {
            let g = g.clone();
            thread::spawn(move || g.push(2))
        };
        worker.join().unwrap();
        spawner.join().unwrap();
        assert!(
            g.queue.is_empty() || *g.in_rotation.lock().unwrap(),
            "a queued task was left in an unlisted group"
        );
    });
}

/// Two workers each drain and unlist while the group is refilled: still never stranded.
#[test]
fn listing_two_removers() {
    for tier in TIERS {
        model_bounded(move || listing_two_removers_with(tier));
    }
}

fn listing_two_removers_with(tier: (u32, usize)) {
    let g = Group::new(tier);
    g.push(1);
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let g = g.clone();
            thread::spawn(move || g.take_and_unlist())
        })
        .collect();
    g.push(2);
    for w in workers {
        w.join().unwrap();
    }
    assert!(g.queue.is_empty() || *g.in_rotation.lock().unwrap());
}

/// One worker parks (with the re-check) while a producer publishes work and notifies: the worker
/// must end up with the work (loom reports a deadlock if it sleeps forever).
/// Worker 0's half of parking: registers as a sleeper, fences, re-checks for work (`has_work`),
/// then either wakes itself or waits for a notification, consumed with a CAS as the runtime does
/// (a failed CAS writes nothing).
fn park_unless(idle: &Idle, notified: &AtomicBool, has_work: impl Fn() -> bool) {
    park_unless_as(idle, notified, false, has_work);
}

/// [`park_unless`] for a worker 0 that was searching (`searching`) or not when it ran out of work.
fn park_unless_as(
    idle: &Idle,
    notified: &AtomicBool,
    searching: bool,
    has_work: impl Fn() -> bool,
) {
    idle.sleep(0, searching);
    fence(Ordering::SeqCst);
    if has_work() {
        idle.wake_self(0, || notified.store(false, Ordering::Relaxed));
    } else {
        while notified
            .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            thread::park();
        }
    }
}

/// A pusher's half of parking, after it made its work visible: fences, then notifies a sleeper
/// (worker 0, whose thread is `worker`), as `Shared::notify_work` does.
fn notify_after_fence(idle: &Idle, notified: &Arc<AtomicBool>, worker: &thread::Thread) {
    fence(Ordering::SeqCst);
    let n = notified.clone();
    if idle
        .notify_one(|_| n.store(true, Ordering::Release))
        .is_some()
    {
        worker.unpark();
    }
}

#[test]
fn park_and_notify_lose_no_wakeup() {
    model(|| {
        let idle = Arc::new(Idle::new(1));
        let work = Arc::new(AtomicUsize::new(0));
        let notified = Arc::new(AtomicBool::new(false));

        let worker = {
            let (idle, work, notified) = (idle.clone(), work.clone(), notified.clone());
            thread::spawn(move || {
                park_unless(&idle, &notified, || work.load(Ordering::SeqCst) != 0);
                assert_eq!(work.swap(0, Ordering::SeqCst), 1, "woken without the work");
            })
        };
        let handle = worker.thread().clone();

        work.store(1, Ordering::SeqCst);
        notify_after_fence(&idle, &notified, &handle);
        worker.join().unwrap();
        assert_eq!(
            idle.counts(),
            (1, 1),
            "the woken worker is counted awake and searching"
        );
    });
}

/// A worker that wakes on its own (a `block_on` future fired) races a notifier that chose it:
/// the counts stay exact and the notification is consumed exactly once.
#[test]
fn self_wake_races_notifier() {
    model(|| {
        let idle = Arc::new(Idle::new(1));
        let notified = Arc::new(AtomicBool::new(false));
        idle.sleep(0, false);

        let notifier = {
            let (idle, notified) = (idle.clone(), notified.clone());
            thread::spawn(move || {
                idle.notify_one(|_| notified.store(true, Ordering::Release));
            })
        };
        idle.wake_self(0, || notified.store(false, Ordering::Relaxed));
        notifier.join().unwrap();
        assert_eq!(idle.counts(), (1, 1));
        assert!(
            !notified.load(Ordering::Acquire),
            "a stale notification was left behind"
        );
    });
}

/// Two pushers and a popper race on a group queue that promotes itself to its hot tier when a
/// push finds two items queued (loom cannot make `try_lock` fail, so the model promotes by length):
/// every item comes out exactly once, and each pusher's items in the order it pushed them, whether
/// they were taken before, during or after the promotion.
#[test]
fn promotion_keeps_order_and_loses_nothing() {
    model(|| {
        let q = Arc::new(GroupQueue::with_promotion(u32::MAX, 2));
        let a = {
            let q = q.clone();
            thread::spawn(move || {
                q.push(1).unwrap();
                q.push(2).unwrap();
            })
        };
        let b = {
            let q = q.clone();
            thread::spawn(move || {
                q.push(10).unwrap();
                q.push(20).unwrap();
            })
        };
        let mut got = Vec::new();
        got.extend(q.pop());
        a.join().unwrap();
        b.join().unwrap();
        while let Some(v) = q.pop() {
            got.push(v);
        }
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 10, 20], "lost or duplicated: {got:?}");
        let pos = |v| got.iter().position(|&x| x == v).unwrap();
        assert!(pos(1) < pos(2) && pos(10) < pos(20), "reordered: {got:?}");
    });
}

/// `close` races a push that promotes the queue: after `close` returns, no push succeeds, and
/// every item whose push succeeded is still there to pop.
#[test]
fn close_races_promotion() {
    model(|| {
        let q = Arc::new(GroupQueue::with_promotion(u32::MAX, 1));
        q.push(0).unwrap();
        let pusher = {
            let q = q.clone();
            thread::spawn(move || q.push(1).is_ok())
        };
        q.close();
        let late = q.push(2).is_ok();
        let pushed = pusher.join().unwrap();
        assert!(!late, "a push after close succeeded");
        assert_eq!(q.pop(), Some(0));
        assert_eq!(q.pop().is_some(), pushed);
        assert_eq!(q.pop(), None);
    });
}

/// Shutdown against a parking core (the runtime's own `Parker`): the shutting-down thread sets its
/// flag and then unparks; the core checks the flag and then parks. Whatever the interleaving, the
/// core never sleeps through the shutdown (the pair used to rely on a thread handle that might not
/// be published yet, and on a fence only the worker side issued).
#[test]
fn shutdown_never_misses_a_parking_core() {
    model(|| {
        let parker = Arc::new(Parker::new());
        let shutdown = Arc::new(AtomicBool::new(false));
        let core = {
            let (parker, shutdown) = (parker.clone(), shutdown.clone());
            thread::spawn(move || {
                while !shutdown.load(Ordering::SeqCst) {
                    parker.park();
                }
            })
        };
        shutdown.store(true, Ordering::SeqCst);
        parker.unpark();
        core.join().unwrap();
    });
}

/// The waker of a model's block_on.
struct Woken(loom::sync::Notify);

impl std::task::Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.notify();
    }
}

/// A core waiting in the reactor (the runtime's own `Parker` in its waker mode): its loop polls
/// `poll_park` from a `block_on` until two flags are set, while two notifiers each set their flag
/// and unpark. An unpark between the core's check and its registration, or one that takes the
/// waker while the core re-registers, is never lost: the core always ends.
#[test]
fn an_unpark_always_wakes_a_waiting_core() {
    // Three threads: bounded like the other three-thread models.
    model_bounded(|| {
        let parker = Arc::new(Parker::new());
        let flags = Arc::new(AtomicUsize::new(0));
        let notifiers: Vec<_> = (0..2)
            .map(|_| {
                let (parker, flags) = (parker.clone(), flags.clone());
                thread::spawn(move || {
                    flags.fetch_add(1, Ordering::SeqCst);
                    parker.unpark();
                })
            })
            .collect();
        // A block_on: poll, and wait for the waker between polls.
        let woken = std::sync::Arc::new(Woken(loom::sync::Notify::new()));
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        while flags.load(Ordering::SeqCst) < 2 {
            if parker.poll_park(&mut cx).is_pending() {
                woken.0.wait();
            }
        }
        for n in notifiers {
            n.join().unwrap();
        }
    });
}

/// A core that stops waiting through its waker (its deadline passed: `cancel_wait`) and then
/// blocks in the same parker (it lost the keeper role) never sleeps through a shutdown that
/// unparked it while its waker was registered.
#[test]
fn a_cancelled_wait_then_a_park_misses_no_unpark() {
    model(|| {
        let parker = Arc::new(Parker::new());
        let shutdown = Arc::new(AtomicBool::new(false));
        let core = {
            let (parker, shutdown) = (parker.clone(), shutdown.clone());
            thread::spawn(move || {
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                if !shutdown.load(Ordering::SeqCst) && parker.poll_park(&mut cx).is_pending() {
                    parker.cancel_wait();
                }
                while !shutdown.load(Ordering::SeqCst) {
                    parker.park();
                }
            })
        };
        shutdown.store(true, Ordering::SeqCst);
        parker.unpark();
        core.join().unwrap();
    });
}

/// A thief: steals half of `victim` into a queue of its own on a new thread, and returns every
/// item it took (the one `steal_half_into` returned, then its own queue's).
fn steal_half_on_a_thread(victim: &Arc<LocalQueue<u32>>) -> thread::JoinHandle<Vec<u32>> {
    let victim = victim.clone();
    thread::spawn(move || {
        let mine = LocalQueue::<u32>::new();
        // SAFETY: this thread owns `mine` (its only pusher and popper).
        let mut got: Vec<u32> =
            unsafe { victim.steal_half_into(&mine, |_| panic!("an empty queue overflowed")) }
                .into_iter()
                .collect();
        // SAFETY: as above.
        while let Some(v) = unsafe { mine.pop() } {
            got.push(v);
        }
        got
    })
}

/// The runtime's own local queue: its owner pushes and pops while a thief steals half into its own
/// queue. Every item is taken exactly once, by the owner, the thief's return value, or the thief's
/// queue.
#[test]
fn local_queue_steal_races_the_owner() {
    model(|| {
        let victim = Arc::new(LocalQueue::<u32>::new());
        // SAFETY (every push and pop on `victim` in this model): this thread is its owner.
        unsafe {
            victim.push(1).unwrap();
            victim.push(2).unwrap();
        }
        let thief = steal_half_on_a_thread(&victim);
        unsafe { victim.push(3).unwrap() };
        let mut got: Vec<u32> = unsafe { victim.pop() }.into_iter().collect();
        got.extend(thief.join().unwrap());
        while let Some(v) = unsafe { victim.pop() } {
            got.push(v);
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2, 3], "lost or duplicated");
    });
}

/// A full local queue while a thief copies out of it: the owner's pushes wait for the copy (they
/// measure free space from the oldest slot a thief may still read), so loom's cell checks see no
/// slot written while it is read, and no item is lost or taken twice.
#[test]
fn local_queue_owner_refills_a_full_queue_during_a_steal() {
    model_bounded(|| {
        let cap = crate::worker::local::LOCAL_CAPACITY as u32;
        let victim = Arc::new(LocalQueue::<u32>::new());
        // SAFETY (every push and pop on `victim` by this thread): this thread is its owner.
        for i in 0..cap {
            unsafe { victim.push(i).unwrap() };
        }
        assert!(
            unsafe { victim.push(cap) }.is_err(),
            "a full queue took an item"
        );
        let thief = steal_half_on_a_thread(&victim);
        let mut got: Vec<u32> = unsafe { victim.pop() }.into_iter().collect();
        // Refill: each push succeeds only into a slot no thief is reading.
        let mut next = cap;
        for _ in 0..2 {
            if unsafe { victim.push(next) }.is_ok() {
                next += 1;
            }
        }
        got.extend(thief.join().unwrap());
        while let Some(v) = unsafe { victim.pop() } {
            got.push(v);
        }
        got.sort_unstable();
        assert_eq!(got, (0..next).collect::<Vec<u32>>(), "lost or duplicated");
    });
}

/// A worker about to park while a thief (worker 1, searching) copies out of the only local queue
/// with work: the parker counts a queue as work only while a thief could take from it
/// (`Shared::has_visible_work`), so it may park during the steal. The thief then stops searching
/// and, if it was the last searcher, wakes a sleeper (`Core::found_work`); if it was not, the
/// parker was still searching and its re-check sees the rest. Either way the item the thief leaves
/// is taken (the queue's owner, which would run it too, stays out of this model). Both for a
/// parker that was searching and for one that was not.
#[test]
fn a_thief_leaves_no_worker_asleep_beside_the_work_it_left() {
    for parker_searching in [false, true] {
        model(move || {
            // Four workers, so that two may search at once; workers 2 and 3 stay awake.
            let idle = Arc::new(Idle::new(4));
            assert_eq!(idle.try_search(), Search::Started);
            if parker_searching {
                assert_eq!(idle.try_search(), Search::Started);
            }
            let victim = Arc::new(LocalQueue::<u32>::new());
            // SAFETY: this thread is the queue's owner until the threads start, and pushes no more.
            unsafe {
                victim.push(1).unwrap();
                victim.push(2).unwrap();
            }
            let notified = Arc::new(AtomicBool::new(false));
            let parker = {
                let (idle, victim, notified) = (idle.clone(), victim.clone(), notified.clone());
                thread::spawn(move || {
                    park_unless_as(&idle, &notified, parker_searching, || victim.is_stealable());
                    std::iter::from_fn(|| victim.steal()).collect::<Vec<_>>()
                })
            };
            let handle = parker.thread().clone();
            // The thief, on this thread.
            let mine = LocalQueue::<u32>::new();
            // SAFETY: this thread owns `mine`.
            let mut got: Vec<u32> =
                unsafe { victim.steal_half_into(&mine, |_| panic!("an empty queue overflowed")) }
                    .into_iter()
                    .collect();
            if !got.is_empty() && idle.stop_searching() == Stopped::Last {
                notify_after_fence(&idle, &notified, &handle);
            }
            // SAFETY: as above.
            while let Some(v) = unsafe { mine.pop() } {
                got.push(v);
            }
            got.extend(parker.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, vec![1, 2], "lost or duplicated");
        });
    }
}

/// Shutdown's drain takes from a core's queue while a thief steals from it: the drain waits for
/// the steal under way instead of giving up while items remain, and each item is taken once.
#[test]
fn local_queue_drain_waits_for_a_steal() {
    model_bounded(|| {
        let victim = Arc::new(LocalQueue::<u32>::new());
        // SAFETY: this thread is the queue's owner.
        for i in 0..3 {
            unsafe { victim.push(i).unwrap() };
        }
        let thief = steal_half_on_a_thread(&victim);
        let mut got = Vec::new();
        while let Some(v) = victim.steal() {
            got.push(v);
        }
        got.extend(thief.join().unwrap());
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2], "lost or duplicated");
    });
}

/// The runtime's timer host, reduced to what the keeper protocol needs: the real `Keeper`, and a
/// core's real `Parker` (`Unpark`), or a flag for "wake a sleeping core" (`Notify`).
struct TimerHostModel {
    keeper: crate::time::keeper::Keeper,
    parker: Parker,
    notified: AtomicBool,
}

impl crate::time::driver::TimerHost for TimerHostModel {
    fn timer_lowered(&self, tick: u64) {
        use crate::time::keeper::Lowered;
        match self.keeper.lowered(tick) {
            Lowered::InTime => {}
            Lowered::Unpark(_) => self.parker.unpark(),
            Lowered::Notify => self.notified.store(true, Ordering::SeqCst),
        }
    }
}

fn timers_with_host() -> (
    std::sync::Arc<TimerHostModel>,
    std::sync::Arc<crate::time::driver::Timers>,
) {
    let host = std::sync::Arc::new(TimerHostModel {
        keeper: crate::time::keeper::Keeper::new(),
        parker: Parker::new(),
        notified: AtomicBool::new(false),
    });
    let weak: std::sync::Weak<dyn crate::time::driver::TimerHost> =
        std::sync::Arc::downgrade(&host) as _;
    (
        host,
        std::sync::Arc::new(crate::time::driver::Timers::new(1, weak)),
    )
}

/// Arms a timer `after` from now in worker 0's shard (the real arm path).
fn arm(
    timers: &crate::time::driver::Timers,
    after: std::time::Duration,
) -> crate::time::driver::Registration {
    let waker = futures::task::noop_waker();
    let deadline = std::time::Instant::now() + after;
    match crate::time::driver::Registration::arm(
        timers.shard(Some(0), 0),
        deadline,
        std::time::Duration::ZERO,
        &waker,
    ) {
        crate::time::driver::Armed::Waiting(r) => r,
        _ => panic!("the timer should wait"),
    }
}

/// A core parks as the keeper (the loop of `Core::park`: become keeper, read the bound, publish
/// the wake-up tick, re-read) while another thread arms an earlier timer: either the keeper's
/// tick is no later than the new timer's, or the armer has unparked it (its park returns).
#[test]
fn an_earlier_timer_always_reaches_the_keeper() {
    model_bounded(|| {
        let (host, timers) = timers_with_host();
        let far = arm(&timers, std::time::Duration::from_secs(3600));
        // Arming it with no keeper asked for a sleeping core; that core is the keeper below.
        assert!(host.notified.swap(false, Ordering::SeqCst));
        let (h2, t2) = (host.clone(), timers.clone());
        let keeper = thread::spawn(move || {
            assert!(h2.keeper.try_keep(0));
            let mut due = t2.earliest();
            loop {
                h2.keeper.publish(due);
                let again = t2.earliest();
                if again >= due {
                    return due;
                }
                due = again;
            }
        });
        let near = arm(&timers, std::time::Duration::from_millis(1));
        let planned = keeper.join().unwrap();
        if planned > timers.earliest() {
            // It would wake too late: the armer must have set its parker's token (a park that
            // does not return is a loom deadlock, and fails the model).
            host.parker.park();
        }
        // Asking for a sleeping core is right only if the keeper had not yet claimed its role;
        // then it read the new bound after claiming it.
        assert!(!host.notified.load(Ordering::SeqCst) || planned <= timers.earliest());
        drop((near, far));
    });
}

/// A processing pass recomputes the bound while another thread arms a timer: the bound never
/// ends above the new timer.
#[test]
fn processing_never_loses_a_concurrent_arm() {
    model_bounded(|| {
        let (_host, timers) = timers_with_host();
        let t2 = timers.clone();
        let processor = thread::spawn(move || {
            let mut wakers = Vec::new();
            t2.process(
                std::time::Instant::now(),
                &mut wakers,
                crate::time::driver::IfBusy::Skip,
            );
            assert!(wakers.is_empty());
        });
        let near = arm(&timers, std::time::Duration::from_millis(50));
        processor.join().unwrap();
        let bound = timers.earliest();
        assert_ne!(
            bound,
            crate::time::driver::NEVER,
            "the armed timer was lost from the bound"
        );
        drop(near);
    });
}

/// Two processing passes at once, one that skips if the other runs (a busy worker) and one that
/// waits for it (the keeper whose deadline passed): the waiting one returns (no deadlock), the due
/// timer fires exactly once, and the bound ends empty.
#[test]
fn a_waiting_pass_and_a_skipping_pass_fire_a_due_timer_once() {
    use crate::time::driver::IfBusy;
    model_bounded(|| {
        let (_host, timers) = timers_with_host();
        let due = arm(&timers, std::time::Duration::from_millis(1));
        let later = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let t2 = timers.clone();
        let skipper = thread::spawn(move || {
            let mut wakers = Vec::new();
            t2.process(later, &mut wakers, IfBusy::Skip)
        });
        let mut wakers = Vec::new();
        let waited = timers.process(later, &mut wakers, IfBusy::Wait);
        let skipped = skipper.join().unwrap();
        assert_eq!(
            waited + skipped,
            1,
            "the due timer fired {} times",
            waited + skipped
        );
        assert_eq!(timers.earliest(), crate::time::driver::NEVER);
        drop(due);
    });
}

/// A task in a lane model: its value and its group's lane flag (a runtime task reaches its
/// group's flag through its metadata).
struct Item(u32, Arc<LaneFlag>);

/// A pusher's half of `fair::lane` for a group with flag `flag`: the lane if the flag was free,
/// else the group's own queue (the runtime's `push_from_outside`, without the floor test).
fn push_outside(lane: &Lane<Item>, flag: &Arc<LaneFlag>, queue: &Mutex<Vec<u32>>, v: u32) {
    if flag.enter() == LaneEntry::Entered {
        if let Err(Item(v, _)) = lane.push(flag, Item(v, flag.clone()), 0) {
            queue.lock().unwrap().push(v);
        }
    } else {
        queue.lock().unwrap().push(v);
    }
}

/// Takes the lane's oldest task's value, freeing its group's flag.
fn take(lane: &Lane<Item>) -> Option<u32> {
    lane.pop(|item| &item.1).map(|(Item(v, _), _)| v)
}

/// Two threads push tasks of one group from outside while a worker takes from the lane: every
/// task comes out exactly once (from the lane or the group's queue), the lane never holds two
/// tasks of the group, and once the lane is empty the group's flag is free again.
#[test]
fn lane_loses_no_task_and_keeps_one_per_group() {
    model_bounded(|| {
        let lane = Arc::new(Lane::<Item>::default());
        let flag = Arc::new(LaneFlag::default());
        let queue = Arc::new(Mutex::new(Vec::new()));
        let pushers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|v| {
                let (lane, flag, queue) = (lane.clone(), flag.clone(), queue.clone());
                thread::spawn(move || {
                    push_outside(&lane, &flag, &queue, v);
                    assert!(lane.len() <= 1, "two tasks of one group in the lane");
                })
            })
            .collect();
        let mut taken = Vec::new();
        if let Some(v) = take(&lane) {
            taken.push(v);
        }
        for p in pushers {
            p.join().unwrap();
        }
        while let Some(v) = take(&lane) {
            taken.push(v);
        }
        assert!(
            !flag.is_set(),
            "the flag outlived the group's task in the lane"
        );
        taken.extend(queue.lock().unwrap().iter().copied());
        taken.sort_unstable();
        assert_eq!(taken, [1, 2]);
    });
}

/// Shutdown closes the lane while a pusher puts a task in it: the task either waits in the lane
/// (and the drain takes it) or comes back to its pusher, never both and never neither, and the
/// group's flag ends free.
#[test]
fn closing_the_lane_races_a_push() {
    model(|| {
        let lane = Arc::new(Lane::<Item>::default());
        let flag = Arc::new(LaneFlag::default());
        let pusher = {
            let (lane, flag) = (lane.clone(), flag.clone());
            thread::spawn(move || {
                assert_eq!(flag.enter(), LaneEntry::Entered);
                lane.push(&flag, Item(7, flag.clone()), 0)
                    .err()
                    .map(|Item(v, _)| v)
            })
        };
        lane.close();
        let mut drained = Vec::new();
        while let Some(v) = take(&lane) {
            drained.push(v);
        }
        let returned = pusher.join().unwrap();
        // A push that lands between the close's drain and the join is impossible: a closed queue
        // refuses it.
        while let Some(v) = take(&lane) {
            drained.push(v);
        }
        assert_eq!(drained.len() + usize::from(returned.is_some()), 1);
        assert!(!flag.is_set());
    });
}

/// A worker about to park and a thread that wakes a task into the lane: the worker either sees
/// the task in its re-check or is notified (the pusher fences after its push, as the runtime's
/// `push_from_outside` does, and the parker after registering as a sleeper).
#[test]
fn a_push_into_the_lane_reaches_a_parking_worker() {
    model(|| {
        let idle = Arc::new(Idle::new(1));
        let lane = Arc::new(Lane::<Item>::default());
        let flag = Arc::new(LaneFlag::default());
        let notified = Arc::new(AtomicBool::new(false));
        let worker = {
            let (idle, lane, notified) = (idle.clone(), lane.clone(), notified.clone());
            thread::spawn(move || {
                park_unless(&idle, &notified, || !lane.is_empty());
                take(&lane)
            })
        };
        let handle = worker.thread().clone();
        assert_eq!(flag.enter(), LaneEntry::Entered);
        assert!(lane.push(&flag, Item(5, flag.clone()), 0).is_ok());
        notify_after_fence(&idle, &notified, &handle);
        assert_eq!(worker.join().unwrap(), Some(5), "woken without the task");
        assert!(!flag.is_set());
    });
}

/// A worker about to park and a pusher listing a group (`Scheduler::list`): the pusher counts
/// the group, queues it in its shard's inbox, fences and looks for a sleeper to wake. The
/// worker's re-check counts a listed group only where a pick can find it (the inbox here), not by
/// the count alone (`Shared::has_visible_work`), so it may park between the pusher's count and
/// its push; it must then be woken, and find the group when it is.
#[test]
fn a_listing_reaches_a_worker_that_parks_before_the_push() {
    model(|| {
        let idle = Arc::new(Idle::new(1));
        let listed = Arc::new(AtomicUsize::new(0));
        let inbox = Arc::new(Inbox::<u32>::default());
        let notified = Arc::new(AtomicBool::new(false));
        let worker = {
            let (idle, listed, inbox, notified) = (
                idle.clone(),
                listed.clone(),
                inbox.clone(),
                notified.clone(),
            );
            thread::spawn(move || {
                park_unless(&idle, &notified, || {
                    listed.load(Ordering::SeqCst) > 0 && inbox.front(0).is_some()
                });
                let mut got = Vec::new();
                inbox.drain(|v| got.push(v));
                got
            })
        };
        let handle = worker.thread().clone();
        listed.fetch_add(1, Ordering::SeqCst);
        inbox.push(7, 0).unwrap();
        notify_after_fence(&idle, &notified, &handle);
        assert_eq!(
            worker.join().unwrap(),
            vec![7],
            "woken without the listed group"
        );
    });
}

/// A worker visiting a rotation shard drains its inbox (the hint reset first) while a pusher
/// lists a group there, behind an earlier listing: no listed group is lost, and whatever is left
/// in the inbox is never hidden behind a hint higher than where it enters (`Inbox::front` may be
/// too low, or the floor for a hint not set yet, never too high), so picks and quantum ends that
/// compare shards by their hints never pass over it for good. Both orders of the two listings'
/// entry points: a later group entering lower and one entering higher.
#[test]
fn an_inbox_never_hides_a_listed_group() {
    for (earlier, later) in [(9u64, 5u64), (5, 9)] {
        model(move || {
            let inbox = Arc::new(Inbox::<u64>::default());
            inbox.push(earlier, earlier).unwrap();
            let lister = {
                let inbox = inbox.clone();
                thread::spawn(move || inbox.push(later, later).unwrap())
            };
            let visitor = {
                let inbox = inbox.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    inbox.drain(|v| got.push(v));
                    got
                })
            };
            lister.join().unwrap();
            let mut all = visitor.join().unwrap();
            let front = inbox.front(0);
            let mut left = Vec::new();
            inbox.drain(|v| left.push(v));
            match left.iter().min() {
                Some(&lowest) => assert!(
                    front.is_some_and(|f| f <= lowest),
                    "{left:?} waiting behind a hint of {front:?}"
                ),
                None => assert_eq!(front, None, "a hint for an empty inbox"),
            }
            all.extend(left);
            all.sort_unstable();
            let mut want = vec![earlier, later];
            want.sort_unstable();
            assert_eq!(all, want, "a listed group was lost or doubled");
        });
    }
}

/// A group's tree node is set once (`group::tree::SetOnce`) while other threads read it: a reader
/// sees nothing or the whole value, never a torn or freed one, and of two setters exactly one
/// wins and the other gets its value back.
#[test]
fn set_once_publishes_whole_and_one_setter_wins() {
    use crate::group::tree::SetOnce;
    model(|| {
        let slot = Arc::new(SetOnce::<(u32, u32)>::default());
        let setters: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|v| {
                let slot = slot.clone();
                thread::spawn(move || slot.set(Box::new((v, v * 10))).is_ok())
            })
            .collect();
        if let Some(&(a, b)) = slot.get() {
            assert_eq!(b, a * 10, "a reader saw a torn value");
        }
        let won: usize = setters
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum();
        assert_eq!(won, 1, "not exactly one setter won");
        let &(a, b) = slot.get().expect("set, and never removed");
        assert_eq!(b, a * 10);
    });
}
