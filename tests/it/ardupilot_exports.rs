//! An ArduPilot flight exported as MCAP (`ulog-recv export LOG.bin -o F.mcap`), read by the
//! Python `mcap` reader against pymavlink (`tests/mcap_read_bin.py`), and as the fleet's
//! tables (`ulog-recv export LOG.bin --dataset DIR`):
//! ArduPilot's own logs (`../shared/testdata/bin/`), and a session of `.bin` splits written
//! from one as the daemon writes a stream, read back by pyarrow alone and held against
//! pymavlink's DFReader reading the `.bin` (`tests/dataset_read_bin.py`): every type and
//! instance, its rows, timestamps, first and last values and sums with FMTU's multipliers
//! applied, the units; the texts, parameters and their changes; the flight's row, its
//! failsafe from the vehicle's `ERR` records; the radio failsafe's finding beside what the
//! vehicle logged of it.

use std::path::Path;
use std::process::Command;

use crate::common::ardupilot::{ardupilot_logs, write_bin_session};
use crate::common::procs::{files_under, fresh_dir, run_ok};
use crate::common::{json_output, project, text_output, venv_python};

/// pyarrow's reading of `flight`'s tables under `root`, held against pymavlink's of `log`.
fn read_against_pymavlink(py: &Path, root: &Path, flight: &str, log: &Path) -> serde_json::Value {
    json_output(
        Command::new(py)
            .arg(project().join("tests/dataset_read_bin.py"))
            .arg(root)
            .arg(flight)
            .arg(log),
    )
}

#[test]
fn ardupilots_logs_and_sessions_export_to_tables_as_pymavlink_reads_them() {
    let Some(py) = venv_python() else { return };
    let Some(logs) = ardupilot_logs() else { return };
    let root = fresh_dir("ardupilot-tables");
    for log in &logs {
        run_ok(&[
            "export",
            log.to_str().unwrap(),
            "--dataset",
            root.to_str().unwrap(),
        ]);
        let stem = log.file_stem().unwrap().to_str().unwrap();
        let report = read_against_pymavlink(&py, &root, stem, log);
        eprintln!("{stem}: {report}");
        assert!(report["tables"].as_u64().unwrap() > 50, "{report}");
        assert!(
            report["checked_values"].as_u64().unwrap() > 500_000,
            "{report}"
        );
        // The radio failsafe log's ERR says so, and the flights row with it.
        let failsafe = stem.contains("failsafe");
        assert_eq!(report["failsafe"], failsafe, "{report}");
    }
    // The finding beside what the vehicle logged of it.
    let script = "import duckdb, sys\n\
        print(duckdb.sql(\"SELECT analyzer, vehicle_said FROM read_parquet('\" + sys.argv[1] + \
        \"/parquet/v1/diagnostics/*/*/sitl_copter_rc_failsafe.parquet')\").fetchall())";
    let said = text_output(Command::new(&py).args(["-c", script]).arg(&root));
    assert!(
        said.contains("'rc_loss', 'ERR radio: late frame at 57.035 s; ERR radio failsafe: occurred at 57.035 s'"),
        "{said}"
    );
    // A session of splits, each opening with the log's state replayed, is the one log.
    let sessions = fresh_dir("ardupilot-tables-session");
    let Some(session) = write_bin_session(&sessions) else {
        return;
    };
    let splits = files_under(&session)
        .iter()
        .filter(|f| f.ends_with(".bin"))
        .count();
    assert!(splits >= 5, "{splits} splits");
    let root = fresh_dir("ardupilot-tables-of-session");
    run_ok(&[
        "export",
        session.to_str().unwrap(),
        "--dataset",
        root.to_str().unwrap(),
    ]);
    let hover = logs
        .iter()
        .find(|l| l.ends_with("sitl_copter_hover.bin"))
        .expect("the hover log");
    let name = session.file_name().unwrap().to_str().unwrap();
    let report = read_against_pymavlink(&py, &root, name, hover);
    eprintln!("session of {splits} splits: {report}");
    assert!(
        report["checked_values"].as_u64().unwrap() > 500_000,
        "{report}"
    );
}

/// pymavlink's reading of `log` held against the MCAP `file` (`tests/mcap_read_bin.py`).
fn read_mcap_against_pymavlink(py: &Path, file: &Path, log: &Path) -> serde_json::Value {
    json_output(
        Command::new(py)
            .arg(project().join("tests/mcap_read_bin.py"))
            .arg(file)
            .arg(log),
    )
}

#[test]
fn ardupilots_logs_and_sessions_export_to_mcap_as_pymavlink_reads_them() {
    let Some(py) = venv_python() else { return };
    let Some(logs) = ardupilot_logs() else { return };
    let dir = fresh_dir("ardupilot-mcap");
    std::fs::create_dir_all(&dir).unwrap();
    for log in &logs {
        let stem = log.file_stem().unwrap().to_str().unwrap();
        let file = dir.join(format!("{stem}.mcap"));
        let said = run_ok(&[
            "export",
            log.to_str().unwrap(),
            "-o",
            file.to_str().unwrap(),
        ]);
        let report = read_mcap_against_pymavlink(&py, &file, log);
        eprintln!("{stem}: {said} {report}");
        assert!(report["channels"].as_u64().unwrap() > 50, "{report}");
        assert!(
            report["checked_values"].as_u64().unwrap() > 500_000,
            "{report}"
        );
        // The radio failsafe's finding on /diagnostics; none in the clean hover.
        let findings = u64::from(stem.contains("failsafe"));
        assert_eq!(report["findings"], findings, "{report}");
    }
    // Any other output is refused, saying what an ArduPilot flight exports to.
    let out = Command::new(crate::common::procs::BIN)
        .args(["export", logs[0].to_str().unwrap(), "-o"])
        .arg(dir.join("flight.bag"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("it exports to NAME.mcap or NAME.bin, or as tables (--dataset)"),
        "{said}"
    );
    // A session of splits is the one log.
    let Some(session) = write_bin_session(&dir.join("logs")) else {
        return;
    };
    let file = dir.join("session.mcap");
    run_ok(&[
        "export",
        session.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    let hover = logs
        .iter()
        .find(|l| l.ends_with("sitl_copter_hover.bin"))
        .expect("the hover log");
    let report = read_mcap_against_pymavlink(&py, &file, hover);
    eprintln!("session: {report}");
    assert!(
        report["checked_values"].as_u64().unwrap() > 500_000,
        "{report}"
    );
}
