//! An ArduPilot message type's table columns, from its FMT and what FMTU, UNIT and MULT
//! records said of its fields (see [`super`]): names, Arrow types, the scale each value is
//! read with, each column's metadata, and where its instance field is.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_schema::{Field, Schema};

use super::{DATAFLASH_LABEL, DATAFLASH_TYPE, MULTIPLIER, UNIT};
use crate::dataflash::format::{Format, MSG_HEADER_LEN, field_size};
use crate::dataflash::units::Units;
use crate::dataflash::values::instance_field;
use crate::export::dataset::columns::{
    Column, Factor, IDENTITY, Source, TopicColumns, column_name, data_type, identity_fields, unique,
};
use crate::ulog::types::BasicType;

/// The basic type a DataFlash field character is stored as, and the scale its character
/// itself gives (pymavlink's); `None` for a text or an `a` array.
fn stored_as(c: u8) -> Option<(BasicType, Option<f64>)> {
    Some(match c {
        b'b' => (BasicType::Int8, None),
        b'B' | b'M' => (BasicType::UInt8, None),
        b'h' => (BasicType::Int16, None),
        b'H' => (BasicType::UInt16, None),
        b'i' => (BasicType::Int32, None),
        b'I' => (BasicType::UInt32, None),
        b'q' => (BasicType::Int64, None),
        b'Q' => (BasicType::UInt64, None),
        b'f' => (BasicType::Float, None),
        b'd' => (BasicType::Double, None),
        b'c' => (BasicType::Int16, Some(0.01)),
        b'C' => (BasicType::UInt16, Some(0.01)),
        b'e' => (BasicType::Int32, Some(0.01)),
        b'E' => (BasicType::UInt32, Some(0.01)),
        b'L' => (BasicType::Int32, Some(1e-7)),
        _ => return None,
    })
}

/// A message type's table: its columns (see the module docs) and where its instance is.
pub(super) struct TypeColumns {
    pub(super) columns: TopicColumns,
    /// The instance field's offset in a message (its header included) and character.
    pub(super) instance: Option<(usize, u8)>,
}

impl TypeColumns {
    pub(super) fn new(f: &Format, units: &Units) -> Self {
        let (unit_ids, mult_ids) = units.of_type(f.type_id);
        let instance_index = instance_field(&unit_ids);
        let mut taken: HashSet<String> = IDENTITY.iter().map(|n| n.to_string()).collect();
        let mut columns = Vec::new();
        let mut fields = Vec::new();
        let mut instance = None;
        let mut offset = MSG_HEADER_LEN;
        for (i, (c, label)) in f.format.bytes().zip(&f.labels).enumerate() {
            let Some(size) = field_size(c) else { break };
            let at = offset;
            offset += size;
            if Some(i) == instance_index {
                instance = Some((at, c));
            }
            if i == 0 && f.has_time_us() {
                continue;
            }
            let body = at - MSG_HEADER_LEN;
            let unit = (unit_ids.get(i))
                .and_then(|&u| units.name(u))
                .filter(|u| !u.is_empty());
            let multiplier = mult_ids.get(i).and_then(|&m| units.multiplier(m));
            let mut add = |name: String, source: Source, factor: Option<f64>| {
                let name = unique(column_name(&name), &mut taken);
                let mut metadata = HashMap::from([
                    (DATAFLASH_LABEL.to_owned(), label.clone()),
                    (DATAFLASH_TYPE.to_owned(), char::from(c).to_string()),
                ]);
                if let Some(unit) = unit {
                    metadata.insert(UNIT.to_owned(), unit.clone());
                }
                if let Some(factor) = factor {
                    metadata.insert(MULTIPLIER.to_owned(), factor.to_string());
                }
                fields.push(Field::new(&name, data_type(&source), false).with_metadata(metadata));
                columns.push(Column { name, source });
            };
            match (c, stored_as(c)) {
                (b'n' | b'N' | b'Z', _) => add(
                    label.clone(),
                    Source::Text {
                        offset: body,
                        len: size,
                    },
                    None,
                ),
                (b'a', _) => {
                    for k in 0..size / 2 {
                        let source = Source::Scalar {
                            ty: BasicType::Int16,
                            offset: body + 2 * k,
                        };
                        add(format!("{label}_{k}"), source, None);
                    }
                }
                (_, Some((ty, Some(scale)))) => {
                    let factor = Factor::new(scale);
                    add(
                        label.clone(),
                        Source::Scaled {
                            ty,
                            offset: body,
                            factor,
                        },
                        Some(scale),
                    )
                }
                (_, Some((ty, None))) => match multiplier {
                    // `-` (0: none), `?` and `0` (1): the value as it is; a mode is a number.
                    Some(&m) if m != 0.0 && m != 1.0 && m.is_finite() && c != b'M' => {
                        let factor = Factor::new(m);
                        add(
                            label.clone(),
                            Source::Scaled {
                                ty,
                                offset: body,
                                factor,
                            },
                            Some(m),
                        )
                    }
                    _ => add(label.clone(), Source::Scalar { ty, offset: body }, None),
                },
                (_, None) => {}
            }
        }
        let mut all = identity_fields();
        all.extend(fields);
        Self {
            columns: TopicColumns {
                columns,
                schema: Arc::new(Schema::new(all)),
            },
            instance,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::testing::df_format;

    #[test]
    fn columns_follow_fmt_and_fmtu_scaled_as_it_says() {
        let bat = df_format(
            20,
            "BAT",
            "QBfcfBnM",
            "TimeUS,Inst,Volt,Temp,CurrTot,RemPct,Id,Mode",
        );
        let mut units = Units::default();
        units.name_unit(b'v', "V");
        units.name_unit(b'#', "instance");
        units.name_unit(b'a', "Ah");
        units.set_multiplier(b'F', 0.001);
        units.set_multiplier(b'B', 0.01);
        units.set_multiplier(b'-', 0.0);
        units.set_type(20, b"s#vOa%--", b"F--BF---");
        let t = TypeColumns::new(&bat, &units);
        let names: Vec<&str> = t.columns.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["Inst", "Volt", "Temp", "CurrTot", "RemPct", "Id", "Mode"]
        );
        assert_eq!(t.instance, Some((11, b'B')));
        let field = |n: &str| t.columns.schema.field_with_name(n).unwrap().clone();
        assert_eq!(field("Volt").data_type(), &arrow_schema::DataType::Float32);
        assert_eq!(field("Volt").metadata()[UNIT], "V");
        // A `c` is hundredths by its character; a float with a multiplier is scaled by it.
        assert_eq!(field("Temp").data_type(), &arrow_schema::DataType::Float64);
        assert_eq!(field("Temp").metadata()[MULTIPLIER], "0.01");
        assert_eq!(field("CurrTot").metadata()[MULTIPLIER], "0.001");
        assert_eq!(field("Id").data_type(), &arrow_schema::DataType::Utf8);
        assert_eq!(field("Mode").data_type(), &arrow_schema::DataType::Int32);
        assert_eq!(
            field("timestamp").data_type(),
            &arrow_schema::DataType::Int64
        );
    }
}
