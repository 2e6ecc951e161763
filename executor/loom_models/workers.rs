//! loom models of the active count (`worker::idle`, steps 6 and 7): raising it against a core
//! parking dormant, and a pusher against a core going dormant beside an active sleeper. Both run
//! the real `Idle`.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models::workers`.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use loom::thread;

use crate::worker::idle::Idle;

use super::model;

/// Core 1's park (`Core::park_begin`, `park_step`): registers, fences, reads the count; dormant,
/// it hands the work it sees to an active sleeper (marking that sleeper's flag) and waits for its
/// own flag; active, it wakes itself for work, or waits.
fn park_core_1(idle: &Idle, flags: &[AtomicBool; 2], work: &AtomicUsize) {
    idle.sleep(1, false);
    fence(Ordering::SeqCst);
    let has_work = || work.load(Ordering::SeqCst) != 0;
    if idle.is_dormant(1) {
        if has_work() {
            idle.notify_one(|i| flags[i].store(true, Ordering::Release));
        }
    } else if has_work() {
        idle.wake_self(1, || flags[1].store(false, Ordering::Relaxed));
        return;
    }
    while flags[1]
        .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        thread::park();
    }
}

/// The controller raises the count while dormant core 1 parks: core 1 ends up awake, whether the
/// activation found it registered or its re-check after the fence saw the new count.
#[test]
fn an_activation_is_never_lost_against_a_dormant_park() {
    model(|| {
        let idle = Arc::new(Idle::with_active(2, 1));
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let work = Arc::new(AtomicUsize::new(1));
        // Core 0 sleeps; core 1 is awake, out of work of its own.
        idle.sleep(0, false);
        let core1 = {
            let (idle, flags, work) = (idle.clone(), flags.clone(), work.clone());
            thread::spawn(move || park_core_1(&idle, &flags, &work))
        };
        let t = core1.thread().clone();
        idle.set_active(2);
        if idle.activate(1, |i| flags[i].store(true, Ordering::Release)) {
            t.unpark();
        }
        core1.join().unwrap();
        let (awake, _) = idle.counts();
        assert!(awake >= 1, "core 1 was activated but still sleeps");
        assert!(
            !flags[1].load(Ordering::Acquire),
            "a stale activation was left"
        );
    });
}

/// A pusher publishes work while core 1, just made dormant, parks beside sleeping active core 0:
/// core 0 is notified, by the pusher (which saw core 1 gone) or by core 1's re-check (which saw
/// the work), and never by a dormant core's choice of itself.
#[test]
fn work_seen_by_a_core_going_dormant_reaches_an_active_sleeper() {
    model(|| {
        let idle = Arc::new(Idle::with_active(2, 2));
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let work = Arc::new(AtomicUsize::new(0));
        idle.sleep(0, false);
        idle.set_active(1);
        let pusher = {
            let (idle, flags, work) = (idle.clone(), flags.clone(), work.clone());
            thread::spawn(move || {
                work.store(1, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                idle.notify_one(|i| flags[i].store(true, Ordering::Release));
            })
        };
        // Core 1 parks dormant: its flag is never set by a notifier, so it only registers, fences
        // and re-checks here (the wait would be for an activation).
        idle.sleep(1, false);
        fence(Ordering::SeqCst);
        assert!(idle.is_dormant(1));
        if work.load(Ordering::SeqCst) != 0 {
            idle.notify_one(|i| flags[i].store(true, Ordering::Release));
        }
        pusher.join().unwrap();
        assert!(
            flags[0].load(Ordering::Acquire),
            "the work was seen by nobody who woke an active sleeper"
        );
        assert!(
            !flags[1].load(Ordering::Acquire),
            "a dormant core was chosen"
        );
    });
}
