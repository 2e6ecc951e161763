//! A group's schedule delays (`group::delay`): the first samples go into an inline word by
//! compare-and-swap; later ones into a record allocated by the first of them and published by a
//! compare-and-swap. Two workers ending waits at once both land, inline or in the record, never
//! in both: with room for one more inline sample, one takes it and the other allocates the
//! record; with none, each finds no record and allocates one, exactly one is published, the
//! loser frees its own and records into the winner's. A reader beside a sample sees none or all
//! of it, never a torn record.

use loom::sync::Arc;
use loom::thread;

use crate::group::delay::{Delays, INLINE_SAMPLES};

use super::model;

#[test]
fn two_first_waits_both_count_inline() {
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

/// `d` with its inline word `room` samples short of full (samples of 0.5 µs, bucket 0).
fn filled(room: u32) -> Delays {
    let d = Delays::new();
    for _ in 0..INLINE_SAMPLES - room {
        d.record(500);
    }
    d
}

#[test]
fn two_waits_for_the_last_inline_place_both_count_once() {
    model(|| {
        let d = Arc::new(filled(1));
        let d2 = d.clone();
        let t = thread::spawn(move || d2.record(5_000));
        d.record(3_000_000);
        t.join().unwrap();
        let h = d.snapshot();
        assert_eq!(h.count(), u64::from(INLINE_SAMPLES) + 1);
        // 5 µs in bucket 3; 3 ms in bucket 12 (2,048 to 4,096 µs).
        assert_eq!((h.counts()[3], h.counts()[12]), (1, 1));
        assert_eq!(
            d.sum_ns(),
            u64::from(INLINE_SAMPLES - 1) * 500 + 5_000 + 3_000_000
        );
    });
}

#[test]
fn two_waits_past_the_inline_word_publish_one_record_and_both_count() {
    model(|| {
        let d = Arc::new(filled(0));
        let d2 = d.clone();
        let t = thread::spawn(move || d2.record(5_000));
        d.record(3_000_000);
        t.join().unwrap();
        let h = d.snapshot();
        assert_eq!(h.count(), u64::from(INLINE_SAMPLES) + 2);
        assert_eq!((h.counts()[3], h.counts()[12]), (1, 1));
    });
}
