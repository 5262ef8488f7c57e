//! The JSON Schemas in `schemas/` and the Rust decoder give the same verdict on every fixture of
//! `tests/data/contract-fixtures.json`, and that verdict is the fixture's own `valid`.
//!
//! The schemas' custom formats `unread-id` and `unread-event-id` (byte lengths, which JSON Schema cannot count) are
//! registered here with the contract's rule. Rules no JSON Schema can see — a value over 64 KiB, invalid UTF-8,
//! duplicate keys, `1.0` written for an integer — are the decoder's alone and tested in `decoder.rs`.

use jsonschema::{Registry, Resource};
use serde_json::Value;
use unread::core::contract::{decode, validate_id, EVENT_TYPES, MAX_ID_BYTES};

use crate::support::repo_path;

const BASE: &str = "https://unread.example/schemas/v1/";

fn load(name: &str) -> Value {
    let path = repo_path("schemas").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn validator() -> jsonschema::Validator {
    let mut names = vec!["common.schema.json".to_string()];
    names.extend(EVENT_TYPES.iter().map(|t| format!("{t}.schema.json")));
    let resources = names.iter().map(|n| (format!("{BASE}{n}"), Resource::from_contents(load(n))));
    let registry = Registry::new().extend(resources).unwrap().prepare().unwrap();
    jsonschema::options()
        .with_registry(&registry)
        .should_validate_formats(true)
        .with_format("unread-id", |s: &str| validate_id(s).is_ok())
        .with_format("unread-event-id", |s: &str| !s.is_empty() && s.len() <= MAX_ID_BYTES)
        .build(&load("event.schema.json"))
        .expect("event.schema.json compiles")
}

#[test]
fn every_event_type_has_a_schema_with_its_id() {
    for t in EVENT_TYPES {
        let schema = load(&format!("{t}.schema.json"));
        assert_eq!(schema["$id"], format!("{BASE}{t}.schema.json"));
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(schema["properties"]["type"]["const"], t);
    }
}

#[test]
fn schemas_and_decoder_agree_on_every_fixture() {
    let validator = validator();
    let fixtures: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(repo_path("tests/data/contract-fixtures.json")).unwrap())
            .unwrap();
    assert!(fixtures.len() >= 50, "only {} fixtures", fixtures.len());
    let mut failures = Vec::new();
    for f in &fixtures {
        let (name, valid, event) = (f["name"].as_str().unwrap(), f["valid"].as_bool().unwrap(), &f["event"]);
        let by_schema = validator.is_valid(event);
        let by_decoder = decode(serde_json::to_string(event).unwrap().as_bytes());
        if by_schema != valid || by_decoder.is_ok() != valid {
            failures.push(format!(
                "{name}: expected valid={valid}, schema said {by_schema}, decoder said {:?}",
                by_decoder.map(|_| "ok")
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let valid = fixtures.iter().filter(|f| f["valid"] == true).count();
    assert!(valid >= 10 && fixtures.len() - valid >= 30, "fixtures must cover both verdicts");
}

/// The stream's messages (`schemas/stream.schema.json`, served at `/stream.schema.json`): a validator, for the push
/// tests to check every message a live stream sends against it.
pub(crate) fn stream_validator() -> jsonschema::Validator {
    jsonschema::validator_for(&load("stream.schema.json")).expect("stream.schema.json compiles")
}

/// Panics unless `message` is one the stream schema describes.
pub(crate) fn assert_stream_message(validator: &jsonschema::Validator, message: &Value) {
    let errors: Vec<String> = validator.iter_errors(message).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "a stream message outside stream.schema.json: {message}\n{errors:#?}");
}

/// The stream schema names every total of the table of counts ([`unread::core::counts::Counts`]): a counter added
/// there fails here until the schema has it.
#[test]
fn the_stream_schema_has_every_total_and_refuses_what_the_stream_never_sends() {
    let schema = load("stream.schema.json");
    assert_eq!(schema["$id"], format!("{BASE}stream.schema.json"));
    let required: Vec<&str> =
        schema["$defs"]["totals"]["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(required, unread::core::counts::Counts::NAMES);
    let v = stream_validator();
    for ok in [
        serde_json::json!({"type": "changes", "version": 3}),
        serde_json::json!({"type": "changes", "version": 4, "conversations": {"c": null}}),
        serde_json::json!({"type": "refreshed", "until": 1700000000}),
        serde_json::json!({"type": "closing", "reason": "forbidden"}),
        serde_json::json!({"type": "refresh", "token": "t"}),
    ] {
        assert_stream_message(&v, &ok);
    }
    for bad in [
        serde_json::json!({"type": "changes"}),
        serde_json::json!({"type": "changes", "version": 1, "totals": {"total_unread": 1}}),
        serde_json::json!({"type": "closing", "reason": "bored"}),
        serde_json::json!({"type": "state", "version": 1, "state": {}}),
        serde_json::json!({"type": "gossip", "version": 1}),
    ] {
        assert!(!v.is_valid(&bad), "{bad}");
    }
}
