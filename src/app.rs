//! The composition root of the read API and the admin address: what the API is built from ([`ApiDeps`]), built one
//! way for `unread run` and for the tests, which serve it in-process without a whole service ([`build`], [`serve`],
//! [`admin`], [`serve_admin`]).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;

use crate::api::admin::AdminState;
use crate::api::limits::{LimitOptions, RateLimits};
use crate::api::ApiState;
use crate::auth::Verifier;
use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::metrics::{Assignment, Metrics};

/// What the read API is built from.
pub struct ApiDeps {
    /// The stores and names it reads (the live pointer, projections, checkpoints).
    pub settings: Settings,
    /// The token verifier; `None`: every caller reads every user (`--insecure-no-auth`).
    pub auth: Option<Arc<Verifier>>,
    /// Size, time and rate limits.
    pub limits: LimitOptions,
    /// The metrics each request is counted in.
    pub metrics: Arc<Metrics>,
    /// The write gateway's producer ([`crate::kafka::gateway_producer`]); `None`: writes answer 503.
    pub producer: Option<crate::kafka::producer::AsyncProducer>,
    /// Turns true when the process stops: the push hub and the server stop with it.
    pub stop: watch::Receiver<bool>,
}

/// Builds the API's state: connects to the live pointer (and follows it), starts the push hub, and wires degraded
/// reads, limits and the gateway.
///
/// Errors: Redis unreachable, or the live pointer names a namespace that is not valid.
pub async fn build(deps: ApiDeps) -> anyhow::Result<ApiState> {
    let ApiDeps { settings, auth, limits, metrics, producer, stop } = deps;
    let live = crate::namespace::LiveProjection::connect(&settings).await?;
    live.follow();
    let fallback = crate::read::Fallback::new(settings.clone());
    let reader = Arc::new(crate::read::Reader::new(live, Some(fallback), metrics.clone()));
    let hub = crate::push::Hub::start(reader.clone(), &settings.redis_url, stop, metrics.clone());
    let (topic, prefix) = (settings.topics().user_events, settings.redis_prefix.clone());
    let gateway = producer.map(|p| Arc::new(crate::api::gateway::Gateway::new(p, topic, prefix)));
    let rates = Arc::new(RateLimits::new(&limits));
    let limits = Arc::new(limits);
    Ok(ApiState { reader, metrics, auth, limits, rates, hub, gateway })
}

/// Binds the API's address (port 0: any free port), before anything else starts: a process that cannot serve
/// its API stops before it joins a consumer group.
///
/// Errors: the address cannot be bound (in use, say).
pub async fn bind(listen: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding the read API to {listen}"))
}

/// Binds the admin address ([`crate::api::admin`]; port 0: any free port), before anything else starts.
///
/// Errors: the address cannot be bound (in use, say).
pub async fn bind_admin(listen: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding the admin address to {listen}"))
}

/// The admin routes' state: the read API's reader and push hub when `api` is given, otherwise a reader of its own
/// (Redis only; its live projection connected here, following the pointer) for `/readyz`.
///
/// Errors: Redis unreachable (only when `api` is `None`).
pub async fn admin(
    settings: &Settings,
    api: Option<&ApiState>,
    assignments: Vec<(Stage, Arc<Assignment>)>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<AdminState> {
    let (reader, hub) = match api {
        Some(s) => (s.reader.clone(), Some(s.hub.clone())),
        None => {
            let live = crate::namespace::LiveProjection::connect(settings).await?;
            live.follow();
            (Arc::new(crate::read::Reader::new(live, None, metrics.clone())), None)
        }
    };
    Ok(AdminState { reader, assignments, metrics, hub })
}

/// Serves the admin routes on `listener` until `stop` turns true.
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    state: AdminState,
    limits: &LimitOptions,
    mut stop: watch::Receiver<bool>,
) {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    crate::api::serve::serve(listener, crate::api::admin::router(state), limits, stopped).await;
}

/// Serves `state` on `listener` until `stop` turns true, then drains the open connections.
pub async fn serve(listener: tokio::net::TcpListener, state: ApiState, mut stop: watch::Receiver<bool>) {
    let limits = state.limits.clone();
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    crate::api::serve::serve(listener, crate::api::router(state), &limits, stopped).await;
}
