//! Issue 23: unread on services that speak TLS only (`UNREAD_STACK_TLS=1 scripts/stack up`): Kafka on a SASL_SSL
//! listener with SCRAM-SHA-512, Redis on `rediss://` with a private CA, a client certificate and a password,
//! PostgreSQL with `hostssl` only and `sslmode=verify-full`. The dev set end to end over it; plaintext and wrong
//! credentials refused, each with an error that names the service.

use std::process::Command;

use crate::support::*;

/// The TLS stack's settings (what `UNREAD_STACK_TLS=1 scripts/stack env` prints), or `None` when it is not up
/// (a panic when the stack is required, as in `scripts/test`).
fn tls_stack(test: &str) -> Option<Stack> {
    let out = Command::new(repo_path("scripts/stack")).arg("env").env("UNREAD_STACK_TLS", "1").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut env: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect();
    let mut take = |k: &str| env.iter().position(|(n, _)| n == k).map(|i| env.remove(i).1).unwrap_or_default();
    let (brokers, redis_url, database_url) =
        (take("UNREAD_BROKERS"), take("UNREAD_REDIS_URL"), take("UNREAD_DATABASE_URL"));
    if std::net::TcpStream::connect(&brokers).is_err() {
        let required = std::env::var("UNREAD_REQUIRE_STACK").as_deref() == Ok("1");
        assert!(!required, "{test}: the TLS stack is not up (UNREAD_STACK_TLS=1 scripts/stack up)");
        println!("SKIPPED {test}: no TLS stack (UNREAD_STACK_TLS=1 scripts/stack up)");
        return None;
    }
    Some(Stack { brokers, redis_url, database_url, client_env: env })
}

#[test]
fn the_dev_set_runs_end_to_end_on_a_stack_that_speaks_tls_only() {
    let Some(stack) = tls_stack("the_dev_set_runs_end_to_end_on_a_stack_that_speaks_tls_only") else { return };
    assert!(stack.redis_url.starts_with("rediss://") && stack.database_url.contains("sslmode=verify-full"));
    let ns = Ns::new(&stack, "tls");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches(svc.port, &dev_expected());
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    svc.stop();
}

#[test]
fn plaintext_and_wrong_credentials_are_refused_with_an_error_naming_the_service() {
    let Some(stack) = tls_stack("plaintext_and_wrong_credentials_are_refused_with_an_error_naming_the_service") else {
        return;
    };
    let ns = Ns::new(&stack, "tlsrefused");
    // Runs a subcommand that must fail; returns its last line (the one the process ends with).
    let refused = |args: &[&str], set: &[(&str, &str)], unset: &[&str]| {
        let mut cmd = ns.cmd(args);
        cmd.envs(set.iter().copied());
        unset.iter().for_each(|k| {
            cmd.env_remove(k);
        });
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} with {set:?} succeeded: {stderr}");
        stderr.lines().last().unwrap_or_default().to_owned()
    };
    let line = refused(&["topics", "create"], &[], &["UNREAD_KAFKA_CONFIG_FILE"]);
    assert!(line.starts_with("unread: Kafka at ") && line.contains("brokers are down"), "{line}");
    let line = refused(&["--kafka-config", "sasl.password=wrong", "topics", "create"], &[], &[]);
    assert!(line.starts_with("unread: Kafka at ") && line.contains("SASL authentication error"), "{line}");
    // The service refuses to start at all, before joining a group, rather than running without Kafka.
    let run = [
        "--kafka-config",
        "sasl.password=wrong",
        "run",
        "--insecure-no-auth",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ];
    let line = refused(&run, &[], &[]);
    assert!(line.starts_with("unread: Kafka at ") && line.contains("SASL authentication error"), "{line}");
    let plain_redis = stack.redis_url.replace("rediss://", "redis://");
    let line = refused(&["inspect", "user", "x"], &[("UNREAD_REDIS_URL", &plain_redis)], &[]);
    assert!(line.starts_with("unread: Redis"), "{line}");
    let line = refused(&["inspect", "user", "x"], &[], &["UNREAD_REDIS_CERT_FILE", "UNREAD_REDIS_KEY_FILE"]);
    assert!(line.starts_with("unread: Redis") && line.contains("CertificateRequired"), "{line}");
    let plain_pg = stack.database_url.replace("sslmode=verify-full", "sslmode=disable");
    let line = refused(&["migrate"], &[("UNREAD_DATABASE_URL", &plain_pg)], &[]);
    assert!(line.starts_with("unread: PostgreSQL") && line.contains("no encryption"), "{line}");
    let wrong_pg = stack.database_url.replace("unread-pg-secret", "wrong");
    let line = refused(&["migrate"], &[("UNREAD_DATABASE_URL", &wrong_pg)], &[]);
    assert!(line.starts_with("unread: PostgreSQL") && line.contains("password authentication failed"), "{line}");
    let no_ca = stack.database_url.split("&sslrootcert").next().unwrap().to_owned();
    let line = refused(&["migrate"], &[("UNREAD_DATABASE_URL", &no_ca)], &[]);
    assert!(line.starts_with("unread: PostgreSQL") && line.contains("UnknownIssuer"), "{line}");
}
