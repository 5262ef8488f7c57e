//! Connection settings shared by every subcommand that talks to Kafka, Redis or PostgreSQL. Each is a flag and an
//! `UNREAD_*` environment variable; the defaults match `scripts/stack up` (native mode).
//!
//! A **namespace** is one complete copy of the service's state: a Redis key prefix, a PostgreSQL schema, two
//! consumer groups and a delta topic, all derived from the base settings and the namespace's name (see
//! [`Settings::redis_prefix`] and its siblings). The input topics are shared by every namespace. `default` is the
//! base namespace, named exactly by the base settings; `unread replay --into NAME` fills another, and
//! `unread promote NAME` makes the read API serve it (docs/operations.md § Replay).

use std::time::Duration;

use anyhow::bail;
use clap::Args;

use crate::checkpoint::Stage;
use crate::topology::Topics;

/// The name of the base namespace.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Where the services are and which namespace this instance uses.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Where the services are")]
pub struct Settings {
    /// Kafka bootstrap servers, comma-separated host:port.
    #[arg(long, env = "UNREAD_BROKERS", default_value = "127.0.0.1:39092")]
    pub brokers: String,
    /// Redis URL of the projection.
    #[arg(long, env = "UNREAD_REDIS_URL", default_value = "redis://127.0.0.1:36379")]
    pub redis_url: String,
    /// PostgreSQL URL of the checkpoint store.
    #[arg(long, env = "UNREAD_DATABASE_URL", default_value = "postgres://unread@127.0.0.1:35432/unread")]
    pub database_url: String,
    /// PostgreSQL schema of the default namespace's checkpoint tables (created if missing; letters, digits and _).
    #[arg(long, env = "UNREAD_DB_SCHEMA", default_value = "unread")]
    pub db_schema: String,
    /// Prefix of every topic name (e.g. `test1.` gives `test1.unread.user-events`).
    #[arg(long, env = "UNREAD_TOPIC_PREFIX", default_value = "")]
    pub topic_prefix: String,
    /// Consumer group id of the default namespace; its fan-out stage uses `{group}.fanout`, its fold `{group}.fold`.
    #[arg(long, env = "UNREAD_GROUP_ID", default_value = "unread")]
    pub group_id: String,
    /// Prefix of every Redis key of the default namespace's projection (and of the `live` pointer).
    #[arg(long, env = "UNREAD_REDIS_PREFIX", default_value = "unread:")]
    pub redis_prefix: String,
    /// The namespace whose state this command reads or writes: `default`, or 1 to 32 of a-z, 0-9 and _.
    #[arg(long, env = "UNREAD_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Member count from which a conversation is read-diffused: its messages are stored once and combined with
    /// each member's cursor at read time; back to write diffusion below half of it; 0 turns it off
    /// (docs/operations.md, "Read diffusion").
    #[arg(long, env = "UNREAD_READ_DIFFUSION_THRESHOLD", default_value_t = crate::core::hybrid::DEFAULT_THRESHOLD)]
    pub read_diffusion_threshold: u64,
    /// Redis as a bounded cache: a user's hash expires this long after its last write or read (e.g. `7d`); a
    /// read of such a user refills it from the checkpoint, and the fold writes it whole at its next change. Off by
    /// default (every user stays in Redis). Give every role the same value; at least [`MIN_PROJECTION_TTL`]
    /// (docs/operations.md, "Redis as a bounded cache").
    #[arg(long, env = "UNREAD_PROJECTION_TTL", value_parser = parse_duration)]
    pub projection_ttl: Option<Duration>,
}

/// The shortest `--projection-ttl`: 5 minutes. A hash may expire only once its last write is in the checkpoint,
/// or a reader would refill it from an older state that nothing corrects until the user changes again; the
/// checkpoint trails Redis by at most the flush interval plus the PostgreSQL retry budget (60 s), after which the
/// task restarts and writes again. Test aid: `UNREAD_TEST_SHORT_PROJECTION_TTL=1` lifts the floor.
pub const MIN_PROJECTION_TTL: Duration = Duration::from_secs(300);

/// Checks a namespace name: `default`, or 1 to 32 characters of `a-z`, `0-9` and `_`.
///
/// Errors: any other name.
pub fn check_namespace(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        bail!("namespace {name:?} must be 1 to 32 characters of a-z, 0-9 and _");
    }
    Ok(())
}

/// Parses a duration in humantime's style (`200ms`, `30s`, `5m`, `1h 30m`); must be more than zero.
///
/// Errors: another shape, or zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 200ms, 30s, 5m)"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than zero"));
    }
    Ok(d)
}

/// [`parse_duration`], where a bare number is milliseconds (the old `--flush-interval-ms 200` spelling).
///
/// Errors: as [`parse_duration`].
pub fn parse_duration_or_ms(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(ms) => parse_duration(&format!("{ms}ms")),
        Err(_) => parse_duration(s),
    }
}

/// A duration that may be zero (`0ms`: at once), e.g. `--publish-interval`; a bare number is milliseconds.
///
/// Errors: another shape.
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(_) => humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 0ms, 50ms, 200ms)")),
    }
}

/// [`parse_duration`], where a bare number is seconds (the old `lag --wait 120` spelling).
///
/// Errors: as [`parse_duration`].
pub fn parse_duration_or_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(secs) => parse_duration(&format!("{secs}s")),
        Err(_) => parse_duration(s),
    }
}

impl Settings {
    /// `--projection-ttl`, checked against [`MIN_PROJECTION_TTL`].
    ///
    /// Errors: a ttl under the floor (unless the test aid is set).
    pub fn checked_projection_ttl(&self) -> anyhow::Result<Option<Duration>> {
        let short_ok = std::env::var("UNREAD_TEST_SHORT_PROJECTION_TTL").is_ok_and(|v| v == "1");
        match self.projection_ttl {
            Some(ttl) if ttl < MIN_PROJECTION_TTL && !short_ok => bail!(
                "--projection-ttl {}: at least {} (the checkpoint must hold a hash's last write before it expires)",
                humantime::format_duration(ttl),
                humantime::format_duration(MIN_PROJECTION_TTL)
            ),
            ttl => Ok(ttl),
        }
    }

    /// The read-diffusion policy of `--read-diffusion-threshold`.
    pub fn diffusion(&self) -> crate::core::hybrid::Diffusion {
        crate::core::hybrid::Diffusion::from_threshold(self.read_diffusion_threshold)
    }

    /// The same settings in another namespace.
    ///
    /// Errors: an invalid namespace name.
    pub fn in_namespace(&self, name: &str) -> anyhow::Result<Settings> {
        check_namespace(name)?;
        Ok(Settings { namespace: name.to_owned(), ..self.clone() })
    }

    fn is_default(&self) -> bool {
        self.namespace == DEFAULT_NAMESPACE
    }

    /// The namespace's Redis key prefix: the base prefix, or `{base}ns:{name}:`.
    pub fn ns_redis_prefix(&self) -> String {
        if self.is_default() {
            self.redis_prefix.clone()
        } else {
            format!("{}ns:{}:", self.redis_prefix, self.namespace)
        }
    }

    /// The namespace's PostgreSQL schema: the base schema, or `{base}_ns_{name}`.
    pub fn ns_db_schema(&self) -> String {
        if self.is_default() {
            self.db_schema.clone()
        } else {
            format!("{}_ns_{}", self.db_schema, self.namespace)
        }
    }

    /// The namespace's consumer group prefix: the base group id, or `{base}.ns.{name}`.
    pub fn ns_group_id(&self) -> String {
        if self.is_default() {
            self.group_id.clone()
        } else {
            format!("{}.ns.{}", self.group_id, self.namespace)
        }
    }

    /// The consumer group of one stage of the namespace: `{group}.fanout` or `{group}.fold`.
    pub fn stage_group(&self, stage: Stage) -> String {
        format!("{}.{stage}", self.ns_group_id())
    }

    /// The namespace's topics: the shared input and dead-letter topics, and its own delta topic
    /// (`unread.user-deltas`, or `unread.user-deltas.{name}`).
    pub fn topics(&self) -> Topics {
        let mut t = Topics::new(&self.topic_prefix);
        if !self.is_default() {
            t.user_deltas = format!("{}.{}", t.user_deltas, self.namespace);
        }
        t
    }

    /// The Redis key naming the namespace the read API serves (`{base prefix}live`; absent means `default`).
    pub fn live_pointer_key(&self) -> String {
        format!("{}live", self.redis_prefix)
    }

    /// Checks the namespace name.
    ///
    /// Errors: an invalid namespace name.
    pub fn check(&self) -> anyhow::Result<()> {
        check_namespace(&self.namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        s: Settings,
    }

    #[test]
    fn durations_are_humantime_and_bare_numbers_keep_their_old_unit() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("0s").is_err() && parse_duration("5").is_err() && parse_duration("s").is_err());
        assert_eq!(parse_duration_or_ms("200").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_duration_or_ms("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration_or_secs("120").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration_or_secs("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration_or_ms("0").is_err());
    }

    #[test]
    fn namespaces_derive_every_name_and_default_keeps_the_base_ones() {
        let base = Cli::parse_from(["x"]).s;
        assert_eq!(
            (base.ns_redis_prefix(), base.ns_db_schema(), base.ns_group_id(), base.topics().user_deltas),
            ("unread:".into(), "unread".into(), "unread".into(), "unread.user-deltas".into())
        );
        let v2 = base.in_namespace("v2").unwrap();
        assert_eq!(
            (v2.ns_redis_prefix(), v2.ns_db_schema(), v2.ns_group_id(), v2.topics().user_deltas),
            ("unread:ns:v2:".into(), "unread_ns_v2".into(), "unread.ns.v2".into(), "unread.user-deltas.v2".into())
        );
        assert_eq!(v2.topics().user_events, base.topics().user_events, "input topics are shared");
        assert_eq!(v2.live_pointer_key(), "unread:live");
        for bad in ["", "V2", "a-b", "a:b", &"x".repeat(33)] {
            assert!(base.in_namespace(bad).is_err(), "{bad:?}");
        }
    }
}
