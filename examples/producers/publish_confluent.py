#!/usr/bin/env python3
"""Publish unread events from a Python backend with confluent-kafka (librdkafka), left at its defaults.

librdkafka's default partitioner is `consistent_random` (CRC32 of the key). Run unread with `--partitioner crc32`
(`UNREAD_PARTITIONER=crc32`) and counts stay exact; or set `"partitioner": "murmur2_random"` below and keep unread's
default, `murmur2` (docs/producers.md).

    publish_confluent.py BOOTSTRAP TOPIC_PREFIX EVENTS.jsonl

Each line of EVENTS.jsonl is one event of the contract (docs/contract.md). It goes to its topic, keyed by the id the
contract names: `conversation_id` (or `broadcast_id`) on the conversation topic, `user_id` on the user topic.
"""
import json
import sys

from confluent_kafka import Producer

USER_EVENTS = {
    "read.ack", "conversation.muted", "conversation.marked_unread", "broadcast.read", "notification.created",
    "notification.read", "notification.retracted", "notifications.seen", "notifications.read", "thread.read",
    "thread.followed", "reactions.read",
}


def route(event: dict, prefix: str) -> tuple[str, str]:
    """The topic and the key of one event."""
    if event["type"] in USER_EVENTS:
        return prefix + "unread.user-events", event["user_id"]
    key = event.get("conversation_id") or event["broadcast_id"]
    return prefix + "unread.conversation-events", key


def main(bootstrap: str, prefix: str, path: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed = []

    def delivered(err, msg):
        if err is not None:
            failed.append(err)

    sent = 0
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            topic, key = route(json.loads(line), prefix)
            while True:
                try:
                    producer.produce(topic, key=key.encode(), value=line.rstrip("\n").encode(), on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
            sent += 1
    producer.flush(60)
    print(f"{sent} events sent, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
