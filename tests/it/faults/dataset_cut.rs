//! The Parquet export's commit cut by the power, on LazyFS: `export --dataset` of a real log
//! (a table per topic, each written under a hidden temporary name, synced, then all renamed)
//! with the power gone while a table is written, at a table's sync, before and after a
//! rename. After each cut every table an engine sees (pyarrow, which skips the hidden
//! temporaries) reads whole; the export run again leaves the dataset as pyulog decodes the
//! log, every sample once, and no temporary behind.

use std::process::Command;
use std::time::Duration;

use crate::common::lazyfs::LazyFs;
use crate::common::procs::{Proc, files_under, run_ok};
use crate::common::{self, json_output, project, venv_python};

/// Where the power goes: LazyFS dies before (or after) the step.
enum Step {
    At(bool, &'static str),
    Rename(bool),
}

const STEPS: &[Step] = &[
    Step::At(true, "write"),
    Step::At(true, "fsync"),
    Step::Rename(true),
    Step::Rename(false),
];

#[test]
fn an_export_cut_by_the_power_leaves_only_whole_tables_and_runs_again_to_the_whole_dataset() {
    let Some(py) = venv_python() else {
        return;
    };
    let Some(logs) = common::shared_logs() else {
        return;
    };
    let log = logs
        .into_iter()
        .find(|p| p.ends_with("sample.ulg"))
        .expect("sample.ulg among the real logs");
    let Some(mut fs) = LazyFs::mount("dataset-cut", &[]) else {
        return;
    };
    let root = fs.mount.join("fleet");
    for step in STEPS {
        let what = match step {
            Step::At(before, op) => {
                fs.remount(&[]);
                let _ = std::fs::remove_dir_all(&root);
                fs.crash_at(*before, op, r"\.partial");
                format!(
                    "{} {op} of a table",
                    if *before { "before" } else { "after" }
                )
            }
            Step::Rename(before) => {
                fs.remount(&[]);
                let _ = std::fs::remove_dir_all(&root);
                fs.crash_at_rename(*before, r"\.partial", r"\.parquet");
                format!(
                    "{} a table's rename",
                    if *before { "before" } else { "after" }
                )
            }
        };
        let mut export = Proc::spawn(
            "the export",
            &[
                "export".into(),
                log.display().to_string(),
                "--dataset".into(),
                root.display().to_string(),
            ],
        );
        let crashed = fs.wait_crashed(Duration::from_secs(60));
        let _ = export.0.kill();
        let _ = export.0.wait();
        assert!(crashed, "{what}: the export never came to it");
        fs.remount(&[]);
        // What an engine sees: whole tables only.
        let visible: Vec<String> = files_under(&root)
            .into_iter()
            .filter(|f| !f.rsplit('/').next().unwrap_or("").starts_with('.'))
            .collect();
        let read = json_output(Command::new(&py).arg("-c").arg(READ_ALL).arg(&root));
        assert_eq!(
            read["read"].as_u64().unwrap() as usize,
            visible.len(),
            "{what}: {read}"
        );
        eprintln!(
            "{what}: {} tables visible after the cut, each whole",
            visible.len()
        );
        // Again, to its end: the whole dataset, nothing left behind.
        run_ok(&[
            "export",
            &log.display().to_string(),
            "--dataset",
            &root.display().to_string(),
        ]);
        let report = json_output(
            Command::new(&py)
                .arg(project().join("tests/dataset_read.py"))
                .arg(&root)
                .arg(log.with_extension("expected.json")),
        );
        assert!(
            report["checked_values"].as_u64().unwrap() > 0,
            "{what}: {report}"
        );
        let left: Vec<String> = files_under(&root)
            .into_iter()
            .filter(|f| f.ends_with(".partial"))
            .collect();
        assert!(left.is_empty(), "{what}: temporaries left: {left:?}");
    }
}

/// Reads every Parquet file an engine sees under the root (argv[1]) with pyarrow.
const READ_ALL: &str = "import glob, json, sys\n\
import pyarrow.parquet as pq\n\
files = glob.glob(sys.argv[1] + '/**/*.parquet', recursive=True)\n\
rows = sum(pq.read_table(f).num_rows for f in files)\n\
print(json.dumps({'read': len(files), 'rows': rows}))\n";
