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
    /// Each field's offset in a message (its header included) and character.
    fields: Vec<(usize, u8)>,
    /// The instance field's offset and character.
    instance: Option<(usize, u8)>,
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
        let mut fields = Vec::new();
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
            fields.push((offset, c));
            offset += size;
        }
        if fields.is_empty() {
            schema.push_str("uint8 structure_needs_at_least_one_member\n");
        }
        Self {
            name: format!("{PACKAGE}/msg/{}", type_name(&f.name)),
            schema,
            fields,
            instance,
        }
    }

    /// `m` as CDR in `out` (cleared first).
    fn encode(&self, m: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&CDR_LE);
        if self.fields.is_empty() {
            out.push(0);
        }
        for &(at, c) in &self.fields {
            let size = field_size(c).unwrap_or(0);
            let bytes = m.get(at..at + size).unwrap_or(&[]);
            match c {
                b'n' | b'N' | b'Z' => {
                    let end = memchr::memchr(0, bytes).unwrap_or(bytes.len());
                    write_string(out, &bytes[..end]);
                }
                b'c' | b'C' | b'e' | b'E' | b'L' => {
                    let v = value(c, bytes).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
                    align(out, 8);
                    out.extend_from_slice(&v.to_le_bytes());
                }
                b'a' => {
                    align(out, 2);
                    out.extend_from_slice(bytes);
                }
                _ => {
                    align(out, size);
                    out.extend_from_slice(bytes);
                }
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
}
