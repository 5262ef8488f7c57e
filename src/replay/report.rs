//! What a replay did, and how `unread replay` prints it.

use std::fmt;

/// What a replay did.
#[derive(Debug, Default, Clone)]
pub struct ReplayReport {
    /// The namespace filled.
    pub namespace: String,
    /// Whether it resumed a namespace that held a replay's checkpoint.
    pub resumed: bool,
    /// Input records read in this run (user events and conversation events).
    pub records: u64,
    /// Records that fail the contract (the live service dead-lettered them): skipped.
    pub invalid: u64,
    /// Deltas of the source's delta topic applied (`--from checkpoint` only).
    pub in_flight_deltas: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Users held at the end.
    pub users: usize,
    /// Conversations held at the end.
    pub conversations: usize,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// Of which folding (fan-out and fold of the batches), seconds.
    pub fold_seconds: f64,
    /// Of which checkpointing (Redis and PostgreSQL), seconds.
    pub checkpoint_seconds: f64,
    /// Stopped by SIGINT/SIGTERM after checkpointing; run the same command to resume.
    pub interrupted: bool,
}

impl ReplayReport {
    /// Records per second over the run.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
}

impl fmt::Display for ReplayReport {
    /// One line: records, rate, time split, what the namespace holds, and whether it is complete.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self;
        write!(
            f,
            "replay into {}{}: {} records ({} invalid skipped, {} in-flight deltas) in {:.2} s, {:.0} records/s \
             (folding {:.2} s, checkpoints {:.2} s); {} users, {} conversations, {} checkpoints; {}",
            r.namespace,
            if r.resumed { " (resumed)" } else { "" },
            r.records,
            r.invalid,
            r.in_flight_deltas,
            r.seconds,
            r.rate(),
            r.fold_seconds,
            r.checkpoint_seconds,
            r.users,
            r.conversations,
            r.checkpoints,
            if r.interrupted { "interrupted: run the same command to resume" } else { "complete" }
        )
    }
}
