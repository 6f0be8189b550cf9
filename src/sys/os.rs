//! The few operating-system calls the daemon makes beyond std and tokio, in one place, through
//! `rustix` (no `unsafe`): lowering a thread's priority, the free space of a filesystem,
//! starting a file's writeback early, forcing a socket's receive buffer past the kernel's cap,
//! and capping a send buffer.

use std::os::fd::AsFd;
use std::path::Path;

/// Lowers the calling thread's scheduling priority to `niceness` (Linux: per thread), so that
/// the network loop, at the process's own priority, gets the CPU first when cores are short.
/// Failure (e.g. a seccomp filter) only leaves the thread where it was.
pub fn lower_thread_priority(niceness: i32) {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), niceness) {
        tracing::debug!(error = %e, niceness, "cannot lower the thread's priority");
    }
}

/// Bytes an unprivileged process may still write on the filesystem of `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(path)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Starts the writeback of `len` bytes of `file` from `offset` without waiting for it, so that
/// a later fsync finds them already on their way to the disk. Linux's `POSIX_FADV_DONTNEED`
/// starts the writeback of the range's dirty pages and drops from the cache only those
/// already clean: called on bytes just written, it leaves them cached (as PostgreSQL's
/// `pg_flush_data` uses it where `sync_file_range`, which rustix does not offer, is missing).
/// Failure only leaves the whole writeback to the fsync.
pub fn start_writeback(file: impl AsFd, offset: u64, len: u64) {
    let advice = rustix::fs::Advice::DontNeed;
    if let Err(e) = rustix::fs::fadvise(file, offset, std::num::NonZeroU64::new(len), advice) {
        tracing::debug!(error = %e, "cannot start a file's writeback");
    }
}

/// `SO_RCVBUFFORCE`: a receive buffer of `bytes` past `net.core.rmem_max`, for a process with
/// `CAP_NET_ADMIN` (root, or a unit that grants it). Without the capability it fails, and the
/// caller keeps what it got.
pub fn force_recv_buffer(socket: impl AsFd, bytes: usize) -> std::io::Result<()> {
    rustix::net::sockopt::set_socket_recv_buffer_size_force(socket, bytes)?;
    Ok(())
}

/// `SO_SNDBUF`: a send buffer of `bytes` (the kernel doubles it for its bookkeeping), which
/// also turns its growth off. What a client does not read then waits in the server's own
/// queue, where the oldest goes first, instead of seconds of it in the kernel.
pub fn cap_send_buffer(socket: impl AsFd, bytes: usize) -> std::io::Result<()> {
    rustix::net::sockopt::set_socket_send_buffer_size(socket, bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_known_and_a_missing_path_is_an_error() {
        assert!(free_bytes(&std::env::temp_dir()).unwrap() > 0);
        assert!(free_bytes(Path::new("/no/such/place")).is_err());
    }
}
