//! A TIDE file read back block by block for `ulog-recv info`: its version, types, channels
//! (entries per channel and their time range, from the `INDX` blocks), chunks (their entries,
//! times and compressions, from their fixed parts) and `META` entries.
//!
//! Every block's size is honoured: a reader continues `size` bytes after the size field
//! whatever it read there, so a block with fields appended by a later minor version reads, and
//! a block of a tag it does not know is skipped and counted. A chunk's entries are skipped
//! with a seek, never held: memory stays small on any file. A block that ends inside one of
//! its fields, or a size past the end of the file, is an error that names the block and its
//! offset.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::{BLOCK_HEADER, CHUNK_FIXED, Compression, INDEX_ENTRY, MAJOR, tag};

/// Why a TIDE file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TideError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a TIDE file: it does not begin with a TIDE block")]
    NotTide,
    #[error("TIDE version {major}.{minor}: this reader reads version {MAJOR}.x")]
    Version { major: u8, minor: u8 },
    #[error(
        "the {tag} block at byte {at} says it holds {size} bytes, past the end of the file ({len} bytes)"
    )]
    PastEnd {
        tag: String,
        at: u64,
        size: u64,
        len: u64,
    },
    #[error("the file ends inside a block header at byte {at}")]
    CutHeader { at: u64 },
    #[error("the {tag} block at byte {at} ends inside its {field}")]
    Short {
        tag: String,
        at: u64,
        field: &'static str,
    },
}

/// A `TYPE` block.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TypeInfo {
    /// The hash, in hex.
    pub hash: String,
    pub syntax: String,
    pub name: String,
    pub dependencies: usize,
}

/// A `CHAN` block, with what the `INDX` blocks say of its entries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChannelInfo {
    pub id: u32,
    pub name: String,
    pub source_name: String,
    /// The names of the types its hashes point at (the hash in hex where no `TYPE` has it).
    pub types: Vec<String>,
    /// Entries the `INDX` blocks index.
    pub entries: u64,
    /// Earliest and latest indexed entry time, ns since the epoch.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
}

/// What `info` says of a TIDE file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TideInfo {
    pub major: u8,
    pub minor: u8,
    pub bytes: u64,
    pub types: Vec<TypeInfo>,
    pub channels: Vec<ChannelInfo>,
    pub chunks: u64,
    /// Entries the chunks hold (their counts).
    pub entries: u64,
    /// Earliest chunk start and latest chunk end, ns since the epoch.
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    /// The chunks' compressions by name (`none`, `gzip`, `bzip2`, or `unknown N`).
    pub compressions: BTreeSet<String>,
    /// `META` entries, in file order.
    pub meta: Vec<(String, String)>,
    /// Blocks of tags this reader does not know, skipped (their tags, printable).
    pub unknown_blocks: Vec<String>,
}

/// Whether `path` begins as a TIDE file does.
pub fn is_tide(path: &Path) -> bool {
    let mut start = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut start))
        .is_ok()
        && start == tag::TIDE
}

/// Reads the blocks of the TIDE file at `path` (see the module docs).
pub fn read_info(path: &Path) -> Result<TideInfo, TideError> {
    let io = |source| TideError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    read_blocks(BufReader::new(file), len).map_err(|e| match e {
        TideError::Io { source, .. } => io(source),
        other => other,
    })
}

/// Reads the blocks of a TIDE file of `len` bytes from `file` (see the module docs).
pub fn read_blocks(mut file: impl Read + Seek, len: u64) -> Result<TideInfo, TideError> {
    let io = |source| TideError::Io {
        path: "the TIDE file".into(),
        source,
    };
    let mut info = TideInfo {
        bytes: len,
        ..TideInfo::default()
    };
    // Per channel: indexed entries, earliest and latest time.
    let mut indexed: BTreeMap<u32, (u64, Option<(u64, u64)>)> = BTreeMap::new();
    let mut channel_hashes: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut type_names: BTreeMap<Vec<u8>, String> = BTreeMap::new();
    let mut at = 0u64;
    let mut data = Vec::new();
    while at < len {
        if len - at < BLOCK_HEADER as u64 {
            return Err(TideError::CutHeader { at });
        }
        let mut header = [0u8; BLOCK_HEADER];
        file.read_exact(&mut header).map_err(io)?;
        let block_tag: [u8; 4] = header[..4].try_into().expect("4 bytes");
        let size = u64::from_le_bytes(header[4..].try_into().expect("8 bytes"));
        let tag_text = printable(&block_tag);
        let body = at + BLOCK_HEADER as u64;
        if size > len - body {
            return Err(TideError::PastEnd {
                tag: tag_text,
                at,
                size,
                len,
            });
        }
        if at == 0 && block_tag != tag::TIDE {
            return Err(TideError::NotTide);
        }
        // A chunk's fixed part only; every other block whole (they are small).
        let keep = match block_tag {
            tag::CHNK => size.min(CHUNK_FIXED as u64),
            tag::TIDE | tag::META | tag::TYPE | tag::CHAN | tag::INDX => size,
            _ => 0,
        };
        data.clear();
        (&mut file).take(keep).read_to_end(&mut data).map_err(io)?;
        file.seek(SeekFrom::Start(body + size)).map_err(io)?;
        let mut block = Fields {
            data: &data,
            tag: &tag_text,
            at,
        };
        match block_tag {
            tag::TIDE => {
                info.major = block.u8("major version")?;
                info.minor = block.u8("minor version")?;
                if info.major != MAJOR {
                    return Err(TideError::Version {
                        major: info.major,
                        minor: info.minor,
                    });
                }
            }
            tag::META => {
                let count = block.u16("metadata count")?;
                for _ in 0..count {
                    let key = block.bytes_u16("metadata key")?;
                    let value = block.bytes_u32("metadata value")?;
                    info.meta.push((text(key), text(value)));
                }
            }
            tag::TYPE => {
                let hash = block.bytes_u16("hash")?.to_vec();
                let syntax = text(block.bytes_u8("syntax")?);
                let name = text(block.bytes_u16("display name")?);
                block.bytes_u16("version")?;
                block.bytes_u32("definition")?;
                for _ in 0..block.u8("acceptable source count")? {
                    block.bytes_u16("acceptable source")?;
                }
                let dependencies = block.u16("dependency count")? as usize;
                for _ in 0..dependencies {
                    block.bytes_u16("dependency hash")?;
                }
                info.types.push(TypeInfo {
                    hash: hex(&hash),
                    syntax,
                    name: name.clone(),
                    dependencies,
                });
                type_names.insert(hash, name);
            }
            tag::CHAN => {
                let id = block.u32("ID")?;
                let name = text(block.bytes_u8("name")?);
                let source_name = text(block.bytes_u32("source name")?);
                block.bytes_u32("source config")?;
                let mut hashes = Vec::new();
                for _ in 0..block.u8("type hash count")? {
                    hashes.push(block.bytes_u16("type hash")?.to_vec());
                }
                info.channels.push(ChannelInfo {
                    id,
                    name,
                    source_name,
                    types: Vec::new(),
                    entries: 0,
                    first_ns: None,
                    last_ns: None,
                });
                channel_hashes.push(hashes);
            }
            tag::INDX => {
                let channel = block.u32("channel ID")?;
                let count = block.u32("count")?;
                if (count as u64) * INDEX_ENTRY as u64 > block.left() as u64 {
                    return Err(block.short("index entries"));
                }
                let state = indexed.entry(channel).or_insert((0, None));
                for _ in 0..count {
                    block.u64("chunk start")?;
                    let time = block.u64("time stamp")?;
                    block.u32("offset")?;
                    state.0 += 1;
                    state.1 = Some(match state.1 {
                        None => (time, time),
                        Some((a, b)) => (a.min(time), b.max(time)),
                    });
                }
            }
            tag::CHNK => {
                block.u32("chunk ID")?;
                info.entries += block.u32("count")? as u64;
                let start = block.u64("start")?;
                let end = block.u64("end")?;
                let compression = block.u8("compression")?;
                info.chunks += 1;
                info.start_ns = Some(info.start_ns.map_or(start, |s| s.min(start)));
                info.end_ns = Some(info.end_ns.map_or(end, |e| e.max(end)));
                info.compressions
                    .insert(match Compression::from_byte(compression) {
                        Some(c) => c.name().to_owned(),
                        None => format!("unknown {compression}"),
                    });
            }
            _ => info.unknown_blocks.push(tag_text),
        }
        at = body + size;
    }
    if info.major == 0 {
        return Err(TideError::NotTide);
    }
    for (channel, hashes) in info.channels.iter_mut().zip(&channel_hashes) {
        channel.types = hashes
            .iter()
            .map(|h| type_names.get(h).cloned().unwrap_or_else(|| hex(h)))
            .collect();
        if let Some((count, times)) = indexed.get(&channel.id) {
            channel.entries = *count;
            channel.first_ns = times.map(|t| t.0);
            channel.last_ns = times.map(|t| t.1);
        }
    }
    Ok(info)
}

/// The fields of one block's data, read in order; a read past its end names the field.
struct Fields<'a> {
    data: &'a [u8],
    tag: &'a str,
    at: u64,
}

impl<'a> Fields<'a> {
    fn short(&self, field: &'static str) -> TideError {
        TideError::Short {
            tag: self.tag.to_owned(),
            at: self.at,
            field,
        }
    }

    fn left(&self) -> usize {
        self.data.len()
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], TideError> {
        if self.data.len() < n {
            return Err(self.short(field));
        }
        let (taken, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(taken)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, TideError> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, TideError> {
        Ok(u16::from_le_bytes(
            self.take(2, field)?.try_into().expect("2"),
        ))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, TideError> {
        Ok(u32::from_le_bytes(
            self.take(4, field)?.try_into().expect("4"),
        ))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, TideError> {
        Ok(u64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8"),
        ))
    }

    /// A field of a size given by the u8 before it.
    fn bytes_u8(&mut self, field: &'static str) -> Result<&'a [u8], TideError> {
        let n = self.u8(field)? as usize;
        self.take(n, field)
    }

    fn bytes_u16(&mut self, field: &'static str) -> Result<&'a [u8], TideError> {
        let n = self.u16(field)? as usize;
        self.take(n, field)
    }

    fn bytes_u32(&mut self, field: &'static str) -> Result<&'a [u8], TideError> {
        let n = self.u32(field)? as usize;
        self.take(n, field)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tag as text, bytes outside printable ASCII as `\xNN`.
fn printable(tag: &[u8; 4]) -> String {
    tag.iter()
        .map(|&b| {
            if b.is_ascii_graphic() {
                (b as char).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}
