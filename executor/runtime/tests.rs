//! Unit tests that look inside a running runtime.

mod monitor {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use crate::Runtime;

    /// Under light load every request wakes an idle runtime. The worker that starts serving a
    /// request never unparks the stall monitor (an unpark is a system call, and the woken monitor
    /// would often take the worker's CPU before the request was read): on Linux it arms the
    /// monitor's kernel timer; elsewhere the monitor keeps ticking on its own timer for a while
    /// after activity.
    #[test]
    fn light_load_does_not_make_the_workers_wake_the_monitor() {
        let rt = Runtime::builder().worker_threads(2).build().unwrap();
        let idle = &rt.handle().shared.idle();
        const N: u64 = 50;
        let mut transitions = 0;
        for _ in 0..N {
            std::thread::sleep(Duration::from_millis(3));
            // Every worker parks between two requests: the spawn wakes one from idleness.
            if idle.counts().0 == 0 {
                transitions += 1;
            }
            rt.block_on(rt.spawn(async {})).unwrap();
        }
        let unparks = idle.watcher_unparks.load(Ordering::Relaxed);
        assert!(
            transitions >= N / 2,
            "only {transitions} of {N} requests found every worker parked"
        );
        assert!(
            unparks <= 3,
            "{unparks} wake-ups of the monitor by a worker for {transitions} idle-to-busy transitions"
        );
    }
}

mod parking {
    use std::time::{Duration, Instant};

    use crate::Runtime;

    /// Parks of all of `rt`'s workers so far.
    fn parks(rt: &Runtime) -> u64 {
        rt.metrics().workers.iter().map(|w| w.parks).sum()
    }

    /// Waits up to 20 s for `done`; false if it never held.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// A pusher counts a group as listed just before it queues the group in its shard's inbox. A
    /// worker that runs out of work inside that window parks (the pusher wakes a sleeper after
    /// its push) instead of going round its search and its park's re-check until the pusher runs
    /// again: a pusher preempted there (a thread outside the runtime, on an oversubscribed
    /// machine) kept every idle worker of the runtime spinning.
    #[test]
    fn a_worker_parks_while_a_listing_is_on_its_way_to_an_inbox() {
        let rt = Runtime::builder().worker_threads(2).build().unwrap();
        let shared = &rt.handle().shared;
        assert!(
            eventually(|| shared.idle().counts().0 == 0),
            "the workers never parked after starting"
        );
        let before = parks(&rt);
        let window = shared.scheduler().listing_on_its_way();
        // A task from outside wakes a worker; once it has run, the worker finds nothing to do.
        let (tx, rx) = std::sync::mpsc::channel();
        drop(rt.spawn(async move { tx.send(()).unwrap() }));
        rx.recv().unwrap();
        assert!(
            eventually(|| parks(&rt) > before && shared.idle().counts().0 == 0),
            "a worker stayed awake while a listing was on its way to an inbox"
        );
        drop(window);
    }

    /// A worker about to park counts another core's local queue as work only while a thief could
    /// take from it. A thief copying out of a queue takes its share, and wakes another worker if
    /// it was the last one searching; a worker that counted a queue under a steal stayed awake and
    /// went round its search and its park's re-check until the thief, if preempted, ran again.
    #[test]
    fn a_worker_parks_while_a_thief_copies_out_of_the_only_queue_with_work() {
        use std::sync::mpsc::channel;

        let rt = Runtime::builder()
            .worker_threads(2)
            // Tasks A and E below block their workers on purpose: no rescue.
            .stall_threshold(Duration::from_secs(600))
            .build()
            .unwrap();
        let shared = rt.handle().shared.clone();
        let core_idx = || crate::worker::lease::with_core(|c| c.map(|c| c.idx)).unwrap();
        // A holds one worker: it fills that worker's local queue, then blocks it.
        let (a_at, a_running) = channel();
        let (a_fill, a_go) = channel::<()>();
        let (a_filled, a_done) = channel();
        let (a_finish, a_end) = channel::<()>();
        drop(rt.spawn(async move {
            a_at.send(core_idx()).unwrap();
            a_go.recv().unwrap();
            // The first two go to the local queue, pushed out of the LIFO slot by the next.
            for _ in 0..3 {
                drop(crate::spawn(async {}));
            }
            a_filled.send(()).unwrap();
            a_end.recv().unwrap();
        }));
        let x = a_running.recv().unwrap();
        // E holds the other worker until the test lets it go.
        let (e_at, e_running) = channel();
        let (e_release, e_go) = channel::<()>();
        drop(rt.spawn(async move {
            e_at.send(core_idx()).unwrap();
            e_go.recv().unwrap();
        }));
        let y = e_running.recv().unwrap();
        assert_ne!(x, y);
        a_fill.send(()).unwrap();
        a_done.recv().unwrap();
        assert_eq!(shared.cores()[x].local.len(), 2);
        let before = parks(&rt);
        let (parked, claimed) = shared.cores()[x].local.while_a_thief_copies_out(|| {
            // E ends: its worker finds no work it can take (x's queue is under a steal).
            e_release.send(()).unwrap();
            eventually(|| parks(&rt) > before)
        });
        for r in claimed {
            let g = r.metadata().group.clone();
            crate::worker::publish::push_global(&g, r);
        }
        a_finish.send(()).unwrap();
        assert!(
            parked,
            "a worker stayed awake while a thief copied out of the only queue with work"
        );
    }
}

cfg_reactor! {
    mod reactor {
        use std::os::unix::net::UnixDatagram;
        use std::time::Duration;

        use async_io::Async;

        use crate::Runtime;

        /// async-io interrupts the reactor's wait (an `eventfd` write and one more pass of
        /// `epoll_wait`) for every timer inserted into it. Here the keeper parks in the reactor once
        /// per datagram, with I/O recent, so each park wants a timer `REACTOR_TICK` ahead: one timer
        /// kept across parks serves them all until it fires.
        #[test]
        fn a_keeper_keeps_its_reactor_timer_from_one_park_to_the_next() {
            const N: u64 = 200;
            let rt = Runtime::builder().worker_threads(1).build().unwrap();
            let (ours, theirs) = UnixDatagram::pair().unwrap();
            let ours = Async::new(ours).unwrap();
            let task = rt.spawn(async move {
                let mut buf = [0u8; 8];
                for _ in 0..N {
                    ours.recv(&mut buf).await.unwrap();
                }
            });
            for _ in 0..N {
                std::thread::sleep(Duration::from_micros(300));
                theirs.send(b"x").unwrap();
            }
            rt.block_on(task).unwrap();
            let parks: u64 = rt.metrics().workers.iter().map(|w| w.parks).sum();
            let timers = rt.handle().shared.reactor_timers();
            assert!(
                parks >= N / 2,
                "the worker parked {parks} times for {N} datagrams"
            );
            assert!(
                timers * 4 <= parks,
                "{timers} reactor timers inserted for {parks} parks"
            );
        }

        /// A runtime fed from another thread, with no I/O, leaves its keeper asleep between the wakes:
        /// of the wakes from outside, only async-io's thread's (its dispatch while it holds the
        /// reactor) make the keeper wake every few milliseconds to win the reactor back. Counting
        /// every wake from outside would make the keeper and async-io's thread switch back and
        /// forth for nothing: with no I/O the reactor is worth nothing to the keeper.
        #[test]
        fn wakes_from_another_thread_leave_the_keeper_asleep() {
            use futures::StreamExt;
            const WAKES: usize = 20;
            let rt = Runtime::builder().worker_threads(2).build().unwrap();
            let (tx, mut rx) = futures::channel::mpsc::unbounded::<()>();
            let task = rt.spawn(async move { while rx.next().await.is_some() {} });
            for _ in 0..WAKES {
                std::thread::sleep(Duration::from_millis(20));
                tx.unbounded_send(()).unwrap();
            }
            drop(tx);
            rt.block_on(task).unwrap();
            // Were every wake from outside counted, the keeper would insert one timer per 8 ms tick:
            // about 50 over these 400 ms.
            let timers = rt.handle().shared.reactor_timers();
            assert!(
                timers <= 5,
                "{timers} reactor timers inserted for {WAKES} wakes from another thread, no I/O"
            );
        }
    }
}

mod charges {
    use std::time::{Duration, Instant};

    use futures::channel::mpsc;
    use futures::{SinkExt, StreamExt};

    use crate::Runtime;

    /// Tasks woken from outside into groups of their own run from the lane, one group after
    /// another, none of them in the rotation: a worker charges such groups under their own locks
    /// when its list of charges fills, and every nanosecond of their service reaches their
    /// virtual runtimes.
    #[test]
    fn groups_served_from_the_lane_are_charged_all_their_service() {
        const GROUPS: usize = 64;
        const ROUNDS: usize = 20;
        let rt = Runtime::builder()
            .worker_threads(1)
            .quantum(Duration::from_millis(100))
            .build()
            .unwrap();
        let groups: Vec<_> = (0..GROUPS).map(|_| rt.group().build().unwrap()).collect();
        let mut senders = Vec::new();
        let mut tasks = Vec::new();
        for g in &groups {
            let (tx, mut rx) = mpsc::channel::<usize>(1);
            senders.push(tx);
            tasks.push(g.spawn(async move {
                let mut got = 0;
                while rx.next().await.is_some() {
                    got += 1;
                }
                got
            }));
        }
        let worker = |rt: &Runtime| rt.metrics().workers[0];
        // Counters are published when the worker parks: wait until they stop moving.
        let settled = |rt: &Runtime| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let before = worker(rt);
                std::thread::sleep(Duration::from_millis(30));
                if worker(rt) == before || Instant::now() > deadline {
                    return before;
                }
            }
        };
        let before = settled(&rt);
        std::thread::spawn(move || {
            futures::executor::block_on(async move {
                for r in 0..ROUNDS {
                    for tx in &mut senders {
                        tx.send(r).await.unwrap();
                    }
                }
            })
        })
        .join()
        .unwrap();
        for t in tasks {
            assert_eq!(rt.block_on(t).unwrap(), ROUNDS);
        }
        let after = settled(&rt);
        let wakes = (GROUPS * ROUNDS) as u64;
        let lane = after.lane_takes - before.lane_takes;
        assert!(
            lane >= wakes / 2,
            "only {lane} of {wakes} wakes ran from the lane: the workload did not happen"
        );
        for g in &groups {
            let charged = g.inner.vtime_hint();
            let served = g.metrics().busy.as_nanos() as u64;
            assert!(
                charged + 1 >= served,
                "a group served {served} ns has a virtual runtime of {charged} ns (weight 1)"
            );
        }
    }
}

mod output_panics {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use crate::Runtime;

    struct PanicOnDrop;

    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("output destructor");
        }
    }

    /// A task that completes between its handle's look at it and the handle's `detach` has its
    /// output dropped inside `detach`, on the dropping thread. The panic of that output's
    /// destructor reaches `on_task_panic` (caught, it must not be lost), and the dropping thread
    /// does not unwind.
    #[test]
    fn an_output_panic_is_reported_when_the_task_finishes_as_its_handle_drops() {
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let rt = Runtime::builder()
            .worker_threads(1)
            .on_task_panic(move |_| {
                s.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap();
        let h = rt.spawn(async { PanicOnDrop });
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        h.drop_as_if_it_finished_after_the_look();
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        assert_eq!(rt.block_on(rt.spawn(async { 2 })).unwrap(), 2);
    }
}

mod tree_clocks {
    use std::time::{Duration, Instant};

    use crate::Runtime;

    fn spin(d: Duration) {
        let start = Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    /// The tree's copy of each nested group's virtual runtime (`VClock::vns`) follows the
    /// group's own through its charges, and the own queue's clock counts its tasks' service.
    #[test]
    fn a_nested_groups_clock_follows_its_virtual_runtime() {
        let rt = Runtime::builder().worker_threads(2).build().unwrap();
        let tenant = rt.group().build().unwrap();
        let child = tenant.child().weight(3).build().unwrap();
        let leaf = child.child().build().unwrap();
        for g in [&tenant, &child, &leaf, &child] {
            let tasks: Vec<_> = (0..4)
                .map(|_| g.spawn(async { spin(Duration::from_millis(1)) }))
                .collect();
            for t in tasks {
                rt.block_on(t).unwrap();
            }
        }
        rt.block_on(tenant.wait_idle());
        // Charges are applied when workers visit the scheduler or park.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let settled = [&child, &leaf].iter().all(|g| {
                let node = g.inner.node().expect("a nested group has a node");
                let st = node.tree.lock();
                let clock = st.clock(node.slot);
                let vns = clock.vns.load(std::sync::atomic::Ordering::Relaxed);
                let own = clock.own_vns.load(std::sync::atomic::Ordering::Relaxed);
                vns == g.inner.vtime_hint() && vns > 0 && own > 0
            });
            if settled {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "a nested group's clock never matched its virtual runtime"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
