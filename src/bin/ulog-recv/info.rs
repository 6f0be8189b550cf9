//! `ulog-recv info`: a .ulg file, or a session (what fills recovered, what is still missing,
//! then its flight), summarised as text or JSON.

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use ulog_recv::store::events::EventSource;

/// `println!` for a command whose output may be cut short (`ulog-recv info FILE | head`): a
/// closed pipe ends the process quietly, as it ends `cat`; another write error is said once.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        match writeln!(std::io::stdout().lock(), $($arg)*) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
            Err(e) => {
                eprintln!("ulog-recv: cannot write the output: {e}");
                std::process::exit(1)
            }
        }
    }};
}
use ulog_recv::ulog::summary::{OwnedValue, Summary, SummaryBuilder};

pub(crate) fn info(path: &Path, json: bool) -> anyhow::Result<()> {
    if path.is_file() && ulog_recv::export::tide::read::is_tide(path) {
        return tide_info(path, json);
    }
    if let Some(json_or_text) = dataflash_info(path, json) {
        return json_or_text;
    }
    let mut builder = SummaryBuilder::default();
    let input = ulog_recv::store::input::log_input(path)?;
    if input == ulog_recv::store::input::LogInput::Snippet {
        // A referencing snippet: the bytes it references, summarised as a file's.
        let stream = ulog_recv::store::reference::read_reference(path, None)
            .with_context(|| format!("cannot read {}", path.display()))?;
        builder
            .push(&stream)
            .with_context(|| format!("{} cannot be read", path.display()))?;
        return print_summary(builder.finish(), json);
    }
    if input == ulog_recv::store::input::LogInput::Session {
        return session_info(path, json);
    }
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    read_in_pieces(&mut file, path, |piece| {
        builder
            .push(piece)
            .with_context(|| format!("{} cannot be read", path.display()))
    })?;
    print_summary(builder.finish(), json)
}

/// Hands `file` (at `path`) to `each` in pieces, to its end.
fn read_in_pieces(
    file: &mut std::fs::File,
    path: &Path,
    mut each: impl FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        each(&buf[..n])?;
    }
}

/// A DataFlash log (ArduPilot's `.bin`: it begins with an FMT record) or an ArduPilot
/// session; `None` for anything else.
fn dataflash_info(path: &Path, json: bool) -> Option<anyhow::Result<()>> {
    use ulog_recv::autopilot::LogFormat;
    use ulog_recv::dataflash::BinSummaryBuilder;
    if path.is_dir() {
        let manifest = ulog_recv::store::manifest::read_manifest(path).ok()?;
        if manifest.log_format != LogFormat::DataFlash {
            return None;
        }
        return Some((|| {
            let report = ulog_recv::report::bin_session::BinSessionReport::read(path)?;
            if json {
                say!("{}", serde_json::to_string_pretty(&report)?);
                return Ok(());
            }
            let s = &report.session;
            say!(
                "Session {}: {}, {} split(s){}, {} dropout(s) as received ({:.1} s of log)",
                path.display(),
                s.autopilot,
                s.splits,
                if s.closed { "" } else { " (still recording)" },
                s.dropouts_received,
                s.dropout_ms as f64 / 1e3
            );
            for e in &s.events {
                say!(
                    "  event {} at {:.3} s ({}): {}",
                    e.name,
                    e.at_us as f64 / 1e6,
                    e.finding
                        .as_ref()
                        .map_or("diagnostic", |f| f.severity.as_str()),
                    e.detail
                );
            }
            if !s.amendments.is_empty() {
                say!(
                    "Filled from the vehicle's card: {} gap(s) ({} partly: the card's log lost \
                     records there too), {} record(s) recovered, in {}",
                    s.gaps_filled,
                    s.gaps_filled_partly,
                    s.records_recovered,
                    s.amendments.join(", ")
                );
            }
            print_unfilled(&s.unfilled);
            print_bin_summary(&report.flight);
            Ok(())
        })());
    }
    ulog_recv::store::input::dataflash_files(path)?;
    Some((|| {
        let mut builder = BinSummaryBuilder::default();
        let mut file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        read_in_pieces(&mut file, path, |piece| {
            builder.push(piece);
            Ok(())
        })?;
        let summary = builder.finish();
        if json {
            say!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            print_bin_summary(&summary);
        }
        Ok(())
    })())
}

/// The gaps the last fill left, each with why.
fn print_unfilled(unfilled: &[ulog_recv::store::amend::UnfilledGap]) {
    for u in unfilled {
        say!("Not filled: {} at byte {}: {}", u.split, u.offset, u.reason);
    }
}

fn print_bin_summary(s: &ulog_recv::dataflash::BinSummary) {
    let secs = |t: Option<u64>| t.unwrap_or(0) as f64 * 1e-6;
    say!(
        "DataFlash log (ArduPilot) of {}: log time {:.3} s to {:.3} s after boot ({:.1} s), {} \
         messages of {} types, {} parameters",
        s.vehicle.as_deref().unwrap_or("an unnamed vehicle"),
        secs(s.first_us),
        secs(s.last_us),
        secs(s.last_us) - secs(s.first_us),
        s.messages,
        s.types.len(),
        s.parameters
    );
    let lost_ms: u64 = s.dropouts.iter().filter_map(|d| d.duration_ms).sum();
    say!(
        "Lost: {} dropout(s) on the link ({:.1} s of log), {} message(s) the vehicle dropped \
         at the source (its DMS counts){}",
        s.dropouts.len(),
        lost_ms as f64 / 1e3,
        s.dropped_at_source,
        if s.skipped_bytes > 0 {
            format!(", {} bytes that were not whole messages", s.skipped_bytes)
        } else {
            String::new()
        }
    );
    say!("\n{:<8} {:>9} {:>10}", "Type", "messages", "rate (Hz)");
    for t in &s.types {
        say!("{:<8} {:>9} {:>10.1}", t.name, t.messages, t.rate_hz);
    }
}

fn print_summary(summary: Summary, json: bool) -> anyhow::Result<()> {
    if json {
        say!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_text(&summary);
    }
    Ok(())
}

/// A session directory: its splits, what fills recovered and what is still missing, then the
/// flight (splits joined, amendments merged) summarised as a file is.
fn session_info(dir: &Path, json: bool) -> anyhow::Result<()> {
    let secs = |us: u64| us as f64 / 1e6;
    let report = ulog_recv::report::session::SessionReport::read(dir)?;
    if json {
        say!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let s = &report.session;
    say!(
        "Session {}: {} split(s){}, {} dropout(s) as received",
        dir.display(),
        s.splits,
        if s.closed { "" } else { " (still recording)" },
        s.dropouts_received
    );
    if s.columns.len() > 1 {
        for c in &s.columns {
            say!(
                "  column {}: {} split(s), {} bytes{}",
                c.name,
                c.splits,
                c.bytes,
                if c.patterns.is_empty() {
                    " (every other topic)".to_owned()
                } else {
                    format!(" ({})", c.patterns.join(", "))
                }
            );
            if let Some(buffer) = &c.event_buffer {
                let shown: Vec<String> = (buffer.windows.iter())
                    .map(|[from, to]| format!("{:.3}-{:.3} s", secs(*from), secs(*to)))
                    .collect();
                say!(
                    "    event buffer: written only around events: {}",
                    if shown.is_empty() {
                        "none yet".to_owned()
                    } else {
                        shown.join(", ")
                    }
                );
            }
        }
    }
    for e in &s.events {
        say!(
            "  event {} at {:.3} s ({}){}",
            e.name,
            e.at_us as f64 / 1e6,
            match e.source {
                EventSource::Request => "asked for",
                EventSource::LoggedText => "logged string",
                EventSource::Field => "field condition",
                EventSource::Diagnostic => match &e.finding {
                    Some(f) => f.severity.as_str(),
                    None => "diagnostic",
                },
            },
            if e.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", e.detail)
            }
        );
    }
    if !s.amendments.is_empty() {
        say!(
            "Filled from the vehicle's SD log: {} gap(s) ({} partly: the SD log lost records \
             there too), {} record(s) recovered (the head, before the stream's first record: {} \
             for {} bytes fetched; the tail, after its last: {} for {} bytes fetched), in {}",
            s.gaps_filled,
            s.gaps_filled_partly,
            s.records_recovered,
            s.records_recovered_head,
            s.fetched_bytes_head,
            s.records_recovered_tail,
            s.fetched_bytes_tail,
            s.amendments.join(", ")
        );
    }
    print_unfilled(&s.unfilled);
    say!(
        "Still missing: {} dropout(s) in the flight as it reads now\n",
        s.dropouts_remaining
    );
    print_text(&report.flight);
    Ok(())
}

pub(crate) fn show(v: &OwnedValue) -> String {
    match v {
        OwnedValue::Str(s) => s.clone(),
        OwnedValue::Int(i) => i.to_string(),
        OwnedValue::UInt(u) => u.to_string(),
        OwnedValue::Float(f) => f.to_string(),
        OwnedValue::Bytes(b) => format!("<{} bytes>", b.len()),
    }
}

pub(crate) fn print_text(s: &Summary) {
    let secs = |t: u64| t as f64 * 1e-6;
    say!(
        "ULog version {}, log start {:.3} s after boot, last sample at {:.3} s ({:.1} s of data)",
        s.version,
        secs(s.start_timestamp),
        secs(s.last_timestamp),
        secs(s.last_timestamp.saturating_sub(s.start_timestamp))
    );
    say!("\nInfo:");
    for (k, v) in &s.info {
        say!("  {k}: {}", show(v));
    }
    let defaults: usize = s.default_parameters.values().map(|m| m.len()).sum();
    say!(
        "\nParameters: {} initial, {} changes, {} defaults",
        s.initial_parameters.len(),
        s.changed_parameters.len(),
        defaults
    );
    say!(
        "\n{:<40} {:>5} {:>9} {:>10}",
        "Topic",
        "multi",
        "samples",
        "rate (Hz)"
    );
    for d in &s.datasets {
        let rate = d.rate_hz().map_or("-".to_owned(), |r| format!("{r:.1}"));
        say!(
            "{:<40} {:>5} {:>9} {:>10}",
            d.name,
            d.multi_id,
            d.count,
            rate
        );
    }
    say!("\nDropouts: {}", s.dropouts.len());
    for d in &s.dropouts {
        say!("  at {:.3} s: {} ms", secs(d.timestamp), d.duration_ms);
    }
    say!("\nLogged messages: {}", s.logged_messages.len());
    for m in &s.logged_messages {
        say!(
            "  {:.3} [{}] {}",
            secs(m.timestamp),
            m.level as char,
            m.text
        );
    }
    let r = &s.reader;
    if r.resyncs + r.malformed_messages + r.unknown_messages + s.truncated_bytes > 0
        || !s.errors.is_empty()
    {
        say!(
            "\nReader: {} unknown messages, {} malformed, {} resyncs ({} bytes skipped), {} bytes truncated",
            r.unknown_messages,
            r.malformed_messages,
            r.resyncs,
            r.skipped_bytes,
            s.truncated_bytes
        );
        for e in &s.errors {
            say!("  {e}");
        }
    }
}

/// `info` of a TIDE export: its version, compression, time range, channels (type, entries,
/// times) and META entries, as our reader reads its blocks.
fn tide_info(path: &Path, json: bool) -> anyhow::Result<()> {
    let info = ulog_recv::export::tide::read::read_info(path)
        .with_context(|| format!("{} cannot be read", path.display()))?;
    if json {
        say!("{}", serde_json::to_string(&info)?);
        return Ok(());
    }
    let seconds =
        |ns: Option<u64>| ns.map_or("-".to_owned(), |ns| format!("{:.6}", ns as f64 / 1e9));
    say!("TIDE {}.{}, {} bytes", info.major, info.minor, info.bytes);
    let compressions: Vec<&str> = info.compressions.iter().map(String::as_str).collect();
    say!(
        "{} chunks ({}), {} entries, {} s to {} s since the epoch",
        info.chunks,
        compressions.join(", "),
        info.entries,
        seconds(info.start_ns),
        seconds(info.end_ns)
    );
    say!(
        "{} types, {} channels:",
        info.types.len(),
        info.channels.len()
    );
    for channel in &info.channels {
        say!(
            "  {:<40} {:>9} entries  {} s .. {} s  {}",
            channel.name,
            channel.entries,
            seconds(channel.first_ns),
            seconds(channel.last_ns),
            channel.types.join(", ")
        );
    }
    for (key, value) in info
        .meta
        .iter()
        .filter(|(k, _)| !k.starts_with("ulog:info:"))
    {
        say!("{key}: {value}");
    }
    if !info.unknown_blocks.is_empty() {
        say!(
            "skipped blocks of unknown tags: {}",
            info.unknown_blocks.join(", ")
        );
    }
    Ok(())
}

/// `info --diagnostics`: what the flight diagnostics find in a `.ulg`, a session (its
/// amendments merged) or a snippet, or in an ArduPilot `.bin` or session, as text or as one
/// JSON object (`diagnostics`, shaped as Flight Review v2's, and `blind`, the log time
/// dropouts hid from them; for ArduPilot also `vehicle_records`, its own `ERR` and `EV`, and
/// `beside`, for each finding the indices of those of the same moment).
pub(crate) fn diagnostics(
    path: &Path,
    selection: ulog_recv::diagnose::Selection,
    json: bool,
) -> anyhow::Result<()> {
    let detectors = ulog_recv::export::flight::diagnose(path, selection)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let ardupilot = ulog_recv::store::input::dataflash_files(path).is_some();
    let found = detectors.findings();
    let records = detectors.vehicle_records();
    if json {
        // Serialised as it is (not through `json!`, which would widen the evidence's f32
        // values to f64 digits).
        #[derive(serde::Serialize)]
        struct Report<'a> {
            analyzers: Vec<&'a str>,
            diagnostics: &'a [ulog_recv::diagnose::Finding],
            blind: &'a [[u64; 2]],
            #[serde(skip_serializing_if = "Option::is_none")]
            vehicle_records: Option<&'a [ulog_recv::diagnose::VehicleRecord]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            beside: Option<Vec<Vec<usize>>>,
        }
        let report = Report {
            analyzers: selection.ids().map(|a| a.as_str()).collect(),
            diagnostics: found,
            blind: detectors.blind(),
            vehicle_records: ardupilot.then_some(records),
            beside: ardupilot.then(|| found.iter().map(|f| detectors.beside(f)).collect()),
        };
        say!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    say!(
        "{}: {} finding(s) ({})",
        path.display(),
        found.len(),
        selection
    );
    let record_line = |r: &ulog_recv::diagnose::VehicleRecord| {
        format!(
            "{:.3} s  {:<3}  {}",
            r.timestamp_us as f64 / 1e6,
            r.record,
            r.text
        )
    };
    for f in found {
        let span = match f.end_timestamp_us {
            Some(end) => format!(
                "{:.3}-{:.3} s",
                f.timestamp_us as f64 / 1e6,
                end as f64 / 1e6
            ),
            None => format!("{:.3} s", f.timestamp_us as f64 / 1e6),
        };
        say!(
            "  {span:<17}  {:<8}  {:<16}  {}",
            f.severity,
            f.id,
            f.summary
        );
        for k in detectors.beside(f) {
            say!("      the vehicle: {}", record_line(&records[k]));
        }
    }
    for [from, to] in detectors.blind() {
        say!(
            "  not seen: {:.3}-{:.3} s (a dropout)",
            *from as f64 / 1e6,
            *to as f64 / 1e6
        );
    }
    if ardupilot {
        say!("The vehicle's own records: {} (ERR, EV)", records.len());
        for r in records {
            say!("  {}", record_line(r));
        }
    }
    Ok(())
}
