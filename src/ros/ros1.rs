//! ROS 1 message types for the ROS bag exports: the definition text a bag's connection
//! carries (the ROS 2 text of [`super::ros2`] without ROS 2's empty-message member; the two
//! grammars agree on everything else we write), its MD5 sum as ROS 1 computes it, and
//! `rosgraph_msgs/Log` for the logged strings.
//!
//! The MD5 sum (genmsg's `compute_md5_text`): per type, its constants as `type NAME=value`,
//! then its fields as `type name`, a field of a nested type written with that type's MD5 sum
//! in place of the type (array brackets dropped), comments and blank lines left out; the
//! lines joined by newlines; the sum of that text.
//!
//! A sample's ROS 1 serialisation ([`Ros2Type::encode_ros1`]) is the same walk as its CDR
//! one, packed.

use md5::{Digest, Md5};

use super::ros2::{Ros2Type, ShortSample};

/// Separates a definition's types (80 `=`).
const SEPARATOR: &str =
    "================================================================================";

/// ROS 1's built-in field types.
const BUILTIN: [&str; 17] = [
    "bool", "byte", "char", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "float32", "float64", "string", "time", "duration", "Header",
];

/// The ROS 1 definition of a type whose ROS 2 text is `ros2_text` (ours: the member ROS 2
/// gives an empty message is left out).
pub fn definition_from_ros2(ros2_text: &str) -> String {
    ros2_text
        .lines()
        .filter(|l| *l != "uint8 structure_needs_at_least_one_member")
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The MD5 sum (32 hex digits) of the type `name` defined by `definition` (its own fields
/// first, then each dependency behind a separator and a `MSG: package/Type` line).
pub fn md5sum(definition: &str, name: &str) -> String {
    let mut sections: Vec<(String, Vec<&str>)> = vec![(name.to_owned(), Vec::new())];
    for line in definition.lines() {
        if line.starts_with(SEPARATOR) {
            continue;
        }
        if let Some(dep) = line.strip_prefix("MSG: ") {
            sections.push((dep.trim().to_owned(), Vec::new()));
            continue;
        }
        sections.last_mut().expect("one at least").1.push(line);
    }
    section_md5(&sections, 0, name)
}

/// The short name a field refers to a type by, and the package of the type it sits in:
/// `Time` in `pkg/X` means `pkg/Time`; `Header` means `std_msgs/Header`.
fn resolve(type_name: &str, within: &str) -> String {
    if type_name == "Header" {
        return "std_msgs/Header".to_owned();
    }
    if type_name.contains('/') {
        return type_name.replace("/msg/", "/");
    }
    let package = within.split('/').next().unwrap_or("");
    format!("{package}/{type_name}")
}

fn section_md5(sections: &[(String, Vec<&str>)], index: usize, name: &str) -> String {
    let (_, lines) = &sections[index];
    let mut constants = Vec::new();
    let mut fields = Vec::new();
    for line in lines {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((ty, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let rest = rest.trim();
        if let Some((constant, value)) = rest.split_once('=') {
            constants.push(format!("{ty} {}={}", constant.trim(), value.trim()));
            continue;
        }
        let base = ty.split('[').next().unwrap_or(ty);
        if BUILTIN.contains(&base) && base != "Header" {
            fields.push(format!("{ty} {rest}"));
        } else {
            let full = resolve(base, name);
            let found = sections
                .iter()
                .position(|(n, _)| n.replace("/msg/", "/") == full);
            let sum = match found {
                Some(i) => section_md5(sections, i, &full),
                None => String::new(),
            };
            fields.push(format!("{sum} {rest}"));
        }
    }
    let text = constants
        .into_iter()
        .chain(fields)
        .collect::<Vec<_>>()
        .join("\n");
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Ros2Type {
    /// The ROS 1 name of the type (`px4_ulog/VehicleAttitude`).
    pub fn ros1_name(&self) -> String {
        self.name.replacen("/msg/", "/", 1)
    }

    /// Writes the ROS 1 serialisation of one sample's data into `out` (cleared first): the
    /// same values, packed without alignment and without an encapsulation header, strings
    /// as their length and bytes (no NUL), nothing for a type without fields.
    pub fn encode_ros1(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), ShortSample> {
        self.serialise::<false>(data, out, write_string)
    }
}

/// The type of logged strings in a ROS 1 bag.
pub const LOG_TYPE: &str = "rosgraph_msgs/Log";

/// `rosgraph_msgs/Log` with its dependency, as ROS 1 defines it (comments left out).
pub const LOG_DEFINITION: &str = "\
byte DEBUG=1
byte INFO=2
byte WARN=4
byte ERROR=8
byte FATAL=16
Header header
byte level
string name
string msg
string file
string function
uint32 line
string[] topics
================================================================================
MSG: std_msgs/Header
uint32 seq
time stamp
string frame_id
";

/// The `rosgraph_msgs/Log` level of a ULog log level (the syslog digit, or its value).
pub fn log_level(ulog_level: u8) -> u8 {
    match super::ros2::log_level(ulog_level) {
        50 => 16,
        40 => 8,
        30 => 4,
        20 => 2,
        _ => 1,
    }
}

/// Appends a ROS 1 string: its length (uint32), its bytes (not UTF-8 ones as `?`).
pub fn write_string(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    if std::str::from_utf8(text).is_ok() {
        out.extend_from_slice(text);
    } else {
        out.extend(text.iter().map(|&b| if b.is_ascii() { b } else { b'?' }));
    }
}

/// Writes a logged string as `rosgraph_msgs/Log` into `out` (cleared first).
pub fn encode_log(
    timestamp_us: u64,
    ulog_level: u8,
    name: &str,
    text: &[u8],
    sequence: u32,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&sequence.to_le_bytes());
    let (sec, nsec) = ros_time(timestamp_us);
    out.extend_from_slice(&sec.to_le_bytes());
    out.extend_from_slice(&nsec.to_le_bytes());
    write_string(out, b"");
    out.push(log_level(ulog_level));
    write_string(out, name.as_bytes());
    write_string(out, text);
    write_string(out, b"");
    write_string(out, b"");
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// ROS 1 time (seconds, nanoseconds) of a time in µs (seconds saturate at `u32::MAX`).
pub fn ros_time(us: u64) -> (u32, u32) {
    let sec = (us / 1_000_000).min(u32::MAX as u64) as u32;
    let nsec = ((us % 1_000_000) * 1000) as u32;
    (sec, nsec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_sums_are_ros1s() {
        // As the ROS 1 packages publish them.
        assert_eq!(
            md5sum(LOG_DEFINITION, LOG_TYPE),
            "acffd30cd6b6de30f120938c17c593fb"
        );
        assert_eq!(
            md5sum(
                "uint32 seq\ntime stamp\nstring frame_id\n",
                "std_msgs/Header"
            ),
            "2176decaecbce78abc3b96ef049fabed"
        );
        assert_eq!(
            md5sum("float64 x\nfloat64 y\nfloat64 z\n", "geometry_msgs/Vector3"),
            "4a842b65f413084dc2b10fb484ea7f17"
        );
    }

    #[test]
    fn the_empty_member_goes_and_log_levels_map() {
        assert_eq!(
            definition_from_ros2("uint8 structure_needs_at_least_one_member\n"),
            ""
        );
        let levels: Vec<u8> = (b'0'..=b'7').map(log_level).collect();
        assert_eq!(levels, [16, 16, 16, 8, 4, 2, 2, 1]);
    }
}
