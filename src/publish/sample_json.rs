//! Samples as JSON objects, the shape the live socket publishes (sans-IO): field names as in
//! the format, arrays as JSON arrays, `char[n]` as strings (up to the first NUL), nested formats
//! as objects, padding left out. NaN and infinities, which JSON cannot hold, become `null`.
//!
//! A [`JsonShape`] is compiled once per [`Layout`] from its flattened field names (`q[2]`,
//! `esc[1].esc_rpm`) and then renders every sample of that layout.

use serde_json::{Map, Value as Json};

use crate::ulog::{BasicType, Layout, Sample};

/// How a layout's fields nest; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonShape {
    root: Vec<(String, Node)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// Index of a field in `Layout::fields`.
    Value(usize),
    /// A `char[n]` array: its fields in order.
    Text(Vec<usize>),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// One step of a flattened field name: `esc[1]` is ("esc", Some(1)).
fn segments(name: &str) -> Vec<(&str, Option<usize>)> {
    name.split('.')
        .map(|seg| match seg.split_once('[') {
            Some((base, rest)) => (base, rest.trim_end_matches(']').parse().ok()),
            None => (seg, None),
        })
        .collect()
}

fn insert(
    children: &mut Vec<(String, Node)>,
    path: &[(&str, Option<usize>)],
    field: usize,
    text: bool,
) {
    let Some(&(name, index)) = path.first() else {
        return;
    };
    let rest = &path[1..];
    let pos = match children.iter().position(|(k, _)| k == name) {
        Some(p) => p,
        None => {
            let node = match (index, rest.is_empty(), text) {
                (Some(_), true, true) => Node::Text(Vec::new()),
                (Some(_), _, _) => Node::Array(Vec::new()),
                (None, true, _) => Node::Value(field),
                (None, false, _) => Node::Object(Vec::new()),
            };
            children.push((name.to_owned(), node));
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
            let path = segments(&f.name);
            insert(&mut root, &path, i, f.ty == BasicType::Char);
        }
        Self { root }
    }

    /// The sample's fields as a JSON object.
    pub fn render(&self, sample: &Sample<'_>) -> Map<String, Json> {
        render_object(&self.root, sample)
    }
}

fn render_object(children: &[(String, Node)], sample: &Sample<'_>) -> Map<String, Json> {
    children
        .iter()
        .map(|(k, n)| (k.clone(), render(n, sample)))
        .collect()
}

fn render(node: &Node, sample: &Sample<'_>) -> Json {
    match node {
        Node::Value(i) => sample.value(*i).to_json(),
        Node::Text(fields) => {
            let bytes: Vec<u8> = fields
                .iter()
                .map(|&i| sample.data[sample.layout.fields[i].offset])
                .take_while(|&b| b != 0)
                .collect();
            Json::String(String::from_utf8_lossy(&bytes).into_owned())
        }
        Node::Array(items) => Json::Array(items.iter().map(|n| render(n, sample)).collect()),
        Node::Object(children) => Json::Object(render_object(children, sample)),
    }
}
