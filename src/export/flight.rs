//! The flight to export, as one ULog byte stream: a `.ulg` file as it is (read from disk in
//! pieces by the writers, [`open`], as is a session read as one column); a session directory
//! read back as one stream ([`crate::store::reading`]: its splits joined, amendments merged,
//! its columns joined, or the one column asked for). With a time window, a session is cut by
//! its manifest's time index, reading only the splits the window needs
//! ([`crate::store::snippet`]). A referencing snippet's directory reads as the bytes it
//! references ([`crate::store::reference`]). [`diagnose`] runs the flight diagnostics over
//! any of them.

use std::io::Read;
use std::path::Path;

use crate::dataflash::format::Format;
use crate::dataflash::framer::Framer;
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::preamble::is_replayed;
use crate::diagnose::{BinDiagnosis, Detectors, Diagnosis, Selection};
use crate::export::{ExportError, ExportOptions, Flight, FlightFile, SessionColumnFlight};
use crate::store::input::{LogInput, dataflash_files, log_input, open_bin_part};
use crate::store::reading::{ColumnStream, read_session};
use crate::store::reference::read_reference;
use crate::store::snippet::{cut_stream, snippet};
use crate::store::splitter::SplitPolicy;

/// `input` as the writers read it: a `.ulg` file from disk, a piece at a time (a window is cut
/// by the writers' walk), and a whole session read as one column (a session without
/// columns, or `--column`) split by split, so that a flight's length never becomes memory;
/// columns to join, a window of a session and a snippet as [`load`] reads them. Anything
/// else is refused ([`crate::store::input`]).
pub fn open(input: &Path, options: &ExportOptions) -> Result<Box<dyn Flight>, ExportError> {
    let kind = log_input(input)?;
    if let LogInput::File(_) = kind {
        let len = std::fs::metadata(input)
            .map_err(|source| ExportError::Read {
                path: input.to_owned(),
                source,
            })?
            .len();
        return Ok(Box::new(FlightFile {
            path: input.to_owned(),
            len,
        }));
    }
    let whole = options.from_us.is_none() && options.to_us.is_none();
    if whole && let LogInput::Session = kind {
        let column = options.column.as_deref();
        if let Some(stream) = ColumnStream::open(input, column)? {
            return Ok(Box::new(SessionColumnFlight {
                dir: input.to_owned(),
                column: options.column.clone(),
                len: stream.files_len(),
            }));
        }
    }
    Ok(Box::new(load(input, options)?))
}

/// Reads `input` (a `.ulg` or a session directory) as one ULog stream in memory; anything
/// else is refused ([`crate::store::input`]).
pub fn load(input: &Path, options: &ExportOptions) -> Result<Vec<u8>, ExportError> {
    let kind = log_input(input)?;
    if let LogInput::File(_) = kind {
        return std::fs::read(input).map_err(|source| ExportError::Read {
            path: input.to_owned(),
            source,
        });
    }
    let column = options.column.as_deref();
    let window = (
        options.from_us.unwrap_or(0),
        options.to_us.unwrap_or(u64::MAX),
    );
    if kind == LogInput::Snippet {
        let stream = read_reference(input, column)?;
        if options.from_us.is_none() && options.to_us.is_none() {
            return Ok(stream);
        }
        let (bytes, _) = cut_stream(&stream, window.0, window.1, &SplitPolicy::unlimited())?;
        return Ok(bytes);
    }
    if options.from_us.is_some() || options.to_us.is_some() {
        let (bytes, _) = snippet(input, window.0, window.1, &SplitPolicy::unlimited(), column)?;
        return Ok(bytes);
    }
    Ok(read_session(input, column)?)
}

/// The flight diagnostics of `input` (a `.ulg`, a session with its amendments merged, a
/// snippet; an ArduPilot `.bin` or session, its splits in order), read a piece at a time:
/// the detectors with their findings, blind spans and, for ArduPilot, the vehicle's own
/// records.
pub fn diagnose(input: &Path, selection: Selection) -> Result<Detectors, ExportError> {
    if let Some(files) = dataflash_files(input) {
        let mut diagnosis = BinDiagnosis::new(selection);
        for file in files {
            let mut reader = open_bin_part(&file).map_err(|source| ExportError::Read {
                path: file.clone(),
                source,
            })?;
            read_in_pieces(&mut reader, &file, |piece| {
                diagnosis.push(piece);
                false
            })?;
        }
        return Ok(diagnosis.finish());
    }
    let flight = open(input, &ExportOptions::default())?;
    let mut reader = flight.open()?;
    let mut diagnosis = Diagnosis::new(selection);
    read_in_pieces(&mut reader, input, |piece| {
        diagnosis.push(piece);
        false
    })?;
    Ok(diagnosis.finish())
}

/// Writes the DataFlash `files` (an ArduPilot session's splits in log order, or a `.bin`) to
/// `out` as one DataFlash log: every message once, the gaps a fill recovered in place, the
/// preambles of the splits after the first left out (what came before, again). Returns the
/// messages written.
pub fn write_bin_log(
    files: &[std::path::PathBuf],
    mut out: impl std::io::Write,
) -> Result<u64, ExportError> {
    let (mut written, mut failed) = (0u64, None);
    each_dataflash_message(files, |m, _| match out.write_all(m) {
        Ok(()) => {
            written += 1;
            true
        }
        Err(e) => {
            failed = Some(e);
            false
        }
    })?;
    if let Some(e) = failed {
        return Err(ExportError::Write(e));
    }
    out.flush().map_err(ExportError::Write)?;
    Ok(written)
}

/// Reads the DataFlash `files` (a `.bin`, or an ArduPilot session's splits in log order) as
/// one log, handing each whole message and its format to `each` until it returns `false`.
/// The preamble each split after the first opens with (the log's state replayed,
/// [`is_replayed`]) is not handed over: it is what came before, again.
pub(crate) fn each_dataflash_message(
    files: &[std::path::PathBuf],
    mut each: impl FnMut(&[u8], &Format) -> bool,
) -> Result<(), ExportError> {
    let mut framer = Framer::new();
    // Whether to go on, and whether a split's replayed preamble is under way.
    let (mut going, mut in_preamble) = (true, false);
    let mut hand = |m: &[u8], f: &Format, going: &mut bool, in_preamble: &mut bool| {
        *in_preamble = *in_preamble && is_replayed(&f.name) && dropout_ms(m, f).is_none();
        if !*in_preamble && *going {
            *going = each(m, f);
        }
    };
    for (split, file) in files.iter().enumerate() {
        let mut reader = open_bin_part(file).map_err(|source| ExportError::Read {
            path: file.clone(),
            source,
        })?;
        in_preamble = split > 0;
        let stopped = read_in_pieces(&mut reader, file, |piece| {
            framer.push(piece, |m, f| hand(m, f, &mut going, &mut in_preamble));
            !going
        })?;
        if stopped {
            return Ok(());
        }
    }
    framer.finish(|m, f| hand(m, f, &mut going, &mut in_preamble));
    Ok(())
}

/// Hands what `reader` (reading `path`) holds to `each`, a piece at a time, to its end or
/// until `each` returns `true` (stop); returns whether it stopped early.
pub(crate) fn read_in_pieces(
    reader: &mut impl Read,
    path: &Path,
    mut each: impl FnMut(&[u8]) -> bool,
) -> Result<bool, ExportError> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(ExportError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        if each(&buf[..n]) {
            return Ok(true);
        }
    }
}
