//! An ArduPilot flight (DataFlash: a `.bin`, or an ArduPilot session's splits in log order)
//! as MCAP, profile `ros2`, written as a PX4 flight is ([`super`]): a channel per message
//! type and instance (`/ATT`; `/BAT/1` for the instance FMTU marks with `#`, as the live
//! view names them), each with a `ros2msg` schema made from its FMT and CDR messages stamped
//! at their `TimeUS`; `MSG` texts on `/log` (`rcl_interfaces/msg/Log`, level INFO:
//! ArduPilot logs none), the flight diagnostics on `/diagnostics` (hardware id
//! `ardupilot`). The definitions (FMT, FMTU, UNIT, MULT) make no channel.
//!
//! The schema (`ardupilot_dataflash/msg/NAME`): a field per FMT field, named by its label as
//! ROS 2 allows ([`field_name`]: `DesRoll` → `desroll`), typed by its character (`b` `int8`,
//! `B`/`M` `uint8`, `h` `int16`, `H` `uint16`, `i` `int32`, `I` `uint32`, `q` `int64`, `Q`
//! `uint64`, `f` `float32`, `d` `float64`, `n`/`N`/`Z` `string`, `a` `int16[32]`), a field
//! stored scaled (`c`, `C`, `e`, `E` hundredths, `L` 10⁻⁷ degrees) as the `float64` pymavlink
//! shows; each line ends with its label and, where FMTU and UNIT give one, its unit as a
//! comment (`float32 volt  # Volt [V]`).

use std::io::Write;
use std::path::PathBuf;

use super::{ChunkSink, write_sized};
use crate::dataflash::format::{Format, MSG_HEADER_LEN, field_size};
use crate::dataflash::state::{LogState, Passing};
use crate::dataflash::units::Units;
use crate::dataflash::values::{Value, instance_field, value};
use crate::diagnose::{BinFollower, Detectors};
use crate::export::flight::each_dataflash_message;
use crate::export::{ExportError, ExportOptions, ExportStats, FlightMetadata, Sink};
use crate::ros::diagnostics::ARDUPILOT_HARDWARE_ID;
use crate::ros::ros2::{CDR_LE, align, field_name, write_string};

/// The package every ArduPilot type lives in.
pub const PACKAGE: &str = "ardupilot_dataflash";

/// The log level of an ArduPilot text (`'6'`, info: its log says none).
const TEXT_LEVEL: u8 = b'6';

/// A message type as a ROS 2 type: its schema and how a message becomes CDR.
#[derive(Debug, Clone)]
struct BinType {
    name: String,
    schema: String,
    /// The steps that encode a message, planned once per type.
    ops: Vec<BinOp>,
    /// Bytes of a message (its header included) the steps read.
    needed: usize,
    /// The instance field's offset and character.
    instance: Option<(usize, u8)>,
}

/// One step of a message's CDR encoding. Where the position in the CDR is known when the
/// type is planned (before its first string), padding is planned too, and fields that lie
/// next to each other in both the message and the CDR are one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    /// `len` bytes at `offset`, as they are.
    Copy { offset: usize, len: usize },
    /// `len` zero bytes of padding.
    Pad { len: usize },
    /// Padding to a multiple of `size`, where the position is known only when encoding.
    Align { size: usize },
    /// A field stored scaled (character `c` at `offset`) as the `float64` pymavlink shows.
    Scaled { offset: usize, c: u8 },
    /// A text field of `len` bytes at `offset`, as a CDR string.
    Str { offset: usize, len: usize },
    /// ROS 2's member of a message without fields.
    Empty,
}

/// Plans [`BinOp`]s, following the CDR position (after the encapsulation header) while it is
/// known.
#[derive(Debug, Default)]
struct Planner {
    ops: Vec<BinOp>,
    /// The CDR position; `None` after a string.
    at: Option<usize>,
}

impl Planner {
    /// Pads to a multiple of `size` (planned where the position is known).
    fn align(&mut self, size: usize) {
        if size <= 1 {
            return;
        }
        match self.at {
            Some(at) => {
                let pad = (size - at % size) % size;
                if pad > 0 {
                    self.ops.push(BinOp::Pad { len: pad });
                    self.at = Some(at + pad);
                }
            }
            None => self.ops.push(BinOp::Align { size }),
        }
    }

    /// `len` bytes at `offset` copied, aligned to `size` (joined to the copy before when both
    /// lie next to each other).
    fn copy(&mut self, offset: usize, len: usize, size: usize) {
        self.align(size);
        match self.ops.last_mut() {
            Some(BinOp::Copy { offset: o, len: l }) if *o + *l == offset => *l += len,
            _ => self.ops.push(BinOp::Copy { offset, len }),
        }
        self.at = self.at.map(|at| at + len);
    }

    fn scaled(&mut self, offset: usize, c: u8) {
        self.align(8);
        self.ops.push(BinOp::Scaled { offset, c });
        self.at = self.at.map(|at| at + 8);
    }

    fn string(&mut self, offset: usize, len: usize) {
        self.ops.push(BinOp::Str { offset, len });
        self.at = None;
    }
}

/// The ROS 2 type of a field character.
fn ros_type(c: u8) -> Option<&'static str> {
    Some(match c {
        b'b' => "int8",
        b'B' | b'M' => "uint8",
        b'h' => "int16",
        b'H' => "uint16",
        b'i' => "int32",
        b'I' => "uint32",
        b'q' => "int64",
        b'Q' => "uint64",
        b'f' => "float32",
        b'd' | b'c' | b'C' | b'e' | b'E' | b'L' => "float64",
        b'n' | b'N' | b'Z' => "string",
        b'a' => "int16[32]",
        _ => return None,
    })
}

impl BinType {
    fn new(f: &Format, units: &Units) -> Self {
        let names = units.field_units(f);
        let (unit_ids, _) = units.of_type(f.type_id);
        let instance_index = instance_field(&unit_ids);
        let mut schema = String::new();
        let mut plan = Planner {
            at: Some(0),
            ..Planner::default()
        };
        let mut taken: Vec<String> = Vec::new();
        let mut instance = None;
        let mut offset = MSG_HEADER_LEN;
        for (i, (c, label)) in f.format.bytes().zip(&f.labels).enumerate() {
            let (Some(size), Some(ty)) = (field_size(c), ros_type(c)) else {
                break;
            };
            if Some(i) == instance_index {
                instance = Some((offset, c));
            }
            let base = field_name(label);
            let mut name = base.clone();
            let mut k = 2;
            while taken.contains(&name) {
                name = format!("{base}_{k}");
                k += 1;
            }
            let unit = names.get(i).copied().flatten();
            let comment = unit.map_or_else(|| label.clone(), |u| format!("{label} [{u}]"));
            schema.push_str(&format!("{ty} {name}  # {comment}\n"));
            taken.push(name);
            match c {
                b'n' | b'N' | b'Z' => plan.string(offset, size),
                b'c' | b'C' | b'e' | b'E' | b'L' => plan.scaled(offset, c),
                b'a' => plan.copy(offset, size, 2),
                _ => plan.copy(offset, size, size),
            }
            offset += size;
        }
        if plan.ops.is_empty() {
            schema.push_str("uint8 structure_needs_at_least_one_member\n");
            plan.ops.push(BinOp::Empty);
        }
        Self {
            name: format!("{PACKAGE}/msg/{}", type_name(&f.name)),
            schema,
            ops: plan.ops,
            needed: offset,
            instance,
        }
    }

    /// `m` as CDR in `out` (cleared first). A message shorter than its type (which the
    /// framer never hands over) reads as zeros past its end.
    fn encode(&self, m: &[u8], out: &mut Vec<u8>) {
        let padded;
        let m = if m.len() < self.needed {
            padded = [m, &vec![0; self.needed - m.len()]].concat();
            &padded[..]
        } else {
            m
        };
        out.clear();
        out.extend_from_slice(&CDR_LE);
        for op in &self.ops {
            match *op {
                BinOp::Copy { offset, len } => out.extend_from_slice(&m[offset..offset + len]),
                BinOp::Pad { len } => out.resize(out.len() + len, 0),
                BinOp::Align { size } => align(out, size),
                BinOp::Scaled { offset, c } => {
                    let bytes = &m[offset..offset + field_size(c).unwrap_or(0)];
                    let v = value(c, bytes).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
                    out.extend_from_slice(&v.to_le_bytes());
                }
                BinOp::Str { offset, len } => {
                    let bytes = &m[offset..offset + len];
                    let end = memchr::memchr(0, bytes).unwrap_or(len);
                    write_string(out, &bytes[..end]);
                }
                BinOp::Empty => out.push(0),
            }
        }
    }
}

/// `XKF1` as a ROS 2 message name (a capital letter first: `T` before one that has none).
fn type_name(name: &str) -> String {
    let clean: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    match clean.starts_with(|c: char| c.is_ascii_uppercase()) {
        true => clean,
        false => format!("T{clean}"),
    }
}

/// What becomes of a type's messages, found at its first one (again after its FMT).
#[derive(Debug, Clone)]
enum Route {
    Skip,
    Text,
    /// A channel per instance, made at its first message.
    Channels {
        ty: Box<BinType>,
        channels: Vec<(u8, u32)>,
    },
}

/// Writes the ArduPilot flight in the DataFlash `files` (in log order) to `out` as MCAP, as
/// `options` select its window and types; see the module docs.
pub fn write_bin<W: Write + Send>(
    files: &[PathBuf],
    options: &ExportOptions,
    out: W,
) -> Result<ExportStats, ExportError> {
    let len = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    write_sized(len, options, ARDUPILOT_HARDWARE_ID, out, |sink| {
        let mut walk = BinMcap {
            options,
            routes: vec![None; 256],
            state: LogState::default(),
            follower: BinFollower::new(options.diagnostics),
            stats: ExportStats::default(),
            error: None,
        };
        each_dataflash_message(files, |m, f| {
            walk.message(sink, m, f);
            walk.error.is_none()
        })?;
        if let Some(e) = walk.error {
            return Err(e);
        }
        let detectors: Detectors = walk.follower.into_detectors();
        let mut stats = walk.stats;
        if sink.takes_findings() {
            for finding in
                (detectors.findings().iter()).filter(|f| options.in_window(f.timestamp_us))
            {
                sink.finding(finding)?;
                stats.findings += 1;
            }
        }
        Ok((stats, FlightMetadata::default()))
    })
}

/// The walk over an ArduPilot flight's messages, handing them to the MCAP sink.
struct BinMcap<'a> {
    options: &'a ExportOptions,
    routes: Vec<Option<Route>>,
    state: LogState,
    follower: BinFollower,
    stats: ExportStats,
    error: Option<ExportError>,
}

impl BinMcap<'_> {
    fn message(&mut self, sink: &mut ChunkSink, m: &[u8], f: &Format) {
        self.follower.message(m, f);
        let timestamp = match self.state.pass(m, f) {
            Passing::Defined(t) => {
                self.routes[usize::from(t)] = None;
                return;
            }
            Passing::Definition => return,
            Passing::Data { timestamp } => timestamp,
        };
        if !self.options.in_window(timestamp) {
            return;
        }
        let options = self.options;
        let route =
            self.routes[usize::from(f.type_id)].get_or_insert_with(|| match f.name.as_str() {
                "MSG" if options.wants("log") => Route::Text,
                "MSG" => Route::Skip,
                _ if !options.wants(&f.name) => Route::Skip,
                _ => Route::Channels {
                    ty: Box::new(BinType::new(f, &self.state.units)),
                    channels: Vec::new(),
                },
            });
        let result = match route {
            Route::Skip => Ok(()),
            Route::Text => {
                let text = f.field("Message").and_then(|(at, c)| {
                    let bytes = m.get(at..at + field_size(c)?)?;
                    match value(c, bytes)? {
                        Value::Text(t) => Some(t),
                        _ => None,
                    }
                });
                self.stats.log_messages += 1;
                sink.log(timestamp, TEXT_LEVEL, "ardupilot", text.unwrap_or(b""))
            }
            Route::Channels { ty, channels } => {
                let instance = ty.instance.map_or(0, |(at, c)| {
                    let bytes = m.get(at..at + field_size(c).unwrap_or(0));
                    let v = bytes.and_then(|b| value(c, b)).and_then(|v| v.as_f64());
                    v.map_or(0, |v| v.clamp(0.0, 255.0) as u8)
                });
                let channel = match channels.iter().find(|(i, _)| *i == instance) {
                    Some(&(_, channel)) => channel,
                    None => {
                        let topic = match instance {
                            0 => format!("/{}", f.name),
                            n => format!("/{}/{n}", f.name),
                        };
                        let schema = sink.schema(&ty.name, &ty.schema);
                        let channel = u32::from(sink.channel_of(schema, &topic));
                        channels.push((instance, channel));
                        self.stats.channels += 1;
                        channel
                    }
                };
                ty.encode(m, &mut sink.buffer);
                self.stats.samples += 1;
                sink.put(channel as u16, timestamp)
            }
        };
        if let Err(e) = result {
            self.error.get_or_insert(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::testing::{df, df_format};

    #[test]
    fn a_type_becomes_a_ros2_type_and_its_message_cdr() {
        let bat = df_format(40, "BAT", "QBfcnM", "TimeUS,Inst,Volt,Temp,Id,Mode");
        let mut units = Units::default();
        units.name_unit(b'#', "instance");
        units.name_unit(b'v', "V");
        units.set_type(40, b"s#vO--", b"F-----");
        let ty = BinType::new(&bat, &units);
        assert_eq!(ty.name, "ardupilot_dataflash/msg/BAT");
        assert_eq!(
            ty.schema,
            "uint64 timeus  # TimeUS\nuint8 inst  # Inst [instance]\nfloat32 volt  # Volt [V]\n\
             float64 temp  # Temp\nstring id  # Id\nuint8 mode  # Mode\n"
        );
        assert_eq!(ty.instance, Some((11, b'B')));
        let mut body = 7u64.to_le_bytes().to_vec();
        body.push(1);
        body.extend_from_slice(&12.5f32.to_le_bytes());
        body.extend_from_slice(&(-250i16).to_le_bytes());
        body.extend_from_slice(b"ab\0\0");
        body.push(5);
        let mut out = Vec::new();
        ty.encode(&df(&bat, &body), &mut out);
        let mut want = CDR_LE.to_vec();
        want.extend_from_slice(&7u64.to_le_bytes());
        want.push(1);
        want.extend_from_slice(&[0; 3]);
        want.extend_from_slice(&12.5f32.to_le_bytes());
        want.extend_from_slice(&(-2.5f64).to_le_bytes());
        want.extend_from_slice(&3u32.to_le_bytes());
        want.extend_from_slice(b"ab\0");
        want.push(5);
        assert_eq!(out, want);
    }

    /// The CDR of `m`, field by field: what the planned steps must equal.
    fn field_by_field(f: &Format, m: &[u8]) -> Vec<u8> {
        let mut out = CDR_LE.to_vec();
        let mut offset = MSG_HEADER_LEN;
        for c in f.format.bytes() {
            let size = field_size(c).unwrap();
            let bytes = &m[offset..offset + size];
            match c {
                b'n' | b'N' | b'Z' => {
                    let end = bytes.iter().position(|&b| b == 0).unwrap_or(size);
                    write_string(&mut out, &bytes[..end]);
                }
                b'c' | b'C' | b'e' | b'E' | b'L' => {
                    align(&mut out, 8);
                    let v = value(c, bytes).unwrap().as_f64().unwrap();
                    out.extend_from_slice(&v.to_le_bytes());
                }
                b'a' => {
                    align(&mut out, 2);
                    out.extend_from_slice(bytes);
                }
                _ => {
                    align(&mut out, size);
                    out.extend_from_slice(bytes);
                }
            }
            offset += size;
        }
        out
    }

    #[test]
    fn the_planned_steps_encode_as_field_by_field_and_join_what_lies_together() {
        let formats = [
            "QfffffffffffffffffffffffB",
            "QBfcnM",
            "QBhHiIqQdcCeEL",
            "QZfhIa",
            "QNbHnBdLf",
            "QbbbbbbbbHHHHIIIIqqqq",
            "QaaB",
        ];
        for (i, format) in formats.iter().enumerate() {
            let labels: Vec<String> = (0..format.len()).map(|k| format!("F{k}")).collect();
            let f = df_format(50 + i as u8, "TEST", format, &labels.join(","));
            let ty = BinType::new(&f, &Units::default());
            let len = usize::from(f.length) - MSG_HEADER_LEN;
            for seed in 0..20u32 {
                let body: Vec<u8> = (0..len as u32)
                    .map(|k| (k.wrapping_mul(2_654_435_761).wrapping_add(seed * 97) >> 7) as u8)
                    .map(|b| if seed % 3 == 0 && b % 5 == 0 { 0 } else { b })
                    .collect();
                let m = df(&f, &body);
                let mut out = Vec::new();
                ty.encode(&m, &mut out);
                assert_eq!(out, field_by_field(&f, &m), "{format}, seed {seed}");
            }
        }
        // A type without text nor scaled fields, all of one size after its time: one copy.
        let sim2 = df_format(60, "SIM2", "Qffffff", "TimeUS,A,B,C,D,E,F");
        let ty = BinType::new(&sim2, &Units::default());
        assert_eq!(ty.ops, vec![BinOp::Copy { offset: 3, len: 32 }]);
    }
}
