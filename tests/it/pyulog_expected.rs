//! Our decoding of every log equals what pyulog decodes from it (`NAME.expected.json`): the
//! real PX4 logs in ../shared and the project's synthetic logs in testdata/.

use crate::common;

use common::{all_logs, compare, expected_for, pyulog_view};

#[test]
fn every_log_decodes_as_pyulog_decodes_it() {
    let logs = all_logs();
    let mut failures = Vec::new();
    for log in &logs {
        let bytes = std::fs::read(log).unwrap();
        let ours = pyulog_view(&bytes, bytes.len());
        let mut expected = expected_for(log);
        // Fields of the dump that describe pyulog itself or that we do not derive.
        for key in ["decoder", "file", "file_corruption"] {
            expected.as_object_mut().unwrap().remove(key);
        }
        assert_eq!(expected["file_corruption"], serde_json::Value::Null);
        let mut diffs = Vec::new();
        compare("", &ours, &expected, false, &mut diffs);
        if !diffs.is_empty() {
            failures.push(format!("{}:\n  {}", log.display(), diffs.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{} logs decoded as pyulog decodes them", logs.len());
}
