//! What a crash leaves, repaired at start: a split still open is cut back to its last whole,
//! plausible message, summarised, closed and entered in its manifest; a column's splits
//! likewise; a session that cannot be repaired is set aside, a deletion cut short finished.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::sink::{make_closed, split_name};
use crate::autopilot::LogFormat;
use crate::store::bin_splitter::summarize_bin;
use crate::store::fsync;
use crate::store::manifest::{MANIFEST, SplitEntry, hex, read_manifest, write_manifest};
use crate::store::splitter::{LastSummary, SplitPolicy, SplitSummary, Splitter};
use crate::ulog::Decoder;
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::Message;
use crate::ulog::message::{
    FILE_HEADER_LEN, FILE_MAGIC, MSG_HEADER_LEN, is_definition, msg_type, plausible_header,
};

/// Finds where the whole, plausible messages of a split end, fed in blocks (a crash can
/// leave a torn message, zeros or garbage where data was not yet written). A sample is
/// plausible when its subscription is in the split, its size fits its format, and it is not
/// zeros after its message id: a write torn after its message header leaves zeros that frame
/// as a sample of message id 0 (which a split may well have) at time 0.
#[derive(Debug)]
struct PrefixScan {
    framer: Framer,
    decoder: Decoder,
    /// Bytes of the file header and whole plausible messages so far.
    good: u64,
    messages: u64,
    /// The file does not start with the ULog magic.
    no_magic: bool,
    stopped: bool,
}

impl Default for PrefixScan {
    fn default() -> Self {
        Self {
            framer: Framer::file(),
            decoder: Decoder::new(),
            good: 0,
            messages: 0,
            no_magic: false,
            stopped: false,
        }
    }
}

impl PrefixScan {
    /// Takes the next block; false once the end of the good part was found.
    pub(super) fn push(&mut self, block: &[u8]) -> bool {
        let (good, messages, no_magic) = (&mut self.good, &mut self.messages, &mut self.no_magic);
        let decoder = &mut self.decoder;
        let flow = self.framer.push(block, |unit| match unit {
            Unit::Header(h) if h[..FILE_MAGIC.len()] != FILE_MAGIC => {
                *no_magic = true;
                ControlFlow::Break(())
            }
            Unit::Header(_) => {
                *good += FILE_HEADER_LEN as u64;
                ControlFlow::Continue(())
            }
            Unit::Message(m) => {
                let size = m.len() - MSG_HEADER_LEN;
                if !plausible_header(m[2], size, *messages == 0) {
                    return ControlFlow::Break(());
                }
                if let Some(message) = Message::parse_framed(m) {
                    let data = matches!(message, Message::Data { .. });
                    let zeros = data
                        && m.len() > MSG_HEADER_LEN + 2
                        && m[MSG_HEADER_LEN + 2..].iter().all(|&b| b == 0);
                    if zeros || (decoder.handle(&message).is_err() && data) {
                        return ControlFlow::Break(());
                    }
                }
                *messages += 1;
                *good += m.len() as u64;
                ControlFlow::Continue(())
            }
        });
        self.stopped |= flow.is_break();
        !self.stopped
    }

    /// Where the file must end: 0 without a file header.
    fn complete_prefix(&self) -> u64 {
        if self.no_magic { 0 } else { self.good }
    }
}

/// Length of the longest prefix of `bytes` that is a file header and whole, plausible
/// messages: where a file cut by a crash must end.
pub fn complete_prefix(bytes: &[u8]) -> usize {
    let mut scan = PrefixScan::default();
    scan.push(bytes);
    scan.complete_prefix() as usize
}

/// Suffix of a session recovery could not repair, renamed aside so that it is looked at by a
/// person and not again at every start.
pub const SET_ASIDE_SUFFIX: &str = ".unrecoverable";

/// Suffix of a session being deleted: renamed first, so that a power cut in the middle of a
/// deletion leaves a name that says so (the next start finishes the deletion), never half a
/// session counted as whole.
pub const DELETING_SUFFIX: &str = ".deleting";

pub(super) fn is_set_aside(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(SET_ASIDE_SUFFIX))
}

/// What recovery did with one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// Its open splits were cut back to whole messages and closed; the manifest says so.
    Repaired(PathBuf),
    /// It held no data: removed.
    Removed(PathBuf),
    /// It could not be repaired: renamed to `to`.
    SetAside {
        from: PathBuf,
        to: PathBuf,
        cause: String,
    },
    /// A deletion a power cut interrupted was finished.
    DeletionFinished(PathBuf),
}

/// Repairs every session under `dir` that a crash left open, and finishes deletions a power
/// cut interrupted. It never stops at a session it cannot repair (an I/O error, a split that
/// is not a regular file or cannot be read, a manifest it cannot read): that one is renamed to
/// `NAME.unrecoverable`, reported once with its path and the cause, and skipped. Memory stays
/// bounded whatever the size of the splits. `boot_id` is this boot's ([`this_boot`]): a
/// session written in another (or in one it cannot tell) may have lost pages to a power cut,
/// and its splits' ends are looked at for a page a power cut tore. Returns what it did.
pub fn recover(dir: &Path, boot_id: Option<&str>) -> Vec<Recovered> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::error!(dir = %dir.display(), error = %e, "cannot look for sessions to repair");
            return Vec::new();
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut done = Vec::new();
    for path in paths {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(DELETING_SUFFIX) {
            match std::fs::remove_dir_all(&path).and_then(|()| fsync::dir(dir)) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "finished a deletion a power cut interrupted");
                    done.push(Recovered::DeletionFinished(path));
                }
                Err(e) => {
                    tracing::error!(dir = %path.display(), error = %e, "cannot finish deleting")
                }
            }
            continue;
        }
        if name.ends_with(SET_ASIDE_SUFFIX) {
            continue;
        }
        if !path.join(MANIFEST).exists() {
            // A crash between a session's directory and its first manifest leaves a directory
            // with nothing in it but its columns' (empty) directories: nothing to keep.
            if name.contains("_sys") && holds_no_file(&path) {
                match std::fs::remove_dir_all(&path).and_then(|()| fsync::dir(dir)) {
                    Ok(()) => tracing::info!(
                        dir = %path.display(),
                        "removed the empty directory of a session a crash cut at its start"
                    ),
                    Err(e) => tracing::debug!(dir = %path.display(), error = %e, "cannot remove"),
                }
            }
            continue;
        }
        match recover_session(dir, &path, boot_id) {
            Ok(Some(r)) => done.push(r),
            Ok(None) => {}
            Err(cause) => {
                let cause = cause.to_string();
                let mut to = path.as_os_str().to_owned();
                to.push(SET_ASIDE_SUFFIX);
                let to = PathBuf::from(to);
                match std::fs::rename(&path, &to).and_then(|()| fsync::dir(dir)) {
                    Ok(()) => {
                        tracing::error!(
                            session = %path.display(),
                            set_aside = %to.display(),
                            "cannot repair a session a crash left: {cause}; set aside, logging goes on"
                        );
                        done.push(Recovered::SetAside {
                            from: path,
                            to,
                            cause,
                        });
                    }
                    Err(e) => tracing::error!(
                        session = %path.display(),
                        "cannot repair a session a crash left ({cause}), nor set it aside ({e}); \
                         logging goes on"
                    ),
                }
            }
        }
    }
    done
}

/// True for a directory with no file in it, nor in its directories (at most a level down:
/// a session's columns).
fn holds_no_file(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|e| {
        e.file_type().is_ok_and(|t| t.is_dir())
            && std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_none())
    })
}

/// This boot of the machine: Linux's `/proc/sys/kernel/random/boot_id`, new at every boot
/// (`None` where there is none).
pub fn this_boot() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

/// Repairs one session (in the log folder `dir`) if it was left open; `Ok(None)` when it
/// was closed.
pub(super) fn recover_session(
    dir: &Path,
    session: &Path,
    boot_id: Option<&str>,
) -> io::Result<Option<Recovered>> {
    let mut manifest = read_manifest(session)
        .map_err(|e| io::Error::new(e.kind(), format!("its manifest cannot be read: {e}")))?;
    if manifest.closed {
        return Ok(None);
    }
    // In the boot that wrote it, the page cache kept every write of a writer that died: no
    // page of it can be torn.
    let rebooted = boot_id.is_none() || manifest.boot_id.as_deref() != boot_id;
    for k in 0..=manifest.columns.len() {
        let prefix = match k {
            0 => String::new(),
            k => {
                let name = &manifest.columns[k - 1].name;
                crate::store::columns::check_name(name)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                format!("{name}/")
            }
        };
        let splits = manifest.column_splits_mut(k).expect("k counts the columns");
        recover_column(session, &prefix, splits, rebooted)?;
    }
    manifest.closed = true;
    if manifest.all_splits().next().is_none() {
        tracing::warn!(session = %session.display(), "a session with no data; removed");
        std::fs::remove_dir_all(session)?;
        fsync::dir(dir)?;
        return Ok(Some(Recovered::Removed(session.to_owned())));
    }
    write_manifest(session, &manifest)?;
    // The session's own entry, which its crashed writer may not have synced yet.
    fsync::dir(dir)?;
    tracing::warn!(session = %session.display(), "repaired a session left open by a crash");
    Ok(Some(Recovered::Repaired(session.to_owned())))
}

/// Repairs the splits of one column of a session (`prefix`: `NAME/`, or empty for the main
/// column) that the manifest does not know as closed; `splits` is the column's entry;
/// `rebooted`: the machine started again since they were written.
fn recover_column(
    session: &Path,
    prefix: &str,
    splits: &mut Vec<SplitEntry>,
    rebooted: bool,
) -> io::Result<()> {
    let dir = session.join(prefix);
    if !dir.is_dir() {
        splits.clear();
        return Ok(());
    }
    // Splits on disk that the manifest does not know as closed.
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("split_") && LogFormat::of_file_name(n).is_some())
        .map(|n| format!("{prefix}{n}"))
        .collect();
    files.sort();
    // A split closed or removed here: its name, or its absence, is not durable yet.
    let mut changed = false;
    if crate::planted::is(crate::planted::Bug::RepairOnlyListedSplits) {
        files.retain(|n| splits.iter().any(|e| &e.file == n));
    }
    for name in files {
        let known_closed = splits.iter().any(|e| e.file == name && e.closed);
        if known_closed {
            continue;
        }
        let path = session.join(&name);
        let entry = repair_split(&path, splits, &name, rebooted)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
        match entry {
            Some(entry) => {
                changed = true;
                match splits.iter_mut().find(|e| e.file == name) {
                    Some(e) => *e = entry,
                    None => splits.push(entry),
                }
            }
            None => {
                // Nothing of it reached the disk: no empty files.
                std::fs::remove_file(&path)?;
                splits.retain(|e| e.file != name);
                changed = true;
            }
        }
    }
    // A column's folder durable before the manifest calls the session closed (the main
    // column's splits are in the session's folder, synced once the manifest is written): a
    // power cut would otherwise take a split's name from under the manifest that lists it,
    // or bring an empty file back beside a manifest that no longer repairs.
    let planted = crate::planted::is(crate::planted::Bug::ColumnRepairUnsynced);
    if changed && !prefix.is_empty() && !planted {
        fsync::dir(&dir)?;
    }
    splits.retain(|e| session.join(&e.file).exists());
    splits.sort_by_key(|e| e.summary.index);
    Ok(())
}

/// Blocks read at a time when a split is repaired.
const REPAIR_BLOCK: usize = 64 << 10;

/// The page a power cut keeps or loses whole: a file whose size reached the disk before the
/// data of its last pages reads zeros from a page boundary to its end.
const PAGE: u64 = 4096;

/// Where the file at `path` (of `len` bytes) may have been torn: the first page boundary
/// from which it is zeros to its end, when that is before its end. A message the boundary
/// falls in lost its bytes from there (its header and first fields kept, zeros after: it
/// frames, and nothing in it says it is not what was written); a repair ends before it. A
/// message a logger wrote with zeros across a page boundary at the very end of a split that
/// a power cut left open is dropped too: one message, in one cut in hundreds (what a fill
/// brings back), against a message with fields zeroed kept as data.
fn torn_from(path: &Path, len: u64) -> io::Result<Option<u64>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(path)?;
    let mut block = vec![0u8; REPAIR_BLOCK];
    // The end of the last byte that is not zero, read backwards a block at a time.
    let mut end = len;
    let data_end = loop {
        if end == 0 {
            break 0;
        }
        let from = end.saturating_sub(REPAIR_BLOCK as u64);
        let n = (end - from) as usize;
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut block[..n])?;
        if let Some(i) = block[..n].iter().rposition(|&b| b != 0) {
            break from + i as u64 + 1;
        }
        end = from;
    };
    let boundary = data_end.div_ceil(PAGE) * PAGE;
    Ok((boundary < len).then_some(boundary))
}

/// Cuts a split back to its last complete message (before a torn page, when the machine
/// `rebooted` since it was written), closes it, and summarises it; `None` when not even one
/// message after the header survived. Reads the file in blocks, twice: once to find where
/// the whole messages end, once to summarise and hash what stays.
pub(super) fn repair_split(
    path: &Path,
    known: &[SplitEntry],
    name: &str,
    rebooted: bool,
) -> io::Result<Option<SplitEntry>> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    if LogFormat::of_file_name(name) == Some(LogFormat::DataFlash) {
        return repair_bin_split(path, meta.len(), known, name, rebooted);
    }
    // Only what is before a torn page is scanned: a message that runs into it is not whole.
    let torn = if rebooted {
        torn_from(path, meta.len())?
    } else {
        None
    };
    let scanned = torn.unwrap_or(meta.len());
    let mut file = File::open(path)?.take(scanned);
    let mut block = vec![0u8; REPAIR_BLOCK];
    let mut scan = PrefixScan::default();
    loop {
        let n = file.read(&mut block)?;
        if n == 0 || !scan.push(&block[..n]) {
            break;
        }
    }
    let keep = scan.complete_prefix();
    if keep <= FILE_HEADER_LEN as u64 {
        return Ok(None);
    }
    if keep < meta.len() {
        tracing::warn!(file = %path.display(), cut = meta.len() - keep, "cutting a torn end");
        OpenOptions::new().write(true).open(path)?.set_len(keep)?;
    }
    // Durable before a manifest says the split is closed: a writer killed before its sync
    // leaves its writes in the page cache (a kill is no power cut), and the next power cut
    // would empty the split under a manifest that still gives its size and SHA-256. Synced
    // through a read-only descriptor: a split its writer already made read-only is whole
    // and stays as it is.
    fsync::file(&File::open(path)?)?;
    // The summary and the hash of what stays.
    let mut splitter = Splitter::new(SplitPolicy::unlimited());
    let mut last = LastSummary(None);
    let mut hash = Sha256::new();
    let mut file = File::open(path)?.take(keep);
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            break;
        }
        hash.update(&block[..n]);
        splitter.push(&block[..n], &mut last);
    }
    splitter.finish(&mut last);
    let mut summary = last.0.unwrap_or_default();
    summary.index = split_index(name);
    // What only the writer knew (the preamble's extent) comes from the manifest's last word;
    // a split the manifest never listed (the crash came before its first manifest) tells it
    // beside the split before it.
    if let Some(k) = told(known, name) {
        summary.preamble_bytes = k.summary.preamble_bytes.min(keep);
        summary.latched_samples = k.summary.latched_samples;
    } else if summary.index > 0
        && let Some((bytes, latched)) = unlisted_preamble(path, summary.index, keep)?
    {
        summary.preamble_bytes = bytes;
        summary.latched_samples = latched;
    }
    make_closed(path)?;
    Ok(Some(SplitEntry {
        file: name.to_owned(),
        closed: true,
        sha256: Some(hex(&hash.finalize())),
        summary,
    }))
}

/// The manifest's entry for split `name`, if it told the split's preamble: every split but
/// the first begins with one, so an entry of a later split that says none was written
/// before its writer knew (listed as it began, the disk full before the next word).
fn told<'a>(known: &'a [SplitEntry], name: &str) -> Option<&'a SplitEntry> {
    let entry = known.iter().find(|e| e.file == name)?;
    (entry.summary.index == 0 || entry.summary.preamble_bytes > 0).then_some(entry)
}

/// The bytes of the split that comes before split `index` (at `path`) in its folder: the
/// one before it, or, when that one is gone (a full disk left nothing whole of it), the
/// nearest earlier one there.
fn split_before(path: &Path, index: u32, format: LogFormat) -> Option<Vec<u8>> {
    (0..index)
        .rev()
        .find_map(|i| std::fs::read(path.with_file_name(split_name(i, format))).ok())
}

/// The preamble of ULog split `index` (> 0) at `path`, which the manifest never listed: its
/// header, its definitions and subscriptions, then the samples that repeat the last one of
/// their topic in the split before (the latched samples the writer replays). The split's
/// own data begins at the first other message: the writer rolls at a sample, a new one.
/// Its length and the latched samples in it; `None` when no split before is there.
fn unlisted_preamble(path: &Path, index: u32, keep: u64) -> io::Result<Option<(u64, u64)>> {
    use std::collections::HashMap;
    use std::io::Read;
    let Some(before) = split_before(path, index, LogFormat::ULog) else {
        return Ok(None);
    };
    let mut last_sample: HashMap<[u8; 2], Vec<u8>> = HashMap::new();
    let _ = Framer::file().push(&before, |unit| {
        if let Unit::Message(m) = unit
            && m[2] == msg_type::DATA
            && m.len() >= 5
        {
            last_sample.insert([m[3], m[4]], m.to_vec());
        }
        ControlFlow::Continue(())
    });
    // A preamble is a few hundred KB at most (formats, parameters, one sample a topic).
    let mut head = Vec::new();
    File::open(path)?
        .take(keep.min(PREAMBLE_READ))
        .read_to_end(&mut head)?;
    let mut end = FILE_HEADER_LEN as u64;
    let mut latched = 0;
    let _ = Framer::file().push(&head, |unit| {
        let Unit::Message(m) = unit else {
            return ControlFlow::Continue(());
        };
        let ty = m[2];
        let replayed = m.len() >= 5
            && ty == msg_type::DATA
            && last_sample.get(&[m[3], m[4]]).is_some_and(|s| s == m);
        if !(is_definition(ty) || ty == msg_type::ADD_LOGGED || replayed) {
            return ControlFlow::Break(());
        }
        end += m.len() as u64;
        latched += u64::from(replayed);
        ControlFlow::Continue(())
    });
    Ok(Some((end, latched)))
}

/// The preamble of a DataFlash split (`split`) the manifest never listed, beside the split
/// before it (`before`): the leading records of the types a preamble replays that are
/// copies of records in the split before (each FMT, UNIT, MULT, FMTU, VER and startup text,
/// each parameter at its latest value, the mode). The split's own data begins at the first
/// other record: the writer rolls at a record with a time, a new one.
fn unlisted_bin_preamble(before: &[u8], split: &[u8]) -> u64 {
    use crate::dataflash::Framer as BinFramer;
    use crate::dataflash::preamble::is_replayed;
    let mut earlier = std::collections::HashSet::new();
    BinFramer::new().push(before, |m, f| {
        if is_replayed(&f.name) {
            earlier.insert(m.to_vec());
        }
    });
    let mut end = 0;
    let mut in_preamble = true;
    BinFramer::new().push(split, |m, f| {
        in_preamble = in_preamble && is_replayed(&f.name) && earlier.contains(m);
        if in_preamble {
            end += m.len() as u64;
        }
    });
    end
}

/// Most of an unlisted split read to find its preamble's end.
const PREAMBLE_READ: u64 = 4 << 20;

/// The index a split's name gives (`split_0007.ulg` → 7).
fn split_index(name: &str) -> u32 {
    let file = name.rsplit('/').next().unwrap_or_default();
    let stem = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
    stem.trim_start_matches("split_").parse().unwrap_or(0)
}

/// [`repair_split`] for a DataFlash split (ArduPilot's `.bin`): read whole (a split is at
/// most the split size), cut after its last whole message, summarised as the splitter does.
fn repair_bin_split(
    path: &Path,
    len: u64,
    known: &[SplitEntry],
    name: &str,
    rebooted: bool,
) -> io::Result<Option<SplitEntry>> {
    let bytes = std::fs::read(path)?;
    // Only what is before a torn page is whole (see repair_split).
    let torn = if rebooted {
        torn_from(path, len)?
    } else {
        None
    };
    let scanned = torn.unwrap_or(len) as usize;
    let (keep, mut summary) = summarize_bin(&bytes[..scanned], split_index(name));
    if keep == 0 {
        return Ok(None);
    }
    if (keep as u64) < len {
        tracing::warn!(file = %path.display(), cut = len - keep as u64, "cutting a torn end");
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(keep as u64)?;
    }
    // Durable before a manifest says the split is closed (see repair_split).
    fsync::file(&File::open(path)?)?;
    if let Some(k) = told(known, name) {
        summary.preamble_bytes = k.summary.preamble_bytes.min(keep as u64);
    } else if summary.index > 0
        && let Some(before) = split_before(path, summary.index, LogFormat::DataFlash)
    {
        summary.preamble_bytes = unlisted_bin_preamble(&before, &bytes[..keep]);
    }
    make_closed(path)?;
    Ok(Some(SplitEntry {
        file: name.to_owned(),
        closed: true,
        sha256: Some(hex(&Sha256::digest(&bytes[..keep]))),
        summary,
    }))
}

/// The summary of a split file, recomputed from its bytes (its preamble not told apart).
pub fn summarize_split(bytes: &[u8], index: u32) -> SplitSummary {
    let mut splitter = Splitter::new(SplitPolicy::unlimited());
    let mut last = LastSummary(None);
    splitter.push(bytes, &mut last);
    splitter.finish(&mut last);
    let mut s = last.0.unwrap_or_default();
    s.index = index;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with(messages: &[&[u8]]) -> Vec<u8> {
        let mut b = FILE_MAGIC.to_vec();
        b.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0]);
        for m in messages {
            b.extend_from_slice(m);
        }
        b
    }

    #[test]
    fn a_torn_or_zero_filled_end_is_cut_at_the_last_whole_message() {
        let dropout: &[u8] = &[2, 0, b'O', 5, 0];
        let unknown: &[u8] = &[1, 0, b'Z', 9];
        let whole = log_with(&[dropout, unknown, dropout]);
        assert_eq!(complete_prefix(&whole), whole.len());
        // Torn inside the last message.
        assert_eq!(complete_prefix(&whole[..whole.len() - 2]), whole.len() - 5);
        // Zeros where a crash left unwritten blocks.
        let mut zeros = whole.clone();
        zeros.extend_from_slice(&[0; 600]);
        assert_eq!(complete_prefix(&zeros), whole.len());
        // No header: nothing.
        assert_eq!(complete_prefix(&whole[..10]), 0);
    }

    /// One framed message of type `ty`.
    fn framed(ty: u8, payload: &[u8]) -> Vec<u8> {
        let mut m = (payload.len() as u16).to_le_bytes().to_vec();
        m.push(ty);
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn a_write_torn_after_its_message_header_is_cut_where_its_zeros_begin() {
        let format = framed(b'F', b"att:uint64_t timestamp;float roll;");
        let subscribe = framed(b'A', b"\x00\x00\x00att");
        let mut sample = vec![0, 0];
        sample.extend_from_slice(&7u64.to_le_bytes());
        sample.extend_from_slice(&0.5f32.to_le_bytes());
        let sample = framed(b'D', &sample);
        let whole = log_with(&[&format, &subscribe, &sample]);
        assert_eq!(complete_prefix(&whole), whole.len());
        // A sample's header on the disk, zeros after it: it frames as a sample of message id
        // 0 of another size than its format's.
        let mut torn = whole.clone();
        torn.extend_from_slice(&framed(b'D', &[0; 18]));
        assert_eq!(complete_prefix(&torn), whole.len());
        // Zeros of the sample's own size: message id 0 is subscribed, the size fits, but a
        // sample at time 0 with every field zero is a page the disk never got.
        let mut torn = whole.clone();
        torn.extend_from_slice(&framed(b'D', &[0; 14]));
        assert_eq!(complete_prefix(&torn), whole.len());
    }

    /// A fresh folder for one test.
    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ulog-recv-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_is_torn_from_the_first_page_boundary_after_its_last_byte_that_is_not_zero() {
        let dir = test_dir("torn-from");
        let path = dir.join("f");
        let at = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            torn_from(&path, bytes.len() as u64).unwrap()
        };
        let mut bytes = vec![7u8; 5000];
        assert_eq!(at(&bytes), None);
        // Zeros from inside the second page to its end: no boundary before the end.
        bytes.extend_from_slice(&[0; 3000]);
        assert_eq!(at(&bytes), None);
        // Past a boundary, more than a read block of them.
        bytes.extend_from_slice(&[0; 100_000]);
        assert_eq!(at(&bytes), Some(2 * PAGE));
        // All zeros: torn from the start.
        assert_eq!(at(&[0; 9000]), Some(0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sample_torn_at_a_page_boundary_is_cut_after_a_reboot_and_kept_in_the_same_boot() {
        let dir = test_dir("torn-sample");
        let format = framed(b'F', b"att:uint64_t timestamp;float roll;");
        let subscribe = framed(b'A', b"\x00\x00\x00att");
        let sample = |t: u64| {
            let mut d = vec![0, 0];
            d.extend_from_slice(&t.to_le_bytes());
            d.extend_from_slice(&0.5f32.to_le_bytes());
            framed(b'D', &d)
        };
        let mut log = log_with(&[&format, &subscribe]);
        // Dropout marks (5 bytes) and samples (17) up to 10 bytes before the page boundary,
        // then a sample across it.
        let dropout: &[u8] = &[2, 0, b'O', 5, 0];
        while !(PAGE as usize - 10 - log.len()).is_multiple_of(17) {
            log.extend_from_slice(dropout);
        }
        let mut t = 0;
        while log.len() <= PAGE as usize {
            t += 1;
            log.extend_from_slice(&sample(t));
        }
        // The disk kept the sample's first page and not the next: zeros from the boundary on
        // (its message header and its timestamp's first bytes kept).
        let whole = log.len() - 17;
        assert_eq!(whole, PAGE as usize - 10);
        log[PAGE as usize..].fill(0);
        let path = dir.join("split_0000.ulg");
        for (rebooted, kept) in [(true, whole), (false, log.len())] {
            std::fs::write(&path, &log).unwrap();
            let entry = repair_split(&path, &[], "split_0000.ulg", rebooted)
                .unwrap()
                .unwrap();
            assert_eq!(entry.summary.bytes, kept as u64, "rebooted: {rebooted}");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), kept as u64);
            let mut perms = std::fs::metadata(&path).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&path, perms).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_session_cut_before_its_first_manifest_is_removed_and_nothing_else() {
        let dir = test_dir("recovery");
        // Cut before its manifest: its directory and an empty column's.
        let cut = dir.join("2026-12-02T04-00-00Z_sys1");
        std::fs::create_dir_all(cut.join("esc")).unwrap();
        // Not ours to touch: a session directory with a file in it, and another folder.
        let kept = dir.join("2026-12-02T05-00-00Z_sys1");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(kept.join("split_0000.ulg"), b"ULog").unwrap();
        let other = dir.join("sd-card");
        std::fs::create_dir_all(&other).unwrap();
        recover(&dir, this_boot().as_deref());
        assert!(!cut.exists());
        assert!(kept.join("split_0000.ulg").exists());
        assert!(other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
