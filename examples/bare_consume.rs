//! Baseline for `scripts/bench-e2e`: a bare Kafka consumer that only reads records.
//!
//! `cargo run --release --example bare_consume -- BROKERS TOPIC...` assigns every partition of the topics from
//! the start, reads until the end offsets seen at start, and prints `records N seconds S` (time from the first
//! poll to the last record). No decoding, no processing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (brokers, topics) = args.split_first().expect("usage: bare_consume BROKERS TOPIC...");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "unread-bench-bare")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    let mut remaining: HashMap<(String, i32), i64> = HashMap::new();
    for topic in topics {
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        for p in md.topics()[0].partitions() {
            let (low, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10)).expect("watermarks");
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning).expect("tpl");
            if high > low {
                remaining.insert((topic.clone(), p.id()), high);
            }
        }
    }
    consumer.assign(&tpl).expect("assign");
    let started = Instant::now();
    let mut records = 0u64;
    while !remaining.is_empty() {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                records += 1;
                std::hint::black_box(m.payload());
                let key = (m.topic().to_owned(), m.partition());
                if remaining.get(&key).is_some_and(|end| m.offset() + 1 >= *end) {
                    remaining.remove(&key);
                }
            }
            Some(Err(e)) => eprintln!("consumer error: {e}"),
            None => {}
        }
    }
    println!("records {records} seconds {:.3}", started.elapsed().as_secs_f64());
}
