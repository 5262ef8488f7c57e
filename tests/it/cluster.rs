//! unread on a Redis Cluster of 3 masters ([`PrivateRedisCluster`]; `docs/operations.md`, "Redis Cluster"): the
//! same end-to-end run as on one server, with read diffusion from 5 members on, so users' hashes, the broadcast
//! lists and the read-diffused conversations' indexes spread over the masters, every script must stay within one
//! slot and every read combines a hash with lists and indexes on other masters. (Switching both ways is the same
//! scripts: `hybrid.rs` runs it on one server.)

use unread::core::contract::UserView;
use unread::core::hybrid::Diffusion;
use unread::pipeline::MAX_BATCH;

use crate::push::{converge, sse};
use crate::support::*;

#[test]
fn v2_dev_set_with_read_diffusion_on_a_redis_cluster_is_exact_pushed_verified_and_rebuilt() {
    let test = "v2_dev_set_with_read_diffusion_on_a_redis_cluster_is_exact_pushed_verified_and_rebuilt";
    let Some(stack) = stack(test) else { return };
    let cluster = PrivateRedisCluster::start();
    let ns = Ns::with(&stack, "clu", &cluster.url(), &stack.database_url);
    let expected = v2_dev_expected();
    let (_, switches) =
        fold_text(&std::fs::read_to_string(v2_dev_events()).unwrap(), Diffusion::from_threshold(5), MAX_BATCH);
    assert!(switches.to_read >= 20, "{switches:?}");
    let svc = ns.start(&["--read-diffusion-threshold", "5"]);
    // Push from an instance without the stages: it hears every node's writes through one node's subscription.
    let api = ns.start(&["--roles", "api"]);
    let sample: Vec<&UserView> = expected.iter().filter(|e| e.total_unread > 0).step_by(97).take(6).collect();
    assert!(sample.len() >= 3, "{} sampled users", sample.len());
    let followers: Vec<_> = sample.iter().map(|e| sse(api.port, &e.user_id)).collect();
    ns.ok(&["produce", &v2_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    let (n, bad) = mismatches(svc.port, &expected);
    assert!(n > 1000 && bad.is_empty(), "{} of {n} users differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(5)]);
    for (f, e) in followers.iter().zip(&sample) {
        converge(f, e);
    }
    assert_spread(&cluster, &ns.name, false);
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    svc.stop();
    // Every master loses the namespace's keys: answered from the checkpoint, then rebuilt, exact again.
    drop(followers);
    api.stop();
    lose_redis_then_rebuild(&ns, &expected, &sample);
}

/// Contracts v3 and v4 on the cluster (the v4 dev set is the v3 set with threads, reactions and teams): counts at
/// an instant (`e:`, `d:` and `t:` fields in users' hashes, and the expiry buckets of read-diffused conversations'
/// indexes, from 20 members), marks, and every receipt, replies' by thread cursor, whose keys (hash-tagged per
/// conversation) spread over the masters; lost, answered from the checkpoint, rebuilt, exact again.
#[test]
fn v4_dev_set_on_a_redis_cluster_is_exact_with_its_receipts_and_rebuilt() {
    let Some(stack) = stack("v4_dev_set_on_a_redis_cluster_is_exact_with_its_receipts_and_rebuilt") else { return };
    let cluster = PrivateRedisCluster::start();
    let ns = Ns::with(&stack, "clu4", &cluster.url(), &stack.database_url);
    let (expected, receipts) = (v4_dev_expected(), crate::v3::v4_dev_receipts());
    let svc = ns.start(&["--read-diffusion-threshold", "20"]);
    ns.ok(&["produce", &v4_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches_at(svc.port, &expected, V3_DEV_NOW);
    crate::v3::assert_receipts(svc.port, &receipts, 1);
    assert_spread(&cluster, &ns.name, true);
    svc.stop();
    let sample: Vec<&UserView> = expected.iter().step_by(97).collect();
    lose_redis_then_rebuild_at(&ns, &expected, &sample, V3_DEV_NOW);
    let api = ns.start(&["--roles", "api"]);
    crate::v3::assert_receipts(api.port, &receipts, 7);
    api.stop();
}

/// Every master holds users' hashes, and read-diffused conversations' indexes live on more than one master (with
/// `buckets`: some hold expiry buckets).
fn assert_spread(cluster: &PrivateRedisCluster, name: &str, buckets: bool) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let count = |node: usize, pattern: String| {
        rt.block_on(async {
            let client = redis::Client::open(cluster.node_url(node)).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut conn).await.unwrap();
            keys.len()
        })
    };
    let users: Vec<usize> = (0..3).map(|i| count(i, format!("{name}:u:*"))).collect();
    let indexes: Vec<usize> = (0..3).map(|i| count(i, format!("{name}:x:{{#*"))).collect();
    assert!(users.iter().all(|n| *n > 100), "users' hashes per master: {users:?}");
    assert!(indexes.iter().filter(|n| **n > 0).count() >= 2, "indexes per master: {indexes:?}");
    let expiring: Vec<usize> = (0..3).map(|i| count(i, format!("{name}:xe:{{#*"))).collect();
    assert!(!buckets || expiring.iter().sum::<usize>() > 0, "expiry buckets per master: {expiring:?}");
}
