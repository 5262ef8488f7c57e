//! Contract v4's reactions to one user's messages in one conversation (`CONTRACT.md` § v4, "Reactions"): the
//! fold's side.
//!
//! The fan-out keeps each message's live reactions and tells every member, after a batch, the
//! [`ReactionSummary`] of each message whose reactions changed; the member who sent the message keeps the highest
//! `reaction_seq` of a live reaction by someone else. `reactions(U, C)` is then how many of those are above U's
//! reaction cursor: max(the conversation's highest `reaction_seq` at U's latest join, every `reactions.read`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::delta::ReactionSummary;
use crate::core::seqset::SeqSet;

/// One user's reactions state in one conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reactions {
    /// The conversation's highest `reaction_seq` at the user's latest join (0 while not a member).
    #[serde(default)]
    pub from: u64,
    /// The largest `read_seq` of the user's `reactions.read`, whenever it arrived; kept across leaving.
    #[serde(default)]
    pub read: u64,
    /// Per message the user sent with a live reaction by someone else: that reaction's highest `reaction_seq`.
    #[serde(default)]
    pub reacted: BTreeMap<u64, u64>,
}

impl Reactions {
    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.from == 0 && self.read == 0 && self.reacted.is_empty()
    }

    /// The reaction cursor: no reaction at or below it is new.
    pub fn cursor(&self) -> u64 {
        self.from.max(self.read)
    }

    /// How many of the user's messages have a live reaction by someone else above the cursor.
    pub fn count(&self) -> u64 {
        let cursor = self.cursor();
        self.reacted.values().filter(|r| **r > cursor).count() as u64
    }

    /// Keeps the summaries of `user`'s own messages (`authored`).
    pub fn apply(&mut self, user: &str, authored: &SeqSet, summaries: &[ReactionSummary]) {
        for s in summaries.iter().filter(|s| authored.contains(s.seq)) {
            match s.by_others_than(user) {
                0 => self.reacted.remove(&s.seq),
                top => self.reacted.insert(s.seq, top),
            };
        }
    }
}
