//! Unit tests that look inside a running runtime.

#[cfg(all(feature = "io", not(loom), not(miri)))]
mod reactor {
    use std::os::unix::net::UnixDatagram;
    use std::sync::atomic::Ordering;
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
        let timers = rt.handle().shared.reactor_timers.load(Ordering::Relaxed);
        assert!(
            parks >= N / 2,
            "the worker parked {parks} times for {N} datagrams"
        );
        assert!(
            timers * 4 <= parks,
            "{timers} reactor timers inserted for {parks} parks"
        );
    }
}
