-- A clean stop marks its leases draining (SIGTERM) and each task clears the mark once its last checkpoint and
-- Kafka transaction are done. A restarted static member waits for the mark to clear before it takes the lease and
-- initializes the partition's transactional producer, so that it neither fences the drain's last checkpoint nor
-- meets its open transaction (which costs librdkafka a fixed 500 ms retry of InitProducerId).
ALTER TABLE partition_leases ADD COLUMN IF NOT EXISTS draining boolean NOT NULL DEFAULT false;
