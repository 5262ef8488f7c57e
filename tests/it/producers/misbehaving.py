#!/usr/bin/env python3
"""A producer that breaks the contract's keying, for tests/it/producers.rs: confluent-kafka (librdkafka) sends each
event of a file either without a key, or keyed but placed round-robin over the topic's partitions (what kafka-go's
default balancer does). Prints one JSON line per record, in the file's order: its topic, partition and key.

    misbehaving.py BOOTSTRAP TOPIC_PREFIX EVENTS.jsonl keyless|round-robin
"""
import json
import sys

from confluent_kafka import Producer

sys.path.insert(0, sys.path[0] + "/../../../examples/producers")
from publish_confluent import route  # noqa: E402


def main(bootstrap: str, prefix: str, path: str, mode: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    delivered = []
    counts = {}
    for i, line in enumerate(open(path, encoding="utf-8")):
        if not line.strip():
            continue
        topic, key = route(json.loads(line), prefix)
        if topic not in counts:
            counts[topic] = [0, len(producer.list_topics(topic, timeout=10).topics[topic].partitions)]
        # Deliveries to different partitions are reported in any order: each remembers its line.
        record = {"value": line.rstrip("\n").encode(), "on_delivery": lambda e, m, i=i: delivered.append((i, e, m))}
        if mode == "keyless":
            producer.produce(topic, **record)
        else:
            n, partitions = counts[topic]
            counts[topic][0] += 1
            producer.produce(topic, key=key.encode(), partition=n % partitions, **record)
    producer.flush(60)
    for _, err, msg in sorted(delivered, key=lambda d: d[0]):
        if err is not None:
            print(f"delivery failed: {err}", file=sys.stderr)
            return 1
        key = msg.key().decode() if msg.key() is not None else None
        print(json.dumps({"topic": msg.topic(), "partition": msg.partition(), "key": key}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
