//! The HTTP listener `serve` and `sandbox` share. axum's own `serve` has no header-read
//! timeout, no idle timeout and no connection cap, so a client that opens connections and
//! never finishes a request head can hold sockets (and file descriptors) for as long as it
//! likes. This accept loop bounds all three:
//!
//! - at most `max_connections` connections are open; past that the loop either stops accepting
//!   (the kernel's backlog holds new clients until one closes; nothing is read from them) or
//!   answers each new client at once with a refusal (a 503) on a short-lived connection
//!   ([`Overflow`]);
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
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// What the listener does with a client that arrives while `max_connections` are open.
#[derive(Clone, Debug)]
pub enum Overflow {
    /// Stop accepting: the kernel's backlog holds new clients until a connection closes
    /// (nothing is read from them).
    Wait,
    /// Accept the client and answer its request with `app` (a 503) on a connection that is
    /// then closed, as uvicorn's `--limit-concurrency` does: the client learns at once instead
    /// of hanging in the backlog. Refusals are connections too: at most `max_open` are open at
    /// once (each lives at most one header-read timeout), past that new clients wait.
    Refuse { app: Router, max_open: usize },
}

/// Serve `app` on `listener` within `limits` until `shutdown` completes, then drain. At the
/// connection cap new clients wait in the backlog ([`Overflow::Wait`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with_overflow(listener, app, limits, Overflow::Wait, shutdown).await
}

/// [`serve`], with a choice of what happens to clients past the connection cap.
pub async fn serve_with_overflow(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    overflow: Overflow,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (refusal_app, refusals) = match overflow {
        Overflow::Wait => (None, Arc::new(Semaphore::new(0))),
        Overflow::Refuse { app, max_open } => (Some(app), Arc::new(Semaphore::new(max_open))),
    };
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let mut refuse_http = http.clone();
    refuse_http.keep_alive(false);
    tokio::pin!(shutdown);
    loop {
        // Capacity (a connection's or a refusal's) is taken before accepting: with none left,
        // new clients wait in the kernel's backlog.
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => Slot::Serve(p),
                Err(_) => break,
            },
            r = refusals.clone().acquire_owned(), if refusal_app.is_some() => match r {
                Ok(r) => Slot::Refuse(r),
                Err(_) => break,
            },
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
        // A connection may have closed while this one was being accepted: serve it if so.
        let slot = match slot {
            Slot::Refuse(r) => match permits.clone().try_acquire_owned() {
                Ok(p) => {
                    drop(r);
                    Slot::Serve(p)
                }
                Err(_) => Slot::Refuse(r),
            },
            serve => serve,
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        let (permit, router, builder) = match slot {
            Slot::Serve(p) => (p, &app, &http),
            // A refusal slot exists only with a refusal app.
            Slot::Refuse(p) => (p, refusal_app.as_ref().unwrap_or(&app), &refuse_http),
        };
        let service = TowerToHyperService::new(router.clone());
        let conn = graceful.watch(builder.serve_connection(io, service));
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

/// The capacity a connection holds while it is open.
enum Slot {
    Serve(OwnedSemaphorePermit),
    Refuse(OwnedSemaphorePermit),
}
