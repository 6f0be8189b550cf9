//! Fuzz target: the fill's locator over an arbitrary "SD log". The flight is the synthetic
//! log (which has dropouts of its own, so there are sites to look for); the input stands for
//! the vehicle's file, read through the block cache in the ranges the locator asks for. The
//! locator must never panic, always end, and a filled range must lie inside the split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ulog_recv::fill::{BlockCache, Locator, Outcome};

const FLIGHT: &[u8] = include_bytes!("../../testdata/synthetic.ulg");

fuzz_target!(|sd: &[u8]| {
    let flight = ulog_recv::fill::scan::scan([("split_0000.ulg", FLIGHT, 0)]);
    let mut from = 0;
    for site in &flight.sites {
        let mut cache = BlockCache::new(sd.len() as u64, 1 << 20);
        let mut locator = Locator::new(&flight, site, sd.len() as u64, from);
        let mut steps = 0;
        while let Some((offset, len)) = locator.next_read() {
            steps += 1;
            assert!(steps < 100_000, "the locator does not end");
            while let Some((at, n)) = cache.missing(offset, len) {
                let end = ((at + n) as usize).min(sd.len());
                cache.insert(at, &sd[at as usize..end]);
            }
            locator.handle_read(offset, &cache.get(offset, len).unwrap_or_default());
        }
        if let Some(s) = locator.scan_start() {
            from = s;
        }
        if let Some(Outcome::Filled { from, to, .. }) = locator.outcome() {
            assert!(from <= to && *to as usize <= FLIGHT.len());
        }
    }
});
