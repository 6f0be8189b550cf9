//! Fuzz target: the fill over an arbitrary "SD log". The flight is the synthetic log (which
//! has dropouts of its own, so there are gaps to walk and sites to search for); the input
//! stands for the vehicle's file, read in the ranges the filler asks for, as the shell reads
//! them. The filler must never panic, always end, answer each dropout at most once, and a
//! range it fills must lie inside the split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ulog_recv::fill::{ColumnSplits, Filler, Flight, Outcome};

const FLIGHT: &[u8] = include_bytes!("../../testdata/synthetic.ulg");

fuzz_target!(|sd: &[u8]| {
    let columns = [ColumnSplits {
        splits: vec![("split_0000.ulg", FLIGHT, 0)],
        windows: None,
    }];
    let (flight, _) = Flight::new(&columns);
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
                assert!(from <= to && to as usize <= FLIGHT.len());
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
