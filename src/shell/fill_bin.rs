//! Fills a closed ArduPilot session from the vehicle's card (the shell around
//! [`crate::fill::dataflash`]): reads the session's `.bin` splits, runs the filler over the
//! card's log (a copy of it, or the vehicle's own over MAVLink FTP: its newest logs tried
//! until one holds the stream), and writes what it recovered as one amendment beside the
//! splits (`amend_NNNN.bin`, durable before the manifest names it), the gaps it could not
//! fill in the manifest. A session filled once is not filled again.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::autopilot::LogFormat;
use crate::fill::dataflash::stream::BinStream;
use crate::fill::dataflash::{BinFiller, BinOutcome, amendment};
use crate::shell::vehicle_files::{FilesError, VehicleFiles};
use crate::store::amend::{AmendmentEntry, UnfilledGap, bin_amendment_name};
use crate::store::files::{hex, read_manifest, update_manifest, write_file_durably};

/// Why an ArduPilot session could not be filled.
#[derive(Debug, thiserror::Error)]
pub enum BinFillError {
    #[error("cannot read or write the session: {0}")]
    Io(#[from] std::io::Error),
    #[error("the session is still being recorded (its manifest is not closed)")]
    NotClosed,
    #[error("not an ArduPilot session")]
    NotDataFlash,
    #[error("the card's log is not this flight's: {0}")]
    WrongLog(String),
    #[error("cannot read the card's log: {0}")]
    Card(std::io::Error),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(
        "no log of this flight on the vehicle's card ({checked} newest checked: none holds \
         the stream's records)"
    )]
    NoCardLog { checked: usize },
}

/// Logs on the vehicle's card tried, newest first, before giving up.
const CANDIDATES: usize = 5;

/// Where the card's log is read from.
pub enum Card<'a> {
    /// A copy of the flight's card log, known by `name`.
    File { name: String, file: std::fs::File },
    /// The vehicle's card over MAVLink FTP: its newest logs tried in turn.
    Vehicle(&'a mut VehicleFiles),
}

impl Card<'_> {
    /// The logs to try, newest first: the copy, or the vehicle's newest `.BIN`s.
    async fn candidates(&mut self) -> Result<Vec<String>, BinFillError> {
        Ok(match self {
            Card::File { name, .. } => vec![name.clone()],
            Card::Vehicle(files) => files
                .list_logs()
                .await?
                .into_iter()
                .rev()
                .filter(|log| log.path.to_ascii_lowercase().ends_with(".bin"))
                .take(CANDIDATES)
                .map(|log| log.path)
                .collect(),
        })
    }

    /// Opens `path` (one of the candidates); its length.
    async fn open(&mut self, path: &str) -> Result<u64, BinFillError> {
        match self {
            Card::File { file, .. } => Ok(file.metadata().map_err(BinFillError::Card)?.len()),
            Card::Vehicle(files) => Ok(files.open(path).await?),
        }
    }

    /// `n` bytes of the open log from `at` (fewer at its end).
    async fn read(&mut self, at: u64, n: u64) -> Result<Vec<u8>, BinFillError> {
        match self {
            Card::File { file, .. } => {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0u8; n as usize];
                let got = file.read_at(&mut buf, at).map_err(BinFillError::Card)?;
                buf.truncate(got);
                Ok(buf)
            }
            Card::Vehicle(files) => Ok(files.read(at, n).await?),
        }
    }

    /// Bytes received from the vehicle so far (its FTP client's count, duplicates
    /// included); `None` for a copy.
    fn received(&self) -> Option<u64> {
        match self {
            Card::File { .. } => None,
            Card::Vehicle(files) => Some(files.stats().bytes_received),
        }
    }

    async fn close(&mut self) -> Result<(), BinFillError> {
        if let Card::Vehicle(files) = self {
            files.close().await?;
        }
        Ok(())
    }
}

/// What a fill of an ArduPilot session did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BinFillReport {
    /// Gaps filled, of them marked by the receiver (the others: the vehicle's drops at the
    /// source), and the records recovered with their bytes.
    pub filled: usize,
    pub marked: usize,
    pub records: u64,
    pub record_bytes: u64,
    /// Stretches of the stream the card could not fill, with why.
    pub unfilled: Vec<String>,
    /// The card's log used (its path on the vehicle, or the copy's name), and its length
    /// when opened.
    pub card_log: Option<String>,
    pub card_log_bytes: u64,
    /// Bytes of the card's logs read (of the flight's and of those tried before it; from the
    /// vehicle, every byte received, duplicates included), in how many reads.
    pub fetched_bytes: u64,
    pub reads: u64,
    /// The amendment written, if any.
    pub amendment: Option<String>,
    /// The session was filled before: nothing was done.
    pub filled_before: bool,
}

/// Fills the closed ArduPilot session in `dir` from `card`. On the vehicle's card, the
/// session's turn with the open file is held from the first open to the close.
pub async fn fill_bin_session(
    dir: &Path,
    mut card: Card<'_>,
) -> Result<BinFillReport, BinFillError> {
    let manifest = read_manifest(dir)?;
    if manifest.log_format != LogFormat::DataFlash {
        return Err(BinFillError::NotDataFlash);
    }
    if !manifest.closed {
        return Err(BinFillError::NotClosed);
    }
    let mut report = BinFillReport::default();
    if manifest.fill.as_deref() == Some("done") {
        report.filled_before = true;
        return Ok(report);
    }
    let splits: Vec<(String, Vec<u8>, u64)> = manifest
        .splits
        .iter()
        .map(|s| {
            Ok((
                s.file.clone(),
                std::fs::read(dir.join(&s.file))?,
                s.summary.preamble_bytes,
            ))
        })
        .collect::<std::io::Result<_>>()?;
    let scanned: Vec<(&[u8], u64)> = splits.iter().map(|(_, b, p)| (&b[..], *p)).collect();
    let stream = BinStream::scan(&scanned);
    let mut outcomes = Vec::new();
    let mut chosen = None;
    if BinFiller::new(&stream, 0).is_done() {
        // Nothing lost, or nothing to find the stream by: no card needed to say which.
        chosen = Some(BinFiller::new(&stream, 0));
    } else {
        let _turn = match &card {
            Card::Vehicle(files) => files.turn().await,
            Card::File { .. } => None,
        };
        let received_before = card.received();
        let candidates = card.candidates().await?;
        let mut refused = None;
        for path in &candidates {
            let len = card.open(path).await?;
            let mut filler = BinFiller::new(&stream, len);
            let mut found = false;
            while let Some((at, n)) = filler.next_read() {
                tracing::trace!(at, n, "reading the card's log");
                let data = card.read(at, n).await?;
                report.fetched_bytes += data.len() as u64;
                report.reads += 1;
                filler.handle_read(at, &data);
                outcomes.extend(std::iter::from_fn(|| filler.poll()));
                found |= filler.found();
                if !found && filler.wrong_log().is_some() {
                    break;
                }
            }
            outcomes.extend(std::iter::from_fn(|| filler.poll()));
            match filler.wrong_log() {
                Some(why) if !found => {
                    tracing::debug!(log = path, "not this flight's card log: {why}");
                    refused = Some(why.to_owned());
                    outcomes.clear();
                }
                _ => {
                    tracing::info!(log = path, len, "the flight's card log");
                    report.card_log = Some(path.clone());
                    report.card_log_bytes = len;
                    chosen = Some(filler);
                    break;
                }
            }
        }
        card.close().await?;
        if let (Some(before), Some(now)) = (received_before, card.received()) {
            report.fetched_bytes = now - before;
        }
        if chosen.is_none() {
            return Err(match (&card, refused) {
                (Card::File { .. }, Some(why)) => BinFillError::WrongLog(why),
                _ => BinFillError::NoCardLog {
                    checked: candidates.len(),
                },
            });
        }
    }
    let filler = chosen.expect("a card log chosen");
    if let Some(why) = filler.wrong_log() {
        return Err(BinFillError::WrongLog(why.to_owned()));
    }
    let source = report.card_log.clone().unwrap_or_default();
    let names: Vec<String> = splits.iter().map(|(n, _, _)| n.clone()).collect();
    let mut fills = Vec::new();
    let mut unfilled = Vec::new();
    for outcome in outcomes {
        match outcome {
            BinOutcome::Filled(f) => {
                report.filled += 1;
                report.marked += usize::from(f.marked);
                report.records += f.count;
                report.record_bytes += f.records.len() as u64;
                fills.push(f);
            }
            BinOutcome::Unfilled(u) => {
                report
                    .unfilled
                    .push(format!("{} at {}: {}", names[u.split], u.offset, u.reason));
                unfilled.push(UnfilledGap {
                    split: names[u.split].clone(),
                    offset: u.offset,
                    reason: u.reason,
                });
            }
        }
    }
    let mut added = None;
    if !fills.is_empty() {
        let (bytes, entries) = amendment::build(&stream, &names, filler.card_formats(), &fills);
        let name = bin_amendment_name(manifest.amendments.len());
        write_file_durably(dir, &name, &bytes)?;
        added = Some(AmendmentEntry {
            file: name.clone(),
            sha256: hex(&Sha256::digest(&bytes)),
            source,
            fills: entries,
        });
        report.amendment = Some(name);
    }
    update_manifest(dir, |m| {
        m.fill = Some("done".into());
        m.unfilled = unfilled;
        m.amendments.extend(added);
    })?;
    Ok(report)
}
