//! The paused clock's auto-advance (`time::clock`): the last two of a runtime's threads to go idle,
//! a parking worker (registered as a sleeper in the real `Idle`, then fenced) and a `block_on`
//! thread (its busy count ended with the real `Clock::not_busy`), each try the real
//! `Timers::auto_advance`. At least one of them sees the runtime idle (no lost advance, which
//! would hang a paused test), and at most one advances (the first claims, so the other finds the
//! runtime busy): the timer fires exactly once and the clock reaches its tick.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use crate::time::driver::{Armed, Registration, Timers};
use crate::worker::idle::Idle;

use super::model_bounded;

struct NoHost;

impl crate::time::driver::TimerHost for NoHost {
    fn timer_lowered(&self, _tick: u64) {}
}

#[test]
fn the_last_thread_to_go_idle_advances_the_paused_clock_once() {
    model_bounded(|| {
        let weak = std::sync::Weak::<NoHost>::new() as std::sync::Weak<dyn crate::time::TimerHost>;
        let timers = Arc::new(Timers::new(1, weak));
        timers.start_paused();
        // A timer an hour ahead of the paused clock, armed by a task of worker 0.
        let deadline = timers.now() + std::time::Duration::from_secs(3600);
        let waker = futures::task::noop_waker();
        let entry = match Registration::arm(
            timers.shard(Some(0), 0),
            deadline,
            std::time::Duration::ZERO,
            &waker,
        ) {
            Armed::Waiting(r) => r,
            _ => panic!("the timer should wait"),
        };
        // One worker, awake; one `block_on` thread, in a poll.
        let idle = Arc::new(Idle::new(1));
        timers.clock().add_busy();
        let advanced = Arc::new(AtomicUsize::new(0));

        let (t, i, a) = (timers.clone(), idle.clone(), advanced.clone());
        let worker = thread::spawn(move || {
            // `Core::park_begin` then `park_step`: register as a sleeper, fence, try.
            i.sleep(0, false);
            loom::sync::atomic::fence(Ordering::SeqCst);
            let mut out = Vec::new();
            if t.auto_advance(|| i.counts().0 == 0, || i.wake_self(0, || {}), &mut out) {
                a.fetch_add(1, Ordering::SeqCst);
            }
        });
        // `park_loop` after a poll: end the busy count (fenced), then try.
        timers.clock().not_busy();
        let mut out = Vec::new();
        let claim = || timers.clock().add_busy();
        if timers.auto_advance(|| idle.counts().0 == 0, claim, &mut out) {
            advanced.fetch_add(1, Ordering::SeqCst);
        }
        worker.join().unwrap();

        assert_eq!(
            advanced.load(Ordering::SeqCst),
            1,
            "advanced by neither or both"
        );
        assert!(entry.is_fired());
        assert!(timers.now() >= deadline);
    });
}
