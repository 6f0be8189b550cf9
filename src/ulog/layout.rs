//! The format compiler: turns a format and the formats it nests into a flat [`Layout`], the
//! list of basic-typed leaf fields with their byte offsets. A layout is compiled once per
//! format and shared by every subscription that uses it (the reader compiles it and the decoder
//! borrows it).
//!
//! Leaf names, flattened the way pyulog flattens them (`q[0]`, `outer.inner`, `arr[1].x`), are
//! built only when a caller first asks for one ([`Layout::field_name`]): decoding and sizing
//! samples never need them, and building one string per leaf was most of a small log's cost.

use std::sync::{Arc, OnceLock};

use crate::ulog::format::{FieldType, FormatDef, Formats};
use crate::ulog::types::BasicType;

/// Deepest nesting accepted (PX4 uses two or three levels).
pub const MAX_NESTING: usize = 16;
/// Largest layout accepted: a data message cannot carry more.
pub const MAX_LAYOUT_SIZE: usize = u16::MAX as usize;

/// One leaf field of a flattened format. Its name is [`Layout::field_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub ty: BasicType,
    /// Byte offset in the sample data (after the message id).
    pub offset: usize,
    /// Part of a `_padding…` field (at any nesting level).
    pub padding: bool,
}

impl Field {
    /// Its value in a sample's `data` (after the message id) as a double; `None` when the
    /// data ends before it.
    #[inline]
    pub fn value_in(&self, data: &[u8]) -> Option<f64> {
        data.get(self.offset..)
            .filter(|rest| rest.len() >= self.ty.size())
            .map(|rest| self.ty.read(rest).as_f64())
    }
}

/// The top-level `timestamp` field of a format, if it has one of an allowed type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampField {
    pub offset: usize,
    pub ty: BasicType,
    /// Microseconds per tick: 1, or 1000 for a `uint8_t` timestamp (milliseconds).
    pub unit_us: u64,
}

impl TimestampField {
    /// The timestamp's raw ticks in a sample's `data`, which holds at least the layout's
    /// `size` bytes (the timestamp is one of the unsigned types [`Layout::compile`] accepts).
    #[inline(always)]
    pub fn ticks(&self, data: &[u8]) -> u64 {
        let at = &data[self.offset..];
        match self.ty {
            BasicType::UInt64 => u64::from_le_bytes(at[..8].try_into().expect("8 bytes")),
            BasicType::UInt32 => u32::from_le_bytes(at[..4].try_into().expect("4 bytes")).into(),
            BasicType::UInt16 => u16::from_le_bytes(at[..2].try_into().expect("2 bytes")).into(),
            _ => at[0].into(),
        }
    }
}

/// A compiled format.
#[derive(Debug, Clone)]
pub struct Layout {
    pub name: String,
    /// All leaves in order, padding included except a trailing top-level padding (which PX4
    /// does not log): exactly pyulog's field list.
    pub fields: Vec<Field>,
    /// Bytes a sample must hold: up to the end of the last field in `fields`.
    pub size: usize,
    /// Bytes of the whole struct, trailing padding included (a sample may carry it).
    pub full_size: usize,
    pub timestamp: Option<TimestampField>,
    /// `fields` grouped into runs of one type laid out back to back (arrays, mostly): what
    /// [`crate::ulog::Sample::for_each_value`] walks, one type dispatch per run.
    pub runs: Vec<Run>,
    /// `runs` without the padding runs: what [`crate::ulog::Sample::for_each_visible_value`]
    /// walks.
    pub visible_runs: Vec<Run>,
    /// The formats this layout was compiled from (its own and every nested one): what names
    /// are built from.
    sources: Vec<Arc<FormatDef>>,
    /// The leaf names, built on first use.
    names: OnceLock<Vec<String>>,
}

/// Two layouts are equal when they describe the same fields; whether their names have been
/// built yet does not matter.
impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.fields == other.fields
            && self.size == other.size
            && self.full_size == other.full_size
            && self.timestamp == other.timestamp
            && self.runs == other.runs
            && self.sources == other.sources
    }
}

impl Eq for Layout {}

/// Consecutive fields of one type, each right after the previous one. Packed into 12 bytes
/// (a layout is at most [`MAX_LAYOUT_SIZE`] bytes, so offsets and counts fit 16 bits): the
/// walk over a sample reads one per type dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Index in [`Layout::fields`] of the first field.
    pub first_field: u32,
    /// Byte offset of the first field in the sample data.
    pub offset: u16,
    /// Number of fields; at least 1.
    pub len: u16,
    /// Byte offset just past the last field (`offset + len * ty.size()`): the walk slices the
    /// run's bytes without working it out per sample.
    pub end: u16,
    pub ty: BasicType,
    /// The fields are padding (a run never mixes padding and data).
    pub padding: bool,
}

impl Run {
    /// The run's bytes within a sample's data.
    #[inline(always)]
    pub fn byte_range(&self) -> std::ops::Range<usize> {
        self.offset as usize..self.end as usize
    }
}

/// Groups `fields` into [`Run`]s.
fn runs_of(fields: &[Field]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        match runs.last_mut() {
            Some(r)
                if r.ty == f.ty
                    && r.padding == f.padding
                    && r.byte_range().end == f.offset
                    && r.len < u16::MAX =>
            {
                r.len += 1;
                r.end += f.ty.size() as u16;
            }
            // Compilation bounds a layout to MAX_LAYOUT_SIZE bytes, so its fields (at least
            // one byte each) and their offsets fit 16 bits.
            _ => runs.push(Run {
                first_field: i as u32,
                offset: f.offset as u16,
                ty: f.ty,
                len: 1,
                end: (f.offset + f.ty.size()) as u16,
                padding: f.padding,
            }),
        }
    }
    runs
}

/// Why a format cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("format '{0}' is not defined")]
    UnknownFormat(String),
    #[error("format '{0}' contains itself")]
    Recursive(String),
    #[error("format '{0}' nests deeper than {MAX_NESTING} levels")]
    TooDeep(String),
    #[error("format '{0}' is larger than {MAX_LAYOUT_SIZE} bytes")]
    TooLarge(String),
}

impl Layout {
    /// Compiles the format `name`, resolving nested formats in `formats`.
    pub fn compile(name: &str, formats: &Formats) -> Result<Self, LayoutError> {
        // At least one leaf per top-level field: most formats need no reallocation.
        let mut fields = Vec::with_capacity(formats.get(name).map_or(0, |f| f.fields.len()));
        let mut sources = Vec::new();
        let mut walk = Walk {
            formats,
            stack: Vec::new(),
            fields: Some(&mut fields),
            names: None,
            sources: Some(&mut sources),
            timestamp: None,
            end_of_last_kept: 0,
            steps_left: MAX_LAYOUT_SIZE * 2,
        };
        let full_size = walk.flatten(name, "", 0, false)?;
        let (size, timestamp_index) = (walk.end_of_last_kept, walk.timestamp);
        // What follows the last kept leaf is top-level padding at the end: not logged.
        while fields.last().is_some_and(|f| f.offset >= size) {
            fields.pop();
        }
        let timestamp = timestamp_index.and_then(|i| {
            let f = fields[i];
            let unit_us = match f.ty {
                BasicType::UInt64 | BasicType::UInt32 | BasicType::UInt16 => 1,
                BasicType::UInt8 => 1000,
                _ => return None,
            };
            Some(TimestampField {
                offset: f.offset,
                ty: f.ty,
                unit_us,
            })
        });
        let runs = runs_of(&fields);
        Ok(Self {
            name: name.to_owned(),
            visible_runs: runs.iter().filter(|r| !r.padding).copied().collect(),
            runs,
            fields,
            size,
            full_size,
            timestamp,
            sources,
            names: OnceLock::new(),
        })
    }

    /// `(size, full_size)` of the format `name`, as [`compile`](Self::compile) would give
    /// them, without building the field list: what a framing check needs.
    pub fn sample_sizes(name: &str, formats: &Formats) -> Result<(usize, usize), LayoutError> {
        let mut walk = Walk {
            formats,
            stack: Vec::new(),
            fields: None,
            names: None,
            sources: None,
            timestamp: None,
            end_of_last_kept: 0,
            steps_left: MAX_LAYOUT_SIZE * 2,
        };
        let full_size = walk.flatten(name, "", 0, false)?;
        Ok((walk.end_of_last_kept, full_size))
    }

    /// The flattened name of leaf field `index` of [`fields`](Self::fields), e.g.
    /// `current.lat`, `q[2]`. The first call builds every name of the layout.
    pub fn field_name(&self, index: usize) -> &str {
        &self.field_names()[index]
    }

    /// The flattened names of all [`fields`](Self::fields), in order; built on first use.
    pub fn field_names(&self) -> &[String] {
        self.names.get_or_init(|| {
            let mut names = Vec::with_capacity(self.fields.len());
            let mut walk = Walk {
                formats: &self.sources[..],
                stack: Vec::new(),
                fields: None,
                names: Some(&mut names),
                sources: None,
                timestamp: None,
                end_of_last_kept: 0,
                steps_left: MAX_LAYOUT_SIZE * 2,
            };
            // The walk that compiled this layout succeeded on the same formats, and takes the
            // same path: it cannot fail, nor name fewer leaves (the fallback keeps a release
            // build from panicking should that ever be wrong).
            let walked = walk.flatten(&self.name, "", 0, false).is_ok();
            names.truncate(self.fields.len());
            debug_assert!(walked && names.len() == self.fields.len(), "{}", self.name);
            if !walked || names.len() < self.fields.len() {
                names = (0..self.fields.len())
                    .map(|i| format!("field{i}"))
                    .collect();
            }
            names
        })
    }

    /// Index in [`fields`](Self::fields) of the leaf named `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.field_names().iter().position(|n| n == name)
    }

    /// Every leaf with its name, in order, padding included.
    pub fn named_fields(&self) -> impl Iterator<Item = (&str, &Field)> {
        self.field_names()
            .iter()
            .map(String::as_str)
            .zip(&self.fields)
    }

    /// The fields a person wants to see: everything but padding.
    pub fn visible_fields(&self) -> impl Iterator<Item = (usize, &Field)> {
        self.fields.iter().enumerate().filter(|(_, f)| !f.padding)
    }

    /// True when `len` bytes of sample data fit this layout.
    #[inline]
    pub fn accepts_len(&self, len: usize) -> bool {
        len >= self.size && len <= self.full_size.max(self.size)
    }
}

/// Where a compilation looks formats up: a log's [`Formats`], or the few formats a layout
/// keeps for its names.
trait FormatLookup {
    fn find(&self, name: &str) -> Option<&Arc<FormatDef>>;
}

impl FormatLookup for Formats {
    fn find(&self, name: &str) -> Option<&Arc<FormatDef>> {
        self.get(name)
    }
}

impl FormatLookup for [Arc<FormatDef>] {
    fn find(&self, name: &str) -> Option<&Arc<FormatDef>> {
        self.iter().find(|f| f.name == name)
    }
}

/// `prefix` + `name`, then `[index]` for an array element (without `format!`, whose
/// machinery was a few percent of decoding a small log).
fn leaf_name(prefix: &str, name: &str, index: Option<usize>) -> String {
    let mut out = String::with_capacity(prefix.len() + name.len() + 8);
    out.push_str(prefix);
    out.push_str(name);
    if let Some(i) = index {
        out.push('[');
        out.push_str(itoa::Buffer::new().format(i));
        out.push(']');
    }
    out
}

/// State of one walk over a format: the formats, the nesting stack (for recursion checks),
/// what is wanted (leaves, their names, the formats used), and a step budget that bounds the
/// work even for empty nested formats in arrays. Every walk takes the same path, so the
/// leaves of one and the names of another line up.
struct Walk<'f, 'o, L: FormatLookup + ?Sized> {
    formats: &'f L,
    stack: Vec<&'f str>,
    /// Where the leaves go, when wanted.
    fields: Option<&'o mut Vec<Field>>,
    /// Where the leaves' names go, when wanted.
    names: Option<&'o mut Vec<String>>,
    /// Every format visited, once each, when wanted.
    sources: Option<&'o mut Vec<Arc<FormatDef>>>,
    /// Index of the leaf of the top-level, non-array `timestamp` field.
    timestamp: Option<usize>,
    /// End of the last leaf outside a top-level `_padding` field: the sample size.
    end_of_last_kept: usize,
    steps_left: usize,
}

impl<'f, L: FormatLookup + ?Sized> Walk<'f, '_, L> {
    /// Appends the leaves of format `name` at `base` offset under `prefix`; returns its size.
    fn flatten(
        &mut self,
        name: &str,
        prefix: &str,
        base: usize,
        in_padding: bool,
    ) -> Result<usize, LayoutError> {
        let def = self
            .formats
            .find(name)
            .ok_or_else(|| LayoutError::UnknownFormat(name.to_owned()))?;
        if self.stack.contains(&name) {
            return Err(LayoutError::Recursive(name.to_owned()));
        }
        if self.stack.len() >= MAX_NESTING {
            return Err(LayoutError::TooDeep(name.to_owned()));
        }
        if let Some(sources) = self.sources.as_deref_mut()
            && !sources.iter().any(|s| Arc::ptr_eq(s, def))
        {
            sources.push(def.clone());
        }
        self.stack.push(&def.name);
        let top_level = self.stack.len() == 1;
        let mut offset = base;
        let mut leaves = self.fields.as_deref().map_or(0, Vec::len);
        for field in &def.fields {
            let padding = in_padding || field.is_padding();
            // Top-level padding at the end is not logged; compile() drops it from the fields.
            let kept = !(top_level && field.is_padding());
            if top_level
                && field.array_len.is_none()
                && field.name == "timestamp"
                && matches!(field.ty, FieldType::Basic(_))
                && self.timestamp.is_none()
            {
                self.timestamp = Some(leaves);
            }
            for i in 0..field.array_len.unwrap_or(1) {
                if self.steps_left == 0 || offset > MAX_LAYOUT_SIZE {
                    return Err(LayoutError::TooLarge(self.stack[0].to_owned()));
                }
                self.steps_left -= 1;
                let leaf_name = match self.names {
                    None => String::new(),
                    Some(_) => leaf_name(prefix, &field.name, field.array_len.map(|_| i)),
                };
                match &field.ty {
                    FieldType::Basic(ty) => {
                        if let Some(out) = self.fields.as_deref_mut() {
                            out.push(Field {
                                ty: *ty,
                                offset,
                                padding,
                            });
                        }
                        if let Some(names) = self.names.as_deref_mut() {
                            names.push(leaf_name);
                        }
                        leaves += 1;
                        offset += ty.size();
                        if kept {
                            self.end_of_last_kept = offset;
                        }
                    }
                    FieldType::Nested(inner) => {
                        let mut inner_prefix = leaf_name;
                        if self.names.is_some() {
                            inner_prefix.push('.');
                        }
                        let before = self.end_of_last_kept;
                        offset += self.flatten(inner, &inner_prefix, offset, padding)?;
                        leaves = self.fields.as_deref().map_or(0, Vec::len);
                        if !kept {
                            self.end_of_last_kept = before;
                        }
                    }
                }
            }
        }
        if offset > MAX_LAYOUT_SIZE {
            return Err(LayoutError::TooLarge(self.stack[0].to_owned()));
        }
        self.stack.pop();
        Ok(offset - base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formats(defs: &[&str]) -> Formats {
        crate::ulog::format::parse_formats(defs.iter().copied()).unwrap()
    }

    #[test]
    fn flattens_like_pyulog() {
        let f = formats(&[
            "outer:uint64_t timestamp;inner[2] arr;uint8_t[3] _padding0;",
            "inner:float x;uint8_t[2] _padding0;int16_t y;",
        ]);
        let l = Layout::compile("outer", &f).unwrap();
        let names: Vec<&str> = l.field_names().iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "timestamp",
                "arr[0].x",
                "arr[0]._padding0[0]",
                "arr[0]._padding0[1]",
                "arr[0].y",
                "arr[1].x",
                "arr[1]._padding0[0]",
                "arr[1]._padding0[1]",
                "arr[1].y",
            ]
        );
        assert!(l.names.get().is_some());
        let fresh = Layout::compile("outer", &f).unwrap();
        assert!(
            fresh.names.get().is_none(),
            "names are built only when asked for"
        );
        assert_eq!(l.size, 8 + 2 * 8);
        assert_eq!(l.full_size, 8 + 2 * 8 + 3);
        assert_eq!(l.fields[8].offset, 8 + 8 + 6);
        assert_eq!(l.visible_fields().count(), 5);
        assert_eq!(l.timestamp.unwrap().offset, 0);
        assert_eq!(Layout::sample_sizes("outer", &f), Ok((l.size, l.full_size)));
        // timestamp | x | pad pad | y | x | pad pad | y: a new run at every change of type.
        let runs: Vec<(u32, u16, u16)> = l
            .runs
            .iter()
            .map(|r| (r.first_field, r.offset, r.len))
            .collect();
        assert_eq!(
            runs,
            [
                (0, 0, 1),
                (1, 8, 1),
                (2, 12, 2),
                (4, 14, 1),
                (5, 16, 1),
                (6, 20, 2),
                (8, 22, 1)
            ]
        );
    }

    #[test]
    fn rejects_recursion_unknown_and_huge() {
        let f = formats(&["a:b x;", "b:a y;"]);
        assert!(matches!(
            Layout::compile("a", &f),
            Err(LayoutError::Recursive(_))
        ));
        let f = formats(&["a:missing x;"]);
        assert_eq!(
            Layout::compile("a", &f),
            Err(LayoutError::UnknownFormat("missing".into()))
        );
        let f = formats(&["a:b[60000] x;", "b:double[60000] y;"]);
        assert!(matches!(
            Layout::compile("a", &f),
            Err(LayoutError::TooLarge(_))
        ));
        // Empty nested formats in big arrays must not take quadratic time.
        let f = formats(&["a:b[65535] x;", "b:c[65535] y;", "c:"]);
        assert!(matches!(
            Layout::compile("a", &f),
            Err(LayoutError::TooLarge(_))
        ));
    }

    #[test]
    fn narrow_timestamps_are_recognised() {
        let f = formats(&["t:uint8_t timestamp;float v;", "u:float timestamp;"]);
        let t = Layout::compile("t", &f).unwrap().timestamp.unwrap();
        assert_eq!((t.ty, t.unit_us), (BasicType::UInt8, 1000));
        assert_eq!(Layout::compile("u", &f).unwrap().timestamp, None);
    }
}
