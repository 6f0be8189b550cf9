//! `ulog-recv`: receives the flight log a PX4 autopilot streams over MAVLink ("ULog
//! streaming") or an ArduPilot autopilot streams ("remote logging" of its DataFlash log),
//! writes it to disk as rolling standalone `.ulg` (or `.bin`) splits, publishes its topics
//! live (a local socket, Foxglove) and exports flights (MCAP, ROS bags). This page is the map
//! of the crate for the engineer who works on it; the operator's guide (`docs/`, an mdBook)
//! is the user's.
//!
//! # Parts
//!
//! One folder per part. Sans-IO parts take bytes and `now: Instant` in and hand events and
//! bytes back; they never touch a socket, a file, a thread or the clock. A part uses only the
//! parts its row names (lower ones), never one above it. `tests/it/layering.rs` reads this table
//! and fails on any `use` that breaks it, on an import circle between two files, and on I/O in
//! a sans-IO part.
//!
//! <!-- parts -->
//! | part | sans-IO | what it is | may use |
//! |---|---|---|---|
//! | [`planted`] | yes | deliberate bugs the whole-receiver simulation must catch, off unless a test plants one in its own thread | — |
//! | [`sys`] | no | the few raw OS calls (thread priority, free space, socket buffers) and a latency histogram | — |
//! | [`monitor`] | no | the daemon's Prometheus metrics (their catalogue, the exposition) and its health check's rules | — |
//! | [`autopilot`] | yes | the two autopilots (PX4, ArduPilot), told from a HEARTBEAT, and their log formats | — |
//! | [`dataflash`] | yes | the DataFlash engine (ArduPilot's `.bin`): FMT records, framer, gap marks, a split's preamble | — |
//! | [`ulog`] | yes | the ULog engine: reader, framer, decoder, writer, dropouts, summaries, topic patterns | — |
//! | [`diagnose`] | yes | flight diagnostics: detectors fed a log's samples (PX4's topics, ArduPilot's messages) find what went wrong (Flight Review v2's definitions) | `ulog`, `dataflash` |
//! | [`ros`] | yes | ULog formats as ROS 2 and ROS 1 message types; CDR and ROS 1 serialisation; findings as `diagnostic_msgs` | `ulog`, `diagnose` |
//! | [`link`] | yes | the log-streaming session over MAVLink (PX4's ULog chunks, ArduPilot's DataFlash blocks): framing, signing, reordering, reassembly | `ulog`, `autopilot`, `dataflash`, `planted` |
//! | [`sim`] | yes | a vehicle without a drone: a synthetic flight, PX4's chunking, a simulated PX4 and ArduPilot | `ulog`, `dataflash`, `link` |
//! | [`fill`] | yes | completing a flight from the vehicle's SD log: each gap read where the one before puts it, or found again by the records around it (PX4); the card walked beside the stream where it lost records (ArduPilot); byte ranges to read, amendments | `ulog`, `dataflash` |
//! | [`store`] | no | splits, columns and event buffers (sans-IO), session directories, manifests, power-safe files, recovery, amendments, snippets, reading sessions back; the store's thread | `ulog`, `autopilot`, `dataflash`, `sys`, `fill`, `diagnose`, `monitor`, `planted` |
//! | [`export`] | no | a `.ulg` or a session to MCAP, ROS bags and TIDE, and either autopilot's flight as Parquet tables in the fleet's layout | `ulog`, `autopilot`, `dataflash`, `ros`, `store`, `diagnose` |
//! | [`upload`] | no | sessions to object storage (S3) and Flight Review: journal, pacing, the uploader's thread | `ulog`, `autopilot`, `store`, `export`, `sys`, `monitor`, `planted` |
//! | [`report`] | no | what a session and its uploads amount to: the figures `info`, `uploads` and the web page's API share | `ulog`, `autopilot`, `dataflash`, `fill`, `store`, `export`, `upload`, `diagnose` |
//! | [`live`] | no | the publishing thread: the live socket (NDJSON) and the Foxglove server, each a sans-IO core and a shell | `ulog`, `autopilot`, `dataflash`, `diagnose`, `ros`, `link`, `store`, `upload`, `sys`, `monitor` |
//! | [`shell`] | no | the tokio shell: links, the daemon's loop, the simulator's loop, the vehicle's files and fills, service, config, the metrics' listener | `sys`, `autopilot`, `ulog`, `diagnose`, `ros`, `link`, `sim`, `fill`, `store`, `live`, `export`, `upload`, `monitor`, `planted` |
//! | [`web`] | no | the companion's web page and its JSON API: the live status, the flights' list, downloads, actions, credentials; its listener's thread | `ulog`, `autopilot`, `diagnose`, `link`, `store`, `export`, `upload`, `report`, `sys`, `shell`, `monitor` |
//! <!-- /parts -->
//!
//! The binary (`src/bin/ulog-recv/`) parses the command line and runs the shell; it is the
//! only place where `anyhow` turns the library's typed errors into messages.
//!
//! # From datagram to file, socket and WebSocket
//!
//! ```text
//!  vehicle ──UDP/TCP/serial──▶ shell::transport ──bytes──▶ link::Session (sans-IO)
//!     ▲                                                     │  frames::FrameDecoder, signing
//!     └──── acks, START/STOP, HEARTBEAT ◀── poll_transmit ──┤  reorder::ReorderBuffer
//!                                                           │  assembler::Assembler
//!                                                           ▼  ulog::gaps::GapMarker
//!                                 Event::{LogOpened, LogBytes, Dropout, LogClosed, ...}
//!                         shell::receiver (the network loop) hands each event, never waiting, to
//!                 ┌─────────────────────────────────────┴──────────────────────────┐
//!                 ▼                                                                ▼
//!   store::thread (queue bounded in bytes)                  live::thread (PublishFeed, backlog-bounded)
//!   store::files::LogStore                                    ├─ live::ndjson::Publisher ──▶ Unix/TCP socket
//!     └─ store::splitter::Splitter (sans-IO)                  │     (JSON lines: `tail`, scripts)
//!          split_NNNN.ulg + manifest.json                     └─ live::foxglove::FoxglovePublisher ──▶ WebSocket
//!          (group commit: one sync per interval)                    (ros::Ros2Type schemas, CDR)
//! ```
//!
//! With `--http`, the web page's thread ([`web::server`]) serves the flights on disk (the
//! figures [`report`] builds) and the status the network loop hands it without waiting.
//!
//! Beside them, the uploader's thread ([`upload::uploader`]) follows the sessions on disk and
//! sends each closed split and manifest to object storage and each closed flight to Flight
//! Review, recording every step in the session's `upload.json`.
//!
//! After a session closes, a fill ([`shell::fill`], by hand or `--fill auto`) completes it
//! from the vehicle's SD log: the link's MAVLink FTP client ([`link::ftp`]) reads the byte
//! ranges the sans-IO [`fill::Filler`] asks for, and the recovered records go beside the
//! splits as amendments ([`store::amend`]), which every reader merges.
//!
//! An ArduPilot vehicle (told by its HEARTBEAT, [`autopilot`]) takes the same path with
//! its own protocol and format: the session's ArduPilot concern acks, NACKs and reorders
//! its `REMOTE_LOG_DATA_BLOCK`s ([`link::log_block`]), the DataFlash engine
//! ([`dataflash`]) frames and marks the log, and the store writes `.bin` splits
//! ([`store::bin_splitter`]) under the same session directories and manifests. The live
//! servers, the diagnostics, the fill and the exports read ULog only.
//!
//! Afterwards, `export` reads a `.ulg` or a session's splits back as one ULog stream
//! ([`export::flight`]) and writes MCAP, ROS bags or TIDE through the same ROS types the live
//! Foxglove server uses.
//!
//! # Threads
//!
//! The daemon runs three: the network loop (a current-thread tokio runtime: acks, the
//! session, timers; it never waits for the other two), the store ([`store::thread`], at a
//! lower priority, fed through a queue bounded in bytes: past the bound samples are stripped
//! and the log gets a dropout) and the publishing thread ([`live::thread`], lower still, fed
//! through a feed that strips samples when it falls behind). A slow card or a slow client
//! costs samples to the files or to that client, never acks on the link.
//!
//! # Rules the code keeps
//!
//! - One mechanism per job: one framer ([`ulog::framer::Framer`]) cuts every ULog stream
//!   (assembler, splitter, publishers, recovery); one dropout writer ([`ulog::gaps`]) for the
//!   link's lost chunks and the store's dropped samples; one ROS type ([`ros::Ros2Type`]) for
//!   the live server and every export; MAVLink framing and signatures are the `mavlink`
//!   crate's.
//! - Errors are typed enums (`thiserror`) in the library; wire data never panics (the fuzz
//!   targets in `fuzz/` drive the engine, the session, signing, the publisher, the FTP
//!   client, the fill and the ROS encoder with arbitrary bytes).
//! - Power safety by group commit: writes reach the OS as they come, one sync per interval
//!   makes them durable in an order that keeps every file reachable and whole.
//! - A server that hands out the vehicle's data binds loopback unless told an address; key
//!   files and sockets are not world-readable.
//!
//! # Where each part is proven
//!
//! - `tests/it/engine.rs`, `tests/it/reassembly.rs`, `tests/it/robustness.rs`: the engine against
//!   pyulog's reading of the real PX4 logs in `../shared/testdata/ulog/` and of our synthetic
//!   one, every piece size, corrupt and truncated input.
//! - `tests/it/session/`: the session against the simulated vehicle in memory with a fake
//!   clock on every log (loss and lost acks up to 20 %, duplication, reordering, outages,
//!   reliable chunks in flight, reboots, restarts at sequence 0, forged and stale chunks,
//!   signing with the right, no or a wrong key, a double sequence wrap), judged against an
//!   ideal receiver computed from the chunks that got through.
//! - `tests/it/signing.rs`: our signatures against pymavlink's both ways, and the daemon and the
//!   simulator signed as processes. `tests/it/hostile.rs`: junk, spoofed heartbeats and forged
//!   chunks from a second socket; a restart while the vehicle streams.
//! - `tests/it/e2e.rs`: the daemon and `ulog-recv sim` as processes over UDP, a pty pair (an
//!   unplugged adapter) and TCP; kill -9 at random moments; every file read by pyulog.
//! - `tests/it/store.rs`, `tests/it/snippet.rs`, `tests/it/disk.rs`, `tests/it/faults/`: splits are the
//!   stream byte for byte without their preambles and open alone in pyulog; columns
//!   (`tests/it/columns.rs`) read back as the log, their exports equal; referencing snippets
//!   (`tests/it/reference.rs`) read back as the copied ones and survive the budget; event
//!   buffers (`tests/it/events.rs`) hold their topics exactly inside the events' windows in
//!   pyulog, with `ulog-recv event` and the triggers through the daemon; the budget
//!   and a real full tmpfs; a slow card (`strace --inject`), a stalled disk, kill -9 every 2 s,
//!   crash leftovers, bad settings.
//! - `tests/it/publish.rs`, `tests/it/live.rs`: the live socket in memory and over the real socket
//!   (slow, vanishing and flooding clients, `tail`, `topics`). `tests/it/ros2msg.rs`: rosbags
//!   decodes our ROS 2 types. `tests/it/foxglove.rs`: Foxglove's own npm libraries as the
//!   client. `tests/it/export.rs`: MCAP read by the `mcap` packages, bags by rosbags and ROS's
//!   `rosbag`, all against pyulog. `tests/it/tide.rs`: TIDE read by a reader written from the
//!   draft's text (`tests/tide_read.py`) and by ours, against pyulog.
//! - `tests/it/ardupilot_sitl.rs`: a real ArduPilot (SITL) streams its DataFlash log to the
//!   daemon through a relay (loopback; 2 % loss, 2 % reorder and 10 % of acks lost; a 15 s
//!   outage); what the daemon wrote is held against the SITL's own card log, both read by
//!   pymavlink's DFReader (`tests/dataflash_compare.py`), each split alone too.
//! - `tests/it/px4_sitl.rs`: a real PX4 (SITL) streams to the daemon; what it wrote is held
//!   against PX4's own file log of the same boot (`tests/px4_compare.py`, pyulog): also a
//!   restart while PX4 streams and 5 % of its datagrams lost.
//! - `tests/it/upload.rs`: the daemon and the simulator against a real Garage (S3) and a real
//!   Flight Review: a session of many splits through a 30 s outage of the server, a
//!   multipart upload cut by kill -9 and resumed, the rate cap, wrong credentials; boto3
//!   reads back what is in the bucket.
//! - `tests/it/web/`: the web page in Debian's chromium over WebDriver, from a flight's stream
//!   to its fill, upload (a real Garage and Flight Review), download and delete; its API
//!   against `info`, `uploads` and `export`; credentials, CSRF, path traversal, oversized
//!   heads and a thousand idle connections.
//! - `tests/it/service.rs`, `tests/it/cli.rs`: the systemd units, sd_notify, the config file, the
//!   command line. `tests/it/layering.rs`: this page's table.
//! - `tests/it/package.rs`: the .deb packages and tarballs `.ci/package` builds (amd64, and
//!   arm64 cross-built): their files, lintian, the units, the glibc floor, dpkg installing,
//!   upgrading and purging them in a scratch root, and the arm64 binary under qemu-user
//!   receiving a flight from the simulator.

pub mod autopilot;
pub mod dataflash;
pub mod diagnose;
pub mod export;
pub mod fill;
pub mod link;
pub mod live;
pub mod monitor;
pub mod planted;
pub mod report;
pub mod ros;
pub mod shell;
pub mod sim;
pub mod store;
pub mod sys;
pub mod ulog;
pub mod upload;
pub mod web;
