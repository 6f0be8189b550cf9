//! ulog-recv's integration tests, one binary: a module per area, each module's `//!` says
//! what it proves and against which independent implementation or real part. One binary
//! links the crate and its dependencies once (a binary per file linked them 36 times).
//!
//! Run one area with a filter on the module's name: `cargo test --test it faults::`; one
//! test by (part of) its name. Tests whose timings are their point (a real PX4, a machine
//! loaded on purpose) take [`common::alone`] and run with no other test of this binary beside
//! them (see [`common::machine`]); [`common::procs::fresh_dir`] gives every test its folders under
//! `target/tmp/MODULE/`.

mod common;

mod ardupilot_diagnostics;
mod ardupilot_exports;
mod ardupilot_fill;
mod ardupilot_props;
mod ardupilot_sim;
mod ardupilot_sitl;
mod ardupilot_sitl_fill;
mod cli;
mod columns;
mod dataflash;
mod dataset;
mod dataset_props;
mod diagnostics;
mod disk;
mod e2e;
mod engine;
mod events;
mod export;
mod faults;
mod fill;
mod fill_e2e;
mod fleet;
mod foxglove;
mod ftp;
mod guide;
mod hostile;
mod layering;
mod licence;
mod live;
mod metrics;
mod package;
mod publish;
mod px4_sitl;
mod pyulog_expected;
mod reassembly;
mod reference;
mod robustness;
mod ros2msg;
mod service;
mod session;
mod signing;
mod simulation;
mod snippet;
mod store;
mod tide;
mod upload;
mod web;
