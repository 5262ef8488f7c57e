//! The PostgreSQL checkpoint: the [`Stage`] a checkpoint belongs to, and the transactional [`store`] (offsets,
//! states and leases in one transaction; tables in `migrations/`). What the stored bytes mean is
//! [`crate::state::codec`].

pub mod store;

use std::fmt;

/// A stage of the pipeline: which checkpoint tables, leases, consumer group and metrics a partition task uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// The fan-out: partitions of `unread.conversation-events`, conversations' state.
    FanOut,
    /// The fold: partitions of `unread.user-events` and `unread.user-deltas`, users' state.
    Fold,
}

impl Stage {
    /// Both stages, fan-out first.
    pub const ALL: [Stage; 2] = [Stage::FanOut, Stage::Fold];

    /// The stage's name in tables, group ids, metrics labels and logs: `fanout` or `fold`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::FanOut => "fanout",
            Stage::Fold => "fold",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
