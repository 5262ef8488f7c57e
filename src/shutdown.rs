//! The process's shutdown as a future ([`signal`]), passed to the long-running commands (`unread run`,
//! `unread replay`) the way mini-redis passes `shutdown` to `server::run`, so that a test or an embedding program
//! can stop them with any future of its own.

use tracing::{info, warn};

/// Completes at the first SIGINT or SIGTERM, logging `SIGINT: stopping` or `SIGTERM: stopping`. The handlers are
/// installed when it is first polled. A SIGTERM handler that cannot be installed is logged, and SIGINT alone stops.
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate()).map_err(|e| warn!(error = %e, "installing the SIGTERM handler"));
    let sigterm = async move {
        match term {
            Ok(mut t) => t.recv().await,
            Err(()) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: stopping"),
        _ = sigterm => info!("SIGTERM: stopping"),
    }
}
