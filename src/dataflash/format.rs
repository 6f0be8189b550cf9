//! FMT records: the definition of each message type ([`Format`]) and the size of each field
//! character; the fixed layout of FMT itself; reading a message's `TimeUS`.

/// The two bytes every DataFlash message begins with.
pub const HEADER: [u8; 2] = [0xA3, 0x95];
/// The type of FMT, the record that defines the others.
pub const FMT_TYPE: u8 = 128;
/// An FMT record's length, its 3 header bytes included.
pub const FMT_LEN: usize = 89;
/// A message's header: the two magic bytes and its type.
pub const MSG_HEADER_LEN: usize = 3;

/// One message type, as its FMT record defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pub type_id: u8,
    /// The whole message's length, its 3 header bytes included.
    pub length: u8,
    pub name: String,
    /// One character per field (`QffB`...).
    pub format: String,
    pub labels: Vec<String>,
}

/// Why an FMT record cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("an FMT record is {0} bytes, not {FMT_LEN}")]
    Length(usize),
    #[error("FMT of type {type_id} ({name}): unknown field character {c:?}")]
    FieldCharacter { type_id: u8, name: String, c: char },
    #[error(
        "FMT of type {type_id} ({name}): its fields add up to {fields} bytes, it says {length}"
    )]
    Size {
        type_id: u8,
        name: String,
        fields: usize,
        length: u8,
    },
}

/// The bytes a field character takes, as ArduPilot's `LogStructure.h` lays them out.
pub fn field_size(c: u8) -> Option<usize> {
    Some(match c {
        b'b' | b'B' | b'M' => 1,
        b'h' | b'H' | b'c' | b'C' => 2,
        b'i' | b'I' | b'f' | b'n' | b'e' | b'E' | b'L' => 4,
        b'd' | b'q' | b'Q' => 8,
        b'N' => 16,
        b'Z' | b'a' => 64,
        _ => return None,
    })
}

/// A NUL-padded text field as a string.
pub fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl Format {
    /// FMT's own definition (type 128), which every log uses before defining it.
    pub fn fmt() -> Self {
        Self {
            type_id: FMT_TYPE,
            length: FMT_LEN as u8,
            name: "FMT".into(),
            format: "BBnNZ".into(),
            labels: ["Type", "Length", "Name", "Format", "Columns"]
                .map(String::from)
                .to_vec(),
        }
    }

    /// Reads an FMT record (its header included) and checks that its fields add up to its
    /// length.
    pub fn parse(message: &[u8]) -> Result<Self, FormatError> {
        if message.len() != FMT_LEN {
            return Err(FormatError::Length(message.len()));
        }
        let f = Format {
            type_id: message[3],
            length: message[4],
            name: text(&message[5..9]),
            format: text(&message[9..25]),
            labels: text(&message[25..89])
                .split(',')
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect(),
        };
        let mut fields = MSG_HEADER_LEN;
        for c in f.format.bytes() {
            fields += field_size(c).ok_or_else(|| FormatError::FieldCharacter {
                type_id: f.type_id,
                name: f.name.clone(),
                c: c as char,
            })?;
        }
        if fields != f.length as usize {
            return Err(FormatError::Size {
                type_id: f.type_id,
                name: f.name,
                fields,
                length: f.length,
            });
        }
        Ok(f)
    }

    /// True when the first field is `TimeUS`, a `Q` (the log time, µs since boot).
    pub fn has_time_us(&self) -> bool {
        self.format.starts_with('Q') && self.labels.first().is_some_and(|l| l == "TimeUS")
    }

    /// Byte offset (header included) and character of the field labelled `label`.
    pub fn field(&self, label: &str) -> Option<(usize, u8)> {
        let mut offset = MSG_HEADER_LEN;
        for (c, l) in self.format.bytes().zip(&self.labels) {
            if l == label {
                return Some((offset, c));
            }
            offset += field_size(c)?;
        }
        None
    }

    /// This FMT as a record (header included).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; FMT_LEN];
        out[..2].copy_from_slice(&HEADER);
        out[2] = FMT_TYPE;
        out[3] = self.type_id;
        out[4] = self.length;
        put_text(&mut out[5..9], &self.name);
        put_text(&mut out[9..25], &self.format);
        put_text(&mut out[25..89], &self.labels.join(","));
        out
    }
}

/// Writes `s` into a NUL-padded field, cut to fit.
pub fn put_text(field: &mut [u8], s: &str) {
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
    field[n..].fill(0);
}

/// True for a type whose records are data samples: not a definition (FMT, FMTU, UNIT,
/// MULT), a parameter, a text, the version or a mode change. A reader short of time may
/// skip samples and still decode the rest.
pub fn is_sample(format: &Format) -> bool {
    !matches!(
        format.name.as_str(),
        "FMT" | "FMTU" | "UNIT" | "MULT" | "PARM" | "MSG" | "VER" | "MODE"
    )
}

/// The log time of a message whose type has a `TimeUS` first.
pub fn time_us(format: &Format, message: &[u8]) -> Option<u64> {
    format
        .has_time_us()
        .then(|| leading_time_us(message))
        .flatten()
}

/// The `TimeUS` a message of a type known to have one first carries.
pub fn leading_time_us(message: &[u8]) -> Option<u64> {
    let bytes = message.get(MSG_HEADER_LEN..MSG_HEADER_LEN + 8)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fmt_record_reads_back_and_its_fields_must_add_up() {
        let att = Format {
            type_id: 35,
            length: 3 + 8 + 4 * 4,
            name: "ATT".into(),
            format: "Qffff".into(),
            labels: ["TimeUS", "DesRoll", "Roll", "DesPitch", "Pitch"]
                .map(String::from)
                .to_vec(),
        };
        let bytes = att.to_bytes();
        assert_eq!(Format::parse(&bytes).unwrap(), att);
        assert!(att.has_time_us());
        assert_eq!(att.field("Roll"), Some((15, b'f')));
        let mut wrong = bytes.clone();
        wrong[4] = 30;
        assert!(matches!(
            Format::parse(&wrong),
            Err(FormatError::Size { fields: 27, .. })
        ));
        let mut junk = bytes;
        junk[9] = b'x';
        assert!(matches!(
            Format::parse(&junk),
            Err(FormatError::FieldCharacter { c: 'x', .. })
        ));
        assert_eq!(
            Format::parse(&Format::fmt().to_bytes()).unwrap(),
            Format::fmt()
        );
    }
}
