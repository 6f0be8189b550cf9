//! The SD log's bytes already fetched, in aligned blocks, sans-IO: dropouts close together
//! read the same stretch of the file, and over a slow link every byte counts. Bounded: the
//! blocks furthest before the newest read go first.

use std::collections::BTreeMap;

/// Bytes per block: one FTP packet's data, so that a block is one single read and a burst
/// from a block's start fills whole blocks (a smaller stretch of the file read costs no
/// more than the packets it needs).
pub const BLOCK: u64 = crate::link::ftp::wire::MAX_DATA as u64;

/// See the module docs.
#[derive(Debug)]
pub struct BlockCache {
    len: u64,
    blocks: BTreeMap<u64, Vec<u8>>,
    max_blocks: usize,
}

impl BlockCache {
    /// A cache of a file of `len` bytes, holding at most `max_bytes`.
    pub fn new(len: u64, max_bytes: u64) -> Self {
        Self {
            len,
            blocks: BTreeMap::new(),
            max_blocks: (max_bytes / BLOCK).max(4) as usize,
        }
    }

    /// The bytes `[offset, offset + len)` (cut at the end of the file), if all are here.
    pub fn get(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let end = (offset + len).min(self.len);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let block = self.blocks.get(&(at / BLOCK))?;
            let from = (at % BLOCK) as usize;
            let to = ((end - at / BLOCK * BLOCK).min(BLOCK) as usize).min(block.len());
            if from >= to {
                return None;
            }
            out.extend_from_slice(&block[from..to]);
            at = at / BLOCK * BLOCK + to as u64;
        }
        Some(out)
    }

    /// The next aligned range to fetch for [`get`](Self::get) of the same range: the first
    /// run of missing blocks in it (fetch, insert and ask again until `None`).
    pub fn missing(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let end = (offset + len).min(self.len);
        if end <= offset {
            return None;
        }
        let first = offset / BLOCK;
        let last = end.saturating_sub(1) / BLOCK;
        let a = (first..=last).find(|b| !self.blocks.contains_key(b))?;
        let b = (a..=last)
            .take_while(|b| !self.blocks.contains_key(b))
            .last()
            .unwrap_or(a);
        let start = a * BLOCK;
        Some((start, ((b + 1) * BLOCK).min(self.len) - start))
    }

    /// The file ends at `len` (sooner than it was listed): nothing past it is asked for.
    pub fn truncate(&mut self, len: u64) {
        self.len = self.len.min(len);
        let len = self.len;
        self.blocks.retain(|b, _| b * BLOCK < len);
        if let Some((b, block)) = self.blocks.iter_mut().next_back() {
            block.truncate((len - b * BLOCK).min(BLOCK) as usize);
        }
    }

    /// Takes fetched bytes starting at a block boundary.
    pub fn insert(&mut self, offset: u64, data: &[u8]) {
        debug_assert_eq!(offset % BLOCK, 0);
        for (k, chunk) in data.chunks(BLOCK as usize).enumerate() {
            let index = offset / BLOCK + k as u64;
            // A short block only at the end of the file.
            if chunk.len() as u64 == BLOCK || index * BLOCK + chunk.len() as u64 == self.len {
                self.blocks.insert(index, chunk.to_vec());
            }
        }
        let newest = (offset + data.len() as u64) / BLOCK;
        while self.blocks.len() > self.max_blocks {
            // Evict the block furthest from the newest read.
            let first = *self.blocks.keys().next().expect("not empty");
            let last = *self.blocks.keys().next_back().expect("not empty");
            let evict = if newest - first.min(newest) >= last.saturating_sub(newest) {
                first
            } else {
                last
            };
            self.blocks.remove(&evict);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_come_from_blocks_fetched_once() {
        let file: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut c = BlockCache::new(file.len() as u64, 1 << 20);
        assert_eq!(c.get(100, 50), None);
        let (o, l) = c.missing(5000, 200).unwrap();
        let first = 5000 / BLOCK * BLOCK;
        assert_eq!((o, l), (first, 2 * BLOCK));
        c.insert(o, &file[o as usize..(o + l) as usize]);
        assert_eq!(c.get(5000, 200).unwrap(), &file[5000..5200]);
        // Across into the last, short block.
        let (o, l) = c.missing(8000, 5000).unwrap();
        let last = 8000 / BLOCK * BLOCK;
        assert_eq!((o, l), (last, 10_000 - last));
        c.insert(o, &file[o as usize..]);
        assert_eq!(c.get(8000, 5000).unwrap(), &file[8000..]);
        // The run of blocks between the two fetched.
        assert_eq!(
            c.missing(first, 10_000 - first),
            Some((first + 2 * BLOCK, last - first - 2 * BLOCK))
        );
        assert_eq!(c.get(0, 10), None);
        // Nothing to fetch for nothing, or past the end.
        assert_eq!(c.missing(100, 0), None);
        assert_eq!(c.missing(20_000, 10), None);
        assert_eq!(BlockCache::new(0, 1 << 20).missing(0, 512), None);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let file = vec![7u8; 100 * BLOCK as usize];
        let mut c = BlockCache::new(file.len() as u64, 8 * BLOCK);
        for b in 0..100u64 {
            c.insert(
                b * BLOCK,
                &file[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize],
            );
            assert!(c.blocks.len() <= 8);
        }
        assert!(c.get(99 * BLOCK, BLOCK).is_some());
        assert!(c.get(0, BLOCK).is_none());
    }
}
