//! Any bytes through the event decoder (`core::contract::decode`, the trust boundary of every Kafka record): an
//! event or a typed error, never a panic. A decoded event re-encodes to JSON that decodes to the same event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unread::core::contract::decode;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = decode(data) {
        let again = serde_json::to_vec(&event).expect("a decoded event encodes");
        let back = decode(&again).expect("an encoded event decodes");
        assert_eq!(back, event, "decode → encode → decode changed the event");
    }
});
