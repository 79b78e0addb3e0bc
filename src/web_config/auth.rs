//! HTTP basic authentication against bcrypt hashes (`basic_auth_users`).
//!
//! Timing: a request naming an unknown user runs one bcrypt verification
//! against a dummy hash of the highest configured cost, so it takes as long
//! as a wrong password for a real user of that cost and users cannot be
//! enumerated by timing. With mixed costs a cheaper user answers faster than
//! an unknown one: [`BasicAuth::cost_warning`] says so at load. Only
//! *successful* verifications are cached (the toolkit caches failures too):
//! a cache hit can therefore only ever speed up a right password, and every
//! failure, cached or not, pays the full bcrypt cost.
//!
//! A request is decided in two steps so the server can keep bcrypt off its
//! async workers and behind a bounded queue: [`check_cached`] (microseconds:
//! parse the header, look the success up in the cache) and, only when that
//! cannot decide, [`authorize`] (one bcrypt run).

use std::collections::{BTreeMap, HashSet};
use std::str::FromStr;
use std::sync::Mutex;

use base64::Engine as _;
use ring::hmac;

/// Successful logins remembered; beyond this the cache is emptied. A handful of
/// scrapers use a handful of credentials, so this never fills in practice.
const CACHE_CAPACITY: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthDecision {
    Allowed,
    /// Answer 401 with `WWW-Authenticate`.
    Denied,
}

/// Why a `basic_auth_users` entry was refused at load time.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("user {user:?}: {problem}")]
pub struct BadUser {
    pub user: String,
    pub problem: String,
}

pub(crate) struct BasicAuth {
    users: BTreeMap<String, String>,
    /// bcrypt cost of each user's hash.
    costs: BTreeMap<String, u32>,
    /// Same cost as the most expensive configured hash; verified against when
    /// the user is unknown.
    dummy_hash: String,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The hashes are secrets: list only the user names.
        f.debug_struct("BasicAuth")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl BasicAuth {
    /// Validates the hashes the way the toolkit's `bcrypt.Cost` check does:
    /// the structure and cost must be right; whether it matches anything is
    /// only known at the first login.
    pub(crate) fn new(users: BTreeMap<String, Option<String>>) -> Result<Self, BadUser> {
        let mut max_cost = 0;
        let mut checked = BTreeMap::new();
        let mut costs = BTreeMap::new();
        for (user, hash) in users {
            let hash = hash.unwrap_or_default();
            let cost = check_hash(&hash).map_err(|problem| BadUser {
                user: user.clone(),
                problem,
            })?;
            max_cost = max_cost.max(cost);
            costs.insert(user.clone(), cost);
            checked.insert(user, hash);
        }
        Ok(BasicAuth {
            users: checked,
            costs,
            dummy_hash: dummy_hash(max_cost),
        })
    }

    /// A warning when the users' hashes have different bcrypt costs: an
    /// unknown user is checked at the highest cost, so a wrong password for
    /// a cheaper user is answered measurably faster, which tells a prober
    /// that the user exists. Names users and costs only.
    pub(crate) fn cost_warning(&self) -> Option<String> {
        let mut by_cost: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
        for (user, cost) in &self.costs {
            by_cost.entry(*cost).or_default().push(user);
        }
        if by_cost.len() < 2 {
            return None;
        }
        let groups: Vec<String> = by_cost
            .iter()
            .map(|(cost, users)| format!("cost {cost}: {}", users.join(", ")))
            .collect();
        let max = by_cost.keys().next_back().copied().unwrap_or_default();
        Some(format!(
            "basic_auth_users: bcrypt costs differ ({}); unknown users are checked at cost {max}, \
             so a wrong password for a cheaper user is answered faster and reveals that the user \
             exists: hash every password at the same cost",
            groups.join("; ")
        ))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub(crate) fn user_names(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }
}

/// Returns the cost of a well-formed bcrypt hash. The messages describe the
/// problem without the value: a plain password written where the hash
/// belongs, or a hash cut short, must not reach the log.
fn check_hash(hash: &str) -> Result<u32, String> {
    const HOW: &str = "generate one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`";
    if hash.is_empty() {
        return Err("empty password hash (expected a bcrypt hash such as $2y$10$...)".into());
    }
    // A hash cut short (or with a stray character) is the likeliest slip:
    // say so before the structural parse, whose error is less specific.
    // "$2y$" + "NN$" + 22 salt + 31 hash characters.
    let looks_bcrypt = ["$2a$", "$2b$", "$2x$", "$2y$"]
        .iter()
        .any(|p| hash.starts_with(p));
    if looks_bcrypt && hash.len() != 60 {
        return Err(format!(
            "bcrypt hash has {} characters, expected 60 (cut short or padded?); {HOW}",
            hash.len()
        ));
    }
    // The bcrypt crate's error repeats the whole input: describe it instead.
    let parts = bcrypt::HashParts::from_str(hash).map_err(|_| {
        format!(
            "not a bcrypt hash (expected $2a$, $2b$ or $2y$, a two-digit cost and \
             53 characters of salt and hash; the value is not logged); {HOW}"
        )
    })?;
    let cost = parts.get_cost();
    if !(4..=31).contains(&cost) {
        return Err(format!("bcrypt cost {cost} outside 4..=31"));
    }
    if cost > MAX_COST {
        return Err(format!(
            "bcrypt cost {cost} is above the exporter's ceiling of {MAX_COST}: each check \
             doubles per step ({MAX_COST} takes about 2 s of a core, {cost} about {}), and one \
             request naming an unknown user pays it; hash the password again at cost 10 to \
             {MAX_COST}, e.g. `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
            check_time(cost)
        ));
    }
    if hash.len() != 60 {
        return Err(format!(
            "bcrypt hash has {} characters, expected 60 (cut short or padded?); {HOW}",
            hash.len()
        ));
    }
    Ok(cost)
}

/// The highest bcrypt cost taken. Go's `bcrypt.MaxCost` (31), which the
/// exporter-toolkit accepts, costs about 35 hours of a core per check; the
/// exporter runs one check at a time, so one request naming an unknown user
/// would pin a core that long and refuse every first login meanwhile
/// (issue 51; probe 6, D8: cost 10 took 0.061 s, 14 0.967 s). 15, about
/// 2 s, is above any cost a password tool proposes (Go's default 10,
/// `htpasswd -B` 5, OWASP's minimum 10) and bounds a check's time.
pub(crate) const MAX_COST: u32 = 15;

/// About how long one check at `cost` takes on one core, from 1 s at 14.
fn check_time(cost: u32) -> String {
    let seconds = 2f64.powi(cost as i32 - 14);
    if seconds < 3600.0 {
        format!("{} s", seconds.round())
    } else {
        format!("{} h", (seconds / 3600.0).round())
    }
}

/// A well-formed hash that no password matches; verifying against it costs
/// exactly what verifying against a real hash of `cost` costs.
fn dummy_hash(cost: u32) -> String {
    let cost = cost.clamp(4, 31);
    format!("$2y${cost:02}$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi")
}

/// Remembers (user, hash, password) triples that verified, as HMACs under a
/// per-process random key, so plaintext passwords are not kept in memory.
pub(crate) struct AuthCache {
    key: Option<hmac::Key>,
    ok: Mutex<HashSet<Vec<u8>>>,
    /// bcrypt is deliberately CPU-heavy; one at a time keeps a password
    /// guessing storm from taking every core.
    bcrypt_lock: Mutex<()>,
}

impl Default for AuthCache {
    fn default() -> Self {
        let rng = ring::rand::SystemRandom::new();
        AuthCache {
            // Without randomness there is no safe cache key: verify every time.
            key: hmac::Key::generate(hmac::HMAC_SHA256, &rng).ok(),
            ok: Mutex::new(HashSet::new()),
            bcrypt_lock: Mutex::new(()),
        }
    }
}

impl AuthCache {
    fn tag(&self, user: &str, hash: &str, password: &[u8]) -> Option<Vec<u8>> {
        let key = self.key.as_ref()?;
        let mut ctx = hmac::Context::with_key(key);
        // Length-prefix each part so that no two triples share an encoding.
        for part in [user.as_bytes(), hash.as_bytes(), password] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part);
        }
        Some(ctx.sign().as_ref().to_vec())
    }

    fn contains(&self, user: &str, hash: &str, password: &[u8]) -> bool {
        match self.tag(user, hash, password) {
            Some(tag) => self.ok.lock().map(|s| s.contains(&tag)).unwrap_or(false),
            None => false,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ok.lock().map(|s| s.len()).unwrap_or(0)
    }
}

/// What [`check_cached`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cached {
    /// Decided without bcrypt: no users, no or malformed credentials, or a
    /// success remembered from before.
    Decided(AuthDecision),
    /// Only a bcrypt run can tell: call [`authorize`].
    NeedsBcrypt,
}

/// The cheap part of a decision (a header parse and an HMAC), safe to run
/// on an async worker: never runs bcrypt.
pub(crate) fn check_cached(auth: &BasicAuth, cache: &AuthCache, header: Option<&[u8]>) -> Cached {
    if auth.is_empty() {
        return Cached::Decided(AuthDecision::Allowed);
    }
    let Some((user, password)) = header.and_then(parse_basic) else {
        return Cached::Decided(AuthDecision::Denied);
    };
    match auth.users.get(&user) {
        Some(hash) if cache.contains(&user, hash, &password) => {
            Cached::Decided(AuthDecision::Allowed)
        }
        _ => Cached::NeedsBcrypt,
    }
}

/// Decides one request. `header` is the raw `Authorization` value. May run
/// bcrypt: call it off the async workers.
pub(crate) fn authorize(
    auth: &BasicAuth,
    cache: &AuthCache,
    header: Option<&[u8]>,
) -> AuthDecision {
    if let Cached::Decided(d) = check_cached(auth, cache, header) {
        return d;
    }
    let Some((user, password)) = header.and_then(parse_basic) else {
        return AuthDecision::Denied;
    };
    let (hash, known) = match auth.users.get(&user) {
        Some(h) => (h.as_str(), true),
        None => (auth.dummy_hash.as_str(), false),
    };
    let tag = if known {
        cache.tag(&user, hash, &password)
    } else {
        None
    };
    #[cfg(test)]
    tests::VERIFIED.with(|v| v.borrow_mut().push(hash.to_string()));
    let verified = {
        let _serial = cache.bcrypt_lock.lock();
        // A malformed stored hash was refused at load; any error here is a
        // failure, never a pass.
        bcrypt::verify(&password, hash).unwrap_or(false)
    };
    if verified && known {
        if let (Some(tag), Ok(mut set)) = (tag, cache.ok.lock()) {
            if set.len() >= CACHE_CAPACITY {
                set.clear();
            }
            set.insert(tag);
        }
        AuthDecision::Allowed
    } else {
        AuthDecision::Denied
    }
}

/// The user name a `Basic` header claims, for the log of a refused login
/// (never the password); `None` when the header is not Basic auth.
pub(crate) fn claimed_user(header: &[u8]) -> Option<String> {
    parse_basic(header).map(|(user, _)| user)
}

/// Parses `Basic base64(user:password)` like Go's `Request.BasicAuth`: the
/// scheme is case-insensitive, the user ends at the first colon.
fn parse_basic(header: &[u8]) -> Option<(String, Vec<u8>)> {
    const PREFIX: &[u8] = b"basic ";
    if header.len() < PREFIX.len() || !header[..PREFIX.len()].eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&header[PREFIX.len()..])
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Every hash `authorize` ran bcrypt against, on this thread.
        pub(super) static VERIFIED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    fn verified() -> Vec<String> {
        VERIFIED.with(|v| std::mem::take(&mut *v.borrow_mut()))
    }

    #[test]
    fn unknown_users_cost_one_bcrypt_run_of_the_configured_cost() {
        // The structural half of "unknown users take as long as wrong
        // passwords": both run exactly one bcrypt verification at the same
        // cost. (The wall-clock half is measured by benches/basic_auth.rs.)
        let hash = bcrypt::hash("right", 5).unwrap();
        let auth =
            BasicAuth::new(BTreeMap::from([("alice".to_string(), Some(hash.clone()))])).unwrap();
        let cache = AuthCache::default();
        verified();
        authorize(&auth, &cache, Some(&header("alice", "wrong")));
        let wrong = verified();
        authorize(&auth, &cache, Some(&header("mallory", "wrong")));
        let unknown = verified();
        assert_eq!(wrong, vec![hash.clone()]);
        assert_eq!(unknown.len(), 1);
        let cost = |h: &str| bcrypt::HashParts::from_str(h).unwrap().get_cost();
        assert_eq!(cost(&unknown[0]), 5);
        // Repeating a failure is never served from the cache.
        authorize(&auth, &cache, Some(&header("alice", "wrong")));
        authorize(&auth, &cache, Some(&header("mallory", "wrong")));
        assert_eq!(verified().len(), 2);
        // A success is verified once, then cached.
        authorize(&auth, &cache, Some(&header("alice", "right")));
        authorize(&auth, &cache, Some(&header("alice", "right")));
        assert_eq!(verified().len(), 1);
    }

    fn header(user: &str, pass: &str) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        format!("Basic {b64}").into_bytes()
    }

    fn auth_with(user: &str, password: &str) -> BasicAuth {
        let hash = bcrypt::hash(password, 4).unwrap();
        BasicAuth::new(BTreeMap::from([(user.to_string(), Some(hash))])).unwrap()
    }

    #[test]
    fn right_wrong_missing_and_unknown() {
        let auth = auth_with("alice", "s3cret");
        let cache = AuthCache::default();
        let h = |u: &str, p: &str| authorize(&auth, &cache, Some(&header(u, p)));
        assert_eq!(h("alice", "s3cret"), AuthDecision::Allowed);
        assert_eq!(h("alice", "wrong"), AuthDecision::Denied);
        assert_eq!(h("bob", "s3cret"), AuthDecision::Denied);
        assert_eq!(h("", ""), AuthDecision::Denied);
        assert_eq!(authorize(&auth, &cache, None), AuthDecision::Denied);
        assert_eq!(
            authorize(&auth, &cache, Some(b"Bearer abc")),
            AuthDecision::Denied
        );
        assert_eq!(
            authorize(&auth, &cache, Some(b"Basic !!!")),
            AuthDecision::Denied
        );
        assert_eq!(
            authorize(&auth, &cache, Some(b"Basic")),
            AuthDecision::Denied
        );
        // No colon in the decoded credentials.
        assert_eq!(
            authorize(&auth, &cache, Some(b"Basic YWxpY2U=")),
            AuthDecision::Denied
        );
        // Scheme is case-insensitive.
        let mut lower = header("alice", "s3cret");
        lower[..5].copy_from_slice(b"bAsIc");
        assert_eq!(
            authorize(&auth, &cache, Some(&lower)),
            AuthDecision::Allowed
        );
    }

    #[test]
    fn password_may_contain_colons() {
        let auth = auth_with("u", "a:b:c");
        let cache = AuthCache::default();
        assert_eq!(
            authorize(&auth, &cache, Some(&header("u", "a:b:c"))),
            AuthDecision::Allowed
        );
    }

    #[test]
    fn no_users_means_open() {
        let auth = BasicAuth::new(BTreeMap::new()).unwrap();
        assert_eq!(
            authorize(&auth, &AuthCache::default(), None),
            AuthDecision::Allowed
        );
    }

    #[test]
    fn only_successes_are_cached() {
        let auth = auth_with("alice", "s3cret");
        let cache = AuthCache::default();
        for _ in 0..3 {
            authorize(&auth, &cache, Some(&header("alice", "wrong")));
            authorize(&auth, &cache, Some(&header("mallory", "x")));
        }
        assert_eq!(cache.len(), 0);
        authorize(&auth, &cache, Some(&header("alice", "s3cret")));
        authorize(&auth, &cache, Some(&header("alice", "s3cret")));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn cache_is_keyed_by_stored_hash() {
        // Same user and password, different stored hash (the operator changed
        // the password file): the old cache entry must not apply.
        let cache = AuthCache::default();
        let a = auth_with("alice", "old");
        assert_eq!(
            authorize(&a, &cache, Some(&header("alice", "old"))),
            AuthDecision::Allowed
        );
        let b = auth_with("alice", "new");
        assert_eq!(
            authorize(&b, &cache, Some(&header("alice", "old"))),
            AuthDecision::Denied
        );
    }

    #[test]
    fn dummy_hash_matches_the_configured_cost() {
        let hash12 = "$2y$12$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";
        let auth = BasicAuth::new(BTreeMap::from([
            ("a".to_string(), Some(bcrypt::hash("x", 4).unwrap())),
            ("b".to_string(), Some(hash12.to_string())),
        ]))
        .unwrap();
        let parts = bcrypt::HashParts::from_str(&auth.dummy_hash).unwrap();
        assert_eq!(parts.get_cost(), 12);
        assert_eq!(check_hash(&auth.dummy_hash), Ok(12));
        // The dummy is a real, verifiable hash: verification runs the full cost.
        assert_eq!(bcrypt::verify("anything", &dummy_hash(4)).ok(), Some(false));
    }

    #[test]
    fn bad_hashes_are_refused() {
        for bad in [
            "",
            "plaintext",
            "$2y$10$short",
            "$2y$99$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi",
            "$1$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi",
        ] {
            let err = BasicAuth::new(BTreeMap::from([("u".to_string(), Some(bad.to_string()))]))
                .unwrap_err();
            assert_eq!(err.user, "u");
        }
        let err = BasicAuth::new(BTreeMap::from([("u".to_string(), None)])).unwrap_err();
        assert!(err.problem.contains("empty"), "{err}");
    }

    #[test]
    fn refusals_name_the_user_and_the_problem_never_the_value() {
        let good = bcrypt::hash("x", 4).unwrap();
        for (bad, problem) in [
            ("hunter2plaintext".to_string(), "not a bcrypt hash"),
            // One character short, and one too many: both pass the prefix
            // parse of some bcrypt versions.
            (good[..59].to_string(), "59 characters"),
            (format!("{good}Z"), "61 characters"),
            (good.replacen("$04$", "$99$", 1), "cost 99"),
            (good.replacen("$2b$", "$1$", 1), "not a bcrypt hash"),
        ] {
            let err = BasicAuth::new(BTreeMap::from([("alice".to_string(), Some(bad.clone()))]))
                .unwrap_err();
            let shown = err.to_string();
            assert!(shown.contains("\"alice\""), "{shown}");
            assert!(shown.contains(problem), "{shown}");
            // Neither the value nor any 8-character piece of it.
            for piece in bad.as_bytes().windows(8) {
                let piece = std::str::from_utf8(piece).unwrap();
                assert!(
                    !shown.contains(piece),
                    "{shown:?} shows {piece:?} of the value"
                );
            }
        }
    }

    #[test]
    fn check_cached_never_runs_bcrypt() {
        let auth = auth_with("alice", "s3cret");
        let cache = AuthCache::default();
        verified();
        let c = |h: Option<&[u8]>| check_cached(&auth, &cache, h);
        assert_eq!(
            c(Some(&header("alice", "s3cret"))),
            Cached::NeedsBcrypt,
            "not cached yet"
        );
        assert_eq!(c(Some(&header("mallory", "x"))), Cached::NeedsBcrypt);
        assert_eq!(c(None), Cached::Decided(AuthDecision::Denied));
        assert_eq!(c(Some(b"Bearer x")), Cached::Decided(AuthDecision::Denied));
        assert!(verified().is_empty());
        assert_eq!(
            authorize(&auth, &cache, Some(&header("alice", "s3cret"))),
            AuthDecision::Allowed
        );
        assert_eq!(verified().len(), 1);
        assert_eq!(
            c(Some(&header("alice", "s3cret"))),
            Cached::Decided(AuthDecision::Allowed)
        );
        assert_eq!(c(Some(&header("alice", "wrong"))), Cached::NeedsBcrypt);
        assert!(verified().is_empty());
        assert_eq!(
            check_cached(&BasicAuth::new(BTreeMap::new()).unwrap(), &cache, None),
            Cached::Decided(AuthDecision::Allowed)
        );
    }

    /// Issue 51 (probe 6, D8): a cost of 31 was taken, and one request
    /// naming an unknown user then pinned a core for about 35 hours.
    #[test]
    fn costs_above_the_ceiling_are_refused_naming_user_and_cost() {
        let at = |cost: u32| {
            format!("$2y${cost:02}$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi")
        };
        assert_eq!(check_hash(&at(MAX_COST)), Ok(MAX_COST));
        for cost in [MAX_COST + 1, 31] {
            let err =
                BasicAuth::new(BTreeMap::from([("prom".to_string(), Some(at(cost)))])).unwrap_err();
            assert_eq!(err.user, "prom");
            let text = err.to_string();
            assert!(
                text.contains(&format!(
                    "bcrypt cost {cost} is above the exporter's ceiling of 15"
                )),
                "{text}"
            );
            assert!(!text.contains("QOauhQNb"), "the hash is not logged: {text}");
        }
        assert!(check_hash(&at(31)).unwrap_err().contains("about 36 h"));
    }

    #[test]
    fn mixed_costs_are_warned_about_by_user_and_cost_only() {
        let h4 = bcrypt::hash("a", 4).unwrap();
        let h5 = bcrypt::hash("b", 5).unwrap();
        let same = BasicAuth::new(BTreeMap::from([
            ("a".to_string(), Some(h4.clone())),
            ("b".to_string(), Some(bcrypt::hash("c", 4).unwrap())),
        ]))
        .unwrap();
        assert_eq!(same.cost_warning(), None);
        let mixed = BasicAuth::new(BTreeMap::from([
            ("alice".to_string(), Some(h4.clone())),
            ("prom".to_string(), Some(h5.clone())),
        ]))
        .unwrap();
        let w = mixed.cost_warning().expect("costs differ");
        assert!(
            w.contains("cost 4: alice") && w.contains("cost 5: prom"),
            "{w}"
        );
        assert!(!w.contains(&h4[7..]) && !w.contains(&h5[7..]), "{w}");
    }
}
