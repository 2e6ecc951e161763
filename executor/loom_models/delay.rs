//! A group's schedule-delay record (`group::delay`): it is allocated by the group's first wait
//! and published by a compare-and-swap. Two workers ending the group's first waits at once each
//! find no record and allocate one: exactly one is published, the loser frees its own and
//! records into the winner's, so both samples land. A reader beside a first sample sees no
//! record or a whole one, never a torn one.

use loom::sync::Arc;
use loom::thread;

use crate::group::delay::Delays;

use super::model;

#[test]
fn two_first_waits_publish_one_record_and_both_count() {
    model(|| {
        let d = Arc::new(Delays::new());
        let d2 = d.clone();
        let t = thread::spawn(move || d2.record(5_000));
        d.record(500);
        t.join().unwrap();
        let h = d.snapshot();
        assert_eq!(h.count(), 2);
        // 0.5 µs in bucket 0, 5 µs in bucket 3 (4 to 8 µs).
        assert_eq!((h.counts()[0], h.counts()[3]), (1, 1));
        assert_eq!(d.sum_ns(), 5_500);
    });
}

#[test]
fn a_reader_beside_the_first_wait_sees_none_or_all_of_it() {
    model(|| {
        let d = Arc::new(Delays::new());
        let d2 = d.clone();
        let t = thread::spawn(move || d2.record(3_000));
        let h = d.snapshot();
        assert!(h.count() <= 1);
        assert!(h.sum().as_nanos() == 0 || h.sum().as_nanos() == 3_000);
        t.join().unwrap();
        assert_eq!(d.snapshot().count(), 1);
    });
}
