-- A clean stop marks its leases draining (at its SIGTERM) and each task marks its own lease released once its last
-- checkpoint and Kafka transaction are done, in either order. A restarted static member waits while a lease it
-- takes over is draining and not released, so that it neither fences the drain's last checkpoint nor meets its open
-- transaction (which costs librdkafka a fixed 500 ms retry of InitProducerId). Taking a lease clears both.
ALTER TABLE partition_leases ADD COLUMN IF NOT EXISTS draining boolean NOT NULL DEFAULT false;
ALTER TABLE partition_leases ADD COLUMN IF NOT EXISTS released boolean NOT NULL DEFAULT false;
