//! The Parquet writer, property-tested on every ULog type: random formats (every basic type,
//! arrays, char arrays, a nested format and arrays of it, padding), several instances of a
//! topic, a subscribed topic with no sample, written by our ULog writer, exported with
//! `write_dataset` and read back by arrow-rs's Parquet reader. Every value comes back where
//! the documented schema puts it (the column named from its ULog name, its type made
//! signed, a `char[N]` one string cut at its first NUL, padding left out), per instance, in
//! timestamp order. Two flights whose topic's format changed between them each keep their own
//! schema in their own file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::prelude::*;
use ulog_recv::export::ExportOptions;
use ulog_recv::export::dataset::{FlightFacts, FlightIdentity, write_dataset};
use ulog_recv::ulog::message::msg_type;
use ulog_recv::ulog::{Message, Writer};

/// A basic ULog type, its size, and how a value of it reads back.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ty {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    Bool,
    Char,
}

impl Ty {
    const ALL: [Ty; 12] = [
        Ty::I8,
        Ty::U8,
        Ty::I16,
        Ty::U16,
        Ty::I32,
        Ty::U32,
        Ty::I64,
        Ty::U64,
        Ty::F32,
        Ty::F64,
        Ty::Bool,
        Ty::Char,
    ];

    fn name(self) -> &'static str {
        match self {
            Ty::I8 => "int8_t",
            Ty::U8 => "uint8_t",
            Ty::I16 => "int16_t",
            Ty::U16 => "uint16_t",
            Ty::I32 => "int32_t",
            Ty::U32 => "uint32_t",
            Ty::I64 => "int64_t",
            Ty::U64 => "uint64_t",
            Ty::F32 => "float",
            Ty::F64 => "double",
            Ty::Bool => "bool",
            Ty::Char => "char",
        }
    }

    fn size(self) -> usize {
        match self {
            Ty::I8 | Ty::U8 | Ty::Bool | Ty::Char => 1,
            Ty::I16 | Ty::U16 => 2,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }

    /// A value's bytes from random `bits`: bools 0 or 1, chars letters or NUL.
    fn bytes(self, bits: u64) -> Vec<u8> {
        match self {
            Ty::Bool => vec![(bits & 1) as u8],
            Ty::Char => vec![if bits.is_multiple_of(5) {
                0
            } else {
                b'a' + (bits % 26) as u8
            }],
            ty => bits.to_le_bytes()[..ty.size()].to_vec(),
        }
    }
}

/// What a column reads back as.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Int(i64),
    /// Floats by their bits (NaNs included).
    Float(u64),
    Bool(bool),
    Text(String),
}

/// One field of a generated format: `TYPE[N] name;` or a nested format.
#[derive(Debug, Clone)]
enum FieldSpec {
    Basic { ty: Ty, array: Option<usize> },
    Nested { array: Option<usize> },
}

/// A generated topic: its fields, the nested format's basic fields.
#[derive(Debug, Clone)]
struct TopicSpec {
    fields: Vec<FieldSpec>,
    nested: Vec<(Ty, Option<usize>)>,
}

fn basic_field() -> impl Strategy<Value = (Ty, Option<usize>)> {
    (
        prop::sample::select(Ty::ALL.to_vec()),
        prop::option::of(1usize..5),
    )
}

fn topic_spec() -> impl Strategy<Value = TopicSpec> {
    let field = prop_oneof![
        4 => basic_field().prop_map(|(ty, array)| FieldSpec::Basic { ty, array }),
        1 => prop::option::of(1usize..3).prop_map(|array| FieldSpec::Nested { array }),
    ];
    (
        prop::collection::vec(field, 1..8),
        prop::collection::vec(basic_field(), 1..4),
    )
        .prop_map(|(fields, nested)| TopicSpec { fields, nested })
}

/// The format text of `spec` as topic `name` (and its nested format `name_inner`), with a
/// padding field at the end as PX4 writes them.
fn format_texts(name: &str, spec: &TopicSpec) -> Vec<String> {
    let decl = |ty: &str, array: Option<usize>, field: &str| match array {
        Some(n) => format!("{ty}[{n}] {field};"),
        None => format!("{ty} {field};"),
    };
    let mut text = format!("{name}:uint64_t timestamp;");
    for (k, field) in spec.fields.iter().enumerate() {
        text += &match field {
            FieldSpec::Basic { ty, array } => decl(ty.name(), *array, &format!("f{k}")),
            FieldSpec::Nested { array } => decl(&format!("{name}_inner"), *array, &format!("n{k}")),
        };
    }
    text += "uint8_t[3] _padding0;";
    let mut inner = format!("{name}_inner:");
    for (k, (ty, array)) in spec.nested.iter().enumerate() {
        inner += &decl(ty.name(), *array, &format!("g{k}"));
    }
    vec![text, inner]
}

/// One sample's bytes and what each column (by ULog name) reads back, from `bits`.
fn sample(
    spec: &TopicSpec,
    timestamp: u64,
    bits: &mut impl FnMut() -> u64,
) -> (Vec<u8>, BTreeMap<String, Cell>) {
    let mut data = timestamp.to_le_bytes().to_vec();
    let mut cells = BTreeMap::new();
    let mut leaves = |data: &mut Vec<u8>,
                      cells: &mut BTreeMap<String, Cell>,
                      name: String,
                      ty: Ty,
                      array: Option<usize>| {
        if ty == Ty::Char {
            let n = array.unwrap_or(1);
            let bytes: Vec<u8> = (0..n).flat_map(|_| Ty::Char.bytes(bits())).collect();
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(n);
            cells.insert(
                name,
                Cell::Text(String::from_utf8(bytes[..end].to_vec()).unwrap()),
            );
            data.extend(bytes);
            return;
        }
        let names: Vec<String> = match array {
            Some(n) => (0..n).map(|i| format!("{name}[{i}]")).collect(),
            None => vec![name],
        };
        for leaf in names {
            let bytes = ty.bytes(bits());
            let cell = match ty {
                Ty::I8 => Cell::Int(bytes[0] as i8 as i64),
                Ty::U8 => Cell::Int(bytes[0] as i64),
                Ty::I16 => Cell::Int(i16::from_le_bytes([bytes[0], bytes[1]]) as i64),
                Ty::U16 => Cell::Int(u16::from_le_bytes([bytes[0], bytes[1]]) as i64),
                Ty::I32 => Cell::Int(i32::from_le_bytes(bytes[..4].try_into().unwrap()) as i64),
                Ty::U32 => Cell::Int(u32::from_le_bytes(bytes[..4].try_into().unwrap()) as i64),
                Ty::I64 | Ty::U64 => Cell::Int(i64::from_le_bytes(bytes[..8].try_into().unwrap())),
                Ty::F32 => {
                    Cell::Float(f32::from_le_bytes(bytes[..4].try_into().unwrap()).to_bits() as u64)
                }
                Ty::F64 => Cell::Float(u64::from_le_bytes(bytes[..8].try_into().unwrap())),
                Ty::Bool => Cell::Bool(bytes[0] == 1),
                Ty::Char => unreachable!(),
            };
            cells.insert(leaf, cell);
            data.extend(bytes);
        }
    };
    for (k, field) in spec.fields.iter().enumerate() {
        match field {
            FieldSpec::Basic { ty, array } => {
                leaves(&mut data, &mut cells, format!("f{k}"), *ty, *array)
            }
            FieldSpec::Nested { array } => {
                let prefixes: Vec<String> = match array {
                    Some(n) => (0..*n).map(|i| format!("n{k}[{i}]")).collect(),
                    None => vec![format!("n{k}")],
                };
                for prefix in prefixes {
                    for (j, (ty, inner_array)) in spec.nested.iter().enumerate() {
                        leaves(
                            &mut data,
                            &mut cells,
                            format!("{prefix}.g{j}"),
                            *ty,
                            *inner_array,
                        );
                    }
                }
            }
        }
    }
    data.extend([0u8; 3]); // the padding
    (data, cells)
}

/// A flight: topics `t0`, `t1`, … of `specs`, each with `instances` instances of `counts`
/// samples, plus `idle` subscribed and never logged; the expected cells per (topic, instance).
type Expected = BTreeMap<(String, u8), Vec<Row>>;

/// A sample as it reads back: its timestamp and each column's cell by ULog name.
type Row = (u64, BTreeMap<String, Cell>);

fn flight(specs: &[(TopicSpec, u8, usize)], seed: u64) -> (Vec<u8>, Expected) {
    let mut state = seed;
    let mut bits = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state ^ (state >> 29)
    };
    let mut w = Writer::new();
    w.header(1, 1_000_000);
    w.flag_bits([0; 8], [0; 8], [0; 3]).unwrap();
    for (k, (spec, _, _)) in specs.iter().enumerate() {
        for text in format_texts(&format!("t{k}"), spec) {
            w.message(msg_type::FORMAT, &[text.as_bytes()]).unwrap();
        }
    }
    w.message(msg_type::FORMAT, &[b"idle:uint64_t timestamp;float x;"])
        .unwrap();
    let mut msg_id = 0u16;
    let mut ids = Vec::new();
    for (k, (_, instances, _)) in specs.iter().enumerate() {
        for multi_id in 0..*instances {
            let name = format!("t{k}");
            w.write(&Message::AddLogged {
                multi_id,
                msg_id,
                name: &name,
            })
            .unwrap();
            ids.push((k, multi_id, msg_id));
            msg_id += 1;
        }
    }
    w.write(&Message::AddLogged {
        multi_id: 0,
        msg_id,
        name: "idle",
    })
    .unwrap();
    let mut expected = Expected::new();
    let rounds = specs.iter().map(|s| s.2).max().unwrap_or(0);
    for round in 0..rounds {
        for &(k, multi_id, id) in &ids {
            let (spec, _, count) = &specs[k];
            if round >= *count {
                continue;
            }
            let timestamp = 2_000_000 + round as u64 * 1000 + u64::from(multi_id);
            let (data, cells) = sample(spec, timestamp, &mut bits);
            w.write(&Message::Data {
                msg_id: id,
                data: &data,
            })
            .unwrap();
            expected
                .entry((format!("t{k}"), multi_id))
                .or_default()
                .push((timestamp, cells));
        }
    }
    (w.take(), expected)
}

fn identity(flight_id: &str) -> FlightIdentity {
    FlightIdentity {
        flight_id: flight_id.into(),
        vehicle_uid: "sys1".into(),
        flight_date_days: 20_000,
        utc_offset_us: None,
        log_start_us: Some(1_000_000),
    }
}

/// Every row of the Parquet file at `path` (the flights here are one row group, one batch).
fn read(path: &Path) -> RecordBatch {
    let file = File::open(path).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .with_batch_size(1 << 20)
        .build()
        .unwrap();
    let mut batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1, "{}", path.display());
    batches.pop().unwrap()
}

/// The cell at `row` of `column`.
fn cell(column: &dyn Array, row: usize) -> Cell {
    use arrow_schema::DataType;
    match column.data_type() {
        DataType::Int32 => Cell::Int(column.as_primitive::<Int32Type>().value(row) as i64),
        DataType::Int64 => Cell::Int(column.as_primitive::<Int64Type>().value(row)),
        DataType::Float32 => {
            Cell::Float(column.as_primitive::<Float32Type>().value(row).to_bits() as u64)
        }
        DataType::Float64 => Cell::Float(column.as_primitive::<Float64Type>().value(row).to_bits()),
        DataType::Boolean => Cell::Bool(column.as_boolean().value(row)),
        DataType::Utf8 => Cell::Text(column.as_string::<i32>().value(row).to_owned()),
        other => panic!("unexpected column type {other}"),
    }
}

/// The documented column name of a ULog name.
fn column_name(ulog_name: &str) -> String {
    ulog_name.replace(']', "").replace(['[', '.'], "_")
}

/// Checks the tables under `root` of flight `id` against `expected`.
fn check(root: &Path, id: &str, expected: &Expected) -> Result<(), TestCaseError> {
    let mut topics: BTreeMap<&str, Vec<(u8, &Vec<Row>)>> = BTreeMap::new();
    for ((topic, multi_id), rows) in expected {
        topics.entry(topic).or_default().push((*multi_id, rows));
    }
    for (topic, instances) in topics {
        let path = root.join(format!(
            "parquet/v1/{topic}/date=2024-10-04/vehicle=sys1/{id}.parquet"
        ));
        let batch = read(&path);
        let schema = batch.schema();
        let multi = batch
            .column_by_name("multi_id")
            .unwrap()
            .as_primitive::<Int32Type>();
        let timestamps = batch
            .column_by_name("timestamp")
            .unwrap()
            .as_primitive::<Int64Type>();
        let total: usize = instances.iter().map(|(_, rows)| rows.len()).sum();
        prop_assert_eq!(batch.num_rows(), total, "{}", topic);
        // Sorted by timestamp.
        prop_assert!(
            timestamps.values().windows(2).all(|w| w[0] <= w[1]),
            "{} not sorted",
            topic
        );
        prop_assert!(
            schema
                .fields()
                .iter()
                .all(|f| !f.name().contains("padding"))
        );
        for (multi_id, rows) in instances {
            let at: Vec<usize> = (0..batch.num_rows())
                .filter(|&r| multi.value(r) == i32::from(multi_id))
                .collect();
            prop_assert_eq!(at.len(), rows.len(), "{} instance {}", topic, multi_id);
            for (&r, (timestamp, cells)) in at.iter().zip(rows) {
                prop_assert_eq!(timestamps.value(r), *timestamp as i64);
                prop_assert_eq!(
                    schema.fields().len(),
                    6 + cells.len(),
                    "{}: {:?}",
                    topic,
                    schema
                );
                for (ulog_name, want) in cells {
                    let name = column_name(ulog_name);
                    let field = schema
                        .field_with_name(&name)
                        .map_err(|e| TestCaseError::fail(format!("{topic}: {e}")))?;
                    prop_assert_eq!(field.metadata().get("ulog_name"), Some(ulog_name));
                    let got = cell(batch.column_by_name(&name).unwrap().as_ref(), r);
                    prop_assert_eq!(&got, want, "{} {} row {}", topic, ulog_name, r);
                }
            }
        }
    }
    // The topic subscribed and never logged has no table.
    prop_assert!(!root.join("parquet/v1/idle").exists());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_type_layout_and_instance_reads_back_as_written(
        specs in prop::collection::vec((topic_spec(), 1u8..4, 1usize..40), 1..4),
        changed in topic_spec(),
        seed in any::<u64>(),
    ) {
        let root = std::env::temp_dir().join(format!(
            "ulog-recv-dataset-props-{}-{seed}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let options = ExportOptions::default();
        let (log, expected) = flight(&specs, seed);
        write_dataset(log.as_slice(), &options, identity("a"), &FlightFacts::default(), &root).unwrap();
        check(&root, "a", &expected)?;
        // A second flight where t0's format changed: its own file, its own schema, and the
        // first flight's file as it was.
        let mut second = specs.clone();
        second[0].0 = changed;
        let (log2, expected2) = flight(&second, seed ^ 1);
        write_dataset(log2.as_slice(), &options, identity("b"), &FlightFacts::default(), &root).unwrap();
        check(&root, "b", &expected2)?;
        check(&root, "a", &expected)?;
        std::fs::remove_dir_all(&root).unwrap();
    }
}
