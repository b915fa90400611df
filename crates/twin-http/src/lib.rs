//! The HTTP listener `serve` and `sandbox` share. axum's own `serve` has no header-read
//! timeout, no idle timeout and no connection cap, so a client that opens connections and
//! never finishes a request head can hold sockets (and file descriptors) for as long as it
//! likes. This accept loop bounds all three:
//!
//! - at most `max_connections` connections are open; past that the loop stops accepting and
//!   the kernel's backlog holds new clients until one closes (nothing is read from them);
//! - a request head must arrive within `header_read_timeout`. hyper starts that timer whenever
//!   the connection waits for a head, so it is also the keep-alive idle timeout;
//! - shutdown stops accepting, lets in-flight requests finish for a grace period, then drops
//!   what is left.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What one listener allows. The defaults are uvicorn-like: vLLM's server keeps idle
/// keep-alive connections 5 s (`--timeout-keep-alive`); a head gets as long.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionLimits {
    /// Open connections at once (each holds a file descriptor and a task).
    pub max_connections: usize,
    /// Time for a client to send a whole request head, and to start the next one on a
    /// kept-alive connection.
    pub header_read_timeout: Duration,
    /// After shutdown is asked for, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Serve `app` on `listener` within `limits` until `shutdown` completes, then drain.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // The permit is taken before accepting: at the cap, new clients wait in the backlog.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, _peer): (_, SocketAddr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                // Out of descriptors or a reset before accept: wait a moment and go on,
                // as hyper's and axum's loops do; the listener itself stays up.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.shutdown_grace) => {}
    }
    Ok(())
}
