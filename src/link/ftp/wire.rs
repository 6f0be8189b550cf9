//! MAVLink FTP on the wire, sans-IO: the 251-byte payload of FILE_TRANSFER_PROTOCOL both ways
//! (client requests and server replies), the error codes of a NAK, directory entries and
//! PX4's file checksum. The client ([`super::client`]) and the simulated vehicle's server
//! ([`crate::sim::ftp_server`]) share it.

use thiserror::Error;

/// Bytes of a FILE_TRANSFER_PROTOCOL payload.
pub const PAYLOAD_LEN: usize = 251;
/// Bytes of the payload before its data.
pub const HEADER_LEN: usize = 12;
/// Data bytes one payload carries at most.
pub const MAX_DATA: usize = PAYLOAD_LEN - HEADER_LEN;

/// The opcodes of the MAVLink FTP specification (requests, then the two replies).
pub mod op {
    pub const NONE: u8 = 0;
    pub const TERMINATE_SESSION: u8 = 1;
    pub const RESET_SESSIONS: u8 = 2;
    pub const LIST_DIRECTORY: u8 = 3;
    pub const OPEN_FILE_RO: u8 = 4;
    pub const READ_FILE: u8 = 5;
    pub const CALC_FILE_CRC32: u8 = 14;
    pub const BURST_READ_FILE: u8 = 15;
    pub const ACK: u8 = 128;
    pub const NAK: u8 = 129;
}

/// One FTP payload: a request (opcode) or a reply (ACK/NAK with the request's opcode in
/// `req_opcode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtpPayload {
    /// A request's sequence number; a reply carries the request's plus one (a burst counts on
    /// from there).
    pub seq: u16,
    pub session: u8,
    pub opcode: u8,
    pub req_opcode: u8,
    /// The last packet of a burst.
    pub burst_complete: bool,
    pub offset: u32,
    /// The size field: `data.len()` where the payload carries data; in a ReadFile or
    /// BurstReadFile request, the bytes asked for.
    pub size: u8,
    /// At most [`MAX_DATA`] bytes.
    pub data: Vec<u8>,
}

/// A payload that cannot be one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("FTP payload says {0} data bytes, more than the {MAX_DATA} it can hold")]
    TooLong(u8),
}

impl FtpPayload {
    /// A request carrying `data` (a path, or nothing).
    pub fn request(seq: u16, session: u8, opcode: u8, offset: u32, data: &[u8]) -> Self {
        let data = data[..data.len().min(MAX_DATA)].to_vec();
        Self {
            seq,
            session,
            opcode,
            req_opcode: 0,
            burst_complete: false,
            offset,
            size: data.len() as u8,
            data,
        }
    }

    /// The reply to `request`: an ACK with `data`, the request's sequence number plus one.
    pub fn ack(request: &FtpPayload, data: Vec<u8>) -> Self {
        let data = data[..data.len().min(MAX_DATA)].to_vec();
        Self {
            seq: request.seq.wrapping_add(1),
            session: request.session,
            opcode: op::ACK,
            req_opcode: request.opcode,
            burst_complete: false,
            offset: request.offset,
            size: data.len() as u8,
            data,
        }
    }

    /// The NAK of `request` with `error`.
    pub fn nak_of(request: &FtpPayload, error: Nak) -> Self {
        let mut reply = Self::ack(request, error.to_data());
        reply.opcode = op::NAK;
        reply
    }

    /// Reads a payload as it came in a FILE_TRANSFER_PROTOCOL message.
    pub fn parse(raw: &[u8; PAYLOAD_LEN]) -> Result<Self, WireError> {
        let size = raw[4];
        if size as usize > MAX_DATA {
            return Err(WireError::TooLong(size));
        }
        Ok(Self {
            seq: u16::from_le_bytes([raw[0], raw[1]]),
            session: raw[2],
            opcode: raw[3],
            req_opcode: raw[5],
            burst_complete: raw[6] != 0,
            offset: u32::from_le_bytes(raw[8..12].try_into().expect("4 bytes")),
            size,
            data: raw[HEADER_LEN..HEADER_LEN + size as usize].to_vec(),
        })
    }

    /// The payload as it goes into a FILE_TRANSFER_PROTOCOL message; data beyond
    /// [`MAX_DATA`] is cut.
    pub fn encode(&self) -> [u8; PAYLOAD_LEN] {
        let mut raw = [0u8; PAYLOAD_LEN];
        let size = self.data.len().min(MAX_DATA);
        raw[0..2].copy_from_slice(&self.seq.to_le_bytes());
        raw[2] = self.session;
        raw[3] = self.opcode;
        raw[4] = self.size.min(MAX_DATA as u8);
        raw[5] = self.req_opcode;
        raw[6] = self.burst_complete as u8;
        raw[8..12].copy_from_slice(&self.offset.to_le_bytes());
        raw[HEADER_LEN..HEADER_LEN + size].copy_from_slice(&self.data[..size]);
        raw
    }

    /// The NAK's error, for a NAK.
    pub fn nak(&self) -> Option<Nak> {
        (self.opcode == op::NAK).then(|| Nak::from_data(&self.data))
    }
}

/// Why a server refused a request (the error codes of a NAK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Nak {
    #[error("the vehicle's FTP server failed")]
    Fail,
    #[error("the vehicle's FTP server failed (errno {0})")]
    FailErrno(u8),
    #[error("the request's data size was refused")]
    InvalidDataSize,
    #[error("the FTP session is not open on the vehicle")]
    InvalidSession,
    #[error("the vehicle's FTP server has no free session (another client holds it)")]
    NoSessionsAvailable,
    #[error("end of file")]
    Eof,
    #[error("the vehicle's FTP server does not know the command")]
    UnknownCommand,
    #[error("the file exists")]
    FileExists,
    #[error("the file is write-protected")]
    FileProtected,
    #[error("no such file on the vehicle")]
    FileNotFound,
    #[error("NAK with error code {0}")]
    Other(u8),
}

impl Nak {
    /// The error a NAK's data carries (code, then errno for `FailErrno`).
    pub fn from_data(data: &[u8]) -> Self {
        match data.first().copied().unwrap_or(1) {
            1 => Nak::Fail,
            2 => Nak::FailErrno(data.get(1).copied().unwrap_or(0)),
            3 => Nak::InvalidDataSize,
            4 => Nak::InvalidSession,
            5 => Nak::NoSessionsAvailable,
            6 => Nak::Eof,
            7 => Nak::UnknownCommand,
            8 => Nak::FileExists,
            9 => Nak::FileProtected,
            10 => Nak::FileNotFound,
            code => Nak::Other(code),
        }
    }

    /// The NAK's data for this error.
    pub fn to_data(self) -> Vec<u8> {
        match self {
            Nak::Fail => vec![1],
            Nak::FailErrno(errno) => vec![2, errno],
            Nak::InvalidDataSize => vec![3],
            Nak::InvalidSession => vec![4],
            Nak::NoSessionsAvailable => vec![5],
            Nak::Eof => vec![6],
            Nak::UnknownCommand => vec![7],
            Nak::FileExists => vec![8],
            Nak::FileProtected => vec![9],
            Nak::FileNotFound => vec![10],
            Nak::Other(code) => vec![code],
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    /// `None` for a directory.
    pub size: Option<u64>,
}

/// The entries of one ListDirectory reply (`Fname\tsize`, `Dname`, `S` for a skipped one,
/// each NUL-terminated), and how many entries it counted (skipped ones too: the next
/// request's offset moves on by that many).
pub fn parse_entries(data: &[u8]) -> (Vec<DirEntry>, u32) {
    let mut entries = Vec::new();
    let mut counted = 0;
    for raw in data.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        counted += 1;
        let text = String::from_utf8_lossy(&raw[1..]);
        match raw[0] {
            b'F' => {
                let (name, size) = text.rsplit_once('\t').unwrap_or((&text, "0"));
                entries.push(DirEntry {
                    name: name.to_string(),
                    size: Some(size.trim().parse().unwrap_or(0)),
                });
            }
            b'D' if text != "." && text != ".." => entries.push(DirEntry {
                name: text.into_owned(),
                size: None,
            }),
            _ => {}
        }
    }
    (entries, counted)
}

/// Appends one entry as a ListDirectory reply writes it.
pub fn write_entry(entry: &DirEntry, out: &mut Vec<u8>) {
    match entry.size {
        Some(size) => out.extend_from_slice(format!("F{}\t{size}", entry.name).as_bytes()),
        None => out.extend_from_slice(format!("D{}", entry.name).as_bytes()),
    }
    out.push(0);
}

/// The checksum PX4 answers CalcFileCRC32 with: CRC-32 (polynomial 0xEDB88320, reflected),
/// started from `crc` (0 for a file's first bytes), without the final inversion (NuttX's
/// `crc32part`).
pub fn crc32_part(mut crc: u32, data: &[u8]) -> u32 {
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_survives_encode_and_parse() {
        let p = FtpPayload {
            seq: 0xfffe,
            session: 3,
            opcode: op::ACK,
            req_opcode: op::BURST_READ_FILE,
            burst_complete: true,
            offset: 0x0102_0304,
            size: MAX_DATA as u8,
            data: (0..MAX_DATA as u8).collect(),
        };
        let raw = p.encode();
        assert_eq!(&raw[..12], &[0xfe, 0xff, 3, 128, 239, 15, 1, 0, 4, 3, 2, 1]);
        assert_eq!(FtpPayload::parse(&raw), Ok(p));
        let mut bad = raw;
        bad[4] = 240;
        assert_eq!(FtpPayload::parse(&bad), Err(WireError::TooLong(240)));
    }

    #[test]
    fn nak_codes_map_both_ways() {
        for code in 0..=12u8 {
            let nak = Nak::from_data(&[code, 5]);
            if code != 0 {
                assert_eq!(Nak::from_data(&nak.to_data()), nak);
            }
        }
        assert_eq!(Nak::from_data(&[2, 13]), Nak::FailErrno(13));
        assert_eq!(Nak::from_data(&[]), Nak::Fail);
    }

    #[test]
    fn listing_entries_are_read_as_px4_writes_them() {
        let mut data = Vec::new();
        write_entry(
            &DirEntry {
                name: "12_00_01.ulg".into(),
                size: Some(123456),
            },
            &mut data,
        );
        write_entry(
            &DirEntry {
                name: "2026-11-23".into(),
                size: None,
            },
            &mut data,
        );
        data.extend_from_slice(b"S\0");
        let (entries, counted) = parse_entries(&data);
        assert_eq!(counted, 3);
        assert_eq!(
            entries,
            vec![
                DirEntry {
                    name: "12_00_01.ulg".into(),
                    size: Some(123456)
                },
                DirEntry {
                    name: "2026-11-23".into(),
                    size: None
                }
            ]
        );
    }

    #[test]
    fn the_checksum_is_crc32_without_its_inversions() {
        // The standard CRC-32 of "123456789" is 0xCBF43926; without the initial and final
        // inversions PX4's is 0x2DFD2D88.
        assert_eq!(crc32_part(0, b"123456789"), 0x2DFD_2D88);
        assert_eq!(
            crc32_part(crc32_part(0, b"1234"), b"56789"),
            crc32_part(0, b"123456789")
        );
    }
}
