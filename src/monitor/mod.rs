//! The daemon's monitoring: its Prometheus metrics ([`catalogue`]: every name, kind, unit,
//! label and help text, in one place), the exposition that renders them in Prometheus's text
//! format ([`Exposition`]), and the rules of its health check ([`health`]).
//!
//! Code that counts something names it from the catalogue and records it through the
//! [`metrics`] facade (`metrics::counter!(catalogue::UPLOAD_OBJECTS.name)`); without an
//! installed exposition (the daemon without `--metrics`, the tests, the other commands) the
//! facade does nothing. Counters that a part already keeps (the session's, the store's) are
//! not counted twice: the shell copies them into their metrics once per status report
//! ([`crate::shell::monitoring`]).

pub mod catalogue;
pub mod health;

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub use catalogue::{Kind, MetricDef};

/// The installed exposition: renders every metric, the process's own included.
#[derive(Clone)]
pub struct Exposition {
    handle: PrometheusHandle,
    process: std::sync::Arc<metrics_process::Collector>,
}

/// Why the exposition cannot be installed.
#[derive(Debug, thiserror::Error)]
pub enum ExpositionError {
    #[error("the metrics' histogram buckets are invalid: {0}")]
    Buckets(String),
    #[error("another metrics recorder is installed in this process")]
    AlreadyInstalled,
}

static INSTALLED: OnceLock<Exposition> = OnceLock::new();

impl Exposition {
    /// Installs the exposition as the process's metrics recorder (once; later calls return
    /// the same one), describes every metric of the catalogue and sets the build's info.
    pub fn install() -> Result<Exposition, ExpositionError> {
        if let Some(e) = INSTALLED.get() {
            return Ok(e.clone());
        }
        let mut builder = PrometheusBuilder::new();
        for def in catalogue::ALL {
            if let Some(buckets) = def.buckets {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(def.name.to_owned()), buckets)
                    .map_err(|e| ExpositionError::Buckets(e.to_string()))?;
            }
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|_| ExpositionError::AlreadyInstalled)?;
        catalogue::describe();
        catalogue::start_at_zero();
        metrics::gauge!(catalogue::BUILD_INFO.name, "version" => env!("CARGO_PKG_VERSION"))
            .set(1.0);
        let process = metrics_process::Collector::default();
        process.describe();
        let exposition = Exposition {
            handle,
            process: std::sync::Arc::new(process),
        };
        Ok(INSTALLED.get_or_init(|| exposition).clone())
    }

    /// Every metric now, in Prometheus's text format (version 0.0.4): the process's CPU,
    /// memory and descriptors are read first.
    pub fn render(&self) -> String {
        self.process.collect();
        self.handle.render()
    }

    /// Folds what histograms recorded into their buckets, so that they hold no samples
    /// between scrapes; call it every few seconds.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}

/// The content type of [`Exposition::render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
