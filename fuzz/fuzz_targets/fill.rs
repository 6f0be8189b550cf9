//! Fuzz target: the fill over an arbitrary "SD log". The flight is the synthetic log (which
//! has dropouts of its own, so there are gaps to walk and sites to search for), as received
//! whole or with its end lost: the input's first byte picks which (0: whole; 1: the records
//! from 70 % of it to its post-flight records lost behind a dropout, the link back for the
//! STOP; 2: everything from 70 % on lost, the link gone for good; 3 and up: as 1, the chunks
//! lost counted, as many as the byte says less 3, times 64). The rest stands for the
//! vehicle's file, read in the ranges the filler asks for, as the shell reads them. The
//! filler must never panic, always end, answer each dropout at most once, and a range it
//! fills must lie inside the split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ulog_recv::fill::{ColumnSplits, Filler, Flight, Outcome};
use ulog_recv::ulog::message::{FILE_HEADER_LEN, framed, is_postflight, msg_type};

const SYNTHETIC: &[u8] = include_bytes!("../../testdata/synthetic.ulg");

/// The synthetic log as received, its end lost as `variant` says.
fn received(variant: u8) -> Vec<u8> {
    if variant == 0 {
        return SYNTHETIC.to_vec();
    }
    let mut starts = Vec::new();
    let mut at = FILE_HEADER_LEN;
    for m in framed(&SYNTHETIC[FILE_HEADER_LEN..]) {
        starts.push((at, m));
        at += m.len();
    }
    let data = starts
        .iter()
        .position(|(_, m)| m[2] == msg_type::DATA)
        .unwrap_or(0);
    let cut = starts[data + (starts.len() - data) * 7 / 10].0;
    let back = if variant != 2 {
        starts
            .iter()
            .find(|(at, m)| *at > cut && is_postflight(m))
            .map_or(at, |(at, _)| *at)
    } else {
        at
    };
    [&SYNTHETIC[..cut], &[2, 0, msg_type::DROPOUT, 0, 0], &SYNTHETIC[back..]].concat()
}

fuzz_target!(|input: &[u8]| {
    let Some((&variant, sd)) = input.split_first() else {
        return;
    };
    let flight_bytes = received(variant);
    let columns = [ColumnSplits {
        splits: vec![("split_0000.ulg", &flight_bytes[..], 0)],
        patterns: &[],
        windows: None,
    }];
    let (mut flight, _) = Flight::new(&columns);
    flight.stream_end.lost_chunks = variant.checked_sub(3).map(|n| n as u64 * 64);
    let sites = flight.columns[0].flight.sites.len();
    let probe = flight.probe(|_, _| true);
    let sd_start = sd
        .get(8..16)
        .map_or(0, |t| u64::from_le_bytes(t.try_into().expect("8 bytes")));
    let mut filler = Filler::new(&flight, vec![vec![false; sites]], probe, sd.len() as u64, sd_start);
    let mut answered = vec![false; sites];
    let mut steps = 0;
    loop {
        while let Some(done) = filler.poll() {
            assert!(!answered[done.site], "a dropout answered twice");
            answered[done.site] = true;
            if let Outcome::Filled { from, to, .. } = done.outcome {
                assert!(from <= to && to as usize <= flight_bytes.len());
            }
        }
        let Some((at, n)) = filler.next_read() else {
            break;
        };
        steps += 1;
        assert!(steps < 100_000, "the filler does not end");
        let end = ((at + n) as usize).min(sd.len());
        filler.handle_read(at, sd.get(at as usize..end).unwrap_or_default());
    }
});
