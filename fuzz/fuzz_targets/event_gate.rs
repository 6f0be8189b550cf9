//! Fuzz target: arbitrary bytes (behind a valid file header or not) through the event
//! buffers' trigger watch and gate, with events opened between pieces. It must never panic,
//! the gate never writes a byte more than it was given, and what it holds stays within its
//! bound after every push.
#![no_main]

use std::sync::LazyLock;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use ulog_recv::diagnose::Selection;
use ulog_recv::store::columns::ColumnSpec;
use ulog_recv::store::events::{EventBufferSpec, EventGate, FieldCondition, Trigger, TriggerWatch};

static TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        Trigger::logged_text("(?i)fail").unwrap(),
        Trigger::Field(FieldCondition::parse("a.b[1] > 0").unwrap()),
        Trigger::Field(FieldCondition::parse("sensor_accel.z < -9.8").unwrap()),
    ]
});

fuzz_target!(|input: &[u8]| {
    let Some((&[split, every, with_header], bytes)) = input.split_first_chunk::<3>() else {
        return;
    };
    let mut log = Vec::new();
    if with_header & 1 == 1 {
        let mut w = ulog_recv::ulog::Writer::new();
        w.header(1, 0);
        log = w.take();
    }
    log.extend_from_slice(bytes);
    let max_bytes = 64 + u64::from(with_header) * 16;
    let mut gate = EventGate::new(EventBufferSpec {
        column: ColumnSpec::parse("b=*").unwrap(),
        before_us: u64::from(split) * 1000,
        after_us: u64::from(every) * 1000,
        max_bytes,
    });
    let mut watch = TriggerWatch::new(TRIGGERS.clone(), Selection::ALL, true);
    let (mut out, mut events) = (BytesMut::new(), Vec::new());
    let every = usize::from(every % 8) + 1;
    for (k, piece) in log.chunks(usize::from(split) + 1).enumerate() {
        watch.push(piece, &mut events);
        gate.push(piece, &mut out);
        assert!(gate.held_bytes() <= max_bytes);
        for e in events.drain(..) {
            gate.open(e.at_us, e.after_us, &mut out);
        }
        if k % every == 0 {
            gate.open(watch.log_time(), None, &mut out);
        }
    }
    assert!(out.len() <= log.len());
});
