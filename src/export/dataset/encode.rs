//! The end of a flight's export to tables: what is left of each table encoded on every core
//! ([`encode_all`]), each table's bytes kept in memory while small and handed to the
//! [`Filer`], which writes, syncs and commits them with the flight's others.

use std::io::Write;
use std::path::PathBuf;

use parquet::file::metadata::KeyValue;

use super::{TableWritten, TopicTable, table};
use crate::export::ExportError;
use crate::store::output::{Filer, FilerHandle, FilerStopped, NewFolders, OutputFile};

/// A table left to encode once the walk is over: a topic's last row group and footer, or a
/// table beside the topics whole.
pub(super) enum Encode {
    Topic {
        key: String,
        topic: String,
        /// Boxed: a table with its writer is far larger than a batch.
        table: Box<TopicTable<TableOutput>>,
        metadata: Vec<KeyValue>,
    },
    Beside {
        key: String,
        name: &'static str,
        out: TableOutput,
        batch: arrow_array::RecordBatch,
        metadata: Vec<KeyValue>,
    },
}

impl Encode {
    /// Bytes to encode: the order that keeps the threads evenly busy.
    fn weight(&self) -> usize {
        match self {
            Encode::Topic { table, .. } => table.buffered_bytes(),
            Encode::Beside { batch, .. } => batch.get_array_memory_size(),
        }
    }

    fn run(self) -> Result<(TableOutput, TableWritten), ExportError> {
        Ok(match self {
            Encode::Topic {
                key,
                topic,
                table,
                metadata,
            } => {
                let (out, rows, row_groups) = table.finish(metadata)?;
                let written = TableWritten {
                    key,
                    topic,
                    rows,
                    row_groups,
                };
                (out, written)
            }
            Encode::Beside {
                key,
                name,
                out,
                batch,
                metadata,
            } => {
                let out = table::write_table(out, &batch, metadata)?;
                let written = TableWritten {
                    key,
                    topic: name.to_owned(),
                    rows: batch.num_rows() as u64,
                    row_groups: 1,
                };
                (out, written)
            }
        })
    }
}

/// Encodes `jobs` on as many threads as the machine has cores, the caller's among them (each
/// table is encoded on its own: a flight's tables take the cores together, the largest
/// first), each thread handing the table it encoded to `filer` itself; returns what was
/// written in the order of `jobs`. The first error ends the work. On one core, the caller
/// encodes them all and starts no thread.
pub(super) fn encode_all(
    jobs: Vec<Encode>,
    filer: &mut Filer,
) -> Result<Vec<TableWritten>, ExportError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let count = jobs.len();
    let mut order: Vec<(usize, Encode)> = jobs.into_iter().enumerate().collect();
    order.sort_by_key(|(_, job)| std::cmp::Reverse(job.weight()));
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count)
        .max(1);
    let queue = std::sync::Mutex::new(order.into_iter());
    let stop = AtomicBool::new(false);
    let (done, finished) = std::sync::mpsc::channel();
    // Takes jobs until none is left or one has failed, handing each table to the filer.
    let work = |done: std::sync::mpsc::Sender<_>, filer: FilerHandle| {
        while !stop.load(Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((index, job)) = next else { break };
            let result = job.run().and_then(|(out, table)| {
                out.hand_to(&filer).map_err(ExportError::Write)?;
                Ok(table)
            });
            stop.fetch_or(result.is_err(), Ordering::Relaxed);
            // Unbounded: the caller reads the results once its own work is done.
            let _ = done.send((index, result));
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            let (done, filer) = (done.clone(), filer.handle());
            scope.spawn(move || work(done, filer));
        }
        work(done, filer.handle());
    });
    let mut written: Vec<Option<TableWritten>> = (0..count).map(|_| None).collect();
    for (index, result) in finished.try_iter() {
        match result {
            Ok(table) => written[index] = Some(table),
            // A handover found the filer stopped: why it stopped (a full disk) is the error.
            Err(ExportError::Write(e)) if FilerStopped::is(&e) => {
                return Err(ExportError::Write(filer.stopped()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(written.into_iter().flatten().collect())
}

/// Encoded bytes a table keeps in memory before they go to its file: a table this small is
/// handed whole to the [`Filer`], which makes, fills and syncs its file while the next table
/// is encoded.
pub const TABLE_IN_MEMORY_BYTES: usize = 4 << 20;

/// A table file's output: in memory up to [`TABLE_IN_MEMORY_BYTES`], then its (temporary)
/// [`OutputFile`].
pub(super) struct TableOutput {
    path: PathBuf,
    /// The filer's folders, for a table too large to hand over whole.
    folders: NewFolders,
    state: TableBytes,
}

enum TableBytes {
    Memory(Vec<u8>),
    /// Written through as parquet's writer buffers.
    File(OutputFile),
}

impl TableOutput {
    /// The output of the table file `path`, committed with the other files of `folders`'
    /// filer.
    pub(super) fn new(path: PathBuf, folders: &NewFolders) -> Self {
        Self {
            path,
            folders: folders.clone(),
            state: TableBytes::Memory(Vec::new()),
        }
    }

    /// The whole table to `filer`, to be synced and committed with the flight's others.
    fn hand_to(self, filer: &FilerHandle) -> std::io::Result<()> {
        match self.state {
            TableBytes::Memory(bytes) => filer.write(self.path, bytes),
            TableBytes::File(file) => filer.sync(file),
        }
    }
}

impl Write for TableOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.state {
            TableBytes::File(file) => file.file().write(buf),
            TableBytes::Memory(bytes) if bytes.len() + buf.len() <= TABLE_IN_MEMORY_BYTES => {
                bytes.extend_from_slice(buf);
                Ok(buf.len())
            }
            TableBytes::Memory(bytes) => {
                // Its folder may be in the making on the filer's thread: made twice is made,
                // and whichever thread makes it, the commit syncs the folder it is in.
                if let Some(dir) = self.path.parent() {
                    self.folders.make(dir)?;
                }
                let file = OutputFile::create(&self.path)?;
                file.file().write_all(bytes)?;
                let written = file.file().write(buf)?;
                self.state = TableBytes::File(file);
                Ok(written)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.state {
            TableBytes::File(file) => file.file().flush(),
            TableBytes::Memory(_) => Ok(()),
        }
    }
}
