//! Per-user authorization of the HTTP API: bearer JWTs (`jsonwebtoken`), HS256 with a shared secret, or RS256/ES256
//! with public keys from a PEM or JWKS file.
//!
//! A token is accepted when its signature verifies with a configured key **of the algorithm that key is for** (an
//! HS256 token is never checked against an RSA key's bytes, `alg: none` is never accepted), `exp` is in the future,
//! `nbf` (if any) in the past, and `iss`/`aud` present and equal to the configured ones when configured; `sub` is
//! the user id (`--auth-leeway`, 60 s by default, on `exp` and `nbf`, for clock skew). A stream opened with a token
//! ends when the token expires plus that leeway, unless the client refreshes it over the socket ([`Grant::until`],
//! `crate::api::stream`). A
//! token whose `scope` (space-separated) holds the configured service scope (`unread:any` by default) is a service
//! token: it reads any user and may use the batch route. Any other token reads its own `sub` only.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Where the keys are and what the claims must say (every `unread` command that serves or mints tokens).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Tokens")]
pub struct AuthOptions {
    /// HS256 shared secret (tokens signed with it are accepted; `unread token` signs with it).
    #[arg(long = "auth-hs256-secret", env = "UNREAD_AUTH_HS256_SECRET", hide_env_values = true)]
    pub hs256_secret: Option<String>,
    /// A PEM public key: RSA (RS256) or EC P-256 (ES256).
    #[arg(long = "auth-public-key", env = "UNREAD_AUTH_PUBLIC_KEY", value_name = "PEM_FILE")]
    pub public_key: Option<PathBuf>,
    /// A JWKS file (RS256 and ES256 keys; a token's `kid` picks its key).
    #[arg(long = "auth-jwks", env = "UNREAD_AUTH_JWKS", value_name = "JSON_FILE")]
    pub jwks: Option<PathBuf>,
    /// The required `iss`, if any.
    #[arg(long = "auth-issuer", env = "UNREAD_AUTH_ISSUER")]
    pub issuer: Option<String>,
    /// The required `aud`, if any.
    #[arg(long = "auth-audience", env = "UNREAD_AUTH_AUDIENCE")]
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, e.g. `60s`: a token is accepted until `exp` plus this, and a stream
    /// opened with it ends then (unless refreshed over the socket).
    #[arg(long = "auth-leeway", env = "UNREAD_AUTH_LEEWAY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub leeway: Duration,
    /// The `scope` entry that makes a service token (reads any user, uses the batch route).
    #[arg(long = "auth-service-scope", env = "UNREAD_AUTH_SERVICE_SCOPE", default_value = "unread:any")]
    pub service_scope: String,
}

/// The claims unread reads and writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user id.
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Not before, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Audience.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
    /// Space-separated scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// What a verified token may do.
/// Both kinds carry the token's `sub`, so that a rate limit ([`crate::api::limits`]) keys on who asks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Access {
    /// A user token: reads and writes its own user only.
    User(String),
    /// A service token, with its `sub` (or no authorization configured, `--insecure-no-auth`, with an empty one):
    /// any user, the batch route.
    Service(String),
}

impl Access {
    /// Whether this access may act for `user_id`: read its counts and stream, and write its events through the
    /// gateway (a user token: itself only; a service token: anyone).
    pub fn may_act_for(&self, user_id: &str) -> bool {
        match self {
            Access::Service(_) => true,
            Access::User(sub) => sub == user_id,
        }
    }
}

/// Why a request is not authenticated (always answered 401, never with a count).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer …` header.
    #[error("a bearer token is required (Authorization: Bearer <JWT>)")]
    Missing,
    /// The token does not verify: its reason, without echoing any claim.
    #[error("the bearer token is not valid: {0}")]
    Invalid(String),
}

/// The configured keys, each with the one algorithm it verifies, and the tokens verified lately.
pub struct Verifier {
    keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
    options: AuthOptions,
    verified: Mutex<HashMap<String, Verified>>,
}

/// Most tokens remembered as verified; the memory is cleared when full (about 300 bytes a token).
const VERIFIED_CAPACITY: usize = 10_000;

/// A token that verified: what it may do and the times it is valid between (seconds since the epoch).
#[derive(Debug, Clone)]
struct Verified {
    access: Access,
    nbf: u64,
    exp: u64,
}

/// What a verified token grants, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What it may do.
    pub access: Access,
    /// The last second (since the Unix epoch) it is accepted: its `exp` plus the leeway. A stream opened or
    /// refreshed with it ends then.
    pub until: u64,
}

impl Verifier {
    /// Loads the configured keys; `None` when none is configured.
    ///
    /// Errors: a key file that cannot be read or parsed, or a JWKS key of another algorithm than RS256/ES256.
    pub fn from_options(options: &AuthOptions) -> anyhow::Result<Option<Self>> {
        let mut keys = Vec::new();
        if let Some(secret) = &options.hs256_secret {
            keys.push((None, Algorithm::HS256, DecodingKey::from_secret(secret.as_bytes())));
        }
        if let Some(path) = &options.public_key {
            let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            keys.push(pem_key(&pem).with_context(|| format!("public key {}", path.display()))?);
        }
        if let Some(path) = &options.jwks {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let set: JwkSet = serde_json::from_str(&text).with_context(|| format!("JWKS {}", path.display()))?;
            for jwk in &set.keys {
                keys.push(jwks_key(jwk).with_context(|| format!("a key of JWKS {}", path.display()))?);
            }
        }
        Ok((!keys.is_empty()).then(|| Self { keys, options: options.clone(), verified: Mutex::default() }))
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.validate_nbf = true;
        v.leeway = self.options.leeway.as_secs();
        let mut required = vec!["exp", "sub"];
        if let Some(iss) = &self.options.issuer {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        match &self.options.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            None => v.validate_aud = false,
        }
        v.set_required_spec_claims(&required);
        v
    }

    /// Verifies a bearer token and says what it may do.
    ///
    /// A token that verified before is not decoded again: its signature, issuer and audience cannot have changed
    /// (the keys are loaded once), so only its `exp` and `nbf` are checked against the clock.
    ///
    /// Errors: [`AuthError::Invalid`] for a token of no configured algorithm (`none` included) or key, a bad
    /// signature, an expired or not yet valid token, a wrong issuer or audience, a missing `sub`.
    pub fn verify(&self, token: &str) -> Result<Access, AuthError> {
        self.grant(token).map(|g| g.access)
    }

    /// [`Verifier::verify`], with the time the token stops being accepted.
    ///
    /// Errors: as [`Verifier::verify`].
    pub fn grant(&self, token: &str) -> Result<Grant, AuthError> {
        let (now, leeway) = (jsonwebtoken::get_current_timestamp(), self.options.leeway.as_secs());
        if let Some(v) = self.verified.lock().expect("not poisoned").get(token) {
            if v.nbf <= now + leeway && now <= v.exp + leeway {
                return Ok(Grant { access: v.access.clone(), until: v.exp + leeway });
            }
        }
        let claims = self.decode(token)?;
        let verified = Verified { nbf: claims.nbf.unwrap_or(0), exp: claims.exp, access: self.access(claims) };
        let mut remembered = self.verified.lock().expect("not poisoned");
        if remembered.len() >= VERIFIED_CAPACITY {
            remembered.clear();
        }
        remembered.insert(token.to_owned(), verified.clone());
        Ok(Grant { access: verified.access, until: verified.exp + leeway })
    }

    /// Decodes and fully validates a token.
    fn decode(&self, token: &str) -> Result<Claims, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        let mut last = AuthError::Invalid(format!("no key for algorithm {:?}", header.alg));
        for (kid, alg, key) in &self.keys {
            if *alg != header.alg || (kid.is_some() && header.kid.is_some() && *kid != header.kid) {
                continue;
            }
            match jsonwebtoken::decode::<Claims>(token, key, &self.validation(*alg)) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = AuthError::Invalid(e.to_string()),
            }
        }
        Err(last)
    }

    fn access(&self, claims: Claims) -> Access {
        let service = claims.scope.as_deref().is_some_and(|s| s.split(' ').any(|s| s == self.options.service_scope));
        if service {
            Access::Service(claims.sub)
        } else {
            Access::User(claims.sub)
        }
    }
}

/// A PEM public key and its algorithm: RSA → RS256, EC P-256 → ES256.
fn pem_key(pem: &[u8]) -> anyhow::Result<(Option<String>, Algorithm, DecodingKey)> {
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        return Ok((None, Algorithm::RS256, key));
    }
    let key = DecodingKey::from_ec_pem(pem).context("neither an RSA nor an EC public key in PEM")?;
    Ok((None, Algorithm::ES256, key))
}

/// A JWKS key and its algorithm (from `alg`, or from the key type).
fn jwks_key(jwk: &jsonwebtoken::jwk::Jwk) -> anyhow::Result<(Option<String>, Algorithm, DecodingKey)> {
    use jsonwebtoken::jwk::AlgorithmParameters;
    let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(a), _) => a.to_string().parse::<Algorithm>().context("key algorithm")?,
        (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
        (None, AlgorithmParameters::EllipticCurve(_)) => Algorithm::ES256,
        (None, _) => bail!("only RSA (RS256) and EC (ES256) keys are accepted"),
    };
    if !matches!(alg, Algorithm::RS256 | Algorithm::ES256) {
        bail!("algorithm {alg:?} is not accepted (RS256 or ES256)");
    }
    Ok((jwk.common.key_id.clone(), alg, DecodingKey::from_jwk(jwk).context("decoding key")?))
}

/// Mints an HS256 token for `user` valid for `ttl` (`unread token`, development and tests), with the configured
/// issuer and audience, and the service scope when `service`.
///
/// Errors: no HS256 secret configured.
pub fn mint(options: &AuthOptions, user: &str, service: bool, ttl: Duration) -> anyhow::Result<String> {
    let secret = options.hs256_secret.as_deref().context("no HS256 secret configured (--auth-hs256-secret)")?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let claims = Claims {
        sub: user.to_owned(),
        exp: now + ttl.as_secs(),
        nbf: Some(now.saturating_sub(1)),
        iss: options.issuer.clone(),
        aud: options.audience.clone(),
        scope: service.then(|| options.service_scope.clone()),
    };
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes()))
        .context("signing the token")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> AuthOptions {
        AuthOptions {
            hs256_secret: Some("s3cret".into()),
            service_scope: "unread:any".into(),
            leeway: Duration::from_secs(60),
            ..Default::default()
        }
    }

    #[test]
    fn a_grant_lasts_until_exp_plus_the_leeway() {
        let o = AuthOptions { leeway: Duration::from_secs(5), ..options() };
        let v = Verifier::from_options(&o).unwrap().unwrap();
        let token = mint(&o, "alice", false, Duration::from_secs(100)).unwrap();
        let now = jsonwebtoken::get_current_timestamp();
        for _ in 0..2 {
            // decoded, then remembered: the same answer
            let grant = v.grant(&token).unwrap();
            assert_eq!(grant.access, Access::User("alice".into()));
            assert!((now + 100 + 5..=now + 100 + 6).contains(&grant.until), "{} vs {now}", grant.until);
        }
    }

    #[test]
    fn a_remembered_token_still_expires() {
        let o = options();
        let v = Verifier::from_options(&o).unwrap().unwrap();
        let token = mint(&o, "alice", false, Duration::from_secs(3600)).unwrap();
        assert_eq!(v.verify(&token), Ok(Access::User("alice".into())));
        assert_eq!(v.verify(&token), Ok(Access::User("alice".into())), "remembered");
        let past = jsonwebtoken::get_current_timestamp() - o.leeway.as_secs() - 10;
        v.verified.lock().unwrap().get_mut(&token).unwrap().exp = past;
        let remembered = Verified { access: Access::Service("forged".into()), nbf: 0, exp: past };
        v.verified.lock().unwrap().insert("not-a-jwt".into(), remembered);
        assert!(v.verify(&token).is_ok(), "expired in memory only: decoded again, and valid");
        assert!(v.verify("not-a-jwt").is_err(), "an expired memory is not trusted");
    }

    #[test]
    fn minted_tokens_verify_as_their_user_or_as_a_service() {
        let o = options();
        let v = Verifier::from_options(&o).unwrap().unwrap();
        let user = mint(&o, "alice", false, Duration::from_secs(60)).unwrap();
        assert_eq!(v.verify(&user), Ok(Access::User("alice".into())));
        assert!(v.verify(&user).unwrap().may_act_for("alice") && !v.verify(&user).unwrap().may_act_for("bob"));
        let service = mint(&o, "svc", true, Duration::from_secs(60)).unwrap();
        assert_eq!(v.verify(&service), Ok(Access::Service("svc".into())));
        let other = AuthOptions { hs256_secret: Some("other".into()), ..o.clone() };
        assert!(matches!(
            v.verify(&mint(&other, "alice", false, Duration::from_secs(60)).unwrap()),
            Err(AuthError::Invalid(_))
        ));
        assert!(Verifier::from_options(&AuthOptions::default()).unwrap().is_none());
    }
}
