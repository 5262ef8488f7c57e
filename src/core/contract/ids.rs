//! The identifier rule of `CONTRACT.md` § Events: opaque UTF-8 strings of 1–256 bytes with no control characters.

use super::MAX_ID_BYTES;

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The string is empty.
    #[error("is empty")]
    Empty,
    /// The string is longer than 256 bytes of UTF-8.
    #[error("is {bytes} bytes long, over the limit of 256")]
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The string holds a control character (Unicode category Cc: U+0000–U+001F, U+007F–U+009F).
    #[error("holds control character U+{code:04X} at byte {at}")]
    ControlChar {
        /// The character's code point.
        code: u32,
        /// Its byte offset in the string.
        at: usize,
    },
}

/// Checks one identifier (`user_id`, `conversation_id`, `sender_id`, a member or a mention).
///
/// Returns `Ok(())` for 1–256 bytes with no control character; otherwise the first rule it breaks, in the order
/// empty, too long, control character.
pub fn validate_id(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    if id.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong { bytes: id.len() });
    }
    // Fast path: printable ASCII only (the common case) needs no char decoding.
    if id.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Ok(());
    }
    match id.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(IdError::ControlChar { code: c as u32, at }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_printable_ids_of_1_to_256_bytes() {
        for id in ["a", "{x} [y] a\\b:c/d%20 e", "é", &"x".repeat(256), &"é".repeat(128)] {
            assert_eq!(validate_id(id), Ok(()), "{id:?}");
        }
    }

    #[test]
    fn rejects_empty_long_and_control() {
        assert_eq!(validate_id(""), Err(IdError::Empty));
        assert_eq!(validate_id(&"x".repeat(257)), Err(IdError::TooLong { bytes: 257 }));
        // 129 two-byte chars: 258 bytes though only 129 characters.
        assert_eq!(validate_id(&"é".repeat(129)), Err(IdError::TooLong { bytes: 258 }));
        assert_eq!(validate_id("a\0b"), Err(IdError::ControlChar { code: 0, at: 1 }));
        assert_eq!(validate_id("tab\there"), Err(IdError::ControlChar { code: 9, at: 3 }));
        assert_eq!(validate_id("x\u{7f}"), Err(IdError::ControlChar { code: 0x7f, at: 1 }));
        assert_eq!(validate_id("é\u{85}"), Err(IdError::ControlChar { code: 0x85, at: 2 }));
    }
}
