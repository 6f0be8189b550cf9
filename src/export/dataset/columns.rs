//! A topic's columns: a compiled ULog [`Layout`] turned into the table's Arrow schema, chosen
//! for the engines that read it (Spark, Trino/Athena, DuckDB, Polars, pyarrow):
//!
//! - leaf names flattened to names every engine takes unquoted: `esc[0].esc_rpm` becomes
//!   `esc_0_esc_rpm`, `q[0]` becomes `q_0`; the ULog name and type stay in the field's
//!   metadata ([`ULOG_NAME`], [`ULOG_TYPE`]);
//! - no unsigned types (Spark reads UINT64 as a decimal; Athena and Iceberg have none):
//!   `int8`/`uint8`/`int16`/`uint16`/`int32` as Int32, `uint32`/`int64` as Int64, `uint64` as
//!   Int64 (its bits as they are: a value past 2^63 reads negative, which PX4's counters and
//!   timestamps never reach);
//! - a `char[N]` field is one string, cut at its first NUL (a lone `char` too);
//! - every `_padding` field is left out;
//! - the ULog `timestamp` becomes the table's `timestamp` column (µs since boot, unwrapped
//!   when the format logs it narrower), ahead of the identity columns every table shares
//!   ([`IDENTITY`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::ulog::layout::Layout;
use crate::ulog::types::BasicType;

/// The field metadata key holding a column's ULog name (`esc[0].esc_rpm`).
pub const ULOG_NAME: &str = "ulog_name";
/// The field metadata key holding a column's ULog type (`uint16_t`, `char[10]`).
pub const ULOG_TYPE: &str = "ulog_type";

/// The columns every topic table starts with, in order: the flight, the vehicle and the day
/// (named apart from the partition keys `date` and `vehicle`, which engines add from the
/// path), the topic instance, the log time and the UTC time.
pub const IDENTITY: [&str; 6] = [
    "flight_id",
    "vehicle_uid",
    "flight_date",
    "multi_id",
    "timestamp",
    "timestamp_utc",
];

/// How one column is read from a sample's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// One basic-typed leaf at `offset`.
    Scalar { ty: BasicType, offset: usize },
    /// `len` chars from `offset`, as a string cut at the first NUL.
    Text { offset: usize, len: usize },
    /// An integer (or float) leaf at `offset` times `factor`, as a double: a DataFlash field
    /// stored scaled (`c` in hundredths) or given a multiplier by its FMTU record.
    Scaled {
        ty: BasicType,
        offset: usize,
        factor: Factor,
    },
}

/// A column's multiplier, kept as its bits so that a column stays `Eq` and `Hash` (its
/// table is found by its columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Factor(u64);

impl Factor {
    pub fn new(factor: f64) -> Self {
        Self(factor.to_bits())
    }

    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// A value column of a topic table (after the [`IDENTITY`] columns).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Column {
    /// The column's name: flattened, unique in the table.
    pub name: String,
    pub source: Source,
}

/// The columns of a topic's table and its Arrow schema.
#[derive(Debug, Clone)]
pub struct TopicColumns {
    pub columns: Vec<Column>,
    pub schema: Arc<Schema>,
}

impl TopicColumns {
    /// The table of the topic whose samples `layout` describes.
    pub fn new(layout: &Layout) -> Self {
        let mut taken: HashSet<String> = IDENTITY.iter().map(|n| n.to_string()).collect();
        let timestamp_offset = layout.timestamp.map(|t| t.offset);
        let mut columns = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut leaves = layout.named_fields().peekable();
        while let Some((ulog_name, leaf)) = leaves.next() {
            if leaf.padding || Some(leaf.offset) == timestamp_offset {
                continue;
            }
            let (ulog_name, source, ulog_type) = match leaf.ty {
                BasicType::Char => {
                    // A char array's leaves are `name[0]`, `name[1]`, … one after the other.
                    let (stem, len) = match ulog_name.strip_suffix("[0]") {
                        Some(stem) => {
                            let mut len = 1;
                            while let Some((next, f)) = leaves.peek() {
                                let follows = f.ty == BasicType::Char
                                    && f.offset == leaf.offset + len
                                    && next.strip_prefix(stem).is_some_and(|rest| {
                                        rest.strip_prefix('[')
                                            .and_then(|r| r.strip_suffix(']'))
                                            .and_then(|i| i.parse::<usize>().ok())
                                            == Some(len)
                                    });
                                if !follows {
                                    break;
                                }
                                len += 1;
                                leaves.next();
                            }
                            (stem, len)
                        }
                        None => (ulog_name, 1),
                    };
                    let source = Source::Text {
                        offset: leaf.offset,
                        len,
                    };
                    (stem, source, format!("char[{len}]"))
                }
                ty => (
                    ulog_name,
                    Source::Scalar {
                        ty,
                        offset: leaf.offset,
                    },
                    ty.name().to_owned(),
                ),
            };
            let name = unique(column_name(ulog_name), &mut taken);
            let metadata = HashMap::from([
                (ULOG_NAME.to_owned(), ulog_name.to_owned()),
                (ULOG_TYPE.to_owned(), ulog_type),
            ]);
            fields.push(Field::new(&name, data_type(&source), false).with_metadata(metadata));
            columns.push(Column { name, source });
        }
        let mut all = identity_fields();
        if let Some(t) = layout.timestamp {
            let timestamp = all[4].clone().with_metadata(HashMap::from([
                (ULOG_NAME.to_owned(), IDENTITY[4].to_owned()),
                (ULOG_TYPE.to_owned(), t.ty.name().to_owned()),
            ]));
            all[4] = timestamp;
        }
        all.extend(fields);
        Self {
            columns,
            schema: Arc::new(Schema::new(all)),
        }
    }
}

/// The [`IDENTITY`] columns' fields.
pub(crate) fn identity_fields() -> Vec<Field> {
    let mut fields = flight_fields();
    fields.push(Field::new(IDENTITY[3], DataType::Int32, false));
    fields.push(Field::new(IDENTITY[4], DataType::Int64, false));
    fields.push(utc_field());
    fields
}

/// The columns that say which flight a row is of, first in every table of the dataset:
/// `flight_id`, `vehicle_uid`, `flight_date`.
pub fn flight_fields() -> Vec<Field> {
    vec![
        Field::new(IDENTITY[0], DataType::Utf8, false),
        Field::new(IDENTITY[1], DataType::Utf8, false),
        Field::new(IDENTITY[2], DataType::Date32, false),
    ]
}

/// `timestamp_utc`: a log time in UTC, null when the flight has no UTC reference.
pub fn utc_field() -> Field {
    Field::new(
        IDENTITY[5],
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        true,
    )
}

/// The Arrow type a column of `source` is written as.
pub fn data_type(source: &Source) -> DataType {
    match source {
        Source::Text { .. } => DataType::Utf8,
        Source::Scaled { .. } => DataType::Float64,
        Source::Scalar { ty, .. } => match ty {
            BasicType::Int8
            | BasicType::UInt8
            | BasicType::Int16
            | BasicType::UInt16
            | BasicType::Int32 => DataType::Int32,
            BasicType::UInt32 | BasicType::Int64 | BasicType::UInt64 => DataType::Int64,
            BasicType::Float => DataType::Float32,
            BasicType::Double => DataType::Float64,
            BasicType::Bool => DataType::Boolean,
            BasicType::Char => DataType::Utf8,
        },
    }
}

/// A ULog leaf name as a column name: `[` and `.` become `_`, `]` goes (`esc[0].esc_rpm` →
/// `esc_0_esc_rpm`); anything but ASCII letters, digits and `_` becomes `_`, and a name that
/// would start with a digit gets a leading `_`.
pub fn column_name(ulog_name: &str) -> String {
    let mut name = String::with_capacity(ulog_name.len());
    for c in ulog_name.chars() {
        match c {
            ']' => {}
            c if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
            _ => name.push('_'),
        }
    }
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// `name`, or `name_2`, `name_3`, … when taken already (a field named like an identity column,
/// or two leaves that flatten alike); the name returned is taken.
pub(crate) fn unique(name: String, taken: &mut HashSet<String>) -> String {
    let mut candidate = name.clone();
    let mut k = 2;
    while taken.contains(&candidate) {
        candidate = format!("{name}_{k}");
        k += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulog::format::parse_formats;

    fn columns(defs: &[&str]) -> TopicColumns {
        let formats = parse_formats(defs.iter().copied()).unwrap();
        let name = defs[0].split(':').next().unwrap();
        TopicColumns::new(&Layout::compile(name, &formats).unwrap())
    }

    #[test]
    fn leaves_are_flattened_typed_for_the_engines_and_padding_is_left_out() {
        let t = columns(&[
            "esc_status:uint64_t timestamp;uint8_t count;uint8_t[7] _padding0;esc_report[2] esc;char[4] name;uint32_t flags;",
            "esc_report:int32_t esc_rpm;uint16_t[2] state;bool armed;uint8_t[1] _padding0;",
        ]);
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "count",
                "esc_0_esc_rpm",
                "esc_0_state_0",
                "esc_0_state_1",
                "esc_0_armed",
                "esc_1_esc_rpm",
                "esc_1_state_0",
                "esc_1_state_1",
                "esc_1_armed",
                "name",
                "flags"
            ]
        );
        let field = |n: &str| t.schema.field_with_name(n).unwrap().clone();
        assert_eq!(field("count").data_type(), &DataType::Int32);
        assert_eq!(field("esc_1_state_0").data_type(), &DataType::Int32);
        assert_eq!(field("flags").data_type(), &DataType::Int64);
        assert_eq!(field("esc_0_armed").data_type(), &DataType::Boolean);
        assert_eq!(field("name").data_type(), &DataType::Utf8);
        assert_eq!(field("name").metadata()[ULOG_TYPE], "char[4]");
        assert_eq!(
            field("esc_0_esc_rpm").metadata()[ULOG_NAME],
            "esc[0].esc_rpm"
        );
        assert_eq!(field("timestamp").data_type(), &DataType::Int64);
        assert_eq!(t.schema.fields().len(), IDENTITY.len() + names.len());
        assert_eq!(
            t.columns[9].source,
            Source::Text {
                offset: 8 + 1 + 7 + 2 * 10,
                len: 4
            }
        );
    }

    #[test]
    fn a_field_named_like_an_identity_column_is_renamed_not_lost() {
        let t = columns(&["odd:uint64_t timestamp;float multi_id;char c;"]);
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["multi_id_2", "c"]);
        assert_eq!(t.columns[1].source, Source::Text { offset: 12, len: 1 });
    }

    #[test]
    fn names_take_no_quotes() {
        assert_eq!(column_name("q[0]"), "q_0");
        assert_eq!(column_name("a.b[12].c"), "a_b_12_c");
        assert_eq!(column_name("0x"), "_0x");
    }
}
