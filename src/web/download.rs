//! Downloads, streamed: a blocking task writes the file (a flight joined as one `.ulg` or
//! `.bin`, its MCAP export, a split) through a channel of a few chunks into the response's body. A client
//! that reads slowly holds at most [`CHUNKS_IN_FLIGHT`] × [`CHUNK_BYTES`] of the daemon's
//! memory, and one that leaves stops the export at its next write.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::web::reply::json_error;

/// Bytes per chunk sent to the body.
pub const CHUNK_BYTES: usize = 64 << 10;
/// Chunks that may wait for the client.
pub const CHUNKS_IN_FLIGHT: usize = 4;

/// What is downloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Download {
    /// The flight as one log: splits joined, amendments merged (as `export NAME.ulg`).
    Ulg,
    /// The flight's MCAP export (as `export NAME.mcap`).
    Mcap,
    /// An ArduPilot flight as one DataFlash log: splits joined, fills merged (as `export
    /// NAME.bin`).
    Bin,
    /// A file as it is.
    File,
}

impl Download {
    pub fn extension(self) -> &'static str {
        match self {
            Download::Ulg => "ulg",
            Download::Mcap => "mcap",
            Download::Bin => "bin",
            Download::File => "",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Download::Mcap => "application/x-mcap",
            _ => "application/octet-stream",
        }
    }
}

type Chunk = Result<Bytes, std::io::Error>;

/// Writes into the channel, a chunk at a time.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let room = CHUNK_BYTES - self.buf.len();
        let n = bytes.len().min(room);
        self.buf.extend_from_slice(&bytes[..n]);
        if self.buf.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// The response streaming `what` of `path` (a session directory, or a file for
/// [`Download::File`]) as the attachment `name`. An error before the first byte is the
/// response's; one after it cuts the body short (the client sees an incomplete download).
pub async fn stream_blocking(what: Download, path: PathBuf, name: String) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(CHUNKS_IN_FLIGHT);
    let (opened_tx, opened_rx) = tokio::sync::oneshot::channel::<Result<Option<u64>, String>>();
    tokio::task::spawn_blocking(move || {
        let mut out = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
        };
        let result = produce(what, &path, &mut out, opened_tx).and_then(|()| out.flush());
        if let Err(e) = result {
            let _ = tx.blocking_send(Err(e));
        }
    });
    let length = match opened_rx.await {
        Ok(Ok(length)) => length,
        Ok(Err(message)) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, &message),
        Err(_) => {
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the download did not start",
            );
        }
    };
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(what.content_type()),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}

/// Opens what is asked (telling `opened` its length, if known, or why it cannot), then
/// writes it to `out`.
fn produce(
    what: Download,
    path: &std::path::Path,
    out: &mut ChannelWriter,
    opened: tokio::sync::oneshot::Sender<Result<Option<u64>, String>>,
) -> std::io::Result<()> {
    let fail = |opened: tokio::sync::oneshot::Sender<_>, message: String| {
        let _ = opened.send(Err(message));
        Ok(())
    };
    if what == Download::File {
        // Not through a link swapped in since the path was checked.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path);
        let mut file = match file {
            Ok(f) => f,
            Err(e) => return fail(opened, format!("cannot open the file: {e}")),
        };
        let length = file.metadata().map(|m| m.len()).ok();
        let _ = opened.send(Ok(length));
        std::io::copy(&mut file, out)?;
        return Ok(());
    }
    let options = crate::export::ExportOptions::default();
    if let Some(files) = crate::store::input::dataflash_files(path) {
        // An ArduPilot flight: one .bin or its MCAP (the route refuses it a .ulg).
        let _ = opened.send(Ok(None));
        if what == Download::Bin {
            crate::export::flight::write_bin_log(&files, std::io::BufWriter::new(&mut *out))
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            return Ok(());
        }
        crate::export::mcap::dataflash::write_bin(
            &files,
            &options,
            std::io::BufWriter::new(&mut *out),
        )
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        return Ok(());
    }
    if what == Download::Bin {
        return fail(opened, "a PX4 flight downloads as .ulg, not .bin".into());
    }
    let flight = match crate::export::flight::open(path, &options) {
        Ok(f) => f,
        Err(e) => return fail(opened, format!("cannot read the flight: {e}")),
    };
    let flight = flight.as_ref();
    if what == Download::Ulg {
        // Not `flight.len()`: that is the splits' bytes, and amendments merged change them.
        let _ = opened.send(Ok(None));
        let mut reader = flight
            .open()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        std::io::copy(&mut reader, out)?;
        return Ok(());
    }
    let _ = opened.send(Ok(None));
    crate::export::mcap::write(flight, &options, std::io::BufWriter::new(&mut *out))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(())
}
