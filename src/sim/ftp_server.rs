//! The simulated vehicle's MAVLink FTP server, sans-IO, serving read-only files as PX4's
//! `mavlink_ftp` does: ListDirectory (`F name\tsize`, `D name`), OpenFileRO (one session at
//! a time: a second open is refused with NoSessionsAvailable), ReadFile, BurstReadFile
//! (packets of 239 bytes until the end of the file or [`BURST_LIMIT`] bytes, the last one
//! marked burst-complete; the size asked for is ignored, as PX4 ignores it), CalcFileCRC32,
//! TerminateSession, ResetSessions; a request sent again with the same sequence number gets
//! the last reply again; a new request ends a burst still being sent (the vehicle drops its
//! unsent packets). `@MAV_LOG` names the log directory, as in PX4.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::link::ftp::wire::{self, DirEntry, FtpPayload, MAX_DATA, Nak, op};

/// Bytes a burst carries at most before it is marked complete (PX4 stops near 35 KB).
pub const BURST_LIMIT: usize = 35_000;

/// Where PX4 keeps its logs, and the virtual name it also lists them under.
pub const LOG_ROOT: &str = "/fs/microsd/log";
pub const MAV_LOG: &str = "@MAV_LOG";

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FtpServerStats {
    pub requests: u64,
    /// File bytes sent in read replies.
    pub bytes_sent: u64,
    pub naks: u64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct FtpServer {
    /// Full path → contents.
    files: BTreeMap<String, Bytes>,
    /// The open session's file.
    open: Option<String>,
    /// The last request's sequence number and the replies it got.
    last: Option<(u16, Vec<FtpPayload>)>,
    stats: FtpServerStats,
}

impl FtpServer {
    /// A server of `files` (full paths, e.g. `/fs/microsd/log/2026-11-23/12_00_00.ulg`).
    pub fn new(files: impl IntoIterator<Item = (String, Bytes)>) -> Self {
        Self {
            files: files.into_iter().collect(),
            ..Self::default()
        }
    }

    pub fn stats(&self) -> FtpServerStats {
        self.stats
    }

    /// The files served: full path and contents.
    pub fn files(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(p, b)| (p.as_str(), &b[..]))
    }

    /// The replies to one request, in order (many for a burst).
    pub fn handle(&mut self, request: &FtpPayload) -> Vec<FtpPayload> {
        if let Some((seq, replies)) = &self.last
            && *seq == request.seq
            && request.opcode != op::BURST_READ_FILE
        {
            return replies.clone();
        }
        self.stats.requests += 1;
        let replies = match self.serve(request) {
            Ok(replies) => replies,
            Err(nak) => {
                self.stats.naks += 1;
                vec![FtpPayload::nak_of(request, nak)]
            }
        };
        self.last = Some((request.seq, replies.clone()));
        replies
    }

    fn serve(&mut self, request: &FtpPayload) -> Result<Vec<FtpPayload>, Nak> {
        let path = || normalise(&String::from_utf8_lossy(&request.data));
        match request.opcode {
            op::LIST_DIRECTORY => self.list(request, &path()),
            op::OPEN_FILE_RO => {
                if self.open.is_some() {
                    return Err(Nak::NoSessionsAvailable);
                }
                let path = path();
                let file = self.files.get(&path).ok_or(Nak::FileNotFound)?;
                let size = (file.len() as u32).to_le_bytes().to_vec();
                self.open = Some(path);
                let mut reply = FtpPayload::ack(request, size);
                reply.session = 0;
                Ok(vec![reply])
            }
            op::READ_FILE => {
                let file = self.open_file(request)?;
                let data = slice(&file, request.offset as usize, MAX_DATA).ok_or(Nak::Eof)?;
                self.stats.bytes_sent += data.len() as u64;
                Ok(vec![FtpPayload::ack(request, data.to_vec())])
            }
            op::BURST_READ_FILE => {
                let file = self.open_file(request)?;
                let mut offset = request.offset as usize;
                if offset >= file.len() {
                    return Err(Nak::Eof);
                }
                let mut replies = Vec::new();
                let mut sent = 0;
                while offset < file.len() && sent < BURST_LIMIT {
                    let data = slice(&file, offset, MAX_DATA).expect("inside the file");
                    let mut reply = FtpPayload::ack(request, data.to_vec());
                    reply.seq = request.seq.wrapping_add(1 + replies.len() as u16);
                    reply.offset = offset as u32;
                    offset += data.len();
                    sent += data.len();
                    replies.push(reply);
                }
                self.stats.bytes_sent += sent as u64;
                if offset >= file.len() {
                    // PX4 ends a burst at the end of the file with a NAK EOF.
                    let mut eof = FtpPayload::nak_of(request, Nak::Eof);
                    eof.seq = request.seq.wrapping_add(1 + replies.len() as u16);
                    eof.offset = offset as u32;
                    replies.push(eof);
                }
                if let Some(last) = replies.last_mut() {
                    last.burst_complete = true;
                }
                Ok(replies)
            }
            op::CALC_FILE_CRC32 => {
                let file = self.files.get(&path()).ok_or(Nak::FileNotFound)?;
                let crc = wire::crc32_part(0, file);
                Ok(vec![FtpPayload::ack(request, crc.to_le_bytes().to_vec())])
            }
            op::TERMINATE_SESSION => {
                if request.session != 0 || self.open.take().is_none() {
                    return Err(Nak::InvalidSession);
                }
                Ok(vec![FtpPayload::ack(request, Vec::new())])
            }
            op::RESET_SESSIONS => {
                self.open = None;
                Ok(vec![FtpPayload::ack(request, Vec::new())])
            }
            op::NONE => Ok(vec![FtpPayload::ack(request, Vec::new())]),
            _ => Err(Nak::UnknownCommand),
        }
    }

    fn open_file(&self, request: &FtpPayload) -> Result<Bytes, Nak> {
        match &self.open {
            Some(path) if request.session == 0 => Ok(self.files[path].clone()),
            _ => Err(Nak::InvalidSession),
        }
    }

    /// The entries of `dir` from entry `request.offset` on, as many as fit one reply.
    fn list(&self, request: &FtpPayload, dir: &str) -> Result<Vec<FtpPayload>, Nak> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut entries: Vec<DirEntry> = Vec::new();
        for (path, contents) in &self.files {
            let Some(rest) = path.strip_prefix(&prefix) else {
                continue;
            };
            let entry = match rest.split_once('/') {
                Some((sub, _)) => DirEntry {
                    name: sub.to_string(),
                    size: None,
                },
                None => DirEntry {
                    name: rest.to_string(),
                    size: Some(contents.len() as u64),
                },
            };
            if entries.last() != Some(&entry) {
                entries.push(entry);
            }
        }
        if entries.is_empty() && !self.files.keys().any(|p| p.starts_with(&prefix)) {
            return Err(Nak::FileNotFound);
        }
        let skip = request.offset as usize;
        if skip > 0 && skip >= entries.len() {
            return Err(Nak::Eof);
        }
        let mut data = Vec::new();
        for entry in &entries[skip.min(entries.len())..] {
            let mut one = Vec::new();
            wire::write_entry(entry, &mut one);
            if data.len() + one.len() > MAX_DATA {
                break;
            }
            data.extend_from_slice(&one);
        }
        Ok(vec![FtpPayload::ack(request, data)])
    }
}

/// `@MAV_LOG/...` as the log directory's path; a trailing `/` dropped.
fn normalise(path: &str) -> String {
    let path = path.trim_end_matches('\0');
    let path = match path.strip_prefix(MAV_LOG) {
        Some(rest) => format!("{LOG_ROOT}{rest}"),
        None => path.to_string(),
    };
    match path.trim_end_matches('/') {
        "" => "/".to_string(),
        p => p.to_string(),
    }
}

/// Up to `max` bytes of `file` from `offset`; `None` at or past its end.
fn slice(file: &Bytes, offset: usize, max: usize) -> Option<&[u8]> {
    (offset < file.len()).then(|| &file[offset..(offset + max).min(file.len())])
}
