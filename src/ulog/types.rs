//! The basic field types of ULog formats (`int8_t` … `double`, `bool`, `char`) and the decoded
//! scalar [`Value`] that a field yields.

/// One of the twelve basic types a ULog format field may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BasicType {
    Int8,
    UInt8,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float,
    Double,
    Bool,
    Char,
}

impl BasicType {
    /// Parses a type name as it stands in a format message (`"uint16_t"`, `"float"`, …).
    /// Returns `None` for anything else (a nested format's name, or garbage).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "int8_t" => Self::Int8,
            "uint8_t" => Self::UInt8,
            "int16_t" => Self::Int16,
            "uint16_t" => Self::UInt16,
            "int32_t" => Self::Int32,
            "uint32_t" => Self::UInt32,
            "int64_t" => Self::Int64,
            "uint64_t" => Self::UInt64,
            "float" => Self::Float,
            "double" => Self::Double,
            "bool" => Self::Bool,
            "char" => Self::Char,
            _ => return None,
        })
    }

    /// The name used in format messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Int8 => "int8_t",
            Self::UInt8 => "uint8_t",
            Self::Int16 => "int16_t",
            Self::UInt16 => "uint16_t",
            Self::Int32 => "int32_t",
            Self::UInt32 => "uint32_t",
            Self::Int64 => "int64_t",
            Self::UInt64 => "uint64_t",
            Self::Float => "float",
            Self::Double => "double",
            Self::Bool => "bool",
            Self::Char => "char",
        }
    }

    /// Size in bytes on the wire.
    #[inline]
    pub fn size(self) -> usize {
        match self {
            Self::Int8 | Self::UInt8 | Self::Bool | Self::Char => 1,
            Self::Int16 | Self::UInt16 => 2,
            Self::Int32 | Self::UInt32 | Self::Float => 4,
            Self::Int64 | Self::UInt64 | Self::Double => 8,
        }
    }

    /// Reads one value of this type at the start of `bytes` (little-endian).
    ///
    /// Contract: `bytes.len() >= self.size()`; shorter input panics, so callers check sizes
    /// once per message (see [`crate::ulog::Layout`]) rather than per field.
    #[inline]
    pub fn read(self, bytes: &[u8]) -> Value {
        match self {
            Self::Int8 => Value::I8(bytes[0] as i8),
            Self::UInt8 => Value::U8(bytes[0]),
            Self::Bool => Value::Bool(bytes[0]),
            Self::Char => Value::Char(bytes[0]),
            Self::Int16 => Value::I16(i16::from_le_bytes(take(bytes))),
            Self::UInt16 => Value::U16(u16::from_le_bytes(take(bytes))),
            Self::Int32 => Value::I32(i32::from_le_bytes(take(bytes))),
            Self::UInt32 => Value::U32(u32::from_le_bytes(take(bytes))),
            Self::Float => Value::F32(f32::from_le_bytes(take(bytes))),
            Self::Int64 => Value::I64(i64::from_le_bytes(take(bytes))),
            Self::UInt64 => Value::U64(u64::from_le_bytes(take(bytes))),
            Self::Double => Value::F64(f64::from_le_bytes(take(bytes))),
        }
    }
}

#[inline(always)]
fn take<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// A decoded scalar. Copy, no allocation.
///
/// `Bool` keeps the raw byte (a log may hold values other than 0 and 1; pyulog reports them as
/// they are) and `Char` the raw byte of one `char` element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    Bool(u8),
    Char(u8),
}

impl Value {
    /// The value as a float64, the way pyulog's numpy arrays sum it (`char` as a signed byte).
    #[inline]
    pub fn as_f64(self) -> f64 {
        match self {
            Value::I8(v) => v as f64,
            Value::U8(v) => v as f64,
            Value::I16(v) => v as f64,
            Value::U16(v) => v as f64,
            Value::I32(v) => v as f64,
            Value::U32(v) => v as f64,
            Value::I64(v) => v as f64,
            Value::U64(v) => v as f64,
            Value::F32(v) => v as f64,
            Value::F64(v) => v,
            Value::Bool(v) => (v as i8) as f64,
            Value::Char(v) => (v as i8) as f64,
        }
    }

    /// The value as an unsigned integer, for integer types that are non-negative.
    pub fn as_u64(self) -> Option<u64> {
        match self {
            Value::U8(v) | Value::Bool(v) | Value::Char(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::F32(_) | Value::F64(_) => None,
        }
    }

    /// Writes the value as JSON (numbers; NaN and infinities as `null`, since JSON has none).
    pub fn to_json(self) -> serde_json::Value {
        match self {
            Value::F32(v) => serde_json::Number::from_f64(v as f64)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::F64(v) => serde_json::Number::from_f64(v)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::I8(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::I64(v) => v.into(),
            Value::U8(v) | Value::Char(v) => v.into(),
            Value::Bool(v) => (v != 0).into(),
            Value::U16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::U64(v) => v.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_its_name_and_reads_little_endian() {
        let all = [
            BasicType::Int8,
            BasicType::UInt8,
            BasicType::Int16,
            BasicType::UInt16,
            BasicType::Int32,
            BasicType::UInt32,
            BasicType::Int64,
            BasicType::UInt64,
            BasicType::Float,
            BasicType::Double,
            BasicType::Bool,
            BasicType::Char,
        ];
        for ty in all {
            assert_eq!(BasicType::from_name(ty.name()), Some(ty));
        }
        assert_eq!(BasicType::from_name("vehicle_status"), None);
        assert_eq!(BasicType::Int16.read(&[0xfe, 0xff]), Value::I16(-2));
        assert_eq!(
            BasicType::UInt32.read(&[1, 0, 0, 1]),
            Value::U32(0x0100_0001)
        );
        assert_eq!(
            BasicType::Double.read(&1.5f64.to_le_bytes()),
            Value::F64(1.5)
        );
        assert_eq!(BasicType::Char.read(&[0xff]).as_f64(), -1.0);
    }
}
