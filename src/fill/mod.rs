//! Completing a flight from the vehicle's SD log, sans-IO. Within one boot PX4's file log and
//! its stream carry the same records with the same message ids, in the same order, each
//! losing its own; a dropout of the stream is found again in the SD log (where the stream's
//! bytes since the gap before put it, or by the records around it) and filled with the
//! records the SD log has in between, fetched by byte range over MAVLink FTP without reading
//! the whole file.
//!
//! - [`scan`]: the flight as received: its definitions and every dropout with the data
//!   records on each side of it, the stream's head (before its first record) and tail (after
//!   its last) counted as dropouts too.
//! - [`walk`]: [`Gaps`], the flight's gaps in every column, and [`GapRead`], one gap read
//!   where the gap before puts it (the stream's bytes between two gaps are the SD log's).
//! - [`locate`]: [`Locator`], one dropout searched for by time where the walk cannot go
//!   (bisection on offsets, then a scan), and what the stream lost there.
//! - [`flight`]: [`Flight`], a session's flight as a fill sees it (its columns, their gaps,
//!   what of the SD log each takes).
//! - [`definitions`]: the SD log's own formats and subscriptions, for a session whose
//!   column lost its own.
//! - [`filler`]: [`Filler`], a whole flight: its dropouts in the order of its gaps, walked
//!   or searched for, over one SD log read through one cache.
//! - [`mod@column`]: [`ColumnFilter`], which of the SD log's records a column of the session
//!   takes (each topic in one column; an event buffer only inside its windows).
//! - [`cache`]: the SD log's bytes already fetched, read in whole packets (dropouts close
//!   together read the same stretch).
//! - [`amendment`]: the recovered records as a standalone ULog and where each dropout's lie
//!   in it ([`Fill`]), which the store keeps beside the splits
//!   ([`crate::store::amend`]).
//!
//! - [`dataflash`]: an ArduPilot flight ([`dataflash::BinFiller`]): the card walked beside the
//!   stream over each dropout mark and each second whose `DMS.Dp` rose, records the stream
//!   lacks recovered in place.
//!
//! The shell ([`crate::shell::fill`]) reads the session, finds the flight's SD log among the
//! vehicle's, runs the [`Filler`] over the link's FTP client and writes the amendments. Uses
//! the engines only (ULog's and DataFlash's).

pub mod amendment;
pub mod cache;
pub mod column;
pub mod dataflash;
pub mod definitions;
pub mod filler;
pub mod flight;
pub mod locate;
pub mod pace;
pub mod scan;
pub mod walk;

pub use amendment::{Fill, Recovered};
pub use cache::ByteCache;
pub use column::ColumnFilter;
pub use filler::{Filler, SiteFill};
pub use flight::{ColumnSplits, Flight};
pub use locate::{Locator, Outcome, StreamEnd, Unfilled};
pub use scan::{DropoutSite, Edge, FlightScan};
pub use walk::{GapRead, Gaps, Walked};
