//! What a DataFlash log says of its fields' units: FMTU records (each type's unit and
//! multiplier ids, a character per field), UNIT (each unit id's name) and MULT (each
//! multiplier id's value), gathered as the log passes.

use std::collections::HashMap;

use crate::dataflash::format::Format;
use crate::dataflash::values::{Value, fields};

/// What FMTU, UNIT and MULT records said so far.
#[derive(Debug, Default, Clone)]
pub struct Units {
    /// By type: its unit and multiplier ids, a character per field.
    of_type: HashMap<u8, (Vec<u8>, Vec<u8>)>,
    /// By unit id: its name.
    names: HashMap<u8, String>,
    /// By multiplier id: its value (as pymavlink takes it, to 7 significant digits).
    multipliers: HashMap<u8, f64>,
}

impl Units {
    /// Whether `f` is the format of a definition record (FMTU, UNIT, MULT), which
    /// [`take`](Self::take) takes in.
    pub fn defines(f: &Format) -> bool {
        matches!(f.name.as_str(), "FMTU" | "UNIT" | "MULT")
    }

    /// Takes in `m` if it is a definition record (FMTU, UNIT, MULT); `false` if it is none.
    pub fn take(&mut self, f: &Format, m: &[u8]) -> bool {
        let mut values = fields(f, m).map(|(_, _, v)| v).skip(1);
        match f.name.as_str() {
            "FMTU" => {
                if let (Some(Value::UInt(ty)), Some(Value::Text(units)), Some(Value::Text(mults))) =
                    (values.next(), values.next(), values.next())
                {
                    let ty = u8::try_from(ty).unwrap_or(0);
                    self.set_type(ty, units, mults);
                }
            }
            "UNIT" => {
                if let (Some(Value::Int(id)), Some(Value::Text(label))) =
                    (values.next(), values.next())
                {
                    self.name_unit(id as u8, &String::from_utf8_lossy(label));
                }
            }
            "MULT" => {
                if let (Some(Value::Int(id)), Some(Value::F64(mult))) =
                    (values.next(), values.next())
                {
                    // Logged as a float made a double: 7 digits, as pymavlink reads it.
                    let rounded = format!("{mult:.6e}").parse().unwrap_or(mult);
                    self.set_multiplier(id as u8, rounded);
                }
            }
            _ => return false,
        }
        true
    }

    /// The unit and multiplier ids of type `type_id`'s fields (empty when FMTU said none).
    pub fn of_type(&self, type_id: u8) -> (Vec<u8>, Vec<u8>) {
        self.of_type.get(&type_id).cloned().unwrap_or_default()
    }

    /// The name of unit `id` (`V`).
    pub fn name(&self, id: u8) -> Option<&String> {
        self.names.get(&id)
    }

    /// The value of multiplier `id`.
    pub fn multiplier(&self, id: u8) -> Option<&f64> {
        self.multipliers.get(&id)
    }

    /// Type `type_id`'s fields have these unit and multiplier ids.
    pub fn set_type(&mut self, type_id: u8, units: &[u8], multipliers: &[u8]) {
        self.of_type
            .insert(type_id, (units.to_vec(), multipliers.to_vec()));
    }

    /// Unit `id` is named `name`.
    pub fn name_unit(&mut self, id: u8, name: &str) {
        self.names.insert(id, name.to_owned());
    }

    /// Multiplier `id` is `value`.
    pub fn set_multiplier(&mut self, id: u8, value: f64) {
        self.multipliers.insert(id, value);
    }

    /// The unit name of each of type `f`'s fields, where FMTU and UNIT give one that says
    /// something (not empty).
    pub fn field_units(&self, f: &Format) -> Vec<Option<&str>> {
        let (ids, _) = self
            .of_type
            .get(&f.type_id)
            .map_or((&[][..], &[][..]), |(u, m)| (u, m));
        (0..f.labels.len())
            .map(|i| {
                let name = ids.get(i).and_then(|u| self.names.get(u));
                name.map(String::as_str).filter(|n| !n.is_empty())
            })
            .collect()
    }
}
