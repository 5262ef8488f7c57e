//! How unread's clients reach managed services (issue 23): librdkafka properties passed through to every Kafka
//! client, and the files of Redis's TLS (a private CA, a client certificate and key). PostgreSQL needs nothing
//! here: its URL says it all (`sslmode=verify-full&sslrootcert=/path/ca.pem`, `sslcert`, `sslkey`).
//!
//! The settings are options of every subcommand (`--kafka-config KEY=VALUE`, `--kafka-config-file`,
//! `--redis-ca-file`, …, each file also an `UNREAD_*` variable), read once at start ([`init`]) and kept for the
//! process: [`crate::kafka::base`] applies the Kafka properties to every client it builds, and
//! [`crate::projection::conn`] the Redis files to every connection. Values are never logged: [`KafkaProperty`]'s
//! `Debug` hides them, since SASL passwords and OAuth secrets travel there.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context};
use clap::Args;

/// A librdkafka property `KEY=VALUE` (`security.protocol=SASL_SSL`, `sasl.mechanism=SCRAM-SHA-512`, …).
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaProperty {
    /// The property's name, as librdkafka's CONFIGURATION.md spells it.
    pub key: String,
    /// Its value, passed as is (may be a secret).
    pub value: String,
}

impl std::fmt::Debug for KafkaProperty {
    /// `key=…`: the value may be a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=…", self.key)
    }
}

impl std::str::FromStr for KafkaProperty {
    type Err = String;

    /// Parses `KEY=VALUE` (the value may hold `=`).
    ///
    /// Errors: no `=`, or an empty key.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok(KafkaProperty { key: key.trim().to_owned(), value: value.trim().to_owned() })
            }
            _ => Err("expected KEY=VALUE, e.g. security.protocol=SASL_SSL".to_owned()),
        }
    }
}

/// What every subcommand's clients need to reach services over TLS and SASL (flags global to the command line).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Clients: TLS, SASL, partitioner (every command)")]
pub struct ClientSettings {
    /// A librdkafka property for every Kafka client, `KEY=VALUE`; repeatable; after the file's, so it wins.
    #[arg(long = "kafka-config", global = true, value_name = "KEY=VALUE")]
    pub kafka_config: Vec<KafkaProperty>,
    /// A file of librdkafka properties, one `KEY=VALUE` a line (`#` starts a comment), e.g. a mounted Secret.
    #[arg(long, global = true, env = "UNREAD_KAFKA_CONFIG_FILE", value_name = "PATH")]
    pub kafka_config_file: Option<PathBuf>,
    /// PEM file of the CA that signed Redis's certificate (`rediss://`), instead of the system's roots.
    #[arg(long, global = true, env = "UNREAD_REDIS_CA_FILE", value_name = "PATH")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM file of the client certificate Redis asks for (mutual TLS); with --redis-key-file.
    #[arg(long, global = true, env = "UNREAD_REDIS_CERT_FILE", value_name = "PATH")]
    pub redis_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key; with --redis-cert-file.
    #[arg(long, global = true, env = "UNREAD_REDIS_KEY_FILE", value_name = "PATH")]
    pub redis_key_file: Option<PathBuf>,
    /// The key partitioner of the input topics' producers: `murmur2` (Java, franz-go, KafkaJS), `crc32`
    /// (librdkafka's default: confluent-kafka, node-rdkafka) or `fnv1a` (Sarama). The fan-out sends a user's deltas
    /// where it puts the user's events, unread's own producers use it, and a record on any other partition is
    /// dead-lettered (`misrouted`). Give every instance and command the same value (docs/producers.md).
    #[arg(long, global = true, env = "UNREAD_PARTITIONER", value_enum, default_value_t)]
    pub partitioner: crate::partitioner::Partitioner,
}

/// The settings as the clients use them, files read.
#[derive(Debug, Default)]
pub struct Clients {
    /// The Kafka properties, the file's first, then the flags'.
    pub kafka: Vec<KafkaProperty>,
    /// Redis's TLS certificates, if any file was named.
    pub redis_tls: Option<redis::TlsCertificates>,
    /// The input producers' key partitioner (`--partitioner`).
    pub partitioner: crate::partitioner::Partitioner,
}

static CLIENTS: OnceLock<Clients> = OnceLock::new();

/// Reads the files and keeps the settings for the process's clients; installs rustls's crypto provider (ring).
/// Called once, at start; a second call keeps the first settings.
///
/// Errors: a file that cannot be read, a properties line that is not `KEY=VALUE` (with its line number), a client
/// certificate without its key or the reverse.
pub fn init(settings: &ClientSettings) -> anyhow::Result<()> {
    // Another provider installed first (none here) would do as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut kafka = match &settings.kafka_config_file {
        Some(path) => read_properties(path)?,
        None => Vec::new(),
    };
    kafka.extend(settings.kafka_config.iter().cloned());
    let _ = CLIENTS.set(Clients { kafka, redis_tls: redis_tls(settings)?, partitioner: settings.partitioner });
    Ok(())
}

/// The process's settings ([`init`]); none before it (plaintext, the system's roots).
pub fn get() -> &'static Clients {
    static NONE: Clients =
        Clients { kafka: Vec::new(), redis_tls: None, partitioner: crate::partitioner::Partitioner::Murmur2 };
    CLIENTS.get().unwrap_or(&NONE)
}

/// The properties of a file: `KEY=VALUE` lines; blank lines and lines starting with `#` or `!` are skipped.
///
/// Errors: the file unreadable, or a line without `=` (named by its number).
pub fn read_properties(path: &Path) -> anyhow::Result<Vec<KafkaProperty>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading Kafka properties {}", path.display()))?;
    let lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    let wanted = lines.filter(|(_, l)| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'));
    wanted.map(|(n, line)| line.parse().map_err(|e| anyhow::anyhow!("{}:{n}: {e}", path.display()))).collect()
}

/// Redis's certificates from the files named, `None` when none is.
fn redis_tls(s: &ClientSettings) -> anyhow::Result<Option<redis::TlsCertificates>> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading Redis TLS file {}", p.display()));
    let client_tls = match (&s.redis_cert_file, &s.redis_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig { client_cert: read(cert)?, client_key: read(key)? }),
        (None, None) => None,
        _ => bail!("--redis-cert-file and --redis-key-file go together (mutual TLS)"),
    };
    let root_cert = s.redis_ca_file.as_deref().map(read).transpose()?;
    Ok((client_tls.is_some() || root_cert.is_some()).then_some(redis::TlsCertificates { client_tls, root_cert }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_and_hide_their_values() {
        let p: KafkaProperty = "sasl.password = s3=cr3t".parse().unwrap();
        assert_eq!((p.key.as_str(), p.value.as_str()), ("sasl.password", "s3=cr3t"));
        assert_eq!(format!("{p:?}"), "sasl.password=…");
        assert!("no-equals".parse::<KafkaProperty>().is_err() && "=x".parse::<KafkaProperty>().is_err());
    }

    #[test]
    fn a_properties_file_skips_comments_and_names_a_bad_line() {
        let dir = std::env::temp_dir().join(format!("unread-props-{}", std::process::id()));
        std::fs::write(&dir, "# managed Kafka\nsecurity.protocol=SASL_SSL\n\n! other\nsasl.mechanism=PLAIN\n").unwrap();
        let got = read_properties(&dir).unwrap();
        assert_eq!(got.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["security.protocol", "sasl.mechanism"]);
        std::fs::write(&dir, "a=1\nbroken\n").unwrap();
        let err = read_properties(&dir).unwrap_err().to_string();
        assert!(err.ends_with(":2: expected KEY=VALUE, e.g. security.protocol=SASL_SSL"), "{err}");
        std::fs::remove_file(&dir).unwrap();
    }
}
