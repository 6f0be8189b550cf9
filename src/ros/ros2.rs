//! ULog topics as ROS 2 messages, for the tools that read ROS 2 data (Foxglove, PlotJuggler,
//! ROS 2 bags and MCAP): a ULog format becomes a `ros2msg` schema, and each sample its CDR
//! encoding (little-endian, XCDR1, as ROS 2 serialises), without allocating per sample.
//!
//! The mapping:
//! - type names: `px4_ulog/msg/` and the format's name in CamelCase (`vehicle_attitude` →
//!   `px4_ulog/msg/VehicleAttitude`); nested formats are referenced as `px4_ulog/Name` and
//!   defined after the main definition, each once, behind a `MSG: px4_ulog/Name` header (the
//!   layout ROS 2 bags and MCAP use for a schema with its dependencies);
//! - `int8_t` … `uint64_t` → `int8` … `uint64`, `float` → `float32`, `double` → `float64`,
//!   `bool` → `bool`, one `char` → `uint8`, `char[n]` → `string` (up to the first NUL; bytes
//!   that are not UTF-8 become `?`), `T[n]` → `T[n]`; `_padding…` fields are left out; a format
//!   with no other field gets ROS 2's `uint8 structure_needs_at_least_one_member`;
//! - field names as ROS 2 allows them ([`field_name`]: lower case letters, digits and single
//!   inner underscores, a letter first): most PX4 names are already so; `voltage5V_v` becomes
//!   `voltage5v_v`, `2d` becomes `f_2d`; a name that would repeat one before it in the same
//!   type gets `_2`, `_3`, … appended.
//!
//! Logged strings ('L', tagged 'C') become `rcl_interfaces/msg/Log` ([`LOG_SCHEMA`],
//! [`encode_log`]).

use crate::ulog::format::{FieldType, FormatDef, Formats};
use crate::ulog::layout::{Layout, LayoutError};
use crate::ulog::types::BasicType;

/// The package every generated type lives in.
pub const PACKAGE: &str = "px4_ulog";

/// The 4-byte encapsulation header of little-endian plain CDR.
pub(crate) const CDR_LE: [u8; 4] = [0, 1, 0, 0];

/// Separates a schema's definitions (80 `=`), as ROS 2 bags write it.
const SEPARATOR: &str =
    "================================================================================";

/// Why a format cannot be made a ROS 2 type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// Why a sample cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sample of {got} bytes, the format needs {needed}")]
pub struct ShortSample {
    pub got: usize,
    pub needed: usize,
}

/// One step of an encoding: what to read from the sample and how to write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `count` little-endian values of `size` bytes at `offset`, aligned to `size`.
    Copy {
        offset: usize,
        size: usize,
        count: usize,
    },
    /// `count` booleans at `offset`, written as 0 or 1.
    Bool { offset: usize, count: usize },
    /// A `char[len]` at `offset` as a CDR string.
    Str { offset: usize, len: usize },
    /// A zero byte: the member ROS 2 gives a message without fields.
    Empty,
}

/// A ULog format compiled to a ROS 2 message type: its name, its schema text and the steps
/// that encode a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ros2Type {
    /// `px4_ulog/msg/VehicleAttitude`.
    pub name: String,
    /// The `ros2msg` text: the definition, then each nested type's.
    pub schema: String,
    ops: Vec<Op>,
    /// Bytes of sample data the encoding reads.
    needed: usize,
}

impl Ros2Type {
    /// Compiles the format `name`, resolving nested formats in `formats`. Fails as
    /// [`Layout::compile`] fails (unknown, recursive, too deep, too large).
    pub fn compile(name: &str, formats: &Formats) -> Result<Self, SchemaError> {
        // The layout compiler bounds what the walks below meet: every format defined, no
        // recursion, bounded depth and size.
        Layout::compile(name, formats)?;
        let mut ops = Vec::new();
        plan(name, formats, 0, &mut ops)?;
        let needed = ops
            .iter()
            .map(|op| match *op {
                Op::Copy {
                    offset,
                    size,
                    count,
                } => offset + size * count,
                Op::Bool { offset, count } => offset + count,
                Op::Str { offset, len } => offset + len,
                Op::Empty => 0,
            })
            .max()
            .unwrap_or(0);
        Ok(Self {
            name: type_name(name),
            schema: schema(name, formats),
            ops: merge(ops),
            needed,
        })
    }

    /// Bytes of sample data (after the message id) an encoding needs.
    pub fn needed_len(&self) -> usize {
        self.needed
    }

    /// Writes the CDR encoding (encapsulation header included) of one sample's data (the
    /// data message after its message id) into `out`, which is cleared first. Allocates
    /// nothing once `out` has grown to a sample's size.
    pub fn encode(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), ShortSample> {
        self.serialise::<true>(data, out, write_string)
    }

    /// The walk both serialisations share, over the steps [`compile`](Self::compile) planned:
    /// `CDR` adds the encapsulation header, aligns each value to its size and writes ROS 2's
    /// member of an empty message; otherwise values are packed and an empty message is
    /// nothing (ROS 1). `string` writes a `char[n]` field's text (up to its first NUL).
    pub(super) fn serialise<const CDR: bool>(
        &self,
        data: &[u8],
        out: &mut Vec<u8>,
        string: fn(&mut Vec<u8>, &[u8]),
    ) -> Result<(), ShortSample> {
        if data.len() < self.needed {
            return Err(ShortSample {
                got: data.len(),
                needed: self.needed,
            });
        }
        out.clear();
        if CDR {
            out.extend_from_slice(&CDR_LE);
        }
        for op in &self.ops {
            match *op {
                Op::Copy {
                    offset,
                    size,
                    count,
                } => {
                    if CDR {
                        align(out, size);
                    }
                    out.extend_from_slice(&data[offset..offset + size * count]);
                }
                Op::Bool { offset, count } => {
                    out.extend(data[offset..offset + count].iter().map(|&b| (b != 0) as u8))
                }
                Op::Str { offset, len } => {
                    let bytes = &data[offset..offset + len];
                    let text = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(len)];
                    string(out, text);
                }
                Op::Empty => {
                    if CDR {
                        out.push(0)
                    }
                }
            }
        }
        Ok(())
    }
}

/// `px4_ulog/msg/` and `format` in CamelCase.
pub fn type_name(format: &str) -> String {
    format!("{PACKAGE}/msg/{}", camel_case(format))
}

/// `vehicle_attitude` → `VehicleAttitude`; a name that does not begin with a letter gets `T`
/// in front.
fn camel_case(format: &str) -> String {
    let mut out = String::with_capacity(format.len());
    for part in format.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, 'T');
    }
    out
}

/// The ROS 2 field name for a ULog field `name`: what ROS 2's grammar allows
/// (`[a-z](_?[a-z0-9]+)*`): letters lowered, any other character an underscore, runs of
/// underscores made one, none at either end, `f` in front of a name that does not begin with
/// a letter (`f_2d`), `f` alone for a name with nothing left.
pub fn field_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    if out.ends_with('_') {
        out.pop();
    }
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, if out.is_empty() { "f" } else { "f_" });
    }
    out
}

fn basic_type(ty: BasicType) -> &'static str {
    match ty {
        BasicType::Int8 => "int8",
        BasicType::UInt8 | BasicType::Char => "uint8",
        BasicType::Int16 => "int16",
        BasicType::UInt16 => "uint16",
        BasicType::Int32 => "int32",
        BasicType::UInt32 => "uint32",
        BasicType::Int64 => "int64",
        BasicType::UInt64 => "uint64",
        BasicType::Float => "float32",
        BasicType::Double => "float64",
        BasicType::Bool => "bool",
    }
}

/// The schema text of `name` (compiled already, so every nested format exists and none
/// recurses).
fn schema(name: &str, formats: &Formats) -> String {
    let mut text = String::new();
    definition(&formats[name], &mut text);
    // Nested types, each once, in the order they are first met (depth first).
    let mut done: Vec<&str> = vec![name];
    let mut pending: Vec<&str> = nested_of(&formats[name]);
    pending.reverse();
    while let Some(inner) = pending.pop() {
        if done.contains(&inner) {
            continue;
        }
        done.push(inner);
        text.push_str(SEPARATOR);
        text.push('\n');
        text.push_str(&format!("MSG: {PACKAGE}/{}\n", camel_case(inner)));
        definition(&formats[inner], &mut text);
        let mut more = nested_of(&formats[inner]);
        more.reverse();
        pending.extend(more);
    }
    text
}

/// The formats `def` nests, in field order.
fn nested_of(def: &FormatDef) -> Vec<&str> {
    def.fields
        .iter()
        .filter(|f| !f.is_padding())
        .filter_map(|f| match &f.ty {
            FieldType::Nested(n) => Some(n.as_str()),
            FieldType::Basic(_) => None,
        })
        .collect()
}

/// One type's lines.
fn definition(def: &FormatDef, text: &mut String) {
    let mut any = false;
    let mut names: Vec<String> = Vec::new();
    for field in def.fields.iter().filter(|f| !f.is_padding()) {
        any = true;
        let ty = match (&field.ty, field.array_len) {
            (FieldType::Basic(BasicType::Char), Some(_)) => "string".to_owned(),
            (FieldType::Basic(b), Some(n)) => format!("{}[{n}]", basic_type(*b)),
            (FieldType::Basic(b), None) => basic_type(*b).to_owned(),
            (FieldType::Nested(inner), Some(n)) => {
                format!("{PACKAGE}/{}[{n}]", camel_case(inner))
            }
            (FieldType::Nested(inner), None) => format!("{PACKAGE}/{}", camel_case(inner)),
        };
        let base = field_name(&field.name);
        let mut name = base.clone();
        let mut n = 1;
        while names.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        text.push_str(&format!("{ty} {name}\n"));
        names.push(name);
    }
    if !any {
        text.push_str("uint8 structure_needs_at_least_one_member\n");
    }
}

/// Bytes of one `type` value in a sample (nested formats whole, padding included).
fn size_of(ty: &FieldType, formats: &Formats) -> Result<usize, SchemaError> {
    Ok(match ty {
        FieldType::Basic(b) => b.size(),
        FieldType::Nested(inner) => Layout::sample_sizes(inner, formats)?.1,
    })
}

/// The encoding steps of format `name` at `base` in the sample.
fn plan(name: &str, formats: &Formats, base: usize, ops: &mut Vec<Op>) -> Result<(), SchemaError> {
    let def = &formats[name];
    let mut offset = base;
    let mut any = false;
    for field in &def.fields {
        let count = field.array_len.unwrap_or(1);
        let size = size_of(&field.ty, formats)?;
        if !field.is_padding() {
            any = true;
            match (&field.ty, field.array_len) {
                (FieldType::Basic(BasicType::Char), Some(len)) => ops.push(Op::Str { offset, len }),
                (FieldType::Basic(BasicType::Bool), _) => ops.push(Op::Bool { offset, count }),
                (FieldType::Basic(b), _) => ops.push(Op::Copy {
                    offset,
                    size: b.size(),
                    count,
                }),
                (FieldType::Nested(inner), _) => {
                    for i in 0..count {
                        plan(inner, formats, offset + i * size, ops)?;
                    }
                }
            }
        }
        offset += size * count;
    }
    if !any {
        ops.push(Op::Empty);
    }
    Ok(())
}

/// Joins steps that copy values of one size lying back to back in the sample.
fn merge(ops: Vec<Op>) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::with_capacity(ops.len());
    for op in ops {
        match (out.last_mut(), op) {
            (
                Some(Op::Copy {
                    offset: o1,
                    size: s1,
                    count: c1,
                }),
                Op::Copy {
                    offset: o2,
                    size: s2,
                    count: c2,
                },
            ) if *s1 == s2 && *o1 + *s1 * *c1 == o2 => *c1 += c2,
            (
                Some(Op::Bool {
                    offset: o1,
                    count: c1,
                }),
                Op::Bool {
                    offset: o2,
                    count: c2,
                },
            ) if *o1 + *c1 == o2 => *c1 += c2,
            _ => out.push(op),
        }
    }
    out
}

/// Pads `out` to a multiple of `size` counted from the end of the encapsulation header.
pub(crate) fn align(out: &mut Vec<u8>, size: usize) {
    let at = out.len() - CDR_LE.len();
    let pad = (size - at % size) % size;
    out.resize(out.len() + pad, 0);
}

/// A CDR string: its length with the NUL (uint32), its bytes, the NUL.
pub(crate) fn write_string(out: &mut Vec<u8>, text: &[u8]) {
    align(out, 4);
    out.extend_from_slice(&(text.len() as u32 + 1).to_le_bytes());
    if std::str::from_utf8(text).is_ok() {
        out.extend_from_slice(text);
    } else {
        out.extend(text.iter().map(|&b| if b.is_ascii() { b } else { b'?' }));
    }
    out.push(0);
}

/// One type of a `ros2msg` schema: its full name, its own definition (without those of its
/// dependencies) and the full names of the types its fields use, in order, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeDefinition {
    /// `px4_ulog/msg/EscReport`, `builtin_interfaces/msg/Time`.
    pub name: String,
    pub text: String,
    pub dependencies: Vec<String>,
}

/// The types of the schema `schema` of type `name` (a [`Ros2Type`]'s, or [`LOG_SCHEMA`]): the
/// main one first, then each nested one as the schema lists it (behind its `MSG:` header).
pub fn schema_definitions(name: &str, schema: &str) -> Vec<TypeDefinition> {
    let separator = format!("{SEPARATOR}\n");
    schema
        .split(separator.as_str())
        .enumerate()
        .map(|(k, part)| {
            let (name, text) = match (k, part.split_once('\n')) {
                (0, _) | (_, None) => (name.to_owned(), part),
                (_, Some((header, rest))) => {
                    let short = header.strip_prefix("MSG: ").unwrap_or(header);
                    (full_type_name(short), rest)
                }
            };
            let mut dependencies: Vec<String> = Vec::new();
            for line in text.lines() {
                let Some((ty, field)) = line.split_once(' ') else {
                    continue;
                };
                let ty = ty.split('[').next().unwrap_or(ty);
                // A constant (`byte DEBUG=10`) uses a basic type.
                if ty.contains('/') && !field.contains('=') {
                    let full = full_type_name(ty);
                    if !dependencies.contains(&full) {
                        dependencies.push(full);
                    }
                }
            }
            TypeDefinition {
                name,
                text: text.to_owned(),
                dependencies,
            }
        })
        .collect()
}

/// `pkg/msg/Name` for a field's `pkg/Name` (and as it is when it says `msg` already).
fn full_type_name(short: &str) -> String {
    match short.split_once('/') {
        Some((package, rest)) if !rest.contains('/') => format!("{package}/msg/{rest}"),
        _ => short.to_owned(),
    }
}

/// The schema name of logged strings.
pub const LOG_TYPE: &str = "rcl_interfaces/msg/Log";

/// The `ros2msg` text of `rcl_interfaces/msg/Log` with its dependency, as ROS 2 defines it.
pub const LOG_SCHEMA: &str = "\
byte DEBUG=10
byte INFO=20
byte WARN=30
byte ERROR=40
byte FATAL=50
builtin_interfaces/Time stamp
uint8 level
string name
string msg
string file
string function
uint32 line
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
";

/// The `rcl_interfaces/msg/Log` level of a ULog log level: the syslog digit as PX4 writes it
/// (`'0'` emergency … `'7'` debug), or its value.
pub fn log_level(ulog_level: u8) -> u8 {
    match crate::ulog::message::syslog_level(ulog_level) {
        0..=2 => 50,
        3 => 40,
        4 => 30,
        5 | 6 => 20,
        _ => 10,
    }
}

/// Writes a logged string as `rcl_interfaces/msg/Log` CDR into `out` (cleared first):
/// `timestamp_us` (µs since boot) as the stamp, the ULog level mapped by [`log_level`],
/// `name` (the logger: `px4`, or `px4/TAG` for a tagged string), `text` (bytes that are not
/// UTF-8 become `?`).
pub fn encode_log(timestamp_us: u64, ulog_level: u8, name: &str, text: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&CDR_LE);
    let sec = (timestamp_us / 1_000_000).min(i32::MAX as u64) as i32;
    let nanosec = ((timestamp_us % 1_000_000) * 1000) as u32;
    out.extend_from_slice(&sec.to_le_bytes());
    out.extend_from_slice(&nanosec.to_le_bytes());
    out.push(log_level(ulog_level));
    write_string(out, name.as_bytes());
    write_string(out, text);
    write_string(out, b"");
    write_string(out, b"");
    align(out, 4);
    out.extend_from_slice(&0u32.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_splits_into_its_types_with_their_direct_dependencies() {
        let f = formats(&[
            "outer:uint64_t timestamp;inner[2] a;leaf b;",
            "inner:leaf x;float y;",
            "leaf:uint8_t z;",
        ]);
        let ty = Ros2Type::compile("outer", &f).unwrap();
        let defs = schema_definitions(&ty.name, &ty.schema);
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "px4_ulog/msg/Outer",
                "px4_ulog/msg/Inner",
                "px4_ulog/msg/Leaf"
            ]
        );
        assert_eq!(
            defs[0].dependencies,
            ["px4_ulog/msg/Inner", "px4_ulog/msg/Leaf"]
        );
        assert_eq!(defs[1].dependencies, ["px4_ulog/msg/Leaf"]);
        assert!(defs[2].dependencies.is_empty());
        assert_eq!(defs[1].text, "px4_ulog/Leaf x\nfloat32 y\n");
        let log = schema_definitions(LOG_TYPE, LOG_SCHEMA);
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].dependencies, ["builtin_interfaces/msg/Time"]);
        assert_eq!(log[1].name, "builtin_interfaces/msg/Time");
        assert_eq!(log[1].text, "int32 sec\nuint32 nanosec\n");
    }

    fn formats(defs: &[&str]) -> Formats {
        crate::ulog::format::parse_formats(defs.iter().copied()).unwrap()
    }

    #[test]
    fn the_schema_names_types_as_ros2_does_and_defines_nested_ones_once() {
        let f = formats(&[
            "outer_thing:uint64_t timestamp;inner[2] arr;char[5] label;bool ok;\
             inner solo;uint8_t[3] _padding0;",
            "inner:float x;uint8_t[2] _padding0;int16_t y;deep d;",
            "deep:double[2] v;",
        ]);
        let t = Ros2Type::compile("outer_thing", &f).unwrap();
        assert_eq!(t.name, "px4_ulog/msg/OuterThing");
        assert_eq!(
            t.schema,
            format!(
                "uint64 timestamp\npx4_ulog/Inner[2] arr\nstring label\nbool ok\n\
                 px4_ulog/Inner solo\n{SEPARATOR}\nMSG: px4_ulog/Inner\nfloat32 x\nint16 y\n\
                 px4_ulog/Deep d\n{SEPARATOR}\nMSG: px4_ulog/Deep\nfloat64[2] v\n"
            )
        );
    }

    #[test]
    fn cdr_aligns_each_value_to_its_size_after_the_header() {
        // uint8 a; (pad 3) uint32 b; string "hi"; (pad to 8) float64 c; bool d
        let f = formats(&["t:uint8_t a;uint32_t b;char[4] s;double c;bool d;"]);
        let t = Ros2Type::compile("t", &f).unwrap();
        let mut data = vec![7u8];
        data.extend(0x0102_0304u32.to_le_bytes());
        data.extend(b"hi\0\0");
        data.extend(1.5f64.to_le_bytes());
        data.push(9);
        let mut out = Vec::new();
        t.encode(&data, &mut out).unwrap();
        let mut want = vec![0, 1, 0, 0, 7, 0, 0, 0];
        want.extend(0x0102_0304u32.to_le_bytes());
        want.extend(3u32.to_le_bytes());
        want.extend(b"hi\0");
        want.push(0); // offset 15 → 16
        want.extend(1.5f64.to_le_bytes());
        want.push(1);
        assert_eq!(out, want);
    }

    #[test]
    fn a_short_sample_is_refused_and_trailing_padding_is_not_needed() {
        let f = formats(&["t:uint64_t timestamp;uint8_t a;uint8_t[7] _padding0;"]);
        let t = Ros2Type::compile("t", &f).unwrap();
        assert_eq!(t.needed_len(), 9);
        let mut out = Vec::new();
        assert!(t.encode(&[0; 9], &mut out).is_ok());
        assert_eq!(
            t.encode(&[0; 8], &mut out),
            Err(ShortSample { got: 8, needed: 9 })
        );
    }

    #[test]
    fn odd_names_and_empty_formats_still_make_valid_types() {
        let f = formats(&["9lives:uint8_t[2] _padding0;", "x:9lives e;float 2d;"]);
        let t = Ros2Type::compile("x", &f).unwrap();
        assert_eq!(t.name, "px4_ulog/msg/X");
        assert!(t.schema.starts_with("px4_ulog/T9lives e\nfloat32 f_2d\n"));
        assert!(
            t.schema
                .ends_with("MSG: px4_ulog/T9lives\nuint8 structure_needs_at_least_one_member\n")
        );
        let mut out = Vec::new();
        t.encode(&[0, 0, 0, 0, 0x80, 0x3f], &mut out).unwrap();
        // The empty member, then the float aligned to 4.
        assert_eq!(out, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f]);
    }

    #[test]
    fn field_names_follow_ros2s_grammar_and_stay_distinct() {
        for (ulog, ros2) in [
            ("timestamp", "timestamp"),
            ("voltage5V_v", "voltage5v_v"),
            ("2d", "f_2d"),
            ("_x__y_", "x_y"),
            ("__", "f"),
            ("a.b", "a_b"),
        ] {
            assert_eq!(field_name(ulog), ros2);
        }
        let f = formats(&["t:float aB;float ab;float a_b;float a__b;"]);
        let t = Ros2Type::compile("t", &f).unwrap();
        assert_eq!(
            t.schema,
            "float32 ab\nfloat32 ab_2\nfloat32 a_b\nfloat32 a_b_2\n"
        );
    }

    #[test]
    fn log_levels_map_from_the_syslog_digit() {
        let levels: Vec<u8> = (b'0'..=b'7').map(log_level).collect();
        assert_eq!(levels, [50, 50, 50, 40, 30, 20, 20, 10]);
        assert_eq!(log_level(3), 40);
    }

    #[test]
    fn recursion_is_refused() {
        let f = formats(&["a:b x;", "b:a y;"]);
        assert!(Ros2Type::compile("a", &f).is_err());
    }

    #[test]
    fn encoding_reuses_its_buffer() {
        let f = formats(&["t:uint64_t timestamp;float[4] q;char[8] s;"]);
        let t = Ros2Type::compile("t", &f).unwrap();
        let mut out = Vec::new();
        let data = [1u8; 32];
        t.encode(&data, &mut out).unwrap();
        let (cap, ptr) = (out.capacity(), out.as_ptr());
        for _ in 0..100 {
            t.encode(&data, &mut out).unwrap();
        }
        assert_eq!((out.capacity(), out.as_ptr()), (cap, ptr));
    }
}
