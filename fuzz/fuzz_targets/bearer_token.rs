//! Bearer tokens through the read API's verifier (`auth::Verifier::verify`, HS256 as `--auth-hs256-secret`
//! configures it). Any string: an access or a typed error, never a panic. A token minted for a user (from the
//! fuzzer's bytes) verifies as that user and only that user; the same token with one byte changed never verifies as
//! anyone else.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use unread::auth::{mint, Access, AuthOptions, Verifier};

fn options() -> &'static AuthOptions {
    static OPTIONS: OnceLock<AuthOptions> = OnceLock::new();
    OPTIONS.get_or_init(|| AuthOptions {
        hs256_secret: Some("fuzzing-secret-fuzzing-secret-32b".to_owned()),
        service_scope: "unread:any".to_owned(),
        ..AuthOptions::default()
    })
}

fn verifier() -> &'static Verifier {
    static VERIFIER: OnceLock<Verifier> = OnceLock::new();
    VERIFIER.get_or_init(|| Verifier::from_options(options()).expect("valid options").expect("a key"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    if mode % 2 == 0 {
        let _ = verifier().verify(&text); // any string: never a panic
        return;
    }
    let (user, service) = (text.as_ref(), mode % 4 == 3);
    let Ok(token) = mint(options(), user, service, Duration::from_secs(60)) else { return };
    let access = verifier().verify(&token).expect("a token just minted verifies");
    match &access {
        Access::User(u) => assert!(!service && u == user, "minted for {user:?}, verified as user {u:?}"),
        Access::Service(s) => assert!(service && s == user, "minted for {user:?}, verified as service {s:?}"),
    }
    assert!(access.may_act_for(user));
    if !service {
        assert!(!access.may_act_for(&format!("{user}x")), "a user token reads another user");
    }
    let mut changed = token.into_bytes();
    let i = usize::from(mode) * 7 % changed.len();
    changed[i] = if changed[i] == b'A' { b'B' } else { b'A' };
    if let Ok(other) = verifier().verify(&String::from_utf8_lossy(&changed)) {
        assert_eq!(other, access, "a changed token verified as someone else");
    }
});
