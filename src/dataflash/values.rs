//! A DataFlash message's field values, as ArduPilot's tools show them: each field read by its
//! FMT character and scaled as pymavlink's `DFReader` scales it (`c`/`C`/`e`/`E` are
//! hundredths, `L` is degrees times 10⁷), texts cut at their first NUL. And the instance
//! field FMTU marks (`#` in its units), which tells `BAT[0]` from `BAT[1]`.

use crate::dataflash::format::{Format, MSG_HEADER_LEN, field_size};

/// One field's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'m> {
    Int(i64),
    UInt(u64),
    F32(f32),
    /// A float ArduPilot stores as a scaled integer, or a `d`.
    F64(f64),
    /// A text field (`n`, `N`, `Z`), up to its first NUL.
    Text(&'m [u8]),
    /// An `a` field: 32 little-endian `int16`.
    Int16s(&'m [u8]),
}

impl Value<'_> {
    /// The value as a number, when it is one.
    pub fn as_f64(&self) -> Option<f64> {
        Some(match *self {
            Value::Int(v) => v as f64,
            Value::UInt(v) => v as f64,
            Value::F32(v) => v as f64,
            Value::F64(v) => v,
            Value::Text(_) | Value::Int16s(_) => return None,
        })
    }
}

/// Reads one field of character `c` from `bytes` (exactly [`field_size`] of it).
pub fn value(c: u8, bytes: &[u8]) -> Option<Value<'_>> {
    let le = |n: usize| -> Option<[u8; 8]> {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(bytes.get(..n)?);
        Some(b)
    };
    let int = |n: usize| -> Option<i64> {
        let raw = u64::from_le_bytes(le(n)?);
        let shift = 64 - 8 * n as u32;
        Some(((raw << shift) as i64) >> shift)
    };
    let uint = |n: usize| -> Option<u64> { Some(u64::from_le_bytes(le(n)?)) };
    Some(match c {
        b'b' => Value::Int(int(1)?),
        b'h' => Value::Int(int(2)?),
        b'i' => Value::Int(int(4)?),
        b'q' => Value::Int(int(8)?),
        b'B' | b'M' => Value::UInt(uint(1)?),
        b'H' => Value::UInt(uint(2)?),
        b'I' => Value::UInt(uint(4)?),
        b'Q' => Value::UInt(uint(8)?),
        b'f' => Value::F32(f32::from_le_bytes(bytes.get(..4)?.try_into().ok()?)),
        b'd' => Value::F64(f64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)),
        b'c' => Value::F64(int(2)? as f64 * 0.01),
        b'C' => Value::F64(uint(2)? as f64 * 0.01),
        b'e' => Value::F64(int(4)? as f64 * 0.01),
        b'E' => Value::F64(uint(4)? as f64 * 0.01),
        b'L' => Value::F64(int(4)? as f64 * 1e-7),
        b'n' | b'N' | b'Z' => {
            let text = bytes.get(..field_size(c)?)?;
            let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
            Value::Text(&text[..end])
        }
        b'a' => Value::Int16s(bytes.get(..64)?),
        _ => return None,
    })
}

/// Each field of `message` (a whole message of `format`, header included) with its label
/// and character, in order. Stops early if the message is shorter than its format says.
pub fn fields<'a>(
    format: &'a Format,
    message: &'a [u8],
) -> impl Iterator<Item = (&'a str, u8, Value<'a>)> + 'a {
    let mut offset = MSG_HEADER_LEN;
    format
        .format
        .bytes()
        .zip(&format.labels)
        .map_while(move |(c, label)| {
            let size = field_size(c)?;
            let v = value(c, message.get(offset..offset + size)?)?;
            offset += size;
            Some((label.as_str(), c, v))
        })
}

/// The index of the instance field among a type's fields, from its FMTU record's units
/// (`#` marks it), when the type has one.
pub fn instance_field(units: &[u8]) -> Option<usize> {
    units.iter().position(|&u| u == b'#')
}

/// An FMTU record's type and its instance field, when `message` is one (`format` is FMTU's).
pub fn fmtu_instance(format: &Format, message: &[u8]) -> Option<(u8, Option<usize>)> {
    if format.name != "FMTU" {
        return None;
    }
    let mut ty = None;
    let mut units = None;
    for (label, _, v) in fields(format, message) {
        match (label, v) {
            ("FmtType", Value::UInt(t)) => ty = u8::try_from(t).ok(),
            ("UnitIds", Value::Text(u)) => units = Some(u),
            _ => {}
        }
    }
    Some((ty?, units.and_then(instance_field)))
}

/// The instance a message carries in field `index` (an integer field), 0 when it has none.
pub fn instance_of(format: &Format, message: &[u8], index: Option<usize>) -> u8 {
    let Some(index) = index else {
        return 0;
    };
    match fields(format, message).nth(index).map(|(_, _, v)| v) {
        Some(Value::UInt(v)) => u8::try_from(v).unwrap_or(u8::MAX),
        Some(Value::Int(v)) => u8::try_from(v).unwrap_or(u8::MAX),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_and_scale_as_dataflash_tools_show_them() {
        let f = Format {
            type_id: 9,
            length: 0,
            name: "TST".into(),
            format: "QbhcCeELfnZ".into(),
            labels: "TimeUS,B,H,C1,C2,E1,E2,Lat,F,Nm,Txt"
                .split(',')
                .map(String::from)
                .collect(),
        };
        let mut m = vec![0xA3, 0x95, 9];
        m.extend_from_slice(&123u64.to_le_bytes());
        m.push(-5i8 as u8);
        m.extend_from_slice(&(-300i16).to_le_bytes());
        m.extend_from_slice(&(-1234i16).to_le_bytes());
        m.extend_from_slice(&(65000u16).to_le_bytes());
        m.extend_from_slice(&(-250i32).to_le_bytes());
        m.extend_from_slice(&(4_000_000_000u32).to_le_bytes());
        m.extend_from_slice(&(473_977_418i32).to_le_bytes());
        m.extend_from_slice(&1.5f32.to_le_bytes());
        m.extend_from_slice(b"AB\0\0");
        let mut z = [0u8; 64];
        z[..5].copy_from_slice(b"hello");
        m.extend_from_slice(&z);
        let got: Vec<(&str, Value)> = fields(&f, &m).map(|(l, _, v)| (l, v)).collect();
        assert_eq!(got.len(), 11);
        assert_eq!(got[0], ("TimeUS", Value::UInt(123)));
        assert_eq!(got[1].1, Value::Int(-5));
        assert_eq!(got[2].1, Value::Int(-300));
        assert_eq!(got[3].1.as_f64(), Some(-12.34));
        assert_eq!(got[4].1.as_f64(), Some(650.0));
        assert_eq!(got[5].1.as_f64(), Some(-2.5));
        assert_eq!(got[6].1.as_f64(), Some(40_000_000.0));
        assert!((got[7].1.as_f64().unwrap() - 47.3977418).abs() < 1e-9);
        assert_eq!(got[8].1, Value::F32(1.5));
        assert_eq!(got[9].1, Value::Text(b"AB"));
        assert_eq!(got[10].1, Value::Text(b"hello"));
        // A message cut short ends the fields where it ends.
        assert_eq!(fields(&f, &m[..20]).count(), 5);
    }

    #[test]
    fn fmtu_marks_the_instance_field() {
        let fmtu = Format {
            type_id: 170,
            length: 3 + 8 + 1 + 16 + 16,
            name: "FMTU".into(),
            format: "QBNN".into(),
            labels: "TimeUS,FmtType,UnitIds,MultIds"
                .split(',')
                .map(String::from)
                .collect(),
        };
        let mut m = vec![0xA3, 0x95, 170];
        m.extend_from_slice(&1u64.to_le_bytes());
        m.push(42);
        let mut units = [0u8; 16];
        units[..4].copy_from_slice(b"s#vA");
        m.extend_from_slice(&units);
        m.extend_from_slice(&[0u8; 16]);
        assert_eq!(fmtu_instance(&fmtu, &m), Some((42, Some(1))));
        let bat = Format {
            type_id: 42,
            length: 3 + 8 + 1 + 4,
            name: "BAT".into(),
            format: "QBf".into(),
            labels: "TimeUS,Inst,Volt".split(',').map(String::from).collect(),
        };
        let mut b = vec![0xA3, 0x95, 42];
        b.extend_from_slice(&7u64.to_le_bytes());
        b.push(1);
        b.extend_from_slice(&12.5f32.to_le_bytes());
        assert_eq!(instance_of(&bat, &b, Some(1)), 1);
        assert_eq!(instance_of(&bat, &b, None), 0);
    }
}
