//! The decoder: Kafka record value bytes → [`Event`], enforcing every rule of `CONTRACT.md` § Events.
//!
//! It parses the JSON object once, keeping each known field as a borrowed raw JSON slice, then converts the fields
//! that the event's `type` needs. So fields can come in any order, unknown fields (and fields of other event types)
//! are ignored whatever their value, and an error names exactly the field that broke a rule.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::*;

/// Why a record value is not a valid event. Every variant names the field and the reason where there is one;
/// [`DecodeError::kind`] gives a stable short name for metrics and dead-letter headers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The value is over 64 KiB ([`MAX_VALUE_BYTES`]).
    #[error("value is {bytes} bytes, over the limit of 65536")]
    TooLarge {
        /// The value's size.
        bytes: usize,
    },
    /// The value is not UTF-8.
    #[error("value is not valid UTF-8 (first bad byte at offset {offset})")]
    InvalidUtf8 {
        /// Offset of the first bad byte.
        offset: usize,
    },
    /// The value is not one JSON document (syntax error, truncation, trailing data).
    #[error("invalid JSON at line {line} column {column}: {message}")]
    InvalidJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The JSON document is not an object.
    #[error("value is JSON {found}, not an object")]
    NotAnObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// The object has the same key twice.
    #[error("field `{field}` appears more than once")]
    DuplicateField {
        /// The repeated key.
        field: String,
    },
    /// A field the event's type requires is absent.
    #[error("field `{field}` is missing")]
    MissingField {
        /// The absent field.
        field: &'static str,
    },
    /// A field has the wrong JSON type (this includes `null`, and floats where an integer is due).
    #[error("field `{field}` must be {expected}, found {found}")]
    WrongType {
        /// The field.
        field: String,
        /// The JSON type due.
        expected: &'static str,
        /// The JSON type found.
        found: String,
    },
    /// `type` names no event type of the contract.
    #[error("field `type`: unknown event type {type_name:?}")]
    UnknownType {
        /// The `type` given.
        type_name: String,
    },
    /// An identifier breaks the id rule (empty, over 256 bytes, control character).
    #[error("field `{field}` {reason}")]
    InvalidId {
        /// The field.
        field: String,
        /// The rule it breaks.
        reason: IdError,
    },
    /// An integer outside its range: `seq` and `from_seq` 1..=2^53, `read_seq` 0..=2^53, `unread_ttl_days`
    /// 1..=3650.
    #[error("field `{field}` is {value}, outside {min}..={max}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// Its value, as written.
        value: String,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// Any other broken rule: a `kind` that is not direct/group/channel, an `occurred_at` that is not RFC 3339.
    #[error("field `{field}` {reason}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// The rule it breaks.
        reason: String,
    },
}

impl DecodeError {
    /// A stable, short name of the error's kind (`too_large`, `invalid_utf8`, `invalid_json`, `not_an_object`,
    /// `duplicate_field`, `missing_field`, `wrong_type`, `unknown_type`, `invalid_id`, `out_of_range`,
    /// `invalid_value`), for metrics labels and dead-letter headers.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::InvalidUtf8 { .. } => "invalid_utf8",
            Self::InvalidJson { .. } => "invalid_json",
            Self::NotAnObject { .. } => "not_an_object",
            Self::DuplicateField { .. } => "duplicate_field",
            Self::MissingField { .. } => "missing_field",
            Self::WrongType { .. } => "wrong_type",
            Self::UnknownType { .. } => "unknown_type",
            Self::InvalidId { .. } => "invalid_id",
            Self::OutOfRange { .. } => "out_of_range",
            Self::InvalidValue { .. } => "invalid_value",
        }
    }
}

/// Decodes one record value (UTF-8 JSON, at most 64 KiB) into an [`Event`].
///
/// Errors, checked in this order: [`DecodeError::TooLarge`], [`DecodeError::InvalidUtf8`],
/// [`DecodeError::InvalidJson`] / [`DecodeError::NotAnObject`] / [`DecodeError::DuplicateField`], then the fields:
/// `type` (missing, wrong type, unknown), `event_id` (1–256 bytes), `occurred_at` (RFC 3339), then the type's own
/// fields in the contract's order. Unknown fields are ignored.
pub fn decode(value: &[u8]) -> Result<Event, DecodeError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(DecodeError::TooLarge { bytes: value.len() });
    }
    let text = std::str::from_utf8(value).map_err(|e| DecodeError::InvalidUtf8 { offset: e.valid_up_to() })?;
    let fields = parse_object(text)?;
    fields.into_event()
}

/// The known field names; a field's index in this list is its slot in [`Fields`].
const NAMES: [&str; 25] = [
    "type",
    "event_id",
    "occurred_at",
    "conversation_id",
    "user_id",
    "sender_id",
    "kind",
    "members",
    "seq",
    "mentions",
    "mention_all",
    "countable",
    "read_seq",
    "muted",
    "broadcast_id",
    "notification_id",
    "category",
    "unread_ttl_days",
    "marked",
    "from_seq",
    "team",
    "thread_root",
    "reaction_seq",
    "reaction",
    "followed",
];
const TYPE: usize = 0;
const EVENT_ID: usize = 1;
const OCCURRED_AT: usize = 2;
const CONVERSATION_ID: usize = 3;
const USER_ID: usize = 4;
const SENDER_ID: usize = 5;
const KIND: usize = 6;
const MEMBERS: usize = 7;
const SEQ: usize = 8;
const MENTIONS: usize = 9;
const MENTION_ALL: usize = 10;
const COUNTABLE: usize = 11;
const READ_SEQ: usize = 12;
const MUTED: usize = 13;
const BROADCAST_ID: usize = 14;
const NOTIFICATION_ID: usize = 15;
const CATEGORY: usize = 16;
const UNREAD_TTL_DAYS: usize = 17;
const MARKED: usize = 18;
const FROM_SEQ: usize = 19;
const TEAM: usize = 20;
const THREAD_ROOT: usize = 21;
const REACTION_SEQ: usize = 22;
const REACTION: usize = 23;
const FOLLOWED: usize = 24;

/// The known fields of one object, as raw JSON slices borrowed from the input.
struct Fields<'a>([Option<&'a RawValue>; NAMES.len()]);

fn parse_object(text: &str) -> Result<Fields<'_>, DecodeError> {
    let mut duplicate = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed =
        de.deserialize_map(ObjectVisitor { duplicate: &mut duplicate }).and_then(|fields| de.end().map(|()| fields));
    match parsed {
        Ok(fields) => Ok(fields),
        Err(_) if duplicate.is_some() => Err(DecodeError::DuplicateField { field: duplicate.unwrap_or_default() }),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            Err(DecodeError::NotAnObject { found: json_kind(text) })
        }
        Err(e) => Err(DecodeError::InvalidJson {
            line: e.line(),
            column: e.column(),
            message: strip_position(&e.to_string()),
        }),
    }
}

struct ObjectVisitor<'s> {
    duplicate: &'s mut Option<String>,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_> {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut slots: [Option<&'de RawValue>; NAMES.len()] = [None; NAMES.len()];
        let mut unknown: Vec<Cow<'de, str>> = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match NAMES.iter().position(|n| *n == key) {
                Some(i) if slots[i].is_some() => {
                    *self.duplicate = Some(key.into_owned());
                    return Err(de::Error::custom("duplicate field"));
                }
                Some(i) => slots[i] = Some(map.next_value::<&'de RawValue>()?),
                None if unknown.contains(&key) => {
                    *self.duplicate = Some(key.into_owned());
                    return Err(de::Error::custom("duplicate field"));
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                    unknown.push(key);
                }
            }
        }
        Ok(Fields(slots))
    }
}

/// An object key, borrowed from the input unless it holds escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// An event's `event_id` and `occurred_at`, checked.
type Meta = (String, String);

impl<'a> Fields<'a> {
    fn into_event(self) -> Result<Event, DecodeError> {
        let type_name = self.string(TYPE)?;
        // Check the type before anything else so that an unknown type is reported as such.
        let Some(event_type) = EventType::parse(&type_name) else {
            return Err(DecodeError::UnknownType { type_name });
        };
        let event_id = self.string(EVENT_ID)?;
        if event_id.is_empty() || event_id.len() > MAX_ID_BYTES {
            let reason = if event_id.is_empty() { IdError::Empty } else { IdError::TooLong { bytes: event_id.len() } };
            return Err(DecodeError::InvalidId { field: "event_id".into(), reason });
        }
        let occurred_at = self.string(OCCURRED_AT)?;
        if let Err(e) = chrono::DateTime::parse_from_rfc3339(&occurred_at) {
            return Err(DecodeError::InvalidValue {
                field: "occurred_at",
                reason: format!("is not an RFC 3339 time ({e}): {occurred_at:?}"),
            });
        }
        self.body(event_type, event_id, occurred_at)
    }

    /// The fields of an event of type `t` past the common ones; one arm per type, so the compiler checks that
    /// every type of [`EventType`] is decoded.
    fn body(&self, t: EventType, event_id: String, occurred_at: String) -> Result<Event, DecodeError> {
        use ConversationEvent as C;
        use EventType as T;
        use UserEvent as U;
        let meta = (event_id, occurred_at);
        Ok(match t {
            T::ConversationCreated => Event::Conversation(C::Created(self.created(meta)?)),
            T::MemberJoined => Event::Conversation(C::Joined(self.joined(meta)?)),
            T::MemberLeft => Event::Conversation(C::Left(self.left(meta)?)),
            T::MessageSent => Event::Conversation(C::Sent(self.sent(meta)?)),
            T::MessageRecalled => Event::Conversation(C::Recalled(self.recalled(meta)?)),
            T::BroadcastPublished => Event::Conversation(C::Published(self.published(meta)?)),
            T::BroadcastRecalled => Event::Conversation(C::Unpublished(self.unpublished(meta)?)),
            T::ReactionAdded => Event::Conversation(C::ReactionAdded(self.reaction(meta)?)),
            T::ReactionRemoved => Event::Conversation(C::ReactionRemoved(self.reaction(meta)?)),
            T::ReadAck => Event::User(U::ReadAck(self.read_ack(meta)?)),
            T::ConversationMuted => Event::User(U::Muted(self.muted(meta)?)),
            T::ConversationMarkedUnread => Event::User(U::MarkedUnread(self.marked_unread(meta)?)),
            T::BroadcastRead => Event::User(U::BroadcastRead(self.broadcast_read(meta)?)),
            T::NotificationCreated => Event::User(U::NotificationCreated(self.note_created(meta)?)),
            T::NotificationRead => Event::User(U::NotificationRead(self.note_mark(meta)?)),
            T::NotificationRetracted => Event::User(U::NotificationRetracted(self.note_mark(meta)?)),
            T::NotificationsSeen => Event::User(U::NotificationsSeen(self.notes_mark(meta)?)),
            T::NotificationsRead => Event::User(U::NotificationsRead(self.notes_mark(meta)?)),
            T::ThreadRead => Event::User(U::ThreadRead(self.thread_read(meta)?)),
            T::ThreadFollowed => Event::User(U::ThreadFollowed(self.thread_followed(meta)?)),
            T::ReactionsRead => Event::User(U::ReactionsRead(self.reactions_read(meta)?)),
        })
    }

    fn created(&self, (event_id, occurred_at): Meta) -> Result<ConversationCreated, DecodeError> {
        let (conversation_id, kind) = (self.id(CONVERSATION_ID)?, self.kind()?);
        let members = self.ids(MEMBERS)?.unwrap_or_default();
        let unread_ttl_days = self.optional_integer(UNREAD_TTL_DAYS, 1, MAX_TTL_DAYS)?;
        let team = self.0[TEAM].map(|_| self.id(TEAM)).transpose()?;
        Ok(ConversationCreated { event_id, occurred_at, conversation_id, kind, members, unread_ttl_days, team })
    }

    fn joined(&self, (event_id, occurred_at): Meta) -> Result<MemberJoined, DecodeError> {
        let (conversation_id, user_id) = (self.id(CONVERSATION_ID)?, self.id(USER_ID)?);
        Ok(MemberJoined { event_id, occurred_at, conversation_id, user_id })
    }

    fn left(&self, (event_id, occurred_at): Meta) -> Result<MemberLeft, DecodeError> {
        let (conversation_id, user_id) = (self.id(CONVERSATION_ID)?, self.id(USER_ID)?);
        Ok(MemberLeft { event_id, occurred_at, conversation_id, user_id })
    }

    /// `message.sent`; v4's `thread_root` is 1..=2^53 and below `seq` (`CONTRACT.md` § v4, "Threads").
    fn sent(&self, (event_id, occurred_at): Meta) -> Result<MessageSent, DecodeError> {
        let (conversation_id, seq) = (self.id(CONVERSATION_ID)?, self.seq(SEQ, 1)?);
        let sender_id = self.id(SENDER_ID)?;
        let (mentions, mention_all) = (self.ids(MENTIONS)?.unwrap_or_default(), self.boolean(MENTION_ALL)?);
        let countable = self.boolean(COUNTABLE)?.unwrap_or(true);
        let thread_root = self.optional_integer(THREAD_ROOT, 1, MAX_SEQ)?;
        if let Some(root) = thread_root.filter(|root| *root >= seq) {
            let reason = format!("is {root}, not below `seq` {seq}: a reply's root is an earlier message");
            return Err(DecodeError::InvalidValue { field: "thread_root", reason });
        }
        let mention_all = mention_all.unwrap_or(false);
        Ok(MessageSent {
            event_id,
            occurred_at,
            conversation_id,
            seq,
            sender_id,
            mentions,
            mention_all,
            countable,
            thread_root,
        })
    }

    /// `reaction.added` and `reaction.removed` (v4): `reaction_seq` and `seq` are 1..=2^53, `reaction` 1–64
    /// bytes without control characters.
    fn reaction(&self, (event_id, occurred_at): Meta) -> Result<Reaction, DecodeError> {
        let (conversation_id, reaction_seq) = (self.id(CONVERSATION_ID)?, self.seq(REACTION_SEQ, 1)?);
        let (seq, user_id) = (self.seq(SEQ, 1)?, self.id(USER_ID)?);
        let reaction = self.string(REACTION)?;
        let reason = match reaction.len() {
            0 => Some("is empty: a reaction is 1–64 bytes".to_owned()),
            n if n > MAX_REACTION_BYTES => Some(format!("is {n} bytes, over 64")),
            _ if reaction.chars().any(char::is_control) => Some("holds a control character".to_owned()),
            _ => None,
        };
        if let Some(reason) = reason {
            return Err(DecodeError::InvalidValue { field: "reaction", reason });
        }
        Ok(Reaction { event_id, occurred_at, conversation_id, reaction_seq, seq, user_id, reaction })
    }

    fn thread_read(&self, (event_id, occurred_at): Meta) -> Result<ThreadRead, DecodeError> {
        let (user_id, conversation_id) = (self.id(USER_ID)?, self.id(CONVERSATION_ID)?);
        let (thread_root, read_seq) = (self.seq(THREAD_ROOT, 1)?, self.seq(READ_SEQ, 0)?);
        Ok(ThreadRead { event_id, occurred_at, user_id, conversation_id, thread_root, read_seq })
    }

    fn thread_followed(&self, (event_id, occurred_at): Meta) -> Result<ThreadFollowed, DecodeError> {
        let (user_id, conversation_id) = (self.id(USER_ID)?, self.id(CONVERSATION_ID)?);
        let thread_root = self.seq(THREAD_ROOT, 1)?;
        let followed = self.boolean(FOLLOWED)?.ok_or(DecodeError::MissingField { field: "followed" })?;
        Ok(ThreadFollowed { event_id, occurred_at, user_id, conversation_id, thread_root, followed })
    }

    fn reactions_read(&self, (event_id, occurred_at): Meta) -> Result<ReactionsRead, DecodeError> {
        let (user_id, conversation_id) = (self.id(USER_ID)?, self.id(CONVERSATION_ID)?);
        Ok(ReactionsRead { event_id, occurred_at, user_id, conversation_id, read_seq: self.seq(READ_SEQ, 0)? })
    }

    fn recalled(&self, (event_id, occurred_at): Meta) -> Result<MessageRecalled, DecodeError> {
        let (conversation_id, seq) = (self.id(CONVERSATION_ID)?, self.seq(SEQ, 1)?);
        Ok(MessageRecalled { event_id, occurred_at, conversation_id, seq })
    }

    fn published(&self, (event_id, occurred_at): Meta) -> Result<BroadcastPublished, DecodeError> {
        let (broadcast_id, seq) = (self.id(BROADCAST_ID)?, self.seq(SEQ, 1)?);
        let countable = self.boolean(COUNTABLE)?.unwrap_or(true);
        Ok(BroadcastPublished { event_id, occurred_at, broadcast_id, seq, countable })
    }

    fn unpublished(&self, (event_id, occurred_at): Meta) -> Result<BroadcastRecalled, DecodeError> {
        let (broadcast_id, seq) = (self.id(BROADCAST_ID)?, self.seq(SEQ, 1)?);
        Ok(BroadcastRecalled { event_id, occurred_at, broadcast_id, seq })
    }

    fn read_ack(&self, (event_id, occurred_at): Meta) -> Result<ReadAck, DecodeError> {
        let (user_id, conversation_id) = (self.id(USER_ID)?, self.id(CONVERSATION_ID)?);
        Ok(ReadAck { event_id, occurred_at, user_id, conversation_id, read_seq: self.seq(READ_SEQ, 0)? })
    }

    fn muted(&self, (event_id, occurred_at): Meta) -> Result<ConversationMuted, DecodeError> {
        let (user_id, conversation_id) = (self.id(USER_ID)?, self.id(CONVERSATION_ID)?);
        let muted = self.boolean(MUTED)?.ok_or(DecodeError::MissingField { field: "muted" })?;
        Ok(ConversationMuted { event_id, occurred_at, user_id, conversation_id, muted })
    }

    /// `conversation.marked_unread` (`CONTRACT.md` § v3): `from_seq` is 1..=2^53 and only allowed with
    /// `marked: true`.
    fn marked_unread(&self, (event_id, occurred_at): Meta) -> Result<ConversationMarkedUnread, DecodeError> {
        let (user_id, conversation_id) = (self.id(USER_ID)?, self.id(CONVERSATION_ID)?);
        let marked = self.boolean(MARKED)?.ok_or(DecodeError::MissingField { field: "marked" })?;
        let from_seq = self.optional_integer(FROM_SEQ, 1, MAX_SEQ)?;
        if from_seq.is_some() && !marked {
            let reason = "is only allowed with `marked: true` (unmarking clears the mark and its from_seq)".into();
            return Err(DecodeError::InvalidValue { field: "from_seq", reason });
        }
        Ok(ConversationMarkedUnread { event_id, occurred_at, user_id, conversation_id, marked, from_seq })
    }

    fn broadcast_read(&self, (event_id, occurred_at): Meta) -> Result<BroadcastRead, DecodeError> {
        let user_id = self.id(USER_ID)?;
        let (broadcast_id, read_seq) = (self.id(BROADCAST_ID)?, self.seq(READ_SEQ, 0)?);
        Ok(BroadcastRead { event_id, occurred_at, user_id, broadcast_id, read_seq })
    }

    fn note_created(&self, (event_id, occurred_at): Meta) -> Result<NotificationCreated, DecodeError> {
        let user_id = self.id(USER_ID)?;
        let (notification_id, category) = (self.id(NOTIFICATION_ID)?, self.id(CATEGORY)?);
        Ok(NotificationCreated { event_id, occurred_at, user_id, notification_id, category })
    }

    fn note_mark(&self, (event_id, occurred_at): Meta) -> Result<NotificationMark, DecodeError> {
        let (user_id, notification_id) = (self.id(USER_ID)?, self.id(NOTIFICATION_ID)?);
        Ok(NotificationMark { event_id, occurred_at, user_id, notification_id })
    }

    fn notes_mark(&self, (event_id, occurred_at): Meta) -> Result<NotificationsMark, DecodeError> {
        let user_id = self.id(USER_ID)?;
        let category = self.0[CATEGORY].map(|_| self.id(CATEGORY)).transpose()?;
        Ok(NotificationsMark { event_id, occurred_at, user_id, category })
    }

    fn raw(&self, i: usize) -> Result<&'a RawValue, DecodeError> {
        self.0[i].ok_or(DecodeError::MissingField { field: NAMES[i] })
    }

    fn string(&self, i: usize) -> Result<String, DecodeError> {
        let raw = self.raw(i)?;
        serde_json::from_str(raw.get()).map_err(|_| wrong_type(NAMES[i].into(), "a string", raw))
    }

    fn id(&self, i: usize) -> Result<String, DecodeError> {
        let s = self.string(i)?;
        validate_id(&s).map_err(|reason| DecodeError::InvalidId { field: NAMES[i].into(), reason })?;
        Ok(s)
    }

    /// An optional array of ids (absent → `None`).
    fn ids(&self, i: usize) -> Result<Option<Vec<String>>, DecodeError> {
        let Some(raw) = self.0[i] else { return Ok(None) };
        let items: Vec<&RawValue> =
            serde_json::from_str(raw.get()).map_err(|_| wrong_type(NAMES[i].into(), "an array of strings", raw))?;
        let mut out = Vec::with_capacity(items.len());
        for (n, item) in items.into_iter().enumerate() {
            let field = || format!("{}[{n}]", NAMES[i]);
            let s: String = serde_json::from_str(item.get()).map_err(|_| wrong_type(field(), "a string", item))?;
            validate_id(&s).map_err(|reason| DecodeError::InvalidId { field: field(), reason })?;
            out.push(s);
        }
        Ok(Some(out))
    }

    fn boolean(&self, i: usize) -> Result<Option<bool>, DecodeError> {
        let Some(raw) = self.0[i] else { return Ok(None) };
        serde_json::from_str(raw.get()).map(Some).map_err(|_| wrong_type(NAMES[i].into(), "true or false", raw))
    }

    /// A required integer in `min..=2^53`.
    fn seq(&self, i: usize, min: u64) -> Result<u64, DecodeError> {
        self.integer(self.raw(i)?, i, min, MAX_SEQ)
    }

    /// An optional integer in `min..=max` (absent → `None`; `null` is a wrong type, as everywhere).
    fn optional_integer(&self, i: usize, min: u64, max: u64) -> Result<Option<u64>, DecodeError> {
        self.0[i].map(|raw| self.integer(raw, i, min, max)).transpose()
    }

    /// The integer literal `raw` of field `i`, in `min..=max`.
    fn integer(&self, raw: &RawValue, i: usize, min: u64, max: u64) -> Result<u64, DecodeError> {
        let text = raw.get().trim();
        let is_integer_literal = {
            let digits = text.strip_prefix('-').unwrap_or(text);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        };
        if !is_integer_literal {
            return Err(wrong_type(NAMES[i].into(), "an integer", raw));
        }
        match text.parse::<u64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(DecodeError::OutOfRange { field: NAMES[i], value: text.to_owned(), min, max }),
        }
    }

    fn kind(&self) -> Result<ConversationKind, DecodeError> {
        match self.string(KIND)?.as_str() {
            "direct" => Ok(ConversationKind::Direct),
            "group" => Ok(ConversationKind::Group),
            "channel" => Ok(ConversationKind::Channel),
            "feed" => Ok(ConversationKind::Feed),
            other => Err(DecodeError::InvalidValue {
                field: "kind",
                reason: format!("must be \"direct\", \"group\", \"channel\" or \"feed\", found {other:?}"),
            }),
        }
    }
}

fn wrong_type(field: String, expected: &'static str, raw: &RawValue) -> DecodeError {
    let text = raw.get().trim();
    let mut shown: String = text.chars().take(40).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    DecodeError::WrongType { field, expected, found: format!("{} {shown}", json_kind(text)) }
}

/// The JSON type of a document, from its first character.
fn json_kind(text: &str) -> &'static str {
    match text.trim_start().bytes().next() {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        Some(_) if text.contains(['.', 'e', 'E']) => "float",
        Some(_) => "number",
        None => "nothing",
    }
}

/// serde_json appends " at line L column C"; the error carries those separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}
