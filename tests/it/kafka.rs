//! The service's Kafka producer (`unread::kafka::producer::AsyncProducer`) against the real broker.

use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::FutureRecord;
use unread::kafka::producer::AsyncProducer;

use crate::support::{stack, Ns};

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
