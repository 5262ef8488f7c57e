//! The connection to Redis: one server, or a Redis Cluster.
//!
//! `UNREAD_REDIS_URL` names one server (`redis://host:port`) or, comma-separated, the seed nodes of a Redis Cluster
//! (`redis://127.0.0.1:37001,redis://127.0.0.1:37002,redis://127.0.0.1:37003`). With several URLs unread uses the
//! redis crate's cluster client, which routes each command to the master owning its key's slot and follows
//! `MOVED`/`ASK` redirections. Every script touches only keys of one slot in cluster mode (see
//! `docs/operations.md`, "Redis Cluster"); what else differs is here:
//!
//! - a batch of commands ([`Conn::run_all`]) is one pipeline on a single server, and concurrent single commands on
//!   a cluster (a cluster pipeline must stay within one slot);
//! - keys are scanned master by master ([`Conn::masters`]);
//! - pub/sub uses one node's plain connection ([`pubsub_url`]): a cluster forwards every `PUBLISH` to all nodes.

use futures::future::{try_join_all, FutureExt};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

/// A reconnecting connection to one Redis server or to a Redis Cluster; cheap to clone (a handle).
#[derive(Clone)]
pub enum Conn {
    /// One server, through the crate's connection manager (reconnects on failure).
    Single(ConnectionManager),
    /// A cluster, through the crate's async cluster client (refreshes slots, follows redirections).
    Cluster(ClusterConnection),
}

/// The URLs in a `UNREAD_REDIS_URL`: one server's, or a cluster's seed nodes (comma-separated, blanks ignored).
pub fn seeds(url: &str) -> Vec<&str> {
    url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// The URL to subscribe to for the `attempt`-th time (counting from 0): the server's, or the seed nodes in turn,
/// so a subscription that failed moves on to the next node.
pub fn pubsub_url(url: &str, attempt: usize) -> &str {
    let nodes = seeds(url);
    nodes.get(attempt % nodes.len().max(1)).copied().unwrap_or(url)
}

/// A client of one server (`redis://` or `rediss://`), with the process's TLS files if any were named
/// ([`crate::clients`]: a private CA, a client certificate).
///
/// Errors: a malformed URL, or certificates that do not parse.
pub fn client(url: &str) -> RedisResult<redis::Client> {
    match &crate::clients::get().redis_tls {
        Some(certs) if url.starts_with("rediss://") => redis::Client::build_with_tls(url, certs.clone()),
        _ => redis::Client::open(url),
    }
}

impl Conn {
    /// Connects to the server, or to the cluster through its seed nodes ([`seeds`]).
    ///
    /// Errors: a malformed URL, or no server (no seed node) reachable.
    pub async fn open(url: &str) -> RedisResult<Self> {
        let nodes = seeds(url);
        if nodes.len() > 1 {
            let mut builder = redis::cluster::ClusterClientBuilder::new(nodes);
            if let Some(certs) = &crate::clients::get().redis_tls {
                builder = builder.certs(certs.clone());
            }
            Ok(Conn::Cluster(builder.build()?.get_async_connection().await?))
        } else {
            let client = client(nodes.first().copied().unwrap_or(url))?;
            Ok(Conn::Single(ConnectionManager::new(client).await?))
        }
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs the commands and returns their replies in order: one pipelined round trip on a single server, concurrent
    /// commands (each routed to its slot's master) on a cluster.
    ///
    /// Errors: the first failing command's error (on a single server, the pipeline's); on a cluster, others may
    /// have run.
    pub async fn run_all<T: FromRedisValue + Send>(&self, cmds: Vec<Cmd>) -> RedisResult<Vec<T>> {
        match self {
            Conn::Single(conn) => {
                let mut pipe = Pipeline::with_capacity(cmds.len());
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query_async(&mut conn.clone()).await
            }
            Conn::Cluster(conn) => {
                try_join_all(cmds.into_iter().map(|cmd| {
                    let mut conn = conn.clone();
                    async move { cmd.query_async::<T>(&mut conn).await }
                }))
                .await
            }
        }
    }

    /// The URLs of the masters holding the keys: `url` itself for a single server; for a cluster, each master that
    /// `CLUSTER NODES` lists as not failed, with the scheme and credentials of the first seed.
    ///
    /// Errors: Redis unreachable.
    pub async fn masters(&self, url: &str) -> RedisResult<Vec<String>> {
        let Conn::Cluster(conn) = self else { return Ok(vec![url.to_owned()]) };
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn.clone()).await?;
        let first = seeds(url).first().copied().unwrap_or(url);
        let (scheme, rest) = first.split_once("://").unwrap_or(("redis", first));
        let credentials = rest.split('/').next().unwrap_or("").rsplit_once('@').map(|(c, _)| format!("{c}@"));
        Ok(masters_in(&nodes)
            .into_iter()
            .map(|address| format!("{scheme}://{}{address}", credentials.as_deref().unwrap_or("")))
            .collect())
    }
}

/// The `host:port` of each master, not failed, in a `CLUSTER NODES` reply.
fn masters_in(nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let (address, flags) = (fields.get(1)?, fields.get(2)?);
            let master = flags.split(',').any(|f| f == "master") && !flags.contains("fail");
            master.then(|| address.split(['@', ',']).next().unwrap_or(address).to_owned())
        })
        .collect()
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count).boxed(),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_url_is_a_server_several_are_a_cluster() {
        assert_eq!(seeds("redis://127.0.0.1:36379"), vec!["redis://127.0.0.1:36379"]);
        let cluster = seeds("redis://127.0.0.1:37001, redis://127.0.0.1:37002,");
        assert_eq!(cluster, vec!["redis://127.0.0.1:37001", "redis://127.0.0.1:37002"]);
        assert_eq!(pubsub_url("redis://a:1,redis://b:2", 3), "redis://b:2");
        assert_eq!(pubsub_url("redis://a:1", 3), "redis://a:1");
    }

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "07c3 127.0.0.1:37002@47002 master - 0 1 2 connected 5461-10922\n\
                     e7d1 127.0.0.1:37001@47001,host myself,master - 0 0 1 connected 0-5460\n\
                     a1b2 127.0.0.1:37004@47004 slave 07c3 0 1 2 connected\n\
                     f00d 127.0.0.1:37003@47003 master,fail - 0 1 3 disconnected\n";
        assert_eq!(masters_in(nodes), vec!["127.0.0.1:37002", "127.0.0.1:37001"]);
    }
}
