//! One topic's Parquet file being written: its samples buffered as the bytes they came in
//! (a row group's worth, no more), then, at each [`TopicTable::flush_row_group`], sorted by
//! timestamp, turned into Arrow arrays column by column ([`columns`](super::columns) says how)
//! and written as one row group, zstd-compressed with statistics (a column of less than
//! [`COMPRESSED_COLUMN_BYTES`] in its first row group is written uncompressed).

use std::io::Write;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, BooleanArray, PrimitiveArray, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::columns::{Source, TopicColumns};
use crate::ulog::types::BasicType;

/// What every row of a flight's tables says of the flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlightIdentity {
    /// The flight (a session's directory name, a `.ulg`'s file stem).
    pub flight_id: String,
    /// The vehicle: the autopilot's hardware id (`sys_uuid`), else `sysN`, else `unknown`.
    pub vehicle_uid: String,
    /// The flight's day (UTC), as days since 1970-01-01.
    pub flight_date_days: i32,
    /// µs to add to a log time for µs since the Unix epoch, when the flight has a UTC
    /// reference.
    pub utc_offset_us: Option<i64>,
    /// The log's start (its header's timestamp), µs since boot.
    pub log_start_us: Option<u64>,
}

/// Why a table could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot encode the table: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("cannot write the table: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

/// A buffered sample: where its bytes are and what it is stamped with.
#[derive(Debug, Clone, Copy)]
struct Row {
    timestamp: u64,
    multi_id: u8,
}

/// A topic's table being written to `W`; see the module docs.
pub struct TopicTable<W: Write + Send> {
    columns: TopicColumns,
    identity: Arc<FlightIdentity>,
    /// Bytes of each sample kept (the layout's size).
    sample_size: usize,
    bytes: Vec<u8>,
    rows: Vec<Row>,
    /// The file's writer, made when the first row group is written (which says whether it
    /// is compressed); until then, its output.
    writer: Option<ArrowWriter<W>>,
    out: Option<W>,
    rows_written: u64,
    row_groups: usize,
}

/// Rows turned into Arrow arrays at a time while a row group is written.
const BATCH_ROWS: usize = 64 * 1024;

/// zstd's level for the tables: fast to write on a Pi, and most of level 9's ratio on
/// sensor data.
const ZSTD_LEVEL: i32 = 3;

/// Bytes of values (as Parquet stores them plain) under which a column's first row group is
/// not compressed, nor are its later ones: parquet-rs sets up zstd for each column of each
/// row group (a compression and a decompression context, about 200 KB to allocate and clear),
/// which costs more time than the column's few bytes saved are worth.
pub const COMPRESSED_COLUMN_BYTES: usize = 256;

impl<W: Write + Send> TopicTable<W> {
    /// A table of `columns` for samples of `sample_size` bytes, written to `out`.
    pub fn new(
        columns: TopicColumns,
        sample_size: usize,
        identity: Arc<FlightIdentity>,
        out: W,
    ) -> Result<Self, TableError> {
        Ok(Self {
            columns,
            identity,
            sample_size,
            bytes: Vec::new(),
            rows: Vec::new(),
            writer: None,
            out: Some(out),
            rows_written: 0,
            row_groups: 0,
        })
    }

    /// Buffers one sample of instance `multi_id` stamped `timestamp` (µs since boot); `data`
    /// holds at least the layout's size.
    pub fn push(&mut self, multi_id: u8, timestamp: u64, data: &[u8]) {
        self.bytes.extend_from_slice(&data[..self.sample_size]);
        self.rows.push(Row {
            timestamp,
            multi_id,
        });
    }

    /// Memory the buffered samples take (what is allocated for them, not only filled).
    pub fn buffered_bytes(&self) -> usize {
        self.bytes.capacity() + self.rows.capacity() * std::mem::size_of::<Row>()
    }

    /// Whether a row group's worth of samples waits.
    pub fn row_group_full(&self) -> bool {
        self.bytes.len() >= super::ROW_GROUP_BYTES
    }

    /// Rows written so far, and buffered.
    pub fn rows(&self) -> u64 {
        self.rows_written + self.rows.len() as u64
    }

    /// Writes the buffered samples as one row group, sorted by timestamp (samples with the
    /// same timestamp keep their log order).
    pub fn flush_row_group(&mut self) -> Result<(), TableError> {
        self.writer()?;
        if self.rows.is_empty() {
            return Ok(());
        }

        let mut order: Vec<u32> = (0..self.rows.len() as u32).collect();
        if !self.rows.is_sorted_by_key(|r| r.timestamp) {
            order.sort_by_key(|&i| self.rows[i as usize].timestamp);
        }
        // In slices: the arrays of one slice exist at a time, and the writer encodes each
        // into the row group's pages as it comes.
        for slice in order.chunks(BATCH_ROWS) {
            let batch = self.batch(slice)?;
            self.writer()?.write(&batch)?;
        }
        self.writer()?.flush()?;
        self.rows_written += self.rows.len() as u64;
        self.row_groups += 1;
        // Given back, not kept: the budget counts what is buffered, and a table that waits
        // long for its next row group must not hold the last one's memory.
        self.rows = Vec::new();
        self.bytes = Vec::new();
        Ok(())
    }

    /// The file's writer, made now if it is not yet, compressing the columns that the rows
    /// buffered now make large enough.
    fn writer(&mut self) -> Result<&mut ArrowWriter<W>, TableError> {
        if let Some(out) = self.out.take() {
            let rows = self.rows.len();
            let schema = &self.columns.schema;
            let properties = properties(schema, |i| rows * plain_width(schema.field(i)));
            let schema = self.columns.schema.clone();
            self.writer = Some(ArrowWriter::try_new(out, schema, Some(properties))?);
        }
        Ok(self.writer.as_mut().expect("made above"))
    }

    /// Writes what is buffered, adds `metadata` to the file's key/value metadata and closes
    /// it; returns the output and the number of rows and row groups written.
    pub fn finish(mut self, metadata: Vec<KeyValue>) -> Result<(W, u64, usize), TableError> {
        self.flush_row_group()?;
        let mut writer = self.writer.take().expect("made by the last row group");
        for kv in metadata {
            writer.append_key_value_metadata(kv);
        }
        let out = writer.into_inner()?;
        Ok((out, self.rows_written, self.row_groups))
    }

    /// The buffered rows in `order` as a record batch of the table's schema.
    fn batch(&self, order: &[u32]) -> Result<RecordBatch, TableError> {
        let id = &self.identity;
        let rows = &self.rows;
        let timestamps = order.iter().map(|&i| rows[i as usize].timestamp);
        let mut arrays = flight_arrays(id, order.len());
        arrays.push(Arc::new(PrimitiveArray::<Int32Type>::from_iter_values(
            order.iter().map(|&i| i32::from(rows[i as usize].multi_id)),
        )));
        arrays.push(Arc::new(PrimitiveArray::<Int64Type>::from_iter_values(
            timestamps.clone().map(|t| t as i64),
        )));
        arrays.push(utc_array(id, timestamps.map(Some)));
        let samples = Samples {
            bytes: &self.bytes,
            size: self.sample_size,
            order,
        };
        for column in &self.columns.columns {
            arrays.push(samples.column(column.source));
        }
        Ok(RecordBatch::try_new(self.columns.schema.clone(), arrays)?)
    }
}

/// The [`flight_fields`](super::columns::flight_fields) columns of `n` rows of the flight.
pub fn flight_arrays(id: &FlightIdentity, n: usize) -> Vec<ArrayRef> {
    vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            &id.flight_id,
            n,
        ))),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            &id.vehicle_uid,
            n,
        ))),
        Arc::new(PrimitiveArray::<Date32Type>::from_value(
            id.flight_date_days,
            n,
        )),
    ]
}

/// The `timestamp_utc` column of log times (µs since boot; `None`: null): each moved by the
/// flight's UTC reference, all null without one.
pub fn utc_array(id: &FlightIdentity, timestamps: impl Iterator<Item = Option<u64>>) -> ArrayRef {
    let utc = timestamps.map(|t| Some((t? as i64).saturating_add(id.utc_offset_us?)));
    Arc::new(PrimitiveArray::<TimestampMicrosecondType>::from_iter(utc).with_timezone("UTC"))
}

/// Writer properties of every table of the dataset: zstd for each column whose
/// `column_bytes` (by its index in `schema`) reach [`COMPRESSED_COLUMN_BYTES`], page
/// statistics, dictionaries for the strings only (the flight's columns repeat one value;
/// numbers go plain, which zstd compresses as well and writes faster), the times
/// (`timestamp`, `timestamp_utc`) delta-encoded, row groups ended by
/// the caller, rows declared sorted by `timestamp` when the table has one that is never null.
pub fn properties(schema: &Schema, column_bytes: impl Fn(usize) -> usize) -> WriterProperties {
    let sorted = (schema.fields().iter())
        .position(|f| f.name() == super::columns::IDENTITY[4] && !f.is_nullable());
    let zstd = Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).expect("a valid zstd level"));
    let properties = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_dictionary_enabled(false)
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None)
        .set_sorting_columns(sorted.map(|column| {
            vec![SortingColumn {
                column_idx: column as i32,
                descending: false,
                nulls_first: false,
            }]
        }))
        .set_created_by(format!("ulog-recv {}", env!("CARGO_PKG_VERSION")));
    let strings = (schema.fields().iter()).filter(|f| f.data_type() == &DataType::Utf8);
    let properties = strings.fold(properties, |p, f| {
        p.set_column_dictionary_enabled(ColumnPath::from(f.name().as_str()), true)
    });
    let large = (schema.fields().iter().enumerate())
        .filter(|&(i, _)| column_bytes(i) >= COMPRESSED_COLUMN_BYTES);
    let properties = large.fold(properties, |p, (_, f)| {
        p.set_column_compression(ColumnPath::from(f.name().as_str()), zstd)
    });
    // The times rise by about one period a row: delta-encoded, they are a few bits a row
    // before zstd sees them (plain, up to a third of a busy table's bytes to compress).
    let times = (schema.fields().iter()).filter(|f| {
        super::columns::IDENTITY[4..].contains(&f.name().as_str())
            && matches!(f.data_type(), DataType::Int64 | DataType::Timestamp(..))
    });
    let properties = times.fold(properties, |p, f| {
        p.set_column_encoding(
            ColumnPath::from(f.name().as_str()),
            Encoding::DELTA_BINARY_PACKED,
        )
    });
    // The flight's columns hold one value (an instance a few): a dictionary of it, its index
    // run-length encoded, is a few bytes that zstd cannot shrink; not compressing them saves
    // a zstd context per column.
    let constant = super::columns::IDENTITY[..4].iter();
    constant
        .fold(properties, |p, name| {
            let column = ColumnPath::from(*name);
            p.set_column_dictionary_enabled(column.clone(), true)
                .set_column_compression(column, Compression::UNCOMPRESSED)
        })
        .build()
}

/// Writes `batch` to `out` as a whole table file (one row group) with `metadata`; returns
/// `out`.
pub fn write_table<W: Write + Send>(
    out: W,
    batch: &RecordBatch,
    metadata: Vec<KeyValue>,
) -> Result<W, TableError> {
    let schema = batch.schema();
    let properties = properties(&schema, |i| batch.column(i).get_array_memory_size());
    let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(properties))?;
    writer.write(batch)?;
    for kv in metadata {
        writer.append_key_value_metadata(kv);
    }
    Ok(writer.into_inner()?)
}

/// Bytes a value of `field` takes stored plain (a string: a guess).
fn plain_width(field: &arrow_schema::Field) -> usize {
    match field.data_type() {
        DataType::Boolean => 1,
        other => other.primitive_width().unwrap_or(16),
    }
}

/// The buffered samples, read in an order.
struct Samples<'a> {
    bytes: &'a [u8],
    size: usize,
    order: &'a [u32],
}

impl Samples<'_> {
    /// The column read from `source` in every sample.
    fn column(&self, source: Source) -> ArrayRef {
        let (ty, offset) = match source {
            Source::Text { offset, len } => {
                let mut out =
                    StringBuilder::with_capacity(self.order.len(), self.order.len() * len);
                for at in self.at(offset) {
                    let chars = &self.bytes[at..at + len];
                    let end = memchr::memchr(0, chars).unwrap_or(len);
                    out.append_value(String::from_utf8_lossy(&chars[..end]));
                }
                return Arc::new(out.finish());
            }
            Source::Scalar { ty, offset } => (ty, offset),
            Source::Scaled { ty, offset, factor } => {
                let factor = factor.get();
                return self.gather::<Float64Type>(offset, |a| {
                    self.number(ty, a).map_or(f64::NAN, |v| v * factor)
                });
            }
        };
        let b = self.bytes;
        match ty {
            BasicType::Int8 => self.gather::<Int32Type>(offset, |a| i32::from(b[a] as i8)),
            BasicType::UInt8 | BasicType::Char => {
                self.gather::<Int32Type>(offset, |a| i32::from(b[a]))
            }
            BasicType::Int16 => {
                self.gather::<Int32Type>(offset, |a| i16::from_le_bytes([b[a], b[a + 1]]).into())
            }
            BasicType::UInt16 => {
                self.gather::<Int32Type>(offset, |a| u16::from_le_bytes([b[a], b[a + 1]]).into())
            }
            BasicType::Int32 => self.gather::<Int32Type>(offset, |a| i32::from_le_bytes(le(b, a))),
            BasicType::UInt32 => {
                self.gather::<Int64Type>(offset, |a| u32::from_le_bytes(le(b, a)).into())
            }
            BasicType::Int64 => self.gather::<Int64Type>(offset, |a| i64::from_le_bytes(le(b, a))),
            BasicType::UInt64 => {
                self.gather::<Int64Type>(offset, |a| u64::from_le_bytes(le(b, a)) as i64)
            }
            BasicType::Float => {
                self.gather::<Float32Type>(offset, |a| f32::from_le_bytes(le(b, a)))
            }
            BasicType::Double => {
                self.gather::<Float64Type>(offset, |a| f64::from_le_bytes(le(b, a)))
            }
            BasicType::Bool => Arc::new(BooleanArray::from_iter(
                self.at(offset).map(|a| Some(b[a] != 0)),
            )),
        }
    }

    /// The number of basic type `ty` at `a`, as a double (`None` for a char).
    fn number(&self, ty: BasicType, a: usize) -> Option<f64> {
        let b = self.bytes;
        Some(match ty {
            BasicType::Int8 => f64::from(b[a] as i8),
            BasicType::UInt8 | BasicType::Bool => f64::from(b[a]),
            BasicType::Int16 => f64::from(i16::from_le_bytes(le(b, a))),
            BasicType::UInt16 => f64::from(u16::from_le_bytes(le(b, a))),
            BasicType::Int32 => f64::from(i32::from_le_bytes(le(b, a))),
            BasicType::UInt32 => f64::from(u32::from_le_bytes(le(b, a))),
            BasicType::Int64 => i64::from_le_bytes(le(b, a)) as f64,
            BasicType::UInt64 => u64::from_le_bytes(le(b, a)) as f64,
            BasicType::Float => f64::from(f32::from_le_bytes(le(b, a))),
            BasicType::Double => f64::from_le_bytes(le(b, a)),
            BasicType::Char => return None,
        })
    }

    /// Where the value at `offset` of each sample is, in order.
    fn at(&self, offset: usize) -> impl Iterator<Item = usize> + '_ {
        let size = self.size;
        self.order.iter().map(move |&i| i as usize * size + offset)
    }

    /// A primitive column: `read` of each sample's value position.
    fn gather<T: ArrowPrimitiveType>(
        &self,
        offset: usize,
        read: impl Fn(usize) -> T::Native,
    ) -> ArrayRef {
        Arc::new(PrimitiveArray::<T>::from_iter_values(
            self.at(offset).map(read),
        ))
    }
}

/// The `N` bytes at `at` of `bytes`.
#[inline(always)]
fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes[at..at + N].try_into().expect("N bytes")
}
