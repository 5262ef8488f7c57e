//! Any string as an id, the way the API takes it after percent-decoding a path segment: the contract's id rule
//! (`core::contract::validate_id`) answers without panicking, and for an id it accepts, the Redis keys built from it
//! name it back: a user's hash key ends in the id under its prefix, and a broadcast list's or index's key parses back
//! to the same list (`projection::shared_of_key`, what the push hub does with every key published on the change
//! channel), so no id can address another user's or list's keys.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unread::core::broadcast::ListId;
use unread::core::contract::validate_id;
use unread::projection::{shared_keys, shared_of_key, user_key, USER_KEY_PREFIX};

const PREFIX: &str = "fuzz:";

fuzz_target!(|data: &[u8]| {
    let Ok(id) = std::str::from_utf8(data) else { return };
    if validate_id(id).is_err() {
        return;
    }
    let key = user_key(PREFIX, id);
    assert_eq!(key.strip_prefix(PREFIX).and_then(|k| k.strip_prefix(USER_KEY_PREFIX)), Some(id));
    for list in [ListId::Broadcast(id.to_owned()), ListId::Index(id.to_owned())] {
        let keys = shared_keys(PREFIX, &list);
        for k in [&keys.live, &keys.mention_all, &keys.guard, &keys.version] {
            assert!(k.starts_with(PREFIX), "{k:?} leaves the namespace's prefix");
        }
        assert_eq!(shared_of_key(PREFIX, &keys.live), Some(list), "the live key of {id:?} names another list");
    }
});
