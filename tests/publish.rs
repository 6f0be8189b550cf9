//! Samples rendered as JSON for the live socket hold pyulog's values: the first and last
//! sample of every dataset of every log, flattened back to pyulog's names (`q[2]`,
//! `esc[1].esc_rpm`, `char[n]` as character codes, booleans as 0/1), equal `NAME.expected.json`
//! less padding.

mod common;

use std::collections::BTreeMap;

use common::{all_logs, compare, expected_for};
use serde_json::{Map, Value as Json};
use ulog_recv::publish::JsonShape;
use ulog_recv::ulog::{BasicType, Decoder, Reader};

/// Flattens our nested JSON into pyulog's field names. Strings become character codes, padded
/// with zeros to the array length `char_len(name)`.
fn flatten(prefix: &str, v: &Json, char_len: &dyn Fn(&str) -> usize, out: &mut Map<String, Json>) {
    match v {
        Json::Object(m) => {
            for (k, x) in m {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, x, char_len, out);
            }
        }
        Json::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), x, char_len, out);
            }
        }
        Json::String(s) => {
            let mut bytes = s.as_bytes().to_vec();
            bytes.resize(char_len(prefix), 0);
            for (i, b) in bytes.iter().enumerate() {
                out.insert(format!("{prefix}[{i}]"), Json::from(*b));
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

#[test]
fn rendered_samples_hold_pyulogs_values() {
    for path in all_logs() {
        let bytes = std::fs::read(&path).unwrap();
        let expected = expected_for(&path);
        let mut reader = Reader::new();
        let mut decoder = Decoder::new();
        reader.push(&bytes);
        reader.finish();
        // Per message id: first and last rendering, flattened.
        let mut rows: BTreeMap<(String, u8), (Json, Json)> = BTreeMap::new();
        let mut shapes: BTreeMap<String, JsonShape> = BTreeMap::new();
        while let Some(r) = reader.next_record() {
            let Ok(r) = r else { continue };
            let Ok(Some(sample)) = decoder.handle(&r.message) else {
                continue;
            };
            let shape = shapes
                .entry(sample.name().to_owned())
                .or_insert_with(|| JsonShape::new(sample.layout));
            let rendered = Json::Object(shape.render(&sample));
            let char_len = |name: &str| {
                sample
                    .layout
                    .fields
                    .iter()
                    .filter(|f| f.ty == BasicType::Char && f.name.starts_with(&format!("{name}[")))
                    .count()
            };
            let mut flat = Map::new();
            flatten("", &rendered, &char_len, &mut flat);
            let row = Json::Object(flat);
            rows.entry((sample.name().to_owned(), sample.multi_id))
                .and_modify(|e| e.1 = row.clone())
                .or_insert((row.clone(), row));
        }
        let mut diffs = Vec::new();
        for ds in expected["datasets"].as_array().unwrap() {
            let key = (
                ds["name"].as_str().unwrap().to_owned(),
                ds["multi_id"].as_u64().unwrap() as u8,
            );
            let Some((first, last)) = rows.get(&key) else {
                diffs.push(format!("{key:?}: missing"));
                continue;
            };
            for (which, ours, theirs) in
                [("first", first, &ds["first"]), ("last", last, &ds["last"])]
            {
                // Padding is not published; NaN and infinities are null in JSON.
                let mut theirs = theirs.as_object().unwrap().clone();
                theirs.retain(|k, _| !k.contains("_padding"));
                let mut ours = ours.as_object().unwrap().clone();
                for (k, v) in ours.iter_mut() {
                    // We publish booleans as JSON booleans; pyulog's dump has 0 and 1.
                    if let Some(b) = v.as_bool() {
                        *v = Json::from(b as u8);
                    }
                    if v.is_null()
                        && let Some(t) = theirs.get(k)
                        && matches!(t.as_str(), Some("nan" | "inf" | "-inf"))
                    {
                        *v = t.clone();
                    }
                }
                compare(
                    &format!("{}:{key:?}.{which}", path.display()),
                    &Json::Object(ours),
                    &Json::Object(theirs),
                    false,
                    &mut diffs,
                );
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }
}
