//! The read API served in-process from its composition root ([`unread::app`]), as zero-to-production's
//! `spawn_app()`: no `unread run`, no consumer group, no dataset. It reads Redis (and PostgreSQL for degraded
//! reads) under a prefix and a schema of its own, so every user answers zeros: enough for authorization and
//! limits.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::watch;
use unread::api::limits::LimitOptions;
use unread::auth::{AuthOptions, Verifier};
use unread::config::Settings;

use super::Stack;

#[derive(Parser)]
struct Options {
    #[command(flatten)]
    settings: Settings,
    #[command(flatten)]
    limits: LimitOptions,
}

/// A read API serving on `port` until dropped.
pub struct App {
    /// The API's port on 127.0.0.1.
    pub port: u16,
    /// The admin address's port on 127.0.0.1 (`/healthz`, `/readyz`, `/metrics`).
    pub admin: u16,
    stop: watch::Sender<bool>,
    runtime: Option<tokio::runtime::Runtime>,
    /// (database URL, schema) of its checkpoint, dropped with it.
    schema: (String, String),
}

/// Serves the API built by [`unread::app::build`] with `auth` and the settings and limits of `args` (flags of
/// `unread run`, e.g. `--rate-limit 5`), on a free port, Redis keys under a prefix named after `test`.
pub fn spawn_app(stack: &Stack, test: &str, auth: AuthOptions, args: &[&str]) -> App {
    let name = format!("app_{test}_{}", std::process::id());
    let prefix = format!("{name}:");
    let mut argv = vec!["app", "--redis-url", &stack.redis_url, "--database-url", &stack.database_url];
    argv.extend(["--brokers", &stack.brokers, "--redis-prefix", &prefix, "--db-schema", &name]);
    argv.extend_from_slice(args);
    let Options { settings, limits } = Options::parse_from(argv);
    let auth = Verifier::from_options(&auth).expect("the auth options load").map(Arc::new);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (stop, stopped) = watch::channel(false);
    let schema = (settings.database_url.clone(), settings.ns_db_schema());
    let (port, admin) = runtime.block_on(async {
        // What `unread migrate` does: degraded reads find the tables, empty.
        super::stack::migrated_store(&schema.0, &schema.1).await;
        let metrics = Arc::new(unread::metrics::Metrics::default());
        let admin_limits = limits.clone();
        let deps = unread::app::ApiDeps {
            settings: settings.clone(),
            auth,
            limits,
            metrics: metrics.clone(),
            producer: None,
            stop: stopped.clone(),
        };
        let state = unread::app::build(deps).await.expect("the API builds");
        let admin_state =
            unread::app::admin(&settings, Some(&state), Vec::new(), metrics).await.expect("the admin state");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (listener, admin) = (
            unread::app::bind(any).await.expect("a free port"),
            unread::app::bind_admin(any).await.expect("a free port"),
        );
        let ports = (listener.local_addr().unwrap().port(), admin.local_addr().unwrap().port());
        tokio::spawn(unread::app::serve(listener, state, stopped.clone()));
        tokio::spawn(async move { unread::app::serve_admin(admin, admin_state, &admin_limits, stopped).await });
        ports
    });
    App { port, admin, stop, runtime: Some(runtime), schema }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(runtime) = self.runtime.take() {
            let (url, schema) = &self.schema;
            if let Err(e) = runtime.block_on(unread::checkpoint::store::drop_schema(url, schema)) {
                println!("dropping {schema}: {e}");
            }
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}
