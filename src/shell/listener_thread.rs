//! A TCP listener served on a thread of its own, below the network loop (nice
//! [`NICENESS`]), with its own current-thread runtime: what the metrics' listener and the web
//! page run on, so that nothing they serve runs on the network loop or delays an ack.
//! Dropping it stops the serving and joins the thread.

use std::future::Future;
use std::net::SocketAddr;

/// Below the network loop, as the other helper threads.
pub const NICENESS: i32 = 10;

/// Why the listener did not start.
#[derive(Debug)]
pub enum ListenerError {
    /// The address could not be bound.
    Bind(std::io::Error),
    /// The thread could not be started.
    Thread(std::io::Error),
}

/// See the module docs.
pub struct ListenerThread {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ListenerThread {
    /// Binds `addr` (a failure stops the start, before anything listens), then runs
    /// `serve(listener, stopped)` on thread `name`, `stopped` completing when this is dropped.
    /// `what` names the listener in the log if its runtime cannot start ("WHAT cannot be
    /// served").
    pub fn start<F, Fut>(
        name: &str,
        addr: SocketAddr,
        what: &'static str,
        serve: F,
    ) -> Result<Self, ListenerError>
    where
        F: FnOnce(tokio::net::TcpListener, tokio::sync::oneshot::Receiver<()>) -> Fut
            + Send
            + 'static,
        Fut: Future<Output = ()>,
    {
        let listener = std::net::TcpListener::bind(addr).map_err(ListenerError::Bind)?;
        listener
            .set_nonblocking(true)
            .map_err(ListenerError::Bind)?;
        let addr = listener.local_addr().map_err(ListenerError::Bind)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                crate::sys::os::lower_thread_priority(NICENESS);
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => return tracing::error!(error = %e, "{what} cannot be served"),
                };
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => serve(listener, stopped).await,
                        Err(e) => tracing::error!(error = %e, "{what} cannot be served"),
                    }
                });
            })
            .map_err(ListenerError::Thread)?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address bound (port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ListenerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
