//! An ArduPilot flight's amendment, sans-IO: what a fill recovered from the card as a
//! standalone `.bin` (the stream's FMT records, then one run per gap), and where each run
//! lies in it and which bytes of which split it stands for ([`Fill`], as for PX4). A run
//! opens with the card's FMT records of the types it holds that the stream never defined,
//! so that a split read with its runs in place defines every record it holds.

use std::collections::BTreeSet;

use crate::dataflash::format::FMT_TYPE;
use crate::dataflash::framer::Framer;
use crate::fill::amendment::Fill;
use crate::fill::dataflash::BinGapFill;
use crate::fill::dataflash::stream::BinStream;

/// Builds the amendment file of `fills` (in order) for `stream`, whose splits are named
/// `split_names`; `card_formats`: the card's FMT records of types the stream never defined
/// ([`super::BinFiller::card_formats`]). Returns its bytes and one [`Fill`] per gap.
pub fn build(
    stream: &BinStream,
    split_names: &[String],
    card_formats: &[Vec<u8>],
    fills: &[BinGapFill],
) -> (Vec<u8>, Vec<Fill>) {
    let mut out: Vec<u8> = stream.format_records.concat();
    let mut framer = Framer::new();
    framer.push(&out, |_, _| {});
    for record in card_formats {
        framer.push(record, |_, _| {});
    }
    let mut entries = Vec::with_capacity(fills.len());
    for fill in fills {
        let mut types = BTreeSet::new();
        let mut reader = framer.clone();
        reader.restart();
        reader.push(&fill.records, |m, _| {
            types.insert(m[2]);
        });
        let start = out.len() as u64;
        for record in card_formats {
            if record[2] == FMT_TYPE && types.contains(&record[3]) {
                out.extend_from_slice(record);
            }
        }
        out.extend_from_slice(&fill.records);
        entries.push(Fill {
            split: split_names[fill.split].clone(),
            offset: fill.from,
            from: fill.from,
            to: fill.to,
            start,
            end: out.len() as u64,
            records: fill.count,
            complete: true,
            edge: None,
            fetched: 0,
            first_us: fill.first_us,
            last_us: fill.last_us,
        });
    }
    (out, entries)
}
