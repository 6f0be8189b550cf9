//! An ArduPilot (DataFlash) message as a JSON object, the form both live servers publish it
//! in: its FMT labels as keys, in order, each value read and scaled as ArduPilot's tools show
//! it ([`crate::dataflash::values`]); and the JSON Schema of a message type, for the
//! Foxglove server's channels.

use serde_json::{Value as Json, json};

use crate::dataflash::format::Format;
use crate::dataflash::values::{Value, fields};
use crate::ulog;

/// How a DataFlash topic's fields are written: each label quoted once, with its character.
#[derive(Debug)]
pub struct BinShape {
    format: Format,
    keys: Vec<Vec<u8>>,
}

impl BinShape {
    pub fn new(format: &Format) -> Self {
        let keys = format
            .labels
            .iter()
            .map(|l| {
                let mut k = serde_json::to_vec(l).expect("a string serialises");
                k.push(b':');
                k
            })
            .collect();
        Self {
            format: format.clone(),
            keys,
        }
    }

    /// Appends the message's fields as one JSON object.
    pub fn write(&self, message: &[u8], out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, ((_, _, value), key)) in fields(&self.format, message).zip(&self.keys).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            write_bin_value(value, out);
        }
        out.push(b'}');
    }
}

/// One field's value as JSON: numbers as the ULog side writes them, texts as strings, `a`
/// fields as arrays.
fn write_bin_value(value: Value<'_>, out: &mut Vec<u8>) {
    use crate::live::ndjson::sample_json::write_value;
    match value {
        Value::Int(v) => write_value(ulog::Value::I64(v), out),
        Value::UInt(v) => write_value(ulog::Value::U64(v), out),
        Value::F32(v) => write_value(ulog::Value::F32(v), out),
        Value::F64(v) => write_value(ulog::Value::F64(v), out),
        Value::Text(t) => serde_json::to_writer(&mut *out, &String::from_utf8_lossy(t))
            .expect("writing to a Vec cannot fail"),
        Value::Int16s(raw) => {
            out.push(b'[');
            for (i, pair) in raw.chunks_exact(2).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let v = i16::from_le_bytes([pair[0], pair[1]]);
                write_value(ulog::Value::I16(v), out);
            }
            out.push(b']');
        }
    }
}

/// A field character's type as the catalogue names it (what the line carries: scaled
/// integers are published as `double`).
pub fn type_name(c: u8) -> &'static str {
    match c {
        b'b' => "int8_t",
        b'B' | b'M' => "uint8_t",
        b'h' => "int16_t",
        b'H' => "uint16_t",
        b'i' => "int32_t",
        b'I' => "uint32_t",
        b'q' => "int64_t",
        b'Q' => "uint64_t",
        b'f' => "float",
        b'd' | b'c' | b'C' | b'e' | b'E' | b'L' => "double",
        b'n' => "char[4]",
        b'N' => "char[16]",
        b'Z' => "char[64]",
        b'a' => "int16_t[32]",
        _ => "unknown",
    }
}

/// The JSON Schema of `format`'s messages as [`BinShape`] writes them.
pub fn json_schema(format: &Format) -> String {
    let properties: serde_json::Map<String, Json> = format
        .format
        .bytes()
        .zip(&format.labels)
        .map(|(c, label)| {
            let ty = match c {
                b'n' | b'N' | b'Z' => json!({"type": "string"}),
                b'a' => json!({"type": "array", "items": {"type": "integer"}}),
                b'f' | b'd' | b'c' | b'C' | b'e' | b'E' | b'L' => json!({"type": "number"}),
                _ => json!({"type": "integer"}),
            };
            (label.clone(), ty)
        })
        .collect();
    json!({"title": format.name, "type": "object", "properties": properties}).to_string()
}
