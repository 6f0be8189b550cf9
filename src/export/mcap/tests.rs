//! The MCAP writer's threads: the same file whichever way the chunks are compressed, and a
//! write that fails with chunks in flight ends the export with its error.

use super::*;

fn synthetic() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg");
    std::fs::read(path).expect("the project's synthetic log")
}

#[test]
fn chunks_compressed_on_several_threads_or_after_decoding_make_the_same_file() {
    let flight = synthetic();
    let options = ExportOptions::default();
    let mut one = Vec::new();
    let stats = write_chunked(&flight, &options, &mut one, 4 << 10, WriterAt::Thread, 1);
    let stats = stats.unwrap();
    assert!(stats.samples > 0);
    // Small chunks: many of them, each thread given several in turn.
    assert!(chunk_records(&one) > 10, "{} chunks", chunk_records(&one));
    for how in [
        (WriterAt::Thread, 2),
        (WriterAt::Thread, 3),
        (WriterAt::After, 1),
    ] {
        let mut other = Vec::new();
        let (at, threads) = how;
        write_chunked(&flight, &options, &mut other, 4 << 10, at, threads).unwrap();
        assert!(one == other, "{how:?} changed the file");
    }
}

/// The chunk records of the data section, walked record by record from the magic.
fn chunk_records(file: &[u8]) -> usize {
    let (mut at, mut chunks) = (MAGIC.len(), 0);
    while at + 9 <= file.len() && file[at] != op::FOOTER {
        let length = u64::from_le_bytes(file[at + 1..at + 9].try_into().unwrap());
        chunks += usize::from(file[at] == op::CHUNK);
        at += 9 + length as usize;
    }
    chunks
}

/// A writer that fails once `room` bytes are written.
struct FullDisk {
    room: usize,
}

impl Write for FullDisk {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if bytes.len() > self.room {
            return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
        }
        self.room -= bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_failing_with_chunks_in_flight_ends_the_export_with_its_error() {
    let flight = synthetic();
    for how in [
        (WriterAt::Thread, 1),
        (WriterAt::Thread, 3),
        (WriterAt::After, 1),
    ] {
        let out = FullDisk { room: 8 << 10 };
        let (at, threads) = how;
        let options = ExportOptions::default();
        let result = write_chunked(&flight, &options, out, 4 << 10, at, threads);
        match result {
            Err(ExportError::Write(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{how:?}: {e}")
            }
            other => panic!("{how:?}: {:?}", other.map(|s| s.samples)),
        }
    }
}
