//! Serving the router over HTTP/1.1 with hyper, so that the request head has a read timeout and a bounded buffer
//! (`axum::serve` sets neither), and connections drain on shutdown.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::limits::LimitOptions;

/// Longest the server waits for open connections to finish their requests after `stop`: 10 s.
pub const DRAIN_FOR: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `stop` completes, then stops accepting and waits up to [`DRAIN_FOR`] for the
/// open connections (each is told to close after its current request).
///
/// A client that takes longer than `header_read_timeout` to send a request head is disconnected; hyper's read
/// buffer is bounded by twice `max_header_bytes` (at least 8 KiB), so a longer head is refused before the
/// [`super::limits`] middleware can answer it with a JSON 431.
pub async fn serve(listener: TcpListener, app: Router, limits: &LimitOptions, stop: impl Future<Output = ()>) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size((limits.max_header_bytes * 2).max(8192));
    let (closing, closing_rx) = watch::channel(false);
    // Every connection task holds a sender: when all are dropped, `open.recv()` answers `None`.
    let (alive, mut open) = mpsc::channel::<()>(1);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        tokio::spawn(connection(http.clone(), stream, app.clone(), closing_rx.clone(), alive.clone()));
    }
    drop((listener, alive));
    let _ = closing.send(true);
    if tokio::time::timeout(DRAIN_FOR, open.recv()).await.is_err() {
        tracing::warn!("connections still open after {DRAIN_FOR:?}: closing them");
    }
}

/// Serves one connection until it ends, or, once `closing` turns true, until its current request is answered.
async fn connection(
    http: hyper::server::conn::http1::Builder,
    stream: TcpStream,
    app: Router,
    mut closing: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
) {
    let _ = stream.set_nodelay(true);
    let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app)).with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = closing.wait_for(|c| *c) => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}
