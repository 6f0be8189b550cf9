//! The compressor threads: one chunk at a time each, in turn, so that the file is byte for
//! byte the one a single compressor writes; a chunk's buffers go back to be filled again.

use std::sync::mpsc;

use super::{Chunk, ZSTD_LEVEL};
use crate::export::ExportError;

/// Compressors wanted for a log of `ulog_len` bytes in chunks of `chunk_limit`: one per core,
/// at most four (the decoding side feeds about two), and no more than the log has chunks.
pub(super) fn compressors_for(ulog_len: u64, chunk_limit: usize) -> usize {
    let chunks = ulog_len.div_ceil(chunk_limit as u64);
    if chunks <= 1 {
        // Not worth asking the cgroup files how many cores there are.
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores
        .min(4)
        .min(usize::try_from(chunks).unwrap_or(usize::MAX))
}

/// A chunk with its records compressed (and their CRC, which the chunk record carries).
pub(super) struct Compressed {
    /// The chunk as laid out (its records, times and indexes), to write its index from.
    pub(super) chunk: Chunk,
    /// Its records compressed.
    pub(super) bytes: Vec<u8>,
    /// The CRC of its records, uncompressed.
    pub(super) crc: u32,
}

/// Compresses `chunk` into `bytes` (emptied first).
pub(super) fn compress(
    compressor: &mut zstd::bulk::Compressor<'_>,
    chunk: Chunk,
    mut bytes: Vec<u8>,
) -> std::io::Result<Compressed> {
    bytes.clear();
    bytes.reserve(zstd::zstd_safe::compress_bound(chunk.records.len()));
    compressor.compress_to_buffer(&chunk.records, &mut bytes)?;
    let crc = crc32fast::hash(&chunk.records);
    Ok(Compressed { chunk, bytes, crc })
}

/// A compressor's end as the writer thread holds it: chunks (each with a buffer for its
/// compressed bytes) in, compressed chunks out.
type Worker = (
    mpsc::SyncSender<(Chunk, Vec<u8>)>,
    mpsc::Receiver<std::io::Result<Compressed>>,
);

/// Where the writer's chunks are compressed, handing them back in the order they came: on
/// the writer thread itself when one compressor is wanted, else on threads of their own
/// ([`CompressThreads`]). Compressed buffers come back to be reused.
pub(super) enum Compression {
    Here {
        compressor: zstd::bulk::Compressor<'static>,
        spare: Vec<u8>,
    },
    Threads(CompressThreads),
}

/// Compressor threads, each chunk going to the next thread in turn and each result taken
/// from them in the same turn, so that they come back in order. Holds at most one chunk per
/// thread.
pub(super) struct CompressThreads {
    workers: Vec<Worker>,
    /// Which worker has each chunk in flight, oldest first.
    in_flight: std::collections::VecDeque<usize>,
    next: usize,
    spares: Vec<Vec<u8>>,
}

impl Compression {
    /// `threads` compressors (one: on the caller's thread), their threads in `scope`.
    pub(super) fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        threads: usize,
    ) -> Result<Self, ExportError> {
        if threads <= 1 {
            return Ok(Compression::Here {
                compressor: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
                spare: Vec::new(),
            });
        }
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (chunks, to_compress) = mpsc::sync_channel::<(Chunk, Vec<u8>)>(1);
            let (done, compressed) = mpsc::sync_channel(1);
            let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
            std::thread::Builder::new()
                .name("mcap-compress".into())
                .spawn_scoped(scope, move || {
                    for (chunk, bytes) in to_compress {
                        // The writer is gone on an error: stop.
                        if done.send(compress(&mut compressor, chunk, bytes)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(ExportError::Write)?;
            workers.push((chunks, compressed));
        }
        Ok(Compression::Threads(CompressThreads {
            workers,
            in_flight: Default::default(),
            next: 0,
            spares: Vec::new(),
        }))
    }

    /// Takes `chunk` in; returns the oldest chunk compressed if one had to be taken out to
    /// make room (on the caller's thread: `chunk` itself).
    pub(super) fn push(&mut self, chunk: Chunk) -> Result<Option<Compressed>, ExportError> {
        match self {
            Compression::Here { compressor, spare } => {
                Ok(Some(compress(compressor, chunk, std::mem::take(spare))?))
            }
            Compression::Threads(threads) => threads.push(chunk),
        }
    }

    /// The oldest chunk in flight, compressed; `None` when none is.
    pub(super) fn pop(&mut self) -> Result<Option<Compressed>, ExportError> {
        match self {
            Compression::Here { .. } => Ok(None),
            Compression::Threads(threads) => threads.pop(),
        }
    }

    /// A compressed buffer written out, to compress into again.
    pub(super) fn recycle(&mut self, bytes: Vec<u8>) {
        match self {
            Compression::Here { spare, .. } => *spare = bytes,
            Compression::Threads(threads) => threads.spares.push(bytes),
        }
    }
}

impl CompressThreads {
    /// See [`Compression::push`].
    fn push(&mut self, chunk: Chunk) -> Result<Option<Compressed>, ExportError> {
        let oldest = match self.in_flight.len() == self.workers.len() {
            true => self.pop()?,
            false => None,
        };
        let bytes = self.spares.pop().unwrap_or_default();
        let (to_worker, _) = &self.workers[self.next];
        to_worker.send((chunk, bytes)).map_err(|_| stopped())?;
        self.in_flight.push_back(self.next);
        self.next = (self.next + 1) % self.workers.len();
        Ok(oldest)
    }

    /// See [`Compression::pop`].
    fn pop(&mut self) -> Result<Option<Compressed>, ExportError> {
        let Some(worker) = self.in_flight.pop_front() else {
            return Ok(None);
        };
        let (_, from_worker) = &self.workers[worker];
        Ok(Some(from_worker.recv().map_err(|_| stopped())??))
    }
}

/// The error of a compressor thread gone.
pub(super) fn stopped() -> ExportError {
    ExportError::Write(std::io::Error::other("an MCAP compressor thread stopped"))
}
