//! What a split of a DataFlash log needs to open alone, followed as the log passes and
//! written at the start of every split after the first: every FMT seen so far, the UNIT,
//! MULT and FMTU records (units and multipliers), VER, the text messages of the log's
//! startup (firmware, frame, board), the parameters in force (each `PARM` at its latest
//! value), and the flight mode in force (`MODE`). A reader that opens such a split alone
//! (pymavlink's DFReader, Mission Planner, MAVExplorer, UAV Log Viewer) decodes every message
//! in it and knows the vehicle, its parameters and its mode.

use std::collections::HashMap;

use crate::dataflash::format::Format;

/// The record types of a log's startup; the first message of another type ends it.
const STARTUP: &[&str] = &["FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "MSG"];

/// Most startup text messages kept.
const MAX_STARTUP_TEXTS: usize = 64;

/// True for a type of the log's startup records (FMT, FMTU, UNIT, MULT, PARM, VER, MSG).
pub fn is_startup(name: &str) -> bool {
    STARTUP.contains(&name)
}

/// The record types a split's preamble replays (see [`is_replayed`]).
const REPLAYED: &[&str] = &["FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "MSG", "MODE"];

/// True for a type a split's preamble replays: FMT, FMTU, UNIT, MULT, PARM, VER, MSG (the
/// startup's) and MODE (the mode in force). At the start of a split after the first, they
/// are the log's state again, not new data; the first record of another type (or a dropout
/// mark) ends the preamble.
pub fn is_replayed(name: &str) -> bool {
    REPLAYED.contains(&name)
}

/// Records kept by a key field, each at its latest value, in first-seen order.
#[derive(Debug, Default, Clone)]
struct Keyed {
    records: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize>,
}

impl Keyed {
    fn put(&mut self, key: &[u8], message: &[u8]) {
        match self.index.get(key) {
            Some(&i) => self.records[i] = message.to_vec(),
            None => {
                self.index.insert(key.to_vec(), self.records.len());
                self.records.push(message.to_vec());
            }
        }
    }

    fn bytes(&self) -> impl Iterator<Item = &[u8]> {
        self.records.iter().map(Vec::as_slice)
    }
}

/// See the module docs.
#[derive(Debug, Default, Clone)]
pub struct Preamble {
    fmt: Keyed,
    unit: Keyed,
    mult: Keyed,
    fmtu: Keyed,
    parm: Keyed,
    ver: Option<Vec<u8>>,
    mode: Option<Vec<u8>>,
    startup_texts: Vec<Vec<u8>>,
    startup_over: bool,
}

/// The bytes of field `label` of `message`, when its format has it.
fn field<'m>(format: &Format, message: &'m [u8], label: &str) -> Option<&'m [u8]> {
    let (offset, c) = format.field(label)?;
    let size = crate::dataflash::format::field_size(c)?;
    message.get(offset..offset + size)
}

impl Preamble {
    pub fn new() -> Self {
        Self::default()
    }

    /// Follows one whole message of the log.
    pub fn observe(&mut self, message: &[u8], format: &Format) {
        let name = format.name.as_str();
        if !self.startup_over && !STARTUP.contains(&name) {
            self.startup_over = true;
        }
        let keyed = |label| field(format, message, label);
        match name {
            "FMT" => self.fmt.put(&message[3..4], message),
            "UNIT" => keyed("Id")
                .into_iter()
                .for_each(|k| self.unit.put(k, message)),
            "MULT" => keyed("Id")
                .into_iter()
                .for_each(|k| self.mult.put(k, message)),
            "FMTU" => keyed("FmtType")
                .into_iter()
                .for_each(|k| self.fmtu.put(k, message)),
            "PARM" => keyed("Name")
                .into_iter()
                .for_each(|k| self.parm.put(k, message)),
            "VER" => self.ver = Some(message.to_vec()),
            "MODE" => self.mode = Some(message.to_vec()),
            "MSG" if !self.startup_over && self.startup_texts.len() < MAX_STARTUP_TEXTS => {
                self.startup_texts.push(message.to_vec())
            }
            _ => {}
        }
    }

    /// The preamble as bytes, in the order ArduPilot writes them at a log's start.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let parts = (self.fmt.bytes())
            .chain(self.unit.bytes())
            .chain(self.mult.bytes())
            .chain(self.fmtu.bytes())
            .chain(self.ver.as_deref())
            .chain(self.startup_texts.iter().map(Vec::as_slice))
            .chain(self.parm.bytes())
            .chain(self.mode.as_deref());
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::framer::Framer;

    fn def(type_id: u8, name: &str, format: &str, labels: &str) -> Format {
        let size: usize = format
            .bytes()
            .map(|c| crate::dataflash::format::field_size(c).unwrap())
            .sum();
        Format {
            type_id,
            length: (3 + size) as u8,
            name: name.into(),
            format: format.into(),
            labels: labels.split(',').map(String::from).collect(),
        }
    }

    fn record(f: &Format, fields: &[u8]) -> Vec<u8> {
        let mut m = vec![0xA3, 0x95, f.type_id];
        m.extend_from_slice(fields);
        m.resize(f.length as usize, 0);
        m
    }

    #[test]
    fn a_split_begins_with_the_definitions_and_the_parameters_in_force() {
        let parm = def(64, "PARM", "QNf", "TimeUS,Name,Value");
        let msg = def(91, "MSG", "QZ", "TimeUS,Message");
        let att = def(35, "ATT", "Qf", "TimeUS,Roll");
        let defs: Vec<u8> = [&parm, &msg, &att]
            .iter()
            .flat_map(|f| f.to_bytes())
            .collect();
        let name = |n: &str| {
            let mut f = vec![0u8; 8];
            let mut name = [0u8; 16];
            name[..n.len()].copy_from_slice(n.as_bytes());
            f.extend_from_slice(&name);
            f
        };
        let mut p1 = name("ARMING_CHECK");
        p1.extend_from_slice(&1f32.to_le_bytes());
        let mut p1b = name("ARMING_CHECK");
        p1b.extend_from_slice(&0f32.to_le_bytes());
        let mut p2 = name("LOG_BACKEND_TYPE");
        p2.extend_from_slice(&3f32.to_le_bytes());
        let mut text = vec![0u8; 8];
        text.extend_from_slice(b"ArduCopter V4.6.0");
        let mut later_text = vec![0u8; 8];
        later_text.extend_from_slice(b"Armed");
        let log: Vec<Vec<u8>> = vec![
            defs,
            record(&parm, &p1),
            record(&parm, &p2),
            record(&msg, &text),
            record(&att, &[0; 12]),
            record(&msg, &later_text),
            record(&parm, &p1b),
        ];
        let mut framer = Framer::new();
        let mut pre = Preamble::new();
        framer.push(&log.concat(), |m, f| pre.observe(m, f));
        let expected = [
            Format::fmt().to_bytes(),
            parm.to_bytes(),
            msg.to_bytes(),
            att.to_bytes(),
            record(&msg, &text),
            record(&parm, &p1b),
            record(&parm, &p2),
        ]
        .concat();
        // FMT's own record is in the log only when the vehicle wrote it: here it did not.
        assert_eq!(pre.bytes(), expected[89..]);
    }
}
