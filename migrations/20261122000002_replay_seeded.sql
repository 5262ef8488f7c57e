-- A replay's first checkpoint (its start state and start offsets, written partition by partition) is complete once
-- `seeded` is set. A replay that died during it is started afresh rather than resumed from half a start state.
ALTER TABLE replays ADD COLUMN IF NOT EXISTS seeded boolean NOT NULL DEFAULT false;
