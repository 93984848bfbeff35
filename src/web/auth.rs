//! `basic_auth_users`: HTTP basic auth against bcrypt hashes, as exporter-toolkit checks it, in
//! a time that does not tell whether the user exists, and with bcrypt's CPU bounded: a flood
//! of bad attempts is refused fast once the slots are taken, never queued.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, OnceLock};

use axum::http::HeaderValue;
use base64::Engine;
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

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

/// Hashes of a constant password, one per bcrypt cost, made once per process: checked against
/// when the user is unknown, at the cost of the configured users, so that a wrong name costs
/// as much as a wrong password (no user enumeration by timing).
fn dummy_hash(cost: u32) -> BcryptHash {
    static HASHES: [OnceLock<String>; 32] = [const { OnceLock::new() }; 32];
    let cost = cost.clamp(4, 31);
    BcryptHash(
        HASHES[cost as usize]
            .get_or_init(|| bcrypt::hash("not a password", cost).expect("bcrypt of a constant"))
            .clone(),
    )
}

/// The hash an unknown user is checked against: of the highest cost among `users` (with mixed
/// costs no single cost matches every user; the highest keeps a wrong name from ever being the
/// cheap answer). Made at config load: tens of milliseconds per cost, once per process.
/// `None` without users.
pub(crate) fn unknown_user_hash(users: &BTreeMap<String, BcryptHash>) -> Option<BcryptHash> {
    users
        .values()
        .filter_map(|h| h.0.parse::<bcrypt::HashParts>().ok())
        .map(|parts| parts.get_cost())
        .max()
        .map(dummy_hash)
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

/// What a request's credentials earn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// Every bcrypt slot (or this client's share) is taken: refused unverified, at once.
    Busy,
}

pub(crate) struct Authenticator {
    /// SHA-256 of (user, password, stored hash) of checks that passed: a changed hash or
    /// password misses, and no password is kept in memory. A hit needs no bcrypt and no slot,
    /// so a scraper verified once goes through any flood of bad attempts.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// bcrypt verifications running at once: one per core, so that a flood of bad logins can
    /// take the cores' time but never queue without bound.
    slots: Arc<Semaphore>,
    /// Slots one client address may hold: half of them, so that a single flooding host leaves
    /// room for a legitimate scraper's first verification.
    per_peer_limit: usize,
    per_peer: PeerCounts,
}

/// Slots held per client address; addresses holding none are removed.
type PeerCounts = Arc<Mutex<HashMap<IpAddr, usize>>>;

impl Default for Authenticator {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Authenticator::new(cores)
    }
}

impl Authenticator {
    /// `slots`: bcrypt verifications at once.
    pub fn new(slots: usize) -> Authenticator {
        let slots = slots.max(1);
        Authenticator {
            verified: Mutex::default(),
            slots: Arc::new(Semaphore::new(slots)),
            per_peer_limit: (slots / 2).max(1),
            per_peer: Arc::default(),
        }
    }

    /// Whether an `Authorization` header carries the credentials of one of `users`; an
    /// unknown user is checked against `unknown_user` (see [`unknown_user_hash`]). `peer`: the
    /// client's address, for its share of the slots.
    pub async fn check(
        &self,
        users: &BTreeMap<String, BcryptHash>,
        unknown_user: &BcryptHash,
        header: Option<&HeaderValue>,
        peer: Option<IpAddr>,
    ) -> Verdict {
        let Some((user, password)) = header.and_then(parse_basic) else {
            return Verdict::Denied;
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
        let hash = found.unwrap_or(unknown_user).0.clone();
        let key = sha256(&[user.as_bytes(), password.as_bytes(), hash.as_bytes()]);
        if known && self.lock().contains(&key) {
            return Verdict::Allowed;
        }
        let Some(peer_slot) = self.take_peer_slot(peer) else {
            return Verdict::Busy;
        };
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Verdict::Busy;
        };
        // bcrypt takes tens of milliseconds on purpose: off the async workers.
        let ok = tokio::task::spawn_blocking(move || {
            let _slots = (slot, peer_slot);
            bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if !(ok && known) {
            return Verdict::Denied;
        }
        let mut verified = self.lock();
        if verified.len() >= CACHE_CAPACITY {
            verified.clear();
        }
        verified.insert(key);
        Verdict::Allowed
    }

    fn take_peer_slot(&self, peer: Option<IpAddr>) -> Option<PeerSlot> {
        let Some(peer) = peer.map(client_key) else {
            return Some(PeerSlot(None));
        };
        let mut per_peer = self.per_peer.lock().unwrap_or_else(|e| e.into_inner());
        let held = per_peer.entry(peer).or_default();
        if *held >= self.per_peer_limit {
            return None;
        }
        *held += 1;
        Some(PeerSlot(Some((self.per_peer.clone(), peer))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a client's share is counted by: its IPv4 address (also when it arrives IPv4-mapped on
/// a dual-stack socket), or its IPv6 /64, since one host commonly holds a whole /64.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::MAX >> 64))),
        v4 => v4,
    }
}

/// One of a client address's slots, given back when dropped.
struct PeerSlot(Option<(PeerCounts, IpAddr)>);

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some((per_peer, peer)) = &self.0 else {
            return;
        };
        let mut per_peer = per_peer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = per_peer.get_mut(peer) {
            *held -= 1;
            if *held == 0 {
                per_peer.remove(peer);
            }
        }
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

    fn users(cost: u32) -> BTreeMap<String, BcryptHash> {
        BTreeMap::from([(
            "alice".to_string(),
            BcryptHash(bcrypt::hash("pw", cost).unwrap()),
        )])
    }

    #[tokio::test]
    async fn checks_and_caches() {
        let users = users(4);
        let unknown = unknown_user_hash(&users).unwrap();
        let auth = Authenticator::new(2);
        let check = |user: &str, pw: &str| {
            let header = header(user, pw);
            let (auth, users, unknown) = (&auth, &users, &unknown);
            async move { auth.check(users, unknown, Some(&header), None).await }
        };
        assert_eq!(check("alice", "pw").await, Verdict::Allowed);
        assert_eq!(auth.lock().len(), 1);
        assert_eq!(check("alice", "pw").await, Verdict::Allowed);
        assert_eq!(check("alice", "wrong").await, Verdict::Denied);
        assert_eq!(check("bob", "pw").await, Verdict::Denied);
        assert_eq!(
            auth.check(&users, &unknown, None, None).await,
            Verdict::Denied
        );
        assert_eq!(auth.lock().len(), 1);
        assert_eq!(format!("{:?}", users["alice"]), "BcryptHash(<hidden>)");
    }

    #[test]
    fn an_unknown_user_costs_what_the_configured_users_cost() {
        for cost in [4, 5, 11] {
            let hash = unknown_user_hash(&users(cost)).unwrap();
            let parts: bcrypt::HashParts = hash.0.parse().unwrap();
            assert_eq!(parts.get_cost(), cost);
        }
        // Mixed costs: the highest.
        let mut mixed = users(4);
        mixed.insert("bob".into(), BcryptHash(bcrypt::hash("pw", 6).unwrap()));
        let parts: bcrypt::HashParts = unknown_user_hash(&mixed).unwrap().0.parse().unwrap();
        assert_eq!(parts.get_cost(), 6);
        assert!(unknown_user_hash(&BTreeMap::new()).is_none());
    }

    #[test]
    fn clients_are_counted_by_ipv4_address_or_ipv6_64() {
        let key = |text: &str| client_key(text.parse().unwrap()).to_string();
        assert_eq!(key("192.0.2.7"), "192.0.2.7");
        assert_eq!(key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn when_the_slots_are_taken_attempts_are_refused_but_a_verified_scraper_passes() {
        let users = users(8);
        let unknown = unknown_user_hash(&users).unwrap();
        let auth = Arc::new(Authenticator::new(2));
        let attacker: IpAddr = "192.0.2.1".parse().unwrap();
        let scraper: IpAddr = "192.0.2.2".parse().unwrap();
        let good = header("alice", "pw");
        assert_eq!(
            auth.check(&users, &unknown, Some(&good), Some(scraper))
                .await,
            Verdict::Allowed
        );
        // One address holds at most half the slots: the second attempt is refused unverified.
        let (users2, unknown2, auth2) = (users.clone(), unknown.clone(), auth.clone());
        let first = tokio::spawn(async move {
            let bad = header("alice", "bad");
            auth2
                .check(&users2, &unknown2, Some(&bad), Some(attacker))
                .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let bad = header("alice", "bad2");
        assert_eq!(
            auth.check(&users, &unknown, Some(&bad), Some(attacker))
                .await,
            Verdict::Busy
        );
        // A verified scraper needs no slot; another address still gets the other one.
        assert_eq!(
            auth.check(&users, &unknown, Some(&good), Some(scraper))
                .await,
            Verdict::Allowed
        );
        let other = header("alice", "pw-other");
        assert_eq!(
            auth.check(&users, &unknown, Some(&other), Some(scraper))
                .await,
            Verdict::Denied
        );
        assert_eq!(first.await.unwrap(), Verdict::Denied);
        assert!(auth.per_peer.lock().unwrap().is_empty(), "slots given back");
    }
}
