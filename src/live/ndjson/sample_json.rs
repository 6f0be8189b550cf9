//! Samples as JSON objects, the shape the live socket publishes (sans-IO): field names as in
//! the format, arrays as JSON arrays, `char[n]` as strings (up to the first NUL), nested formats
//! as objects, padding left out. NaN and infinities, which JSON cannot hold, become `null`;
//! `float` fields are written in the shortest form that reads back as the same `float`
//! (`0.1`, not `0.10000000149011612`).
//!
//! A [`JsonShape`] is compiled once per [`Layout`] from its flattened field names (`q[2]`,
//! `esc[1].esc_rpm`), with every key already quoted, and then writes every sample of that
//! layout straight into a byte buffer: no map, no per-field allocation.

use crate::ulog::{BasicType, Layout, Sample, Value};

/// How a layout's fields nest; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonShape {
    root: Vec<(Key, Node)>,
}

/// A field name and its JSON form (`"name":`), ready to copy.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    name: String,
    quoted: Vec<u8>,
}

impl Key {
    fn new(name: &str) -> Self {
        let mut quoted = serde_json::to_vec(name).expect("a string serialises");
        quoted.push(b':');
        Self {
            name: name.to_owned(),
            quoted,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// Index of a field in `Layout::fields`.
    Value(usize),
    /// A `char[n]` array: its fields in order.
    Text(Vec<usize>),
    Array(Vec<Node>),
    Object(Vec<(Key, Node)>),
}

/// One step of a flattened field name: `esc[1]` is ("esc", Some(1)).
pub(crate) fn segments(name: &str) -> Vec<(&str, Option<usize>)> {
    name.split('.')
        .map(|seg| match seg.split_once('[') {
            Some((base, rest)) => (base, rest.trim_end_matches(']').parse().ok()),
            None => (seg, None),
        })
        .collect()
}

fn insert(
    children: &mut Vec<(Key, Node)>,
    path: &[(&str, Option<usize>)],
    field: usize,
    text: bool,
) {
    let Some(&(name, index)) = path.first() else {
        return;
    };
    let rest = &path[1..];
    let pos = match children.iter().position(|(k, _)| k.name == name) {
        Some(p) => p,
        None => {
            let node = match (index, rest.is_empty(), text) {
                (Some(_), true, true) => Node::Text(Vec::new()),
                (Some(_), _, _) => Node::Array(Vec::new()),
                (None, true, _) => Node::Value(field),
                (None, false, _) => Node::Object(Vec::new()),
            };
            children.push((Key::new(name), node));
            children.len() - 1
        }
    };
    match (&mut children[pos].1, index) {
        (Node::Text(fields), Some(_)) => fields.push(field),
        (Node::Array(items), Some(i)) => {
            while items.len() <= i {
                items.push(Node::Object(Vec::new()));
            }
            if rest.is_empty() {
                items[i] = Node::Value(field);
            } else if let Node::Object(c) = &mut items[i] {
                insert(c, rest, field, text);
            }
        }
        (Node::Object(c), None) => insert(c, rest, field, text),
        _ => {}
    }
}

impl JsonShape {
    /// Compiles the shape of `layout` (padding fields are left out).
    pub fn new(layout: &Layout) -> Self {
        let mut root = Vec::new();
        for (i, f) in layout.visible_fields() {
            let path = segments(layout.field_name(i));
            insert(&mut root, &path, i, f.ty == BasicType::Char);
        }
        Self { root }
    }

    /// Appends the sample's fields to `out` as one JSON object.
    ///
    /// Contract: `sample` is of the layout this shape was compiled from.
    pub fn write(&self, sample: &Sample<'_>, out: &mut Vec<u8>) {
        write_object(&self.root, sample, out);
    }

    /// The sample's fields as a parsed JSON object (for tests and one-off use; the socket
    /// uses [`write`](Self::write)).
    pub fn render(&self, sample: &Sample<'_>) -> serde_json::Map<String, serde_json::Value> {
        let mut out = Vec::new();
        self.write(sample, &mut out);
        serde_json::from_slice(&out).expect("the shape writes valid JSON")
    }
}

fn write_object(children: &[(Key, Node)], sample: &Sample<'_>, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (key, node)) in children.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&key.quoted);
        write_node(node, sample, out);
    }
    out.push(b'}');
}

fn write_node(node: &Node, sample: &Sample<'_>, out: &mut Vec<u8>) {
    match node {
        Node::Value(i) => write_value(sample.value(*i), out),
        Node::Text(fields) => {
            let bytes: Vec<u8> = fields
                .iter()
                .map(|&i| sample.data[sample.layout.fields[i].offset])
                .take_while(|&b| b != 0)
                .collect();
            serde_json::to_writer(&mut *out, &String::from_utf8_lossy(&bytes))
                .expect("writing to a Vec cannot fail");
        }
        Node::Array(items) => {
            out.push(b'[');
            for (i, n) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_node(n, sample, out);
            }
            out.push(b']');
        }
        Node::Object(children) => write_object(children, sample, out),
    }
}

/// Writes one value as a JSON number (booleans as `true`/`false`, NaN and infinities as
/// `null`).
pub fn write_value(value: Value, out: &mut Vec<u8>) {
    let mut int = itoa::Buffer::new();
    match value {
        Value::F32(v) if v.is_finite() => {
            out.extend_from_slice(zmij::Buffer::new().format_finite(v).as_bytes())
        }
        Value::F64(v) if v.is_finite() => {
            out.extend_from_slice(zmij::Buffer::new().format_finite(v).as_bytes())
        }
        Value::F32(_) | Value::F64(_) => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if b != 0 { b"true" } else { b"false" }),
        Value::I8(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::I16(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::I32(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::I64(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::U8(v) | Value::Char(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::U16(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::U32(v) => out.extend_from_slice(int.format(v).as_bytes()),
        Value::U64(v) => out.extend_from_slice(int.format(v).as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(v: Value) -> String {
        let mut out = Vec::new();
        write_value(v, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn values_are_written_as_json_that_reads_back_the_same() {
        assert_eq!(written(Value::F32(0.1)), "0.1");
        assert_eq!(written(Value::F32(f32::NAN)), "null");
        assert_eq!(written(Value::F64(f64::NEG_INFINITY)), "null");
        assert_eq!(written(Value::Bool(1)), "true");
        assert_eq!(written(Value::I8(-128)), "-128");
        assert_eq!(written(Value::U64(u64::MAX)), u64::MAX.to_string());
        for v in [1e30f32, -3.4028235e38, 1.0e-45, 0.0, -0.0, 123456.79] {
            let s = written(Value::F32(v));
            let back: f64 = serde_json::from_str(&s).unwrap();
            assert_eq!((back as f32).to_bits(), v.to_bits(), "{v} written as {s}");
        }
    }
}
