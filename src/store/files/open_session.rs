//! The open log session: its manifest in memory, the framer that cuts what is written into
//! whole messages, and per column a splitter and its files; event buffers' gates and the
//! events they record.

use std::path::PathBuf;

use bytes::BytesMut;

use super::sink::FileSink;
use crate::autopilot::LogFormat;
use crate::diagnose::FindingFilter;
use crate::store::bin_splitter::BinSplitter;
use crate::store::columns::ColumnRouter;
use crate::store::events::{
    BufferWindow, EventGate, EventRecord, EventSource, MAX_LISTED_EVENTS, TriggerWatch,
};
use crate::store::manifest::Manifest;
use crate::store::splitter::{SplitPolicy, SplitSummary, Splitter};
use crate::ulog::framer::Framer;
use crate::ulog::gaps::GapMarker;

/// The open log session.
pub(super) struct OpenSession {
    pub(super) dir: PathBuf,
    /// Its folder and first manifest are on disk (not while the disk was too full for them
    /// since the session began: writing is paused until they are).
    pub(super) folder_made: bool,
    /// Writing paused, and the log lost something to it (what the failure cut, or bytes
    /// that came meanwhile): the split writing resumes in marks it.
    pub(super) lost_to_pause: bool,
    /// Writing resumed: the manifest is saved as soon as the next split begins.
    pub(super) announce_split: bool,
    pub(super) manifest: Manifest,
    /// Cuts the bytes written, in any pieces, into whole messages (a ULog log's).
    pub(super) framer: Framer,
    /// A DataFlash log's framing and marks; `None` for a ULog log.
    pub(super) bin: Option<BinGaps>,
    /// Marks samples dropped before the store (its queue was full) with a dropout.
    pub(super) gaps: GapMarker,
    /// The store dropped samples of its own (a dropout the link did not make).
    pub(super) dropped_own: bool,
    /// Cuts the log into a stream per column; `None` without columns.
    pub(super) router: Option<ColumnRouter>,
    /// The main column first, then one per column (event buffers last).
    pub(super) columns: Vec<ColumnWriter>,
    /// Per column: its gate when it is an event buffer.
    pub(super) gates: Vec<Option<EventGate>>,
    /// Follows the log for events; `None` without event buffers and triggers.
    pub(super) watch: Option<TriggerWatch>,
    /// Events entered in the manifest, not yet handed out.
    pub(super) recorded: Vec<EventRecord>,
    /// The findings that open the event buffers' windows.
    pub(super) event_on_diagnostic: FindingFilter,
}

/// One column's splitter and files.
pub(super) struct ColumnWriter {
    pub(super) splitter: LogSplitter,
    pub(super) sink: FileSink,
}

/// The splitter of the log's format.
pub(super) enum LogSplitter {
    ULog(Splitter),
    DataFlash(BinSplitter),
}

impl LogSplitter {
    pub(super) fn new(format: LogFormat, policy: SplitPolicy) -> Self {
        match format {
            LogFormat::ULog => LogSplitter::ULog(Splitter::new(policy)),
            LogFormat::DataFlash => LogSplitter::DataFlash(BinSplitter::new(policy)),
        }
    }

    pub(super) fn push(&mut self, bytes: &[u8], sink: &mut FileSink) {
        match self {
            LogSplitter::ULog(s) => s.push(bytes, sink),
            LogSplitter::DataFlash(s) => s.push(bytes, sink),
        }
    }

    pub(super) fn finish(&mut self, sink: &mut FileSink) {
        match self {
            LogSplitter::ULog(s) => s.finish(sink),
            LogSplitter::DataFlash(s) => s.finish(sink),
        }
    }

    pub(super) fn current(&self) -> Option<&SplitSummary> {
        match self {
            LogSplitter::ULog(s) => s.current(),
            LogSplitter::DataFlash(s) => s.current(),
        }
    }

    pub(super) fn set_policy(&mut self, policy: SplitPolicy) {
        match self {
            LogSplitter::ULog(s) => s.set_policy(policy),
            LogSplitter::DataFlash(s) => s.set_policy(policy),
        }
    }

    pub(super) fn request_roll(&mut self) {
        match self {
            LogSplitter::ULog(s) => s.request_roll(),
            LogSplitter::DataFlash(s) => s.request_roll(),
        }
    }

    pub(super) fn force_roll(&mut self) {
        match self {
            LogSplitter::ULog(s) => s.force_roll(),
            LogSplitter::DataFlash(s) => s.force_roll(),
        }
    }

    pub(super) fn log_time(&self) -> u64 {
        match self {
            LogSplitter::ULog(s) => s.log_time(),
            LogSplitter::DataFlash(s) => s.log_time(),
        }
    }
}

/// A DataFlash log's own framing in the store: whole messages, and the marks of samples the
/// store dropped (its queue was full).
pub(super) struct BinGaps {
    pub(super) framer: crate::dataflash::Framer,
    pub(super) gaps: crate::dataflash::GapMarker,
}

/// Opens `event`'s window in `gate`, noting it in the event; the held samples it takes go to
/// `out`.
fn open_window(gate: &mut EventGate, event: &mut EventRecord, out: &mut BytesMut) {
    let [from_us, to_us] = gate.open(event.at_us, event.after_us, out);
    event.windows.push(BufferWindow {
        buffer: gate.spec().column.name.clone(),
        from_us,
        to_us,
    });
}

impl OpenSession {
    /// Whole units of the log to the columns' splitters (through the router when there are
    /// columns, and each event buffer's through its gate); the events they make are
    /// recorded.
    pub(super) fn split(&mut self, bytes: &[u8]) {
        let mut events = Vec::new();
        if let Some(watch) = &mut self.watch {
            watch.push(bytes, &mut events);
            if let Some(d) = &mut self.manifest.diagnostics
                && d.blind.len() != watch.blind().len()
            {
                d.blind = watch.blind().to_vec();
            }
        }
        let filter = self.event_on_diagnostic;
        let opens_windows = |e: &EventRecord| e.finding.as_ref().is_none_or(|f| filter.takes(f));
        match &mut self.router {
            None => {
                let c = &mut self.columns[0];
                c.splitter.push(bytes, &mut c.sink);
            }
            Some(router) => {
                let mut outs: Vec<BytesMut> =
                    (0..router.outputs()).map(|_| BytesMut::new()).collect();
                router.push(bytes, &mut outs);
                for ((c, gate), out) in self.columns.iter_mut().zip(&mut self.gates).zip(&outs) {
                    let gated;
                    let out = match gate {
                        Some(gate) => {
                            let mut held_back = BytesMut::new();
                            gate.push(out, &mut held_back);
                            for e in events.iter_mut().filter(|e| opens_windows(e)) {
                                open_window(gate, e, &mut held_back);
                            }
                            gated = held_back;
                            &gated
                        }
                        None => out,
                    };
                    if !out.is_empty() {
                        c.splitter.push(out, &mut c.sink);
                    }
                }
            }
        }
        for e in events {
            self.record(e);
        }
    }

    pub(super) fn request_event(&mut self, name: &str, after_us: Option<u64>) -> EventRecord {
        // The watch's time when it follows every sample (the buffers' windows go by it).
        let at_us = match &self.watch {
            Some(w) if !w.skims() => w.log_time(),
            _ => self.columns[0].splitter.log_time(),
        };
        let mut event = EventRecord {
            name: name.to_owned(),
            source: EventSource::Request,
            at_us,
            detail: String::new(),
            after_us,
            windows: Vec::new(),
            finding: None,
        };
        for (c, gate) in self.columns.iter_mut().zip(&mut self.gates) {
            if let Some(gate) = gate {
                let mut gated = BytesMut::new();
                open_window(gate, &mut event, &mut gated);
                c.splitter.push(&gated, &mut c.sink);
            }
        }
        self.record(event.clone());
        event
    }

    /// Enters an event in the manifest, with the buffers' windows as they are now.
    /// Past [`MAX_LISTED_EVENTS`] only the windows are: the event is counted.
    pub(super) fn record(&mut self, event: EventRecord) {
        for (entry, gate) in self.manifest.columns.iter_mut().zip(&self.gates[1..]) {
            if let (Some(b), Some(gate)) = (&mut entry.event_buffer, gate) {
                b.windows = gate.windows().to_vec();
                b.dropped_for_memory = gate.dropped_for_memory;
            }
        }
        if self.manifest.events.len() >= MAX_LISTED_EVENTS {
            if self.manifest.events_unlisted == 0 {
                tracing::warn!(
                    "{MAX_LISTED_EVENTS} events in this log: further ones still write their \
                     windows but are not listed (a trigger that fires too often?)"
                );
            }
            self.manifest.events_unlisted += 1;
            return;
        }
        tracing::info!(
            name = %event.name,
            source = ?event.source,
            at_s = event.at_us as f64 / 1e6,
            detail = %event.detail,
            "event"
        );
        self.manifest.events.push(event.clone());
        self.recorded.push(event);
    }
}
