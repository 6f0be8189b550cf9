//! The store's splitting in the simulation: each log the session hands out is cut into
//! splits as the store cuts it (the sans-IO [`Splitter`] or [`BinSplitter`], by a size or a
//! time the seed draws), in memory; [`check`] holds them to what the store promises: without
//! their preambles the splits put back together are the log byte for byte, and each split
//! reads on its own (every sample's subscription and format, every record's FMT, in it).

use ulog_recv::autopilot::LogFormat;
use ulog_recv::dataflash::Framer;
use ulog_recv::store::bin_splitter::BinSplitter;
use ulog_recv::store::{SplitPolicy, SplitSink, SplitSummary, Splitter};

use crate::common::split_messages;

/// One log's splits, as they are written.
#[derive(Default)]
pub struct Splits {
    pub files: Vec<Vec<u8>>,
    pub summaries: Vec<SplitSummary>,
}

impl SplitSink for Splits {
    fn begin(&mut self, _: u32) {
        self.files.push(Vec::new());
    }
    fn write(&mut self, bytes: &[u8]) {
        self.files
            .last_mut()
            .expect("begun")
            .extend_from_slice(bytes);
    }
    fn end(&mut self, summary: &SplitSummary) {
        self.summaries.push(summary.clone());
    }
}

/// A log's splitter, either format's.
pub enum LogSplitter {
    ULog(Box<Splitter>),
    Bin(Box<BinSplitter>),
}

impl LogSplitter {
    pub fn new(format: LogFormat, policy: SplitPolicy) -> Self {
        match format {
            LogFormat::ULog => LogSplitter::ULog(Box::new(Splitter::new(policy))),
            LogFormat::DataFlash => LogSplitter::Bin(Box::new(BinSplitter::new(policy))),
        }
    }

    pub fn push(&mut self, bytes: &[u8], out: &mut Splits) {
        match self {
            LogSplitter::ULog(s) => s.push(bytes, out),
            LogSplitter::Bin(s) => s.push(bytes, out),
        }
    }

    pub fn finish(&mut self, out: &mut Splits) {
        match self {
            LogSplitter::ULog(s) => s.finish(out),
            LogSplitter::Bin(s) => s.finish(out),
        }
    }
}

/// The store's split policy with these limits (the default latched topics).
pub fn policy(max_bytes: Option<u64>, max_duration_us: Option<u64>) -> SplitPolicy {
    SplitPolicy {
        max_bytes,
        max_duration_us,
        ..SplitPolicy::unlimited()
    }
}

/// The first broken promise of a log's splits (`log`: the bytes the session handed out).
pub fn check(format: LogFormat, log: &[u8], splits: &Splits) -> Result<(), String> {
    check_each(format, splits)?;
    let mut joined = Vec::with_capacity(log.len());
    for (file, s) in splits.files.iter().zip(&splits.summaries) {
        joined.extend_from_slice(&file[s.preamble_bytes as usize..]);
    }
    if joined != log {
        let at = joined.iter().zip(log).position(|(a, b)| a != b);
        return Err(format!(
            "the splits without their preambles are not the log ({} bytes against {}, first \
             difference at {at:?})",
            joined.len(),
            log.len()
        ));
    }
    Ok(())
}

/// Each split as its summary says, and reading on its own.
pub fn check_each(format: LogFormat, splits: &Splits) -> Result<(), String> {
    if splits.files.len() != splits.summaries.len() {
        return Err(format!(
            "{} splits begun, {} ended",
            splits.files.len(),
            splits.summaries.len()
        ));
    }
    for (k, (file, s)) in splits.files.iter().zip(&splits.summaries).enumerate() {
        if s.bytes != file.len() as u64 {
            return Err(format!(
                "split {k}: {} bytes, its summary says {}",
                file.len(),
                s.bytes
            ));
        }
        match format {
            LogFormat::ULog => ulog_stands_alone(file),
            LogFormat::DataFlash => bin_stands_alone(file),
        }
        .map_err(|e| format!("split {k} does not read on its own: {e}"))?;
    }
    Ok(())
}

/// Every sample's subscription is in the split before it, and every subscription's format.
fn ulog_stands_alone(file: &[u8]) -> Result<(), String> {
    let mut formats = std::collections::HashSet::new();
    let mut subscribed = std::collections::HashSet::new();
    for m in split_messages(file).iter().skip(1) {
        match m[2] {
            b'F' => {
                let text = &m[3..];
                let name = text.split(|&b| b == b':').next().unwrap_or_default();
                formats.insert(name.to_vec());
            }
            b'A' => {
                let id = u16::from_le_bytes([m[4], m[5]]);
                let name = &m[6..];
                if !formats.contains(name) {
                    return Err(format!(
                        "subscription {id} to {} before its format",
                        String::from_utf8_lossy(name)
                    ));
                }
                subscribed.insert(id);
            }
            b'D' => {
                let id = u16::from_le_bytes([m[3], m[4]]);
                if !subscribed.contains(&id) {
                    return Err(format!("a sample of {id} before its subscription"));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Every record's type has its FMT in the split before it.
fn bin_stands_alone(file: &[u8]) -> Result<(), String> {
    let mut framer = Framer::new();
    let mut defined = std::collections::HashSet::new();
    let mut error = None;
    let mut at = 0;
    framer.push(file, |m, f| {
        at += m.len();
        if f.name == "FMT" && m.len() > 3 {
            defined.insert(m[3]);
        } else if !defined.contains(&m[2]) && error.is_none() {
            error = Some(format!("a {} record before its FMT", f.name));
        }
    });
    if at != file.len() {
        return Err(format!(
            "{} of its {} bytes are whole records",
            at,
            file.len()
        ));
    }
    error.map_or(Ok(()), Err)
}
