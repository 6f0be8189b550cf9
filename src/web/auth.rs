//! Who may use the web page and its API: on loopback, anyone on the computer (as the live
//! socket); bound beyond loopback, only who knows the password of `--http-password-file`,
//! by a session cookie after the login form or by HTTP Basic (for scripts). Every action (a
//! POST) also carries the CSRF token `GET /api/session` hands out, so that another site open
//! in the operator's browser cannot make it act.
//!
//! Plain state: requests' headers in, a verdict out; the server applies it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const COOKIE: &str = "ulog_recv_session";
/// The header an action carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A login lasts this long without use.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// Logins kept at most (the oldest go first).
const MAX_SESSIONS: usize = 64;

/// A random token: 32 bytes from the kernel, as 64 hex digits.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            // getrandom(2) fails only on a kernel before 3.17, which this daemon does not run on.
            Err(e) => panic!("the kernel's random numbers are not available: {e}"),
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a request showed of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may go on.
    Allowed,
    /// It has no valid credentials: 401.
    Unauthorised,
}

/// See the module docs.
pub struct Access {
    /// The password's SHA-256; none: open to anyone who reaches the address (loopback).
    password: Option<[u8; 32]>,
    csrf: String,
    sessions: Mutex<HashMap<String, Instant>>,
}

impl Access {
    /// Open to anyone (a loopback address).
    pub fn open() -> Self {
        Self::with(None)
    }

    /// Only who knows `password` (the password file's text, its end of line cut).
    pub fn with_password(password: &str) -> Self {
        Self::with(Some(digest(password.as_bytes())))
    }

    fn with(password: Option<[u8; 32]>) -> Self {
        Self {
            password,
            csrf: random_token(),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a password is asked for.
    pub fn needs_login(&self) -> bool {
        self.password.is_some()
    }

    /// The CSRF token every action carries.
    pub fn csrf_token(&self) -> &str {
        &self.csrf
    }

    /// A request's verdict, from its `Authorization` and `Cookie` headers, at `now`.
    pub fn check(
        &self,
        authorization: Option<&str>,
        cookie: Option<&str>,
        now: Instant,
    ) -> Verdict {
        if self.password.is_none() {
            return Verdict::Allowed;
        }
        if let Some(given) = authorization.and_then(basic_password)
            && self.is_password(&given)
        {
            return Verdict::Allowed;
        }
        if let Some(token) = cookie.and_then(session_cookie) {
            let mut sessions = self.sessions.lock().expect("sessions lock");
            if let Some(used) = sessions.get_mut(token)
                && now.saturating_duration_since(*used) < SESSION_IDLE
            {
                *used = now;
                return Verdict::Allowed;
            }
        }
        Verdict::Unauthorised
    }

    /// Whether `given` is the password.
    pub fn is_password(&self, given: &str) -> bool {
        // Digests compared: the time taken tells nothing of the password.
        self.password.is_some_and(|p| digest(given.as_bytes()) == p)
    }

    /// A login with `given` at `now`: the new session's token, or none for a wrong password.
    pub fn login(&self, given: &str, now: Instant) -> Option<String> {
        if !self.is_password(given) {
            return None;
        }
        let token = random_token();
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions.retain(|_, used| now.saturating_duration_since(*used) < SESSION_IDLE);
        while sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(t, _)| t.clone());
            match oldest {
                Some(t) => sessions.remove(&t),
                None => break,
            };
        }
        sessions.insert(token.clone(), now);
        Some(token)
    }

    /// Ends the session of `cookie`'s token.
    pub fn logout(&self, cookie: Option<&str>) {
        if let Some(token) = cookie.and_then(session_cookie) {
            self.sessions.lock().expect("sessions lock").remove(token);
        }
    }

    /// Whether an action's CSRF header is the token.
    pub fn csrf_ok(&self, header: Option<&str>) -> bool {
        header.is_some_and(|h| digest(h.as_bytes()) == digest(self.csrf.as_bytes()))
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The password of an `Authorization: Basic` header (the user name is not asked for).
fn basic_password(header: &str) -> Option<String> {
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_owned())
}

/// The session token in a `Cookie` header.
fn session_cookie(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user_password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    #[test]
    fn open_access_lets_every_request_in_and_still_asks_actions_for_the_token() {
        let access = Access::open();
        let now = Instant::now();
        assert_eq!(access.check(None, None, now), Verdict::Allowed);
        assert!(!access.csrf_ok(None));
        assert!(!access.csrf_ok(Some("guess")));
        assert!(access.csrf_ok(Some(access.csrf_token())));
    }

    #[test]
    fn with_a_password_only_basic_or_a_login_cookie_gets_in() {
        let access = Access::with_password("correct horse");
        let now = Instant::now();
        assert_eq!(access.check(None, None, now), Verdict::Unauthorised);
        let right = basic("anyone:correct horse");
        let wrong = basic("anyone:battery staple");
        assert_eq!(access.check(Some(&right), None, now), Verdict::Allowed);
        assert_eq!(access.check(Some(&wrong), None, now), Verdict::Unauthorised);
        assert_eq!(
            access.check(Some("Bearer x"), None, now),
            Verdict::Unauthorised
        );
        assert!(access.login("wrong", now).is_none());
        let token = access.login("correct horse", now).expect("logged in");
        let cookie = format!("theme=dark; {COOKIE}={token}");
        assert_eq!(access.check(None, Some(&cookie), now), Verdict::Allowed);
        let forged = format!("{COOKIE}={}", random_token());
        assert_eq!(
            access.check(None, Some(&forged), now),
            Verdict::Unauthorised
        );
        // Idle too long, then logged out.
        let later = now + SESSION_IDLE;
        assert_eq!(
            access.check(None, Some(&cookie), later),
            Verdict::Unauthorised
        );
        let token = access.login("correct horse", now).expect("logged in");
        let cookie = format!("{COOKIE}={token}");
        access.logout(Some(&cookie));
        assert_eq!(
            access.check(None, Some(&cookie), now),
            Verdict::Unauthorised
        );
    }

    #[test]
    fn logins_are_bounded_and_the_oldest_go_first() {
        let access = Access::with_password("pw");
        let start = Instant::now();
        let first = access.login("pw", start).expect("login");
        for k in 1..=MAX_SESSIONS as u64 {
            access
                .login("pw", start + Duration::from_secs(k))
                .expect("login");
        }
        let cookie = format!("{COOKIE}={first}");
        let now = start + Duration::from_secs(MAX_SESSIONS as u64 + 1);
        assert_eq!(
            access.check(None, Some(&cookie), now),
            Verdict::Unauthorised
        );
        assert_eq!(access.sessions.lock().unwrap().len(), MAX_SESSIONS);
    }
}
