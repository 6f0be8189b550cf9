//! Format definitions ('F' messages): `name:type field;type[n] field;…` parsed into
//! [`FormatDef`]. A field's type is a basic type or the name of another format (nested).

use std::collections::HashMap;
use std::sync::Arc;

use crate::ulog::types::BasicType;

/// The format definitions of a log by name, each parsed once and shared (by the reader, the
/// decoder and every layout compiled from them).
pub type Formats = HashMap<String, Arc<FormatDef>>;

/// Largest array length accepted in a format (a bigger one cannot fit in a message).
pub const MAX_ARRAY_LEN: usize = u16::MAX as usize;

/// The type of one field of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldType {
    Basic(BasicType),
    /// Another format, by name; it may be defined later in the log.
    Nested(String),
}

/// One field as written in a format message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDef {
    pub ty: FieldType,
    /// `Some(n)` for `type[n]`.
    pub array_len: Option<usize>,
    pub name: String,
}

impl FieldDef {
    /// True for the `_padding…` fields that only align the C struct.
    pub fn is_padding(&self) -> bool {
        self.name.starts_with("_padding")
    }

    /// The type as written in a format message, without the array suffix.
    pub fn type_name(&self) -> &str {
        match &self.ty {
            FieldType::Basic(b) => b.name(),
            FieldType::Nested(n) => n,
        }
    }
}

/// A parsed 'F' message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatDef {
    pub name: String,
    pub fields: Vec<FieldDef>,
}

/// Parses the texts of 'F' messages into [`Formats`] (a later definition of a name replaces
/// an earlier one, as in a log).
pub fn parse_formats<'t>(texts: impl IntoIterator<Item = &'t str>) -> Result<Formats, FormatError> {
    texts
        .into_iter()
        .map(|text| FormatDef::parse(text).map(|def| (def.name.clone(), Arc::new(def))))
        .collect()
}

/// Why a format message cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("format has no ':' separating its name from its fields")]
    NoColon,
    #[error("format name is empty or has a space")]
    BadName,
    #[error("field '{0}' is not of the form 'type name'")]
    BadField(String),
    #[error("field '{0}' has a bad array length")]
    BadArrayLen(String),
}

impl FormatDef {
    /// Parses the text of an 'F' message.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let (name, mut rest) = split_at_byte(text, b':').ok_or(FormatError::NoColon)?;
        if name.is_empty() || has_byte(name, b' ') {
            return Err(FormatError::BadName);
        }
        let mut fields = Vec::with_capacity(rest.bytes().filter(|&b| b == b';').count() + 1);
        while !rest.is_empty() {
            let (field, after) = split_at_byte(rest, b';').unwrap_or((rest, ""));
            if !field.is_empty() {
                fields.push(parse_field(field)?);
            }
            rest = after;
        }
        Ok(Self {
            name: name.to_owned(),
            fields,
        })
    }

    /// The format back as the text of an 'F' message.
    pub fn to_text(&self) -> String {
        let mut s = format!("{}:", self.name);
        for f in &self.fields {
            match f.array_len {
                Some(n) => s.push_str(&format!("{}[{}] {};", f.type_name(), n, f.name)),
                None => s.push_str(&format!("{} {};", f.type_name(), f.name)),
            }
        }
        s
    }
}

/// `text` split around the first `byte` (an ASCII one), which neither part holds. A loop over
/// bytes: a format's pieces are a few bytes long, shorter than a `str` searcher's set-up.
fn split_at_byte(text: &str, byte: u8) -> Option<(&str, &str)> {
    let at = text.bytes().position(|b| b == byte)?;
    Some((&text[..at], &text[at + 1..]))
}

fn has_byte(text: &str, byte: u8) -> bool {
    text.bytes().any(|b| b == byte)
}

fn parse_field(field: &str) -> Result<FieldDef, FormatError> {
    let bad = || FormatError::BadField(field.to_owned());
    let (ty, name) = split_at_byte(field, b' ').ok_or_else(bad)?;
    if ty.is_empty() || name.is_empty() || has_byte(name, b' ') {
        return Err(bad());
    }
    let (base, array_len) = match split_at_byte(ty, b'[') {
        None => (ty, None),
        Some((base, len)) => {
            let len = len
                .strip_suffix(']')
                .and_then(|l| l.parse::<usize>().ok())
                .filter(|&l| l <= MAX_ARRAY_LEN)
                .ok_or_else(|| FormatError::BadArrayLen(field.to_owned()))?;
            (base, Some(len))
        }
    };
    if base.is_empty() {
        return Err(bad());
    }
    let ty = match BasicType::from_name(base) {
        Some(b) => FieldType::Basic(b),
        None => FieldType::Nested(base.to_owned()),
    };
    Ok(FieldDef {
        ty,
        array_len,
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_basic_array_and_nested_fields() {
        let f = FormatDef::parse(
            "pos:uint64_t timestamp;float[3] xyz;inner_t in;uint8_t[5] _padding0;",
        )
        .unwrap();
        assert_eq!(f.name, "pos");
        assert_eq!(f.fields.len(), 4);
        assert_eq!(f.fields[1].array_len, Some(3));
        assert_eq!(f.fields[2].ty, FieldType::Nested("inner_t".into()));
        assert!(f.fields[3].is_padding());
        assert_eq!(
            f.to_text(),
            "pos:uint64_t timestamp;float[3] xyz;inner_t in;uint8_t[5] _padding0;"
        );
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(FormatDef::parse("nocolon"), Err(FormatError::NoColon));
        assert!(matches!(
            FormatDef::parse("a:float"),
            Err(FormatError::BadField(_))
        ));
        assert!(matches!(
            FormatDef::parse("a:float[x] b;"),
            Err(FormatError::BadArrayLen(_))
        ));
        assert!(matches!(
            FormatDef::parse("a:float[99999999] b;"),
            Err(FormatError::BadArrayLen(_))
        ));
    }
}
