//! `GET /v1/users/{user_id}/threads` (contract v4, "Threads"): a user's followed threads with unread replies as
//! one list, paged. Pure: it pages the `threads` of a [`UserView`].
//!
//! Order: conversations by id, and within each the newest thread first (the highest root seq: a conversation's seqs
//! grow with time). Seqs of different conversations say nothing about which came first, and the contract carries no
//! time per reply, so the list is not interleaved across conversations by time.

use serde::{Deserialize, Serialize};

use super::view::UserView;

/// Default and largest page of [`thread_page`]: 100 and 1,000 threads.
pub const THREAD_PAGE: (usize, usize) = (100, 1000);

/// One followed thread with unread replies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThreadItem {
    /// The thread's conversation.
    pub conversation_id: String,
    /// Its root's seq.
    pub root: u64,
    /// Unread replies (`CONTRACT.md` § v4: countable, of others, above the thread cursor, not expired).
    pub unread: u64,
    /// Those of them that mention the user.
    pub mentions: u64,
    /// The conversation is muted (its threads are listed, but not counted in `unread_threads`).
    pub muted: bool,
}

/// One page of a user's followed threads with unread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThreadPage {
    /// The user.
    pub user_id: String,
    /// Followed threads with unread in the user's view, on every page.
    pub total: u64,
    /// This page's threads, in order.
    pub threads: Vec<ThreadItem>,
    /// The `after` of the next page, `null` on the last: opaque.
    pub next: Option<String>,
}

/// Where a page starts: after the thread `(conversation_id, root)` a previous page ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    /// The last thread's conversation.
    pub conversation_id: String,
    /// The last thread's root.
    pub root: u64,
}

impl After {
    /// The cursor as [`ThreadPage::next`] writes it: `"{root}:{conversation_id}"`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.root, self.conversation_id)
    }

    /// Parses [`After::encode`]'s text; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let (root, conversation_id) = text.split_once(':')?;
        Some(After { conversation_id: conversation_id.to_owned(), root: root.parse().ok()? })
    }
}

/// The page of `view`'s threads after `after` (from the start when `None`), of at most `limit` threads.
pub fn thread_page(view: &UserView, after: Option<&After>, limit: usize) -> ThreadPage {
    let muted = |cid: &str| view.conversations.get(cid).is_some_and(|c| c.muted);
    let all = view.threads.iter().flat_map(|(cid, threads)| threads.iter().rev().map(move |(root, t)| (cid, root, t)));
    let past = |(cid, root): (&String, u64)| match after {
        None => true,
        Some(a) => cid.as_str() > a.conversation_id.as_str() || (*cid == a.conversation_id && root < a.root),
    };
    let mut rest = all.filter(|(cid, root, _)| past((cid, **root)));
    let threads: Vec<ThreadItem> = rest
        .by_ref()
        .take(limit)
        .map(|(cid, root, t)| ThreadItem {
            conversation_id: cid.clone(),
            root: *root,
            unread: t.unread,
            mentions: t.mentions,
            muted: muted(cid),
        })
        .collect();
    let last = threads.last().map(|t| After { conversation_id: t.conversation_id.clone(), root: t.root });
    let next = last.filter(|_| rest.next().is_some()).map(|a| a.encode());
    let total = view.threads.values().map(|t| t.len() as u64).sum();
    ThreadPage { user_id: view.user_id.clone(), total, threads, next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::contract::ThreadView;

    fn view() -> UserView {
        let mut view = UserView { user_id: "u".into(), ..UserView::default() };
        for (cid, root) in [("b:x", 3), ("a", 1), ("a", 9), ("b:x", 12), ("c", 5)] {
            view.threads.entry(cid.into()).or_default().insert(root, ThreadView { unread: root, mentions: 0 });
        }
        view
    }

    #[test]
    fn pages_walk_every_thread_once_by_conversation_then_newest_root() {
        let (view, mut after, mut seen) = (view(), None, Vec::new());
        loop {
            let page = thread_page(&view, after.as_ref(), 2);
            assert_eq!(page.total, 5);
            seen.extend(page.threads.iter().map(|t| (t.conversation_id.clone(), t.root)));
            match page.next {
                Some(next) => after = Some(After::parse(&next).expect("a cursor parses")),
                None => break,
            }
        }
        let ids = |v: &[(&str, u64)]| v.iter().map(|(c, r)| (c.to_string(), *r)).collect::<Vec<_>>();
        assert_eq!(seen, ids(&[("a", 9), ("a", 1), ("b:x", 12), ("b:x", 3), ("c", 5)]));
    }

    #[test]
    fn a_page_that_ends_the_list_has_no_next() {
        let page = thread_page(&view(), None, 5);
        assert_eq!((page.threads.len(), page.next), (5, None));
        assert_eq!(thread_page(&view(), None, 4).next.as_deref(), Some("3:b:x"));
    }
}
