//! The SD log's own definitions (its formats and subscriptions), read from its start when
//! the session's do not cover its records, sans-IO: asks for byte ranges
//! ([`SdDefinitions::next_read`]), takes what they hold ([`SdDefinitions::handle_read`]).
//!
//! A fill reads the SD log with the flight's definitions: they tell its records' sizes
//! (where whole messages begin in a piece read from anywhere) and times. A session stored in
//! columns keeps each column's formats and subscriptions in that column's splits; a column
//! that lost all its splits (the disk was full when the session began, a power cut took the
//! only one) took its definitions with it, and the records of its topics, most of the SD
//! log's bytes when they are the IMU's, can be told apart by no column: no chain of records
//! fits, and the search for a dropout runs to the SD log's end. The SD log names them: its
//! definitions, and the subscriptions PX4 writes before its first sample, come first in the
//! file (parameters among them: 36 to 87 KB in the real PX4 logs of the project's tests).
//!
//! The read ends at the first data record (the subscriptions added later in a flight are not
//! needed: a chain of records whose ids are known is), at the end of the file, or after
//! [`MAX_BYTES`] (not a ULog's definitions).

use std::ops::ControlFlow;

use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::{FILE_HEADER_LEN, msg_type};

/// Bytes read per step.
pub const PIECE: u64 = 8192;
/// Most bytes read before the first data record.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// See the module docs.
#[derive(Debug)]
pub struct SdDefinitions {
    sd_len: u64,
    framer: Framer,
    /// Where the next read starts.
    at: u64,
    formats: Vec<Vec<u8>>,
    subscriptions: Vec<Vec<u8>>,
    done: bool,
}

impl SdDefinitions {
    /// A reader of the definitions of an SD log of `sd_len` bytes.
    pub fn new(sd_len: u64) -> Self {
        Self {
            sd_len,
            framer: Framer::file(),
            at: 0,
            formats: Vec::new(),
            subscriptions: Vec::new(),
            done: sd_len <= FILE_HEADER_LEN as u64,
        }
    }

    /// The byte range to read next, `None` once done.
    pub fn next_read(&self) -> Option<(u64, u64)> {
        (!self.done).then(|| (self.at, PIECE.min(self.sd_len - self.at)))
    }

    /// Takes the bytes of the range [`next_read`](Self::next_read) asked for (fewer at the
    /// end of the file).
    pub fn handle_read(&mut self, offset: u64, data: &[u8]) {
        if self.done || offset != self.at {
            return;
        }
        self.at += data.len() as u64;
        let (formats, subscriptions) = (&mut self.formats, &mut self.subscriptions);
        let flow = self.framer.push(data, |unit| match unit {
            Unit::Header(_) => ControlFlow::Continue(()),
            Unit::Message(m) => match m[2] {
                msg_type::FORMAT => {
                    formats.push(m.to_vec());
                    ControlFlow::Continue(())
                }
                msg_type::ADD_LOGGED => {
                    subscriptions.push(m.to_vec());
                    ControlFlow::Continue(())
                }
                msg_type::DATA => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            },
        });
        self.done =
            flow.is_break() || data.is_empty() || self.at >= self.sd_len || self.at >= MAX_BYTES;
    }

    /// Nothing more to read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The format messages and subscription messages read (each framed: its 3-byte header
    /// included), in the SD log's order.
    pub fn messages(&self) -> impl Iterator<Item = &[u8]> {
        self.formats
            .iter()
            .chain(&self.subscriptions)
            .map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulog::message::framed;

    fn synthetic() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/synthetic.ulg"
        ))
        .unwrap()
    }

    /// Reads `sd` as the fill does, in the pieces asked for; the bytes read.
    fn read(sd: &[u8]) -> (SdDefinitions, u64) {
        let mut defs = SdDefinitions::new(sd.len() as u64);
        let mut read = 0;
        while let Some((at, n)) = defs.next_read() {
            let piece = &sd[at as usize..(at + n) as usize];
            read += n;
            defs.handle_read(at, piece);
        }
        (defs, read)
    }

    #[test]
    fn reads_the_formats_and_subscriptions_up_to_the_first_data_record() {
        let sd = synthetic();
        let (defs, read) = read(&sd);
        let body = &sd[FILE_HEADER_LEN..];
        let first_data = framed(body).position(|m| m[2] == msg_type::DATA).unwrap();
        let before: Vec<&[u8]> = framed(body).take(first_data).collect();
        let wanted: Vec<&[u8]> = before
            .iter()
            .filter(|m| m[2] == msg_type::FORMAT)
            .chain(before.iter().filter(|m| m[2] == msg_type::ADD_LOGGED))
            .copied()
            .collect();
        assert!(wanted.iter().any(|m| m[2] == msg_type::ADD_LOGGED));
        assert_eq!(defs.messages().collect::<Vec<_>>(), wanted);
        let data_at: usize = FILE_HEADER_LEN + before.iter().map(|m| m.len()).sum::<usize>();
        assert!(
            read < data_at as u64 + PIECE,
            "read {read}, data at {data_at}"
        );
        assert!(
            read < sd.len() as u64,
            "stopped at the data, not the file's end"
        );
    }

    #[test]
    fn a_file_cut_in_its_definitions_ends_at_its_end_with_what_it_holds() {
        let sd = synthetic();
        let cut = &sd[..FILE_HEADER_LEN + 600];
        let (defs, read) = read(cut);
        assert!(defs.is_done());
        assert_eq!(read, cut.len() as u64);
        let whole = framed(&cut[FILE_HEADER_LEN..])
            .filter(|m| m[2] == msg_type::FORMAT)
            .count();
        assert_eq!(defs.messages().count(), whole);
    }

    #[test]
    fn a_file_of_no_records_is_read_no_further_than_the_bound() {
        // Messages of an unknown type, none a data record, to well past the bound.
        let mut sd = synthetic()[..FILE_HEADER_LEN].to_vec();
        while sd.len() < 2 * MAX_BYTES as usize {
            sd.extend_from_slice(&[200, 0, b'Q']);
            sd.extend_from_slice(&[0; 200]);
        }
        let (defs, read) = read(&sd);
        assert_eq!(defs.messages().count(), 0);
        assert_eq!(read, MAX_BYTES);
    }
}
