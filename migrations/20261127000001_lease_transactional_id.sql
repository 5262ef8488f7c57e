-- The transactional id of the Kafka producer a fan-out lease's owner writes its deltas with: `{group}.fanout.{p}`
-- (one producer per partition) or the instance's shared one. A successor that takes a lease its owner did not
-- release (a crash, a pause) initializes that id when it differs from its own, which fences the previous owner's
-- producer and aborts its open transaction (docs/operations.md, "Fencing"). NULL for the fold's leases.
ALTER TABLE partition_leases ADD COLUMN IF NOT EXISTS transactional_id text;
