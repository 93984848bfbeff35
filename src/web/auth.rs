//! `basic_auth_users`: HTTP basic auth against bcrypt hashes, as exporter-toolkit checks it.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use axum::http::HeaderValue;
use base64::Engine;
use serde::Deserialize;
use subtle::ConstantTimeEq;

/// Successful checks remembered; past this the cache starts over (scrapers are few).
const CACHE_CAPACITY: usize = 1024;

/// A bcrypt hash from the file; never shown (Debug included).
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct BcryptHash(String);

impl std::fmt::Debug for BcryptHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BcryptHash(<hidden>)")
    }
}

impl BcryptHash {
    /// Whether it parses as a bcrypt hash; the error never quotes it.
    pub fn check(&self) -> Result<(), &'static str> {
        self.0
            .parse::<bcrypt::HashParts>()
            .map(|_| ())
            .map_err(|_| "not a bcrypt hash ($2y$..., from `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)")
    }
}

/// Checked against when the user is unknown, so a wrong name costs as much as a wrong
/// password (no user enumeration by timing).
fn dummy_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("not a password", 10).expect("bcrypt of a constant"))
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        context.update(&(part.len() as u64).to_le_bytes());
        context.update(part);
    }
    context
        .finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

#[derive(Default)]
pub struct Authenticator {
    /// SHA-256 of (user, password, stored hash) of checks that passed: a changed hash or
    /// password misses, and no password is kept in memory.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// One bcrypt at a time, so a flood of bad logins costs one core, not all.
    bcrypt: Arc<tokio::sync::Mutex<()>>,
}

impl Authenticator {
    /// Whether an `Authorization` header carries the credentials of one of `users`.
    pub async fn check(
        &self,
        users: &BTreeMap<String, BcryptHash>,
        header: Option<&HeaderValue>,
    ) -> bool {
        let Some((user, password)) = header.and_then(parse_basic) else {
            return false;
        };
        // Compare every name in constant time (on digests, equal in length).
        let wanted = sha256(&[user.as_bytes()]);
        let mut found: Option<&BcryptHash> = None;
        for (name, hash) in users {
            if bool::from(sha256(&[name.as_bytes()]).ct_eq(&wanted)) {
                found = Some(hash);
            }
        }
        let known = found.is_some();
        let hash = found.map_or_else(|| dummy_hash().to_string(), |h| h.0.clone());
        let key = sha256(&[user.as_bytes(), password.as_bytes(), hash.as_bytes()]);
        if known && self.lock().contains(&key) {
            return true;
        }
        let guard = self.bcrypt.clone().lock_owned().await;
        // bcrypt takes tens of milliseconds on purpose: off the async workers.
        let ok = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if ok && known {
            let mut verified = self.lock();
            if verified.len() >= CACHE_CAPACITY {
                verified.clear();
            }
            verified.insert(key);
            return true;
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `Basic base64(user:password)` into its parts.
fn parse_basic(header: &HeaderValue) -> Option<(String, String)> {
    let text = header.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    #[tokio::test]
    async fn checks_and_caches() {
        let users = BTreeMap::from([(
            "alice".to_string(),
            BcryptHash(bcrypt::hash("pw", 4).unwrap()),
        )]);
        let auth = Authenticator::default();
        assert!(auth.check(&users, Some(&header("alice", "pw"))).await);
        assert_eq!(auth.lock().len(), 1);
        assert!(auth.check(&users, Some(&header("alice", "pw"))).await);
        assert!(!auth.check(&users, Some(&header("alice", "wrong"))).await);
        assert!(!auth.check(&users, Some(&header("bob", "pw"))).await);
        assert!(!auth.check(&users, None).await);
        assert_eq!(auth.lock().len(), 1);
        assert_eq!(format!("{:?}", users["alice"]), "BcryptHash(<hidden>)");
    }
}
