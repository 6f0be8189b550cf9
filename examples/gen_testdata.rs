//! Regenerates `testdata/synthetic.ulg` from [`ulog_recv::synth`]. After running it, refresh
//! pyulog's view of the file with
//! `python3 tests/pyulog_dump.py testdata/synthetic.ulg > testdata/synthetic.expected.json`.

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    std::fs::create_dir_all(&dir)?;
    let bytes = ulog_recv::synth::generate(ulog_recv::synth::SynthOptions::default());
    std::fs::write(dir.join("synthetic.ulg"), &bytes)?;
    println!("wrote testdata/synthetic.ulg ({} bytes)", bytes.len());
    Ok(())
}
