//! Fuzz target: the flight diagnostics on flights with faults in them, their bytes changed
//! where the input says (a sample's values, a format's text, a message's size) and fed in
//! pieces of the input's size, with dropout messages between them (cutting a message at
//! times, as a corrupt stream would). They must never panic, nor find more than one thing
//! per sample.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ulog_recv::diagnose::{Diagnosis, Selection};
use ulog_recv::sim::faults::{Fault, FaultFlight, fault_flight};

fuzz_target!(|input: &[u8]| {
    let Some((&[which, piece], edits)) = input.split_first_chunk::<2>() else {
        return;
    };
    let fault = Fault::ALL[usize::from(which) % Fault::ALL.len()];
    let mut log = fault_flight(FaultFlight {
        fault,
        armed: which & 0x80 == 0,
        seed: 1,
        rc_lost_as_uint8: which & 0x40 != 0,
    });
    // Each edit: 3 bytes of offset (spread over the log), 1 byte of value.
    for edit in edits.chunks_exact(4) {
        let at = u32::from_le_bytes([edit[0], edit[1], edit[2], 0]) as usize;
        let len = log.len();
        log[at * 97 % len] = edit[3];
    }
    let mut diagnosis = Diagnosis::new(Selection::ALL);
    for (k, chunk) in log.chunks(usize::from(piece) * 64 + 1).enumerate() {
        diagnosis.push(chunk);
        if k % 7 == 6 {
            // A dropout message between pieces (3-byte header, 2-byte duration).
            diagnosis.push(&[2, 0, b'O', piece, 0]);
        }
    }
    // At most: a brownout per 30 s, GPS per 5 s, each motor twice, a warning and a critical
    // per test ratio run, an RC loss per loss; far below one per message.
    let messages = log.len() / 20;
    assert!(diagnosis.finish().findings().len() <= messages);
});
