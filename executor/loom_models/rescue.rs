//! loom models of starvation rescue: the claim protocol of a core lent to a poll
//! (`executor/worker/lent.rs`, the runtime's own `LentSlot`), and the stall monitor's idle sleep
//! (`Idle::wait_for_awake`). loom models the asymmetric barrier pair of the claim as two SeqCst
//! fences.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models::rescue`.
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::worker::idle::Idle;
use crate::worker::lent::{Lease, LentSlot, is_lent};

use super::model;

/// A stand-in for a core: the LIFO slot a wake fills.
#[derive(Default)]
struct Core {
    lifo: Vec<u32>,
}

/// A wake during the poll: into the core's LIFO slot if the poll still has its core, otherwise to
/// the global queue (what `schedule` does with `with_core`).
fn wake(
    slot: &LentSlot<Core>,
    lease: crate::worker::lent::Lease,
    global: &Mutex<Vec<u32>>,
    v: u32,
) {
    // The hint is what the runtime passes: whether the LIFO slot holds a task.
    let (_, still) = slot.with(
        lease,
        |core| match core {
            Some(core) => core.lifo.push(v),
            None => global.lock().unwrap().push(v),
        },
        |core| !core.lifo.is_empty(),
    );
    let _ = still;
}

/// A core lent to a poll: the slot, the global queue wakes fall back to, the poll's lease, and the
/// slot's word as the monitor observes it.
#[allow(clippy::type_complexity)]
fn lent_core() -> (Arc<LentSlot<Core>>, Arc<Mutex<Vec<u32>>>, Lease, u64) {
    let slot = Arc::new(LentSlot::<Core>::new());
    let global = Arc::new(Mutex::new(Vec::new()));
    let lease = slot.lend(Box::new(Core::default()), false);
    let observed = slot.observe();
    (slot, global, lease, observed)
}

/// The rescuer claims the core while the poll thread wakes a task and then takes its core back:
/// exactly one of them ends up with the core, a second claim of the same lease fails, and the
/// wake is in the core or in the global queue, never lost and never in both.
#[test]
fn a_claim_and_the_polls_own_accesses_give_the_core_to_exactly_one_thread() {
    model(|| {
        let (slot, global, lease, observed) = lent_core();
        assert!(is_lent(observed));

        let rescuer = {
            let slot = slot.clone();
            thread::spawn(move || {
                let first = slot.claim(observed);
                // The monitor's next tick: the same lease is never claimed twice.
                let again = slot.claim(slot.observe());
                assert!(first.is_none() || again.is_none());
                first.or(again)
            })
        };

        wake(&slot, lease, &global, 1);
        let mine = slot.take_back(lease);
        let theirs = rescuer.join().unwrap();

        assert!(
            mine.is_some() != theirs.is_some(),
            "the core must have exactly one owner"
        );
        let core = mine.or(theirs).unwrap();
        let global = global.lock().unwrap();
        assert_eq!(
            core.lifo.len() + global.len(),
            1,
            "the wake was lost or duplicated"
        );
    });
}

/// After a claim, the rescue thread lends the core again for its own polls while the stuck poll
/// (holding the old lease) wakes a task and tries to take the core back: the old lease never
/// reaches the core again, and the new lease keeps it.
#[test]
fn a_stale_lease_never_takes_back_a_core_lent_again() {
    model(|| {
        let (slot, global, lease, observed) = lent_core();

        let rescuer = {
            let slot = slot.clone();
            let global = global.clone();
            thread::spawn(move || {
                let core = slot.claim(observed)?;
                // The rescue thread's own poll, with a wake of its own.
                let lease2 = slot.lend(core, false);
                wake(&slot, lease2, &global, 2);
                let core = slot.take_back(lease2);
                assert!(core.is_some(), "the new lease lost its core");
                core
            })
        };

        wake(&slot, lease, &global, 1);
        let mine = slot.take_back(lease);
        let theirs = rescuer.join().unwrap();

        assert!(mine.is_some() != theirs.is_some());
        let core = mine.or(theirs).unwrap();
        let global = global.lock().unwrap();
        let wakes = core.lifo.len() + global.len();
        let expected = if global.contains(&2) || core.lifo.contains(&2) {
            2
        } else {
            1
        };
        assert_eq!(wakes, expected, "a wake was lost or duplicated");
    });
}

/// Two accesses by the poll thread around one claim attempt: the claim wins only between them,
/// and the poll's second access then sees no core.
#[test]
fn a_claim_between_two_accesses_is_seen_by_the_second() {
    model(|| {
        let (slot, global, lease, observed) = lent_core();

        let rescuer = {
            let slot = slot.clone();
            thread::spawn(move || slot.claim(observed))
        };

        wake(&slot, lease, &global, 1);
        wake(&slot, lease, &global, 2);
        let mine = slot.take_back(lease);
        let theirs = rescuer.join().unwrap();

        assert!(mine.is_some() != theirs.is_some());
        let core = mine.or(theirs).unwrap();
        let global = global.lock().unwrap();
        let mut all: Vec<u32> = core.lifo.iter().chain(global.iter()).copied().collect();
        all.sort_unstable();
        assert_eq!(all, [1, 2]);
        // Once a wake found the core gone, every later one does too.
        if global.contains(&1) {
            assert!(global.contains(&2));
        }
    });
}

/// The stall monitor sleeps without a timeout while no worker is awake; the notifier that wakes
/// the first worker wakes it: it never sleeps through the wake (loom reports a deadlock if it
/// does).
#[test]
fn the_monitor_never_sleeps_through_the_first_wake() {
    the_first_wake_reaches_the_monitor(true);
}

/// The same without a kernel timer: the first waker unparks the monitor.
#[test]
fn the_monitor_never_sleeps_through_the_first_wake_without_a_timer() {
    the_first_wake_reaches_the_monitor(false);
}

fn the_first_wake_reaches_the_monitor(alarm: bool) {
    model(move || {
        let idle = Idle::new(1);
        let idle = Arc::new(if alarm { idle } else { idle.without_alarm() });
        // The only worker parks.
        idle.sleep(0, false);
        assert_eq!(idle.counts().0, 0);
        let notified = Arc::new(AtomicBool::new(false));

        let monitor = {
            let idle = idle.clone();
            thread::spawn(move || {
                idle.wait_for_awake(|| false);
                assert!(idle.counts().0 > 0);
            })
        };
        {
            let notified = notified.clone();
            // A spawner makes work visible and wakes the sleeper.
            let chosen = idle.notify_one(|_| notified.store(true, Ordering::SeqCst));
            assert_eq!(chosen, Some(0));
        }
        monitor.join().unwrap();
        assert!(notified.load(Ordering::SeqCst));
    });
}

/// With a kernel timer, the first worker to wake arms the monitor's alarm and the last to park
/// disarms it, both under the sleepers lock: a worker that wakes, parks and wakes again (or two
/// workers doing so in turn) always leaves the alarm armed while one is awake, so the monitor
/// never sleeps through the last wake (loom reports a deadlock if it does), whatever the order of
/// the arms, the disarm and the monitor's own wait.
#[test]
fn a_disarm_never_cancels_the_alarm_of_a_later_wake() {
    model(|| {
        let idle = Arc::new(Idle::new(2));
        // Both workers park.
        idle.sleep(0, false);
        idle.sleep(1, false);
        let monitor = {
            let idle = idle.clone();
            thread::spawn(move || {
                idle.wait_for_awake(|| false);
            })
        };
        // Worker 0 is woken, then parks again.
        let first = {
            let idle = idle.clone();
            thread::spawn(move || {
                idle.wake_self(0, || {});
                idle.sleep(0, true);
            })
        };
        // Worker 1 is woken and stays awake: the monitor must look.
        idle.wake_self(1, || {});
        first.join().unwrap();
        monitor.join().unwrap();
        assert_eq!(idle.counts().0, 1);
    });
}
