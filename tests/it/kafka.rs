//! The service's Kafka producer (`unread::kafka::producer::AsyncProducer`), the visibility probe and `unread lag`
//! against the real broker.

use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::FutureRecord;
use unread::kafka::producer::AsyncProducer;

use crate::support::{dev_events, stack, Ns};

#[test]
fn the_async_producer_acknowledges_each_record_with_its_offset_and_refuses_a_partition_the_topic_lacks() {
    let Some(stack) =
        stack("the_async_producer_acknowledges_each_record_with_its_offset_and_refuses_a_partition_the_topic_lacks")
    else {
        return;
    };
    let ns = Ns::new(&stack, "asyncprod");
    let topic = unread::topology::Topics::new(&format!("{}.", ns.name)).dead_letter;
    let producer: AsyncProducer = unread::kafka::producer_config(&stack.brokers).create().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Queued without waiting, acknowledged in order, at consecutive offsets of the partition.
        let acks: Vec<_> = (0..100)
            .map(|i| {
                let payload = format!("record {i}");
                producer.send_result(FutureRecord::<(), _>::to(&topic).partition(0).payload(&payload)).unwrap()
            })
            .collect();
        let mut offsets = Vec::new();
        for ack in acks {
            // The polling thread serves the reports: without it, this would wait forever.
            let report = tokio::time::timeout(Duration::from_secs(30), ack).await.expect("acknowledged within 30 s");
            let delivery = report.expect("a delivery report").map_err(|(e, _)| e).unwrap();
            assert_eq!(delivery.partition, 0);
            offsets.push(delivery.offset);
        }
        assert_eq!(offsets, (offsets[0]..offsets[0] + 100).collect::<Vec<_>>());
        // Sent and awaited, by a clone (one client).
        let clone = producer.clone();
        let one = clone.send(FutureRecord::to(&topic).partition(0).key("k").payload("last"), Duration::from_secs(10));
        assert_eq!(one.await.map_err(|(e, _)| e).unwrap().offset, offsets[99] + 1);
        // A partition the topic does not have: an error with the record, not a wait.
        let record = FutureRecord::to(&topic).partition(99).key("k").payload("nowhere");
        let (error, message) = producer.send(record, Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::UnknownPartition), "{error}");
        assert_eq!(rdkafka::Message::payload(&message), Some(&b"nowhere"[..]));
    });
    let reader: rdkafka::consumer::BaseConsumer =
        unread::kafka::reader(&stack.brokers, "asyncprod-check").create().unwrap();
    let (_, high) = unread::kafka::watermarks(&reader, &topic, 1).unwrap()[0];
    assert!(high >= 101, "the partition's high watermark {high} counts every record acknowledged");
    ns.cleanup();
}

#[test]
fn a_kept_visibility_probe_answers_each_question_afresh_past_commit_markers_and_aborted_records() {
    use rdkafka::producer::Producer;
    let Some(stack) =
        stack("a_kept_visibility_probe_answers_each_question_afresh_past_commit_markers_and_aborted_records")
    else {
        return;
    };
    let ns = Ns::new(&stack, "visprobe");
    let topic = unread::topology::Topics::new(&format!("{}.", ns.name)).dead_letter;
    let mut config = unread::kafka::producer_config(&stack.brokers);
    config.set("transactional.id", format!("{}-visprobe", ns.name));
    let producer: AsyncProducer = config.create().unwrap();
    let t = Duration::from_secs(30);
    producer.init_transactions(t).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // One transaction of `n` records on partition 0, committed or aborted: the offset of its first record.
    let transaction = |n: usize, commit: bool| -> i64 {
        producer.begin_transaction().unwrap();
        let first = rt.block_on(async {
            let mut first = None;
            for _ in 0..n {
                let record = FutureRecord::<(), _>::to(&topic).partition(0).payload("x");
                let sent = producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
                first = first.or(Some(sent.offset));
            }
            first.unwrap()
        });
        match commit {
            true => producer.commit_transaction(t).unwrap(),
            false => producer.abort_transaction(t).unwrap(),
        }
        first
    };
    let probe = unread::kafka::VisibilityProbe::new(&stack.brokers).unwrap();
    let ask = |from: i64| {
        let answer = probe.first_visible(&topic, &[(0, from)], Duration::from_secs(10)).unwrap()[&0];
        // Left assigned, the reader would go on fetching the partition until the next question.
        assert_eq!(probe.assigned().unwrap(), 0, "the probe is unassigned once it answered");
        answer
    };
    // Records 0..3, then the commit marker at 3.
    let first = transaction(3, true);
    assert_eq!(ask(first), Some(first));
    assert_eq!(ask(first + 1), Some(first + 1));
    assert_eq!(ask(first + 3), None, "only the commit marker lies at the end");
    // The same question after a new committed record: the probe does not answer from what it read before.
    let next = transaction(1, true);
    assert_eq!(next, first + 4);
    assert_eq!(ask(first + 3), Some(next));
    // An aborted record and its marker, then nothing: invisible.
    let aborted = transaction(1, false);
    assert_eq!(ask(aborted), None, "an aborted record is not visible");
    assert_eq!(ask(next + 1), None, "past the last commit marker only the aborted transaction lies");
    assert_eq!(ask(next), Some(next));
    ns.cleanup();
}

/// `unread lag --wait` ends each poll at the first partition that shows lag (during a catch-up, one watermark query
/// instead of a fetch from every delta partition), but a wait that runs out prints the whole table: every
/// partition of the three input topics, and the total `unread lag` reports.
#[test]
fn a_lag_wait_that_runs_out_prints_every_partition_and_the_whole_lag() {
    let Some(stack) = stack("a_lag_wait_that_runs_out_prints_every_partition_and_the_whole_lag") else { return };
    let ns = Ns::new(&stack, "lagwait");
    ns.ok(&["produce", &dev_events()]);
    // No service runs: nothing is folded, so the wait runs out.
    let out = ns.cmd(&["lag", "--wait", "1s"]).output().unwrap();
    assert!(!out.status.success(), "no service ran, yet the lag reached zero");
    let err = String::from_utf8_lossy(&out.stderr);
    let whole: serde_json::Value = serde_json::from_str(&ns.ok(&["lag", "--output", "json"])).unwrap();
    let topics = unread::topology::Topics::new(&format!("{}.", ns.name));
    for topic in [&topics.conversation_events, &topics.user_events, &topics.user_deltas] {
        let partitions = whole["rows"].as_array().unwrap().iter().filter(|r| r["topic"] == topic.as_str()).count();
        let rows = err.lines().filter(|l| l.split_whitespace().nth(1) == Some(topic.as_str())).count();
        assert!(partitions > 0);
        assert_eq!(rows, partitions, "{topic}: a row per partition in\n{err}");
    }
    let total = whole["total"].as_i64().unwrap();
    assert!(total > 0);
    assert!(err.contains(&format!("lag is still {total} after 1s")), "{err}");
    assert!(err.trim_end().ends_with(&format!("total lag: {total}")), "{err}");
    ns.cleanup();
}
