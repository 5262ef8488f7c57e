//! The in-process pipeline behind `unread fold`: JSON Lines of events → fan-out → fold → reader views.
//!
//! It is the same pure logic the service runs per partition, wired without Kafka: each batch of at most
//! [`MAX_BATCH`] events is split into conversation events (fanned out into deltas) and user events, and the fold
//! applies both. Because the fold is order-proof, applying a batch's deltas before its user events gives the
//! state any interleaving would. Read acks and conversation events also feed the conversation side's read
//! receipts ([`Receipts`]), and the pipeline notes the latest `occurred_at` seen, the default instant of the
//! views (`unread fold --now`).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};

use anyhow::Context;

use crate::core::contract::{decode, DecodeError, Event, UserEvent, UserView};
use crate::core::expiry::{day_of, seconds_of};
use crate::core::fanout::{BatchStats, FanOut};
use crate::core::fold::Fold;
use crate::core::hybrid::Diffusion;
use crate::core::receipts::Receipts;

/// Largest batch of events the fan-out takes at once: `unread fold`'s batch, a service's fan-out task's once its
/// partition is a backlog behind (`task::BACKLOG_BATCH`), and the most `unread run --fanout-batch` allows (its
/// default is 1,000, for a burst's latency). A conversation's messages in one batch reach each member as one delta,
/// so when every batch is full (a file, a backlog) the bound decides how many deltas there are: the v4 full set
/// fans out into 212,000 deltas in batches of 4,000 against 417,000 in batches of 1,000 (`docs/performance.md`,
/// "Fan-out batches of 4,000 events").
pub const MAX_BATCH: usize = 4_000;

/// The fan-out and the fold of every conversation and user, in one process.
#[derive(Debug, Default)]
pub struct Pipeline {
    fanout: FanOut,
    fold: Fold,
    /// Kept only when asked for ([`Pipeline::keep_receipts`]).
    receipts: Option<Receipts>,
    stats: BatchStats,
    /// The latest `occurred_at` seen, in seconds since the epoch.
    latest: Option<i64>,
}

impl Pipeline {
    /// An empty pipeline (read diffusion from the default threshold). Its fan-out feeds one fold, so replies and
    /// reactions always go in a delta for every member ([`Diffusion::for_one_fold`]).
    pub fn new() -> Self {
        Self::with_diffusion(Diffusion::default().for_one_fold())
    }

    /// An empty pipeline with the given read-diffusion policy.
    pub fn with_diffusion(diffusion: Diffusion) -> Self {
        Self { fanout: FanOut::with_diffusion(diffusion), ..Self::default() }
    }

    /// What the fan-out counted so far (duplicates, early recalls, diffusion switches).
    pub fn stats(&self) -> BatchStats {
        self.stats
    }

    /// Runs one batch (events in log order) through fan-out and fold.
    pub fn process_batch(&mut self, events: &[Event]) {
        let conversation_events = events.iter().filter_map(|e| match e {
            Event::Conversation(c) => Some(c),
            Event::User(_) => None,
        });
        self.note_receipts_and_time(events);
        let (deltas, stats) = self.fanout.process_batch(conversation_events);
        // No projection here: nothing looks the new replies up.
        self.fanout.take_new_replies();
        self.stats.duplicate_messages += stats.duplicate_messages;
        self.stats.early_recalls += stats.early_recalls;
        (self.stats.to_read, self.stats.to_write) =
            (self.stats.to_read + stats.to_read, self.stats.to_write + stats.to_write);
        // Each delta is dropped as soon as it is applied, while its ops are still in the caches: dropped together
        // after the batch, their heap parts were cold again (docs/performance.md, "Where the fold's cache misses are").
        for delta in deltas {
            self.fold.apply_delta(&delta);
        }
        for event in events {
            if let Event::User(u) = event {
                self.fold.apply_user_event(u);
            }
        }
    }

    /// Feeds the receipts (conversation events, read acks) and notes the latest `occurred_at`.
    fn note_receipts_and_time(&mut self, events: &[Event]) {
        for event in events {
            match event {
                Event::Conversation(c) => self.receipts.iter_mut().for_each(|r| r.apply(c)),
                Event::User(UserEvent::ReadAck(a)) => {
                    self.receipts.iter_mut().for_each(|r| r.ack(&a.user_id, &a.conversation_id, a.read_seq))
                }
                Event::User(UserEvent::ThreadRead(t)) => self
                    .receipts
                    .iter_mut()
                    .for_each(|r| r.thread_ack(&t.user_id, &t.conversation_id, t.thread_root, t.read_seq)),
                Event::User(_) => {}
            }
            if let Some(at) = seconds_of(event.occurred_at()) {
                self.latest = Some(self.latest.map_or(at, |l| l.max(at)));
            }
        }
    }

    /// The latest `occurred_at` of the events so far, in seconds since the epoch (`None` before any event).
    pub fn latest(&self) -> Option<i64> {
        self.latest
    }

    /// This pipeline with a fold that notes no user's own-seq changes ([`Fold::without_own_changes`]): for `unread
    /// fold`, which has no projection to tell them to. The states and views are the same.
    pub fn without_own_changes(self) -> Self {
        Self { fold: self.fold.without_own_changes(), ..self }
    }

    /// Keeps read receipts from now on (call before the first batch: receipts need every event).
    pub fn keep_receipts(&mut self) {
        self.receipts.get_or_insert_with(Receipts::new);
    }

    /// The read receipts of every conversation, if kept ([`Pipeline::keep_receipts`]).
    pub fn receipts(&self) -> Option<&Receipts> {
        self.receipts.as_ref()
    }

    /// The fold's state.
    pub fn fold(&self) -> &Fold {
        &self.fold
    }

    /// The fan-out's state.
    pub fn fanout(&self) -> &FanOut {
        &self.fanout
    }

    /// Every listed user's reader view with nothing expired, sorted by user id.
    pub fn views(&self) -> Vec<UserView> {
        self.fold.views(&self.fanout)
    }

    /// Every listed user's reader view at the instant `now` (seconds since the epoch; `CONTRACT.md` § v3,
    /// "Expiry"), sorted by user id.
    pub fn views_at(&self, now: i64) -> Vec<UserView> {
        self.fold.views_at(&self.fanout, day_of(now))
    }

    /// Writes [`Pipeline::views_at`] as JSON Lines, one view built and written at a time, as [`write_views`] would;
    /// returns how many were written.
    ///
    /// Errors: the writer fails.
    pub fn write_views_at(&self, now: i64, shape: Shape, mut out: impl Write) -> io::Result<usize> {
        let mut written = 0;
        for view in self.fold.views_iter_at(&self.fanout, day_of(now)) {
            shape.write(&view, &mut out)?;
            written += 1;
        }
        out.flush()?;
        Ok(written)
    }
}

/// A line of input that is not a valid event.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {error}")]
pub struct InvalidLine {
    /// 1-based line number.
    pub line: u64,
    /// Why it was rejected.
    pub error: DecodeError,
}

/// What reading an input yielded.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct InputStats {
    /// Lines read, blank ones included.
    pub lines: u64,
    /// Valid events passed on.
    pub events: u64,
    /// Invalid lines reported.
    pub invalid: u64,
    /// Bytes read (uncompressed).
    pub bytes: u64,
}

/// Opens an input: `-` is stdin; a name ending in `.gz` is gunzipped (multi-member files too).
///
/// Errors: the file cannot be opened.
pub fn open_input(path: &str) -> anyhow::Result<Box<dyn BufRead>> {
    const BUF: usize = 1 << 20;
    let raw: Box<dyn io::Read> = if path == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path).with_context(|| format!("cannot open input {path}"))?)
    };
    Ok(if path.ends_with(".gz") {
        Box::new(BufReader::with_capacity(BUF, flate2::read::MultiGzDecoder::new(BufReader::with_capacity(BUF, raw))))
    } else {
        Box::new(BufReader::with_capacity(BUF, raw))
    })
}

/// Reads JSON Lines of events, decodes each line, and calls `on_batch` with batches of at most `batch_size`
/// (clamped to 1..=[`MAX_BATCH`]) valid events in input order. Blank lines are skipped. Each invalid line goes to
/// `on_invalid`, which decides whether to go on (`Ok`) or stop the read (`Err`, returned as is).
///
/// Errors: an I/O or gzip error, with the line number where it happened; or `on_invalid`'s error.
pub fn for_each_batch(
    mut input: impl BufRead,
    batch_size: usize,
    mut on_invalid: impl FnMut(InvalidLine) -> anyhow::Result<()>,
    mut on_batch: impl FnMut(&[Event]),
) -> anyhow::Result<InputStats> {
    let batch_size = batch_size.clamp(1, MAX_BATCH);
    let mut stats = InputStats::default();
    let mut batch = Vec::with_capacity(batch_size);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        let n = input.read_until(b'\n', &mut line).with_context(|| format!("reading line {}", stats.lines + 1))?;
        if n == 0 {
            break;
        }
        stats.lines += 1;
        stats.bytes += n as u64;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match decode(text) {
            Ok(event) => {
                stats.events += 1;
                batch.push(event);
                if batch.len() == batch_size {
                    on_batch(&batch);
                    batch.clear();
                }
            }
            Err(error) => {
                stats.invalid += 1;
                on_invalid(InvalidLine { line: stats.lines, error })?;
            }
        }
    }
    if !batch.is_empty() {
        on_batch(&batch);
    }
    Ok(stats)
}

/// Writes receipts as JSON Lines (`{"conversation_id", "seq", "read", "recipients"}`, compact).
///
/// Errors: the writer fails.
pub fn write_receipts(receipts: &[crate::core::contract::ReceiptView], mut out: impl Write) -> io::Result<()> {
    for r in receipts {
        serde_json::to_writer(&mut out, r)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Writes views as JSON Lines (the contract's reader shape, compact).
///
/// Errors: the writer fails.
pub fn write_views(views: &[UserView], out: impl Write) -> io::Result<()> {
    write_views_shaped(views, Shape::V4, out)
}

/// Writes views as JSON Lines in a contract version's reader shape.
///
/// Errors: the writer fails.
pub fn write_views_shaped(views: &[UserView], shape: Shape, mut out: impl Write) -> io::Result<()> {
    for view in views {
        shape.write(view, &mut out)?;
    }
    out.flush()
}

/// A contract version's reader shape (`CONTRACT.md` § "The state a reader sees"), for files made for an earlier
/// version: each drops the fields its version did not have, in the same order otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// v1 and v2: no `marked_unread` (v3) and no v4 field.
    V2,
    /// v3: no `first_unread` and `reactions` per conversation, no `threads`, `unread_threads`, `thread_mentions`,
    /// `total_reactions` and `teams`.
    V3,
    /// v4: every field.
    #[default]
    V4,
}

impl Shape {
    /// The fields of a conversation that this shape leaves out.
    fn conversation_fields(self) -> &'static [&'static str] {
        match self {
            Self::V2 => &["marked_unread", "first_unread", "reactions"],
            Self::V3 => &["first_unread", "reactions"],
            Self::V4 => &[],
        }
    }

    /// `view` as this shape says it: the fields the shape does not have at their defaults (to compare a fold's
    /// views with a file of an earlier version parsed as [`UserView`]s).
    pub fn project(self, view: &UserView) -> UserView {
        let mut view = view.clone();
        if self == Self::V4 {
            return view;
        }
        (view.threads, view.teams) = Default::default();
        (view.unread_threads, view.thread_mentions, view.total_reactions) = (0, 0, 0);
        for c in view.conversations.values_mut() {
            (c.first_unread, c.reactions) = (None, 0);
            c.marked_unread &= self == Self::V3;
        }
        view
    }

    /// One view as one line of JSON in this shape.
    fn write(self, view: &UserView, mut out: impl Write) -> io::Result<()> {
        if self == Self::V4 {
            return write_view(view, out);
        }
        let mut value = serde_json::to_value(view)?;
        if let Some(user) = value.as_object_mut() {
            for field in ["threads", "unread_threads", "thread_mentions", "total_reactions", "teams"] {
                user.shift_remove(field);
            }
            let conversations = user.get_mut("conversations").and_then(|c| c.as_object_mut()).into_iter();
            for conversation in conversations.flat_map(|c| c.values_mut()).filter_map(|c| c.as_object_mut()) {
                self.conversation_fields().iter().for_each(|f| drop(conversation.shift_remove(*f)));
            }
        }
        serde_json::to_writer(&mut out, &value)?;
        out.write_all(b"\n")
    }
}

/// One view as one line of JSON.
fn write_view(view: &UserView, mut out: impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut out, view)?;
    out.write_all(b"\n")
}
