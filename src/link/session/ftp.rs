//! MAVLink FTP through the session: the [`FtpClient`](crate::link::ftp::FtpClient)'s requests go
//! out as the session's frames (signed when it signs), the vehicle's replies come back to it, its
//! results go out as [`Event::Ftp`].

use std::time::Instant;

use mavlink::dialects::ardupilotmega::{FILE_TRANSFER_PROTOCOL_DATA, MavMessage};

use super::{Event, Session};
use crate::link::ftp::{FtpError, FtpOp, FtpStats};

impl Session {
    /// Starts a MAVLink FTP operation on the vehicle (found first); its result comes as
    /// [`Event::Ftp`]. Frames go out with the session's (signed when it signs).
    pub fn ftp_start(&mut self, op: FtpOp, now: Instant) -> Result<(), FtpError> {
        if self.vehicle.is_none() {
            return Err(FtpError::NoVehicle);
        }
        self.ftp.start(op, now)?;
        self.flush_ftp(now);
        Ok(())
    }

    /// The FTP client's counters.
    pub fn ftp_stats(&self) -> FtpStats {
        self.ftp.stats()
    }

    /// Frames the FTP client's requests and hands its results out as events.
    pub(super) fn flush_ftp(&mut self, now: Instant) {
        let Some(v) = self.vehicle else { return };
        while let Some(request) = self.ftp.poll_request() {
            self.send(
                MavMessage::FILE_TRANSFER_PROTOCOL(FILE_TRANSFER_PROTOCOL_DATA {
                    target_network: 0,
                    target_system: v.system_id,
                    target_component: v.component_id,
                    payload: request.encode(),
                }),
                now,
            );
        }
        while let Some(result) = self.ftp.poll_result() {
            self.events.push_back(Event::Ftp(result));
        }
    }
}
