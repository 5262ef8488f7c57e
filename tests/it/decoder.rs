//! The decoder rejects every broken rule of the contract with an error naming the field and the reason.

use unread::core::contract::{decode, DecodeError, Event, IdError, UserEvent, MAX_VALUE_BYTES};

const ACK: &str = r#"{"type":"read.ack","event_id":"e1","occurred_at":"2024-05-01T12:00:00Z","user_id":"alice","conversation_id":"team","read_seq":3}"#;
const SENT: &str = r#"{"type":"message.sent","event_id":"e2","occurred_at":"2024-05-01T12:00:00Z","conversation_id":"team","seq":5,"sender_id":"bob"}"#;

/// `SENT` with one field's raw JSON value replaced (or added).
fn sent_with(field: &str, raw: &str) -> String {
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(SENT).unwrap();
    v.remove(field);
    let body = serde_json::to_string(&v).unwrap();
    format!("{},\"{field}\":{raw}}}", &body[..body.len() - 1])
}

fn err(text: &str) -> DecodeError {
    decode(text.as_bytes()).expect_err(text)
}

#[test]
fn decodes_valid_events_with_defaults() {
    match decode(SENT.as_bytes()).unwrap() {
        Event::Conversation(unread::core::contract::ConversationEvent::Sent(m)) => {
            assert_eq!((m.seq, m.sender_id.as_str(), m.countable, m.mention_all), (5, "bob", true, false));
            assert!(m.mentions.is_empty());
        }
        other => panic!("{other:?}"),
    }
    match decode(ACK.as_bytes()).unwrap() {
        Event::User(UserEvent::ReadAck(a)) => assert_eq!((a.read_seq, a.user_id.as_str()), (3, "alice")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn round_trips_through_serialize() {
    for text in [ACK, SENT] {
        let event = decode(text.as_bytes()).unwrap();
        let again = decode(serde_json::to_string(&event).unwrap().as_bytes()).unwrap();
        assert_eq!(event, again);
    }
}

#[test]
fn rejects_values_over_64_kib() {
    let padding = "x".repeat(MAX_VALUE_BYTES);
    let text = sent_with("note", &format!("\"{padding}\""));
    assert_eq!(err(&text), DecodeError::TooLarge { bytes: text.len() });
    // Exactly at the limit is fine.
    let room = MAX_VALUE_BYTES - sent_with("note", "\"\"").len();
    let text = sent_with("note", &format!("\"{}\"", "x".repeat(room)));
    assert_eq!(text.len(), MAX_VALUE_BYTES);
    assert!(decode(text.as_bytes()).is_ok());
}

#[test]
fn rejects_invalid_utf8() {
    let mut bytes = SENT.as_bytes().to_vec();
    let at = SENT.find("bob").unwrap();
    bytes[at] = 0xff;
    assert_eq!(decode(&bytes), Err(DecodeError::InvalidUtf8 { offset: at }));
}

#[test]
fn rejects_invalid_json() {
    for text in [&SENT[..40], "{", "", "{\"type\":}", &format!("{SENT} trailing"), &format!("{SENT}{SENT}")] {
        assert!(matches!(err(text), DecodeError::InvalidJson { .. }), "{text:?}: {:?}", err(text));
    }
    let e = err(&format!("{SENT}x"));
    assert_eq!(e.kind(), "invalid_json");
    assert!(e.to_string().contains("trailing"), "{e}");
}

#[test]
fn rejects_non_objects() {
    assert_eq!(err("[1]"), DecodeError::NotAnObject { found: "array" });
    assert_eq!(err("\"read.ack\""), DecodeError::NotAnObject { found: "string" });
    assert_eq!(err("null"), DecodeError::NotAnObject { found: "null" });
    assert_eq!(err("42"), DecodeError::NotAnObject { found: "number" });
}

#[test]
fn rejects_duplicate_keys() {
    assert_eq!(err(&sent_with("seq", "6,\"seq\":7")), DecodeError::DuplicateField { field: "seq".into() });
    assert_eq!(err(&sent_with("x", "1,\"x\":2")), DecodeError::DuplicateField { field: "x".into() });
}

#[test]
fn rejects_unknown_and_missing_type() {
    let text = SENT.replace("message.sent", "message.edited");
    assert_eq!(err(&text), DecodeError::UnknownType { type_name: "message.edited".into() });
    let text = SENT.replace("\"type\":\"message.sent\",", "");
    assert_eq!(err(&text), DecodeError::MissingField { field: "type" });
    assert!(
        matches!(err(&SENT.replace("\"message.sent\"", "3")), DecodeError::WrongType { field, .. } if field == "type")
    );
}

#[test]
fn rejects_missing_fields_naming_them() {
    for field in ["event_id", "occurred_at", "conversation_id", "seq", "sender_id"] {
        let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(SENT).unwrap();
        v.remove(field);
        let e = err(&serde_json::to_string(&v).unwrap());
        assert_eq!(e, DecodeError::MissingField { field: field_static(field) });
        assert!(e.to_string().contains(field), "{e}");
    }
    let no_muted = r#"{"type":"conversation.muted","event_id":"e","occurred_at":"2024-05-01T12:00:00Z","user_id":"u","conversation_id":"c"}"#;
    assert_eq!(err(no_muted), DecodeError::MissingField { field: "muted" });
}

fn field_static(name: &str) -> &'static str {
    ["event_id", "occurred_at", "conversation_id", "seq", "sender_id"].into_iter().find(|f| *f == name).unwrap()
}

#[test]
fn rejects_wrong_types_including_null_and_floats() {
    let cases = [
        ("seq", "\"5\"", "seq"),
        ("seq", "null", "seq"),
        ("seq", "5.0", "seq"),
        ("seq", "1e3", "seq"),
        ("seq", "18446744073709551616.5", "seq"),
        ("sender_id", "7", "sender_id"),
        ("sender_id", "null", "sender_id"),
        ("mentions", "\"alice\"", "mentions"),
        ("mentions", "null", "mentions"),
        ("mentions", "[\"a\",2]", "mentions[1]"),
        ("mention_all", "1", "mention_all"),
        ("countable", "\"true\"", "countable"),
    ];
    for (field, raw, named) in cases {
        let e = err(&sent_with(field, raw));
        match &e {
            DecodeError::WrongType { field: f, .. } => assert_eq!(f, named, "{raw}"),
            other => panic!("{field}={raw}: expected WrongType, got {other:?}"),
        }
        assert!(e.to_string().contains(named), "{e}");
    }
}

#[test]
fn rejects_bad_ids_naming_the_field_and_reason() {
    let cases = [
        ("sender_id", "\"\"".to_string(), "sender_id", IdError::Empty),
        ("sender_id", format!("\"{}\"", "x".repeat(257)), "sender_id", IdError::TooLong { bytes: 257 }),
        ("sender_id", format!("\"{}\"", "é".repeat(129)), "sender_id", IdError::TooLong { bytes: 258 }),
        ("conversation_id", "\"a\\u0000b\"".to_string(), "conversation_id", IdError::ControlChar { code: 0, at: 1 }),
        ("conversation_id", "\"a\\tb\"".to_string(), "conversation_id", IdError::ControlChar { code: 9, at: 1 }),
        ("mentions", "[\"ok\",\"x\\u007f\"]".to_string(), "mentions[1]", IdError::ControlChar { code: 0x7f, at: 1 }),
    ];
    for (field, raw, named, reason) in cases {
        assert_eq!(err(&sent_with(field, &raw)), DecodeError::InvalidId { field: named.into(), reason }, "{raw}");
    }
    let e = err(&ACK.replace("\"e1\"", "\"\""));
    assert_eq!(e, DecodeError::InvalidId { field: "event_id".into(), reason: IdError::Empty });
    let e = err(&ACK.replace("\"e1\"", &format!("\"{}\"", "e".repeat(257))));
    assert_eq!(e, DecodeError::InvalidId { field: "event_id".into(), reason: IdError::TooLong { bytes: 257 } });
}

#[test]
fn rejects_out_of_range_seqs() {
    for raw in ["0", "-1", "9007199254740993", "18446744073709551616", "-99999999999999999999"] {
        assert_eq!(
            err(&sent_with("seq", raw)),
            DecodeError::OutOfRange { field: "seq", value: raw.into(), min: 1, max: 9007199254740992 },
            "seq {raw}"
        );
    }
    assert!(decode(sent_with("seq", "9007199254740992").as_bytes()).is_ok(), "2^53 is allowed");
    let ack = |raw: &str| ACK.replace("\"read_seq\":3", &format!("\"read_seq\":{raw}"));
    assert!(decode(ack("0").as_bytes()).is_ok(), "read_seq 0 is allowed");
    assert!(decode(ack("9007199254740992").as_bytes()).is_ok());
    assert_eq!(
        err(&ack("9007199254740993")),
        DecodeError::OutOfRange { field: "read_seq", value: "9007199254740993".into(), min: 0, max: 9007199254740992 }
    );
    assert_eq!(
        err(&ack("-1")),
        DecodeError::OutOfRange { field: "read_seq", value: "-1".into(), min: 0, max: 9007199254740992 }
    );
}

#[test]
fn rejects_bad_kind_and_time() {
    let created = r#"{"type":"conversation.created","event_id":"e","occurred_at":"2024-05-01T12:00:00Z","conversation_id":"c","kind":"forum"}"#;
    assert!(matches!(err(created), DecodeError::InvalidValue { field: "kind", .. }));
    assert!(matches!(
        err(&SENT.replace("2024-05-01T12:00:00Z", "yesterday")),
        DecodeError::InvalidValue { field: "occurred_at", .. }
    ));
    assert!(matches!(
        err(&SENT.replace("2024-05-01T12:00:00Z", "2024-13-01T12:00:00Z")),
        DecodeError::InvalidValue { field: "occurred_at", .. }
    ));
}

#[test]
fn ignores_unknown_fields_and_other_types_fields_of_any_type() {
    // `read_seq` is not a field of message.sent: its value is not checked.
    assert!(decode(sent_with("read_seq", "\"whatever\"").as_bytes()).is_ok());
    assert!(decode(sent_with("text", "{\"nested\":[1,2,null]}").as_bytes()).is_ok());
}

#[test]
fn every_error_kind_is_named() {
    let kinds = [
        err(&"x".repeat(MAX_VALUE_BYTES + 1)).kind(),
        decode(&[0xff]).unwrap_err().kind(),
        err("{").kind(),
        err("[]").kind(),
        err(&sent_with("seq", "1,\"seq\":2")).kind(),
        err("{}").kind(),
        err(&sent_with("seq", "1.5")).kind(),
        err(&SENT.replace("message.sent", "nope")).kind(),
        err(&sent_with("sender_id", "\"\"")).kind(),
        err(&sent_with("seq", "0")).kind(),
        err(&SENT.replace("2024-05-01T12:00:00Z", "now")).kind(),
    ];
    assert_eq!(
        kinds,
        [
            "too_large",
            "invalid_utf8",
            "invalid_json",
            "not_an_object",
            "duplicate_field",
            "missing_field",
            "wrong_type",
            "unknown_type",
            "invalid_id",
            "out_of_range",
            "invalid_value"
        ]
    );
}

/// Every field the contract names, each with a valid value: with any `type`, the decoder reads what it needs.
const EVERY_FIELD: &str = r#""event_id":"e9","occurred_at":"2024-05-01T12:00:00Z","conversation_id":"c","user_id":"u","sender_id":"s","kind":"group","members":["u"],"seq":4,"mentions":[],"mention_all":false,"countable":true,"read_seq":2,"muted":true,"marked":true,"broadcast_id":"b","notification_id":"n","category":"k","thread_root":3,"reaction_seq":5,"reaction":"👍","followed":true"#;

#[test]
fn every_listed_type_decodes_to_itself_on_its_stream() {
    use unread::core::contract::{EventType, EVENT_TYPES};
    assert_eq!(EVENT_TYPES.len(), EventType::ALL.len());
    for (t, name) in EventType::ALL.into_iter().zip(EVENT_TYPES) {
        assert_eq!(t.name(), name);
        assert_eq!(EventType::parse(name), Some(t));
        let text = format!(r#"{{"type":"{name}",{EVERY_FIELD}}}"#);
        let event = decode(text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((event.event_type(), event.type_name(), event.stream()), (t, name, t.stream()));
    }
}

proptest::proptest! {
    /// Any listed type with any subset of the fields, each valid or of a wrong shape, decodes to an event of that
    /// type or to an error naming why: never a panic (a panic would crash-loop a partition task on one record).
    #[test]
    fn any_listed_type_with_any_fields_never_panics(
        t in 0..unread::core::contract::EventType::ALL.len(),
        keep in proptest::collection::vec(proptest::bool::ANY, 17),
        wrong in proptest::collection::vec(0u8..4, 17),
    ) {
        let fields: Vec<&str> = EVERY_FIELD.split(",\"").collect();
        let name = unread::core::contract::EventType::ALL[t].name();
        let mut parts = vec![format!(r#""type":"{name}""#)];
        for (i, field) in fields.iter().enumerate() {
            let field = if i == 0 { field.to_string() } else { format!("\"{field}") };
            let key = field.split(':').next().unwrap().to_owned();
            match (keep[i % keep.len()], wrong[i % wrong.len()]) {
                (false, _) => {}
                (true, 0) => parts.push(format!("{key}:null")),
                (true, 1) => parts.push(format!("{key}:-1")),
                (true, 2) => parts.push(format!("{key}:\"\"")),
                (true, _) => parts.push(field),
            }
        }
        let text = format!("{{{}}}", parts.join(","));
        if let Ok(event) = decode(text.as_bytes()) {
            proptest::prop_assert_eq!(event.type_name(), name);
        }
    }
}

/// Contract v4's rules: a reply's `thread_root` comes before its `seq`, a reaction's `reaction_seq` and `seq` are
/// at least 1, and a reaction is 1–64 bytes without control characters.
#[test]
fn rejects_what_v4_forbids_naming_the_field() {
    let field = |e: DecodeError| match e {
        DecodeError::InvalidValue { field, .. } | DecodeError::OutOfRange { field, .. } => field,
        other => panic!("{other:?}"),
    };
    assert!(decode(sent_with("thread_root", "4").as_bytes()).is_ok(), "a root below seq 5");
    for raw in ["5", "6", "0"] {
        assert_eq!(field(err(&sent_with("thread_root", raw))), "thread_root", "thread_root {raw}");
    }
    let reaction = |rseq: &str, seq: &str, r: &str| {
        format!(
            r#"{{"type":"reaction.added","event_id":"r","occurred_at":"2024-05-01T12:00:00Z","conversation_id":"c","reaction_seq":{rseq},"seq":{seq},"user_id":"u","reaction":{r}}}"#
        )
    };
    assert!(decode(reaction("1", "1", r#""👍""#).as_bytes()).is_ok());
    assert_eq!(field(err(&reaction("0", "1", r#""👍""#))), "reaction_seq");
    assert_eq!(field(err(&reaction("1", "0", r#""👍""#))), "seq");
    for bad in [r#""""#, &format!("\"{}\"", "x".repeat(65)), r#""a\u0007""#] {
        assert_eq!(field(err(&reaction("1", "1", bad))), "reaction", "{bad}");
    }
    assert!(decode(reaction("1", "1", &format!("\"{}\"", "x".repeat(64))).as_bytes()).is_ok(), "64 bytes");
}
