//! Who in a fold may follow which thread of a conversation: the fold's index that lets a delta for every member
//! ([`crate::core::delta::Delta::is_for_members`]) reach only the members it concerns.
//!
//! The replies and reactions of a read-diffused conversation, and of a write-diffused one with
//! [`crate::core::hybrid::Diffusion::shares`] members, reach a fold once per partition of the delta topic, not once
//! per member.
//! Most members do not follow most threads: for them a reply only joins the conversation's
//! [`crate::core::threads::Replies`], from which a later follow counts it. A member follows the thread of root R
//! (`CONTRACT.md` § v4, "Threads") only when it sent R or a reply in it, is named in R or in a reply, or has a
//! `thread.followed` or `thread.read` for it: each of these is a seq in the member's state (its authored seqs,
//! the seqs naming it, its threads' roots). [`Stakes`] keeps, per conversation, those seqs with their users, so
//! the fold applies the replies of R to the users kept under R and to no one else. A reaction to message S concerns
//! only S's sender (`CONTRACT.md` § v4, "Reactions"), kept under S as its author: it reaches that user alone.
//!
//! An entry is never wrong to keep: the fold applies the replies through the user's own state, which decides again
//! whether the thread is the user's. So entries are added, never removed (a user who left, or a conversation back
//! to write diffusion, leaves a few stale ones behind).

use std::collections::BTreeSet;

use crate::core::Map;

/// Per conversation that is no feed, the (seq, user) pairs of the fold's users with a stake in the thread that seq
/// roots (or would root), or in the reactions to it. A user is kept once, by number: a pair takes 12 bytes in its
/// set, not a copy of the user's id (about 50 bytes a message before).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stakes {
    /// Every user noted, in the order first noted: a pair's number is its index here.
    users: Vec<String>,
    /// Each user's number.
    numbers: Map<String, u32>,
    by_conversation: Map<String, BTreeSet<(u64, u32)>>,
}

impl Stakes {
    /// Notes that `user` has a stake in the threads rooted at each of `seqs` of `conversation_id`.
    pub fn add(&mut self, conversation_id: &str, user: &str, seqs: impl IntoIterator<Item = u64>) {
        let mut seqs = seqs.into_iter().peekable();
        if seqs.peek().is_none() {
            return;
        }
        let number = match self.numbers.get(user) {
            Some(&n) => n,
            None => {
                // A fold holds its users in memory: far fewer than 2^32.
                let n = u32::try_from(self.users.len()).expect("fewer than 2^32 users in one fold");
                self.users.push(user.to_owned());
                self.numbers.insert(user.to_owned(), n);
                n
            }
        };
        let pairs = self.by_conversation.entry_ref(conversation_id).or_default();
        pairs.extend(seqs.map(|seq| (seq, number))); // a pair already kept stays once
    }

    /// The users with a stake in any of the threads of `roots` in `conversation_id`, ascending, each once.
    pub fn users_of<'a>(&'a self, conversation_id: &str, roots: impl IntoIterator<Item = u64>) -> BTreeSet<&'a str> {
        let Some(pairs) = self.by_conversation.get(conversation_id) else { return BTreeSet::new() };
        let mut users = BTreeSet::new();
        for root in roots {
            users.extend(pairs.range((root, 0)..=(root, u32::MAX)).map(|(_, n)| self.users[*n as usize].as_str()));
        }
        users
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_finds_exactly_the_users_noted_under_it_once_each() {
        let mut stakes = Stakes::default();
        stakes.add("c", "ann", [3, 5]);
        stakes.add("c", "bob", [5]);
        stakes.add("c", "bob", [5, 8]);
        stakes.add("d", "cid", [5]);
        assert_eq!(stakes.users_of("c", [5]).into_iter().collect::<Vec<_>>(), ["ann", "bob"]);
        assert_eq!(stakes.users_of("c", [3, 8, 5]).into_iter().collect::<Vec<_>>(), ["ann", "bob"]);
        assert!(stakes.users_of("c", [4]).is_empty() && stakes.users_of("e", [5]).is_empty());
        assert_eq!(stakes.by_conversation["c"].len(), 4, "a pair noted twice is kept once");
    }
}
