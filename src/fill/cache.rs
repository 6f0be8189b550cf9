//! The SD log's bytes already fetched, as byte ranges, sans-IO: dropouts close together read
//! the same stretch of the file, and over a slow link every byte counts. A read from any
//! offset brings one FTP packet's worth of bytes (PX4 answers a read with as many as a packet
//! holds, whatever was asked), so what is missing is fetched in whole packets from its first
//! byte, and every byte that came is kept. Bounded: the ranges furthest from the newest read
//! go first.

use std::collections::BTreeMap;

/// Bytes one read brings: one MAVLink FTP packet's data (its 251-byte payload less the
/// 12-byte header; `tests/it/fill.rs` holds it to the FTP client's own constant).
pub const PACKET: u64 = 239;

/// See the module docs.
#[derive(Debug)]
pub struct ByteCache {
    len: u64,
    /// Disjoint, non-touching ranges: start → bytes.
    ranges: BTreeMap<u64, Vec<u8>>,
    held: u64,
    max_bytes: u64,
}

impl ByteCache {
    /// A cache of a file of `len` bytes, holding at most `max_bytes` (at least a few
    /// packets).
    pub fn new(len: u64, max_bytes: u64) -> Self {
        Self {
            len,
            ranges: BTreeMap::new(),
            held: 0,
            max_bytes: max_bytes.max(4 * PACKET),
        }
    }

    /// The bytes `[offset, offset + len)` (cut at the end of the file), if all are here.
    pub fn get(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let end = (offset + len).min(self.len);
        if end <= offset {
            return Some(Vec::new());
        }
        let (start, bytes) = self.ranges.range(..=offset).next_back()?;
        let to = start + bytes.len() as u64;
        (to >= end).then(|| bytes[(offset - start) as usize..(end - start) as usize].to_vec())
    }

    /// What to fetch next for [`get`](Self::get) of the same range: from its first missing
    /// byte, whole packets up to its end or to what is held next (fetch, insert and ask
    /// again until `None`).
    pub fn missing(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let (at, n) = self.missing_exact(offset, len)?;
        Some((at, (n.div_ceil(PACKET) * PACKET).min(self.len - at)))
    }

    /// [`missing`](Self::missing) without rounding up to whole packets: for a server that
    /// answers a read with the bytes asked for (ArduPilot's), where a small read costs less
    /// of the link.
    pub fn missing_exact(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let end = (offset + len).min(self.len);
        let mut at = offset;
        // Step over what is held from `at` on.
        while at < end {
            match self.ranges.range(..=at).next_back() {
                Some((start, bytes)) if start + bytes.len() as u64 > at => {
                    at = start + bytes.len() as u64;
                }
                _ => break,
            }
        }
        if at >= end {
            return None;
        }
        // Up to what is held next, if that comes first.
        let stop = self
            .ranges
            .range(at..)
            .next()
            .map_or(end, |(start, _)| end.min(*start));
        Some((at, stop - at))
    }

    /// The file ends at `len` (sooner than it was listed): nothing past it is asked for.
    pub fn truncate(&mut self, len: u64) {
        self.len = self.len.min(len);
        let len = self.len;
        let past: Vec<u64> = self.ranges.range(len..).map(|(s, _)| *s).collect();
        for start in past {
            let bytes = self.ranges.remove(&start).expect("listed");
            self.held -= bytes.len() as u64;
        }
        if let Some((start, bytes)) = self.ranges.iter_mut().next_back() {
            let keep = (len - start).min(bytes.len() as u64) as usize;
            self.held -= (bytes.len() - keep) as u64;
            bytes.truncate(keep);
        }
    }

    /// Takes fetched bytes of the file from `offset` on (any offset, any length).
    pub fn insert(&mut self, offset: u64, data: &[u8]) {
        let data = &data[..data.len().min(self.len.saturating_sub(offset) as usize)];
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        // Every range that overlaps or touches the new one joins it.
        let joining: Vec<u64> = self
            .ranges
            .range(..=end)
            .rev()
            .take_while(|(s, b)| *s + b.len() as u64 >= offset)
            .map(|(s, _)| *s)
            .collect();
        let mut start = offset;
        let mut merged_end = end;
        let mut parts = Vec::new();
        for s in joining {
            let bytes = self.ranges.remove(&s).expect("listed");
            self.held -= bytes.len() as u64;
            start = start.min(s);
            merged_end = merged_end.max(s + bytes.len() as u64);
            parts.push((s, bytes));
        }
        let mut merged = vec![0u8; (merged_end - start) as usize];
        for (s, bytes) in parts {
            let at = (s - start) as usize;
            merged[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        let at = (offset - start) as usize;
        merged[at..at + data.len()].copy_from_slice(data);
        self.held += merged.len() as u64;
        self.ranges.insert(start, merged);
        // Over the bound: drop the ranges furthest from this read (never this one).
        while self.held > self.max_bytes {
            let distance = |(s, b): (&u64, &Vec<u8>)| {
                let e = s + b.len() as u64;
                (
                    if e <= offset {
                        offset - e
                    } else {
                        s.saturating_sub(end)
                    },
                    *s,
                )
            };
            let far = [self.ranges.first_key_value(), self.ranges.last_key_value()]
                .into_iter()
                .flatten()
                .filter(|(s, _)| **s != start)
                .map(distance)
                .max();
            let Some((_, evict)) = far else { break };
            let bytes = self.ranges.remove(&evict).expect("listed");
            self.held -= bytes.len() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_read_asks_for_what_is_missing_only() {
        let file: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut c = ByteCache::new(file.len() as u64, 1 << 20);
        assert_eq!(c.missing_exact(5000, 23), Some((5000, 23)));
        c.insert(5000, &file[5000..5023]);
        assert_eq!(c.missing_exact(5000, 23), None);
        // From where what is held ends, up to what is held next.
        c.insert(5100, &file[5100..5200]);
        assert_eq!(c.missing_exact(5010, 500), Some((5023, 77)));
        assert_eq!(c.missing_exact(9_990, 500), Some((9_990, 10)));
    }

    #[test]
    fn what_is_missing_is_fetched_once_in_whole_packets_from_its_first_byte() {
        let file: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut c = ByteCache::new(file.len() as u64, 1 << 20);
        assert_eq!(c.get(100, 50), None);
        // From the first byte wanted, one packet.
        assert_eq!(c.missing(5000, 200), Some((5000, PACKET)));
        c.insert(5000, &file[5000..5000 + PACKET as usize]);
        assert_eq!(c.get(5000, 200).unwrap(), &file[5000..5200]);
        // A range that starts inside what is held asks from where that ends.
        let held_end = 5000 + PACKET;
        assert_eq!(c.missing(5100, 300), Some((held_end, PACKET)));
        assert_eq!(c.missing(5100, 400), Some((held_end, 2 * PACKET)));
        c.insert(
            held_end,
            &file[held_end as usize..(held_end + PACKET) as usize],
        );
        assert_eq!(c.get(5100, 300).unwrap(), &file[5100..5400]);
        // Across the end of the file: cut there.
        assert_eq!(c.missing(9_900, 500), Some((9_900, 100)));
        c.insert(9_900, &file[9_900..]);
        assert_eq!(c.get(9_900, 500).unwrap(), &file[9_900..]);
        // A gap between two held ranges, then the ranges join.
        assert_eq!(c.missing(4_000, 2_000), Some((4_000, 5 * PACKET)));
        c.insert(4_000, &file[4_000..5_000]);
        assert_eq!(c.get(4_000, 1_478).unwrap(), &file[4_000..5_478]);
        assert_eq!(c.ranges.len(), 2);
        // Nothing to fetch for nothing, or past the end.
        assert_eq!(c.missing(100, 0), None);
        assert_eq!(c.missing(20_000, 10), None);
        assert_eq!(c.get(20_000, 10), Some(Vec::new()));
        assert_eq!(ByteCache::new(0, 1 << 20).missing(0, 512), None);
    }

    #[test]
    fn a_file_shorter_than_listed_is_cut_where_it_ends() {
        let file = vec![3u8; 1000];
        let mut c = ByteCache::new(2000, 1 << 20);
        c.insert(900, &file[900..]);
        c.truncate(1000);
        assert_eq!(c.missing(900, 500), None);
        assert_eq!(c.get(900, 500).unwrap(), &file[900..]);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let file = vec![7u8; 100 * PACKET as usize];
        let mut c = ByteCache::new(file.len() as u64, 8 * PACKET);
        for b in (0..100u64).step_by(2) {
            let at = (b * PACKET) as usize;
            c.insert(b * PACKET, &file[at..at + PACKET as usize]);
            assert!(c.held <= 8 * PACKET);
        }
        assert!(c.get(98 * PACKET, PACKET).is_some());
        assert!(c.get(0, PACKET).is_none());
    }
}
