//! Flight diagnostics' findings as ROS 2 `diagnostic_msgs/msg/DiagnosticArray`, the type
//! Foxglove's Diagnostics panels (summary and detail) and `rqt_runtime_monitor` show: the
//! live Foxglove server's `/diagnostics` channel and the MCAP export's.
//!
//! One finding is one array of one status:
//! - `header.stamp`: when the finding was made ([`Finding::made_at_us`]), `frame_id` empty;
//! - `level`: OK for an `info` finding, WARN for a `warning`, ERROR for a `critical`;
//! - `name`: the analyzer (`motor_failure`), `hardware_id`: the autopilot whose flight it
//!   is ([`PX4_HARDWARE_ID`], [`ARDUPILOT_HARDWARE_ID`]);
//! - `message`: the finding's summary;
//! - `values`: `severity`, `start_us`, `end_us` (for a finding that spans a window), then the
//!   evidence's fields as Flight Review v2 names them (`motor_index`, `pwm_value`, ...), each
//!   as text (numbers as JSON writes them; a field without a value is left out).

use crate::diagnose::{Finding, Severity};
use crate::ros::ros2::{CDR_LE, align, write_string};

/// The schema name of the diagnostics channel.
pub const DIAGNOSTICS_TYPE: &str = "diagnostic_msgs/msg/DiagnosticArray";

/// The channel's topic, live and in the MCAP export.
pub const DIAGNOSTICS_TOPIC: &str = "/diagnostics";

/// The `hardware_id` of a PX4 flight's statuses: what the findings are about.
pub const PX4_HARDWARE_ID: &str = "px4";
/// The `hardware_id` of an ArduPilot flight's statuses.
pub const ARDUPILOT_HARDWARE_ID: &str = "ardupilot";

/// The `ros2msg` text of `diagnostic_msgs/msg/DiagnosticArray` with its dependencies, as ROS 2
/// defines it (comments left out).
pub const DIAGNOSTICS_SCHEMA: &str = "\
std_msgs/Header header
DiagnosticStatus[] status
================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
================================================================================
MSG: diagnostic_msgs/DiagnosticStatus
byte OK=0
byte WARN=1
byte ERROR=2
byte STALE=3
byte level
string name
string message
string hardware_id
KeyValue[] values
================================================================================
MSG: diagnostic_msgs/KeyValue
string key
string value
";

/// The `DiagnosticStatus` level of a finding's severity.
pub fn status_level(severity: Severity) -> u8 {
    match severity {
        Severity::Info => 0,
        Severity::Warning => 1,
        Severity::Critical => 2,
    }
}

/// The status's `values` of `finding` (see the module docs).
pub fn status_values(finding: &Finding) -> Vec<(String, String)> {
    let mut values = vec![
        ("severity".to_owned(), finding.severity.to_string()),
        ("start_us".to_owned(), finding.timestamp_us.to_string()),
    ];
    if let Some(end) = finding.end_timestamp_us {
        values.push(("end_us".to_owned(), end.to_string()));
    }
    // Through the JSON text, so that an `f32` reads as JSON writes it (`19.2`, not the `f64`
    // it widens to).
    let evidence = serde_json::to_string(&finding.evidence).map(|t| serde_json::from_str(&t));
    if let Ok(Ok(serde_json::Value::Object(fields))) = evidence {
        for (key, value) in fields {
            let text = match value {
                serde_json::Value::Null => continue,
                serde_json::Value::String(s) if key == "type" => {
                    values.push(("evidence".to_owned(), s));
                    continue;
                }
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            values.push((key, text));
        }
    }
    values
}

/// Writes `finding`, of the flight of `hardware_id`, as a
/// `diagnostic_msgs/msg/DiagnosticArray` CDR message into `out` (cleared first).
pub fn encode_finding(finding: &Finding, hardware_id: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&CDR_LE);
    let at = finding.made_at_us();
    let sec = (at / 1_000_000).min(i32::MAX as u64) as i32;
    let nanosec = ((at % 1_000_000) * 1000) as u32;
    out.extend_from_slice(&sec.to_le_bytes());
    out.extend_from_slice(&nanosec.to_le_bytes());
    write_string(out, b"");
    align(out, 4);
    out.extend_from_slice(&1u32.to_le_bytes());
    out.push(status_level(finding.severity));
    write_string(out, finding.id.as_str().as_bytes());
    write_string(out, finding.summary.as_bytes());
    write_string(out, hardware_id.as_bytes());
    let values = status_values(finding);
    align(out, 4);
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for (key, value) in &values {
        write_string(out, key.as_bytes());
        write_string(out, value.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::{AnalyzerId, Evidence};
    use crate::ros::ros2::schema_definitions;

    fn motor() -> Finding {
        Finding {
            id: AnalyzerId::MotorFailure,
            summary: "Motor 2 output dropped to zero".into(),
            severity: Severity::Critical,
            timestamp_us: 15_000_000,
            end_timestamp_us: None,
            evidence: Evidence::MotorFailure {
                motor_index: 2,
                pwm_value: 0.0,
                failure_mode: "drop_to_zero".into(),
                flight_mode: "Position".into(),
            },
        }
    }

    #[test]
    fn the_schema_lists_each_nested_type_once_with_its_dependencies() {
        let defs = schema_definitions(DIAGNOSTICS_TYPE, DIAGNOSTICS_SCHEMA);
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "diagnostic_msgs/msg/DiagnosticArray",
                "std_msgs/msg/Header",
                "builtin_interfaces/msg/Time",
                "diagnostic_msgs/msg/DiagnosticStatus",
                "diagnostic_msgs/msg/KeyValue"
            ]
        );
    }

    #[test]
    fn a_finding_is_one_status_with_its_evidence_as_text() {
        let f = motor();
        let values = status_values(&f);
        let get = |k: &str| {
            values
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("severity"), Some("critical"));
        assert_eq!(get("start_us"), Some("15000000"));
        assert_eq!(get("end_us"), None);
        assert_eq!(get("evidence"), Some("MotorFailure"));
        assert_eq!(get("motor_index"), Some("2"));
        assert_eq!(get("failure_mode"), Some("drop_to_zero"));
        let mut out = Vec::new();
        encode_finding(&f, PX4_HARDWARE_ID, &mut out);
        // Stamp, empty frame id, one status at level ERROR named after the analyzer.
        assert_eq!(&out[4..8], &15i32.to_le_bytes());
        assert_eq!(&out[8..12], &0u32.to_le_bytes());
        assert_eq!(&out[12..17], &[1, 0, 0, 0, 0]);
        assert_eq!(&out[20..24], &1u32.to_le_bytes());
        assert_eq!(out[24], 2);
        assert_eq!(&out[28..32], &14u32.to_le_bytes());
        assert_eq!(&out[32..45], b"motor_failure");
    }
}
