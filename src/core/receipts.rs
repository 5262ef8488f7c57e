//! Read receipts (`CONTRACT.md` § v3, "Read receipts"): how many of a message's recipients have read it.
//!
//! The conversation side keeps, per conversation, its current members' head at join and cursor, each also in a
//! sorted list, so that one query is two binary searches: `recipients(C, S)` = members whose head at join is below
//! S, `read(C, S)` = those of them whose cursor is at or above S, both less the sender when the sender is one of
//! them. A cursor is `max(head at join, every read_seq acked, every seq sent)` (§ Semantics), kept as the max of
//! what arrives, so acks and messages may come in any order. Nothing is stored per (message, reader): a read ack
//! moves one cursor. What is stored per message is what a 404 and the sender's exclusion need: the sent, not
//! recalled seqs ([`SeqSet`]) and each one's sender.
//!
//! Cost: a query is O(log members); a cursor move, join or leave is O(log members) to find and O(members) to shift
//! the sorted lists (a memmove: about 50 µs at 100,000 members).

use std::collections::BTreeMap;

use crate::core::contract::{ConversationEvent, ReceiptView};
use crate::core::seqset::SeqSet;
use crate::core::Map;

/// One conversation's receipts state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvReceipts {
    /// The highest seq sent (duplicates at or below it change nothing).
    head: u64,
    /// Current members → (head at their latest join, cursor).
    members: BTreeMap<String, (u64, u64)>,
    /// Every user's floor here: the largest `read_seq` acked and seq sent, whenever (kept across leaving).
    floors: BTreeMap<String, u64>,
    /// The members' heads at join, sorted (a multiset).
    join_heads: Vec<u64>,
    /// The members' cursors, sorted (a multiset).
    cursors: Vec<u64>,
    /// Seqs sent, not duplicates, not recalled: those with receipts.
    live: SeqSet,
    /// The sender of each seq in `live`.
    senders: BTreeMap<u64, String>,
    /// v4: seqs sent and then recalled (with `live`, every seq ever sent: a reply's root must have been).
    recalled: SeqSet,
    /// v4: every reply → its thread's root (`CONTRACT.md` § v4, "Threads").
    roots: BTreeMap<u64, u64>,
    /// v4: per thread root, every user's thread floor there: the largest `thread.read` and own reply, whenever.
    thread_floors: BTreeMap<u64, BTreeMap<String, u64>>,
}

fn insert_sorted(list: &mut Vec<u64>, value: u64) {
    let at = list.partition_point(|v| *v < value);
    list.insert(at, value);
}

fn remove_sorted(list: &mut Vec<u64>, value: u64) {
    let at = list.partition_point(|v| *v < value);
    debug_assert_eq!(list.get(at), Some(&value), "a value the sorted list does not hold");
    list.remove(at);
}

impl ConvReceipts {
    /// Applies one conversation event in partition order (broadcast events are not about conversations and are
    /// ignored).
    pub fn apply(&mut self, event: &ConversationEvent) {
        match event {
            ConversationEvent::Created(e) => e.members.iter().for_each(|m| self.join(m)),
            ConversationEvent::Joined(e) => self.join(&e.user_id),
            ConversationEvent::Left(e) => self.leave(&e.user_id),
            ConversationEvent::Sent(e) if e.seq > self.head => {
                let root = e.thread_root.filter(|r| self.live.contains(*r) || self.recalled.contains(*r));
                let root = root.map(|r| self.roots.get(&r).copied().unwrap_or(r));
                self.head = e.seq;
                self.live.insert(e.seq);
                self.senders.insert(e.seq, e.sender_id.clone());
                match root {
                    // A reply moves its sender's thread cursor, not the conversation's (§ v4).
                    Some(root) => {
                        self.roots.insert(e.seq, root);
                        self.thread_ack(&e.sender_id, root, e.seq);
                    }
                    None => self.raise_floor(&e.sender_id, e.seq),
                }
            }
            ConversationEvent::Recalled(e) if e.seq <= self.head && self.live.remove(e.seq) => {
                self.senders.remove(&e.seq);
                self.recalled.insert(e.seq);
            }
            _ => {}
        }
    }

    /// A read ack of `user` up to `read_seq`, whenever it arrives and whether or not `user` is a member.
    pub fn ack(&mut self, user: &str, read_seq: u64) {
        self.raise_floor(user, read_seq);
    }

    /// v4: a `thread.read` of `user` in the thread of `root` up to `read_seq`, or a reply the user sent there.
    pub fn thread_ack(&mut self, user: &str, root: u64, read_seq: u64) {
        let floor = self.thread_floors.entry(root).or_default().entry(user.to_owned()).or_default();
        *floor = (*floor).max(read_seq);
    }

    /// The receipts of message `seq`: `None` for a seq never sent, a duplicate's or a recalled one. A reply's
    /// readers are the recipients whose thread cursor reached it (§ v4): O(users with a cursor in its thread).
    pub fn query(&self, seq: u64) -> Option<(u64, u64)> {
        let sender = self.senders.get(&seq)?;
        let before = self.join_heads.partition_point(|h| *h < seq) as u64;
        if let Some(root) = self.roots.get(&seq) {
            let floors = self.thread_floors.get(root).into_iter().flatten();
            let read = floors
                .filter(|(user, floor)| **floor >= seq && *user != sender)
                .filter(|(user, _)| self.members.get(*user).is_some_and(|(joined, _)| *joined < seq))
                .count() as u64;
            let own = u64::from(self.members.get(sender).is_some_and(|(joined, _)| *joined < seq));
            return Some((read, before - own));
        }
        let unread = self.cursors.partition_point(|c| *c < seq) as u64;
        // The sender's cursor is at or above seq (sending is reading), so it is among `before - unread` if counted.
        let own = u64::from(self.members.get(sender).is_some_and(|(joined, _)| *joined < seq));
        Some((before - unread - own, before - own))
    }

    /// Every live seq with its receipts, ascending.
    pub fn all(&self) -> impl Iterator<Item = (u64, (u64, u64))> + '_ {
        self.live.iter().filter_map(|seq| self.query(seq).map(|r| (seq, r)))
    }

    fn join(&mut self, user: &str) {
        if self.members.contains_key(user) {
            return;
        }
        let cursor = self.floors.get(user).copied().unwrap_or(0).max(self.head);
        self.members.insert(user.to_owned(), (self.head, cursor));
        insert_sorted(&mut self.join_heads, self.head);
        insert_sorted(&mut self.cursors, cursor);
    }

    fn leave(&mut self, user: &str) {
        if let Some((joined, cursor)) = self.members.remove(user) {
            remove_sorted(&mut self.join_heads, joined);
            remove_sorted(&mut self.cursors, cursor);
        }
    }

    fn raise_floor(&mut self, user: &str, seq: u64) {
        let floor = self.floors.entry(user.to_owned()).or_default();
        *floor = (*floor).max(seq);
        if let Some((_, cursor)) = self.members.get_mut(user) {
            if seq > *cursor {
                remove_sorted(&mut self.cursors, *cursor);
                insert_sorted(&mut self.cursors, seq);
                *cursor = seq;
            }
        }
    }
}

/// The receipts state of every conversation seen (what the conversation side keeps).
#[derive(Debug, Clone, Default)]
pub struct Receipts {
    conversations: Map<String, ConvReceipts>,
}

impl Receipts {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one conversation event (broadcast events are ignored).
    pub fn apply(&mut self, event: &ConversationEvent) {
        if let crate::core::contract::Target::Conversation(cid) = event.target() {
            self.conversations.entry_ref(cid).or_default().apply(event);
        }
    }

    /// v4: a `thread.read` of `user` in `conversation_id`'s thread of `root` up to `read_seq` (naming a seq that
    /// is no root reads no thread: its floor is never asked for).
    pub fn thread_ack(&mut self, user: &str, conversation_id: &str, root: u64, read_seq: u64) {
        self.conversations.entry_ref(conversation_id).or_default().thread_ack(user, root, read_seq);
    }

    /// A read ack of `user` in `conversation_id` up to `read_seq`.
    pub fn ack(&mut self, user: &str, conversation_id: &str, read_seq: u64) {
        self.conversations.entry_ref(conversation_id).or_default().ack(user, read_seq);
    }

    /// The receipts of message `seq` of `conversation_id`, `None` when it has none (never sent, a duplicate, or
    /// recalled).
    pub fn query(&self, conversation_id: &str, seq: u64) -> Option<ReceiptView> {
        let (read, recipients) = self.conversations.get(conversation_id)?.query(seq)?;
        Some(ReceiptView { conversation_id: conversation_id.to_owned(), seq, read, recipients, readers: None })
    }

    /// Every message's receipts, sorted by conversation id then seq (the order of `reference_fold.py --receipts`).
    pub fn all(&self) -> Vec<ReceiptView> {
        let mut ids: Vec<&String> = self.conversations.keys().collect();
        ids.sort_unstable();
        let per_conversation = ids.into_iter().flat_map(|id| {
            self.conversations[id].all().map(move |(seq, (read, recipients))| ReceiptView {
                conversation_id: id.clone(),
                seq,
                read,
                recipients,
                readers: None,
            })
        });
        per_conversation.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::contract::{decode, Event};

    fn conv(json: &str) -> ConversationEvent {
        match decode(json.as_bytes()).expect("valid event") {
            Event::Conversation(c) => c,
            Event::User(_) => panic!("not a conversation event"),
        }
    }

    #[test]
    fn read_and_recipients_leave_out_the_sender_and_later_joiners() {
        let mut r = ConvReceipts::default();
        let at = r#""event_id":"e","occurred_at":"2020-01-01T00:00:00Z","conversation_id":"c""#;
        r.apply(&conv(&format!(r#"{{"type":"conversation.created",{at},"kind":"group","members":["a","b","c"]}}"#)));
        r.apply(&conv(&format!(r#"{{"type":"message.sent",{at},"seq":1,"sender_id":"a"}}"#)));
        r.apply(&conv(&format!(r#"{{"type":"member.joined",{at},"user_id":"d"}}"#)));
        assert_eq!(r.query(1), Some((0, 2)), "b and c received 1; d joined after it");
        r.apply(&conv(&format!(r#"{{"type":"message.sent",{at},"seq":2,"sender_id":"b"}}"#)));
        r.ack("c", 5); // an ack above the head still counts once the messages exist
        assert_eq!(r.query(1), Some((2, 2)), "b read 1 by sending 2; c acked");
        assert_eq!(r.query(2), Some((1, 3)), "a, c and d (joined at head 1) received 2; c read it");
        r.apply(&conv(&format!(r#"{{"type":"message.recalled",{at},"seq":2}}"#)));
        assert_eq!((r.query(2), r.query(3)), (None, None), "recalled, never sent");
    }
}
