//! Who may use the web page and its API: on loopback, anyone on the computer (as the live
//! socket); bound beyond loopback, only who knows the password of `--http-password-file`,
//! by a session cookie after the login form or by HTTP Basic (for scripts). Every action (a
//! POST) also carries the CSRF token `GET /api/session` hands out, so that another site open
//! in the operator's browser cannot make it act.
//!
//! Wrong passwords, by either way, are throttled per address and in all
//! ([`crate::web::throttle`]).
//!
//! Plain state: requests' headers and address in, a verdict out; the server applies it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::web::throttle::{Gate, Throttle};

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
    /// Its address guessed wrong too often: its password was not checked; 429, try again
    /// after this.
    Throttled(Duration),
}

/// What a login with the form came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// The new session's token.
    In(String),
    Wrong,
    /// Not checked: see [`Verdict::Throttled`].
    Throttled(Duration),
}

/// See the module docs.
pub struct Access {
    /// The password's SHA-256; none: open to anyone who reaches the address (loopback).
    password: Option<[u8; 32]>,
    csrf: String,
    sessions: Mutex<HashMap<String, Instant>>,
    throttle: Mutex<Throttle>,
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
            throttle: Mutex::new(Throttle::new(Instant::now())),
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

    /// A request's verdict, from its `Authorization` and `Cookie` headers and the address
    /// it came from, at `now`.
    pub fn check(
        &self,
        authorization: Option<&str>,
        cookie: Option<&str>,
        client: IpAddr,
        now: Instant,
    ) -> Verdict {
        if self.password.is_none() {
            return Verdict::Allowed;
        }
        if let Some(given) = authorization.and_then(basic_password) {
            match self.try_password(&given, client, now) {
                Ok(true) => return Verdict::Allowed,
                Ok(false) => {}
                Err(retry_after) => return Verdict::Throttled(retry_after),
            }
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

    /// `given` tried as the password by `client` at `now`, through the throttle: whether it
    /// is right, or how long until the address may try again.
    fn try_password(&self, given: &str, client: IpAddr, now: Instant) -> Result<bool, Duration> {
        let mut throttle = self.throttle.lock().expect("throttle lock");
        if let Some(r) = throttle.report(now) {
            tracing::warn!(
                wrong = r.wrong,
                refused_unchecked = r.refused,
                addresses = r.addresses,
                "wrong passwords for the web page in the last minute"
            );
        }
        match throttle.before(client, now) {
            Gate::Refuse { retry_after } => Err(retry_after),
            Gate::Check(ticket) => {
                let right = self.is_password(given);
                throttle.outcome(client, ticket, right, now);
                Ok(right)
            }
        }
    }

    /// A login with `given` from `client` at `now`.
    pub fn login(&self, given: &str, client: IpAddr, now: Instant) -> Login {
        match self.try_password(given, client, now) {
            Ok(true) => {}
            Ok(false) => return Login::Wrong,
            Err(retry_after) => return Login::Throttled(retry_after),
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
        Login::In(token)
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

    fn me() -> IpAddr {
        "192.0.2.1".parse().unwrap()
    }

    fn logged_in(login: Login) -> String {
        match login {
            Login::In(token) => token,
            other => panic!("not logged in: {other:?}"),
        }
    }

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
        assert_eq!(access.check(None, None, me(), now), Verdict::Allowed);
        assert!(!access.csrf_ok(None));
        assert!(!access.csrf_ok(Some("guess")));
        assert!(access.csrf_ok(Some(access.csrf_token())));
    }

    #[test]
    fn with_a_password_only_basic_or_a_login_cookie_gets_in() {
        let access = Access::with_password("correct horse");
        let now = Instant::now();
        assert_eq!(access.check(None, None, me(), now), Verdict::Unauthorised);
        let right = basic("anyone:correct horse");
        let wrong = basic("anyone:battery staple");
        assert_eq!(
            access.check(Some(&right), None, me(), now),
            Verdict::Allowed
        );
        assert_eq!(
            access.check(Some(&wrong), None, me(), now),
            Verdict::Unauthorised
        );
        assert_eq!(
            access.check(Some("Bearer x"), None, me(), now),
            Verdict::Unauthorised
        );
        assert_eq!(access.login("wrong", me(), now), Login::Wrong);
        let token = logged_in(access.login("correct horse", me(), now));
        let cookie = format!("theme=dark; {COOKIE}={token}");
        assert_eq!(
            access.check(None, Some(&cookie), me(), now),
            Verdict::Allowed
        );
        let forged = format!("{COOKIE}={}", random_token());
        assert_eq!(
            access.check(None, Some(&forged), me(), now),
            Verdict::Unauthorised
        );
        // Idle too long, then logged out.
        let later = now + SESSION_IDLE;
        assert_eq!(
            access.check(None, Some(&cookie), me(), later),
            Verdict::Unauthorised
        );
        let token = logged_in(access.login("correct horse", me(), now));
        let cookie = format!("{COOKIE}={token}");
        access.logout(Some(&cookie));
        assert_eq!(
            access.check(None, Some(&cookie), me(), now),
            Verdict::Unauthorised
        );
    }

    #[test]
    fn logins_are_bounded_and_the_oldest_go_first() {
        let access = Access::with_password("pw");
        let start = Instant::now();
        let first = logged_in(access.login("pw", me(), start));
        for k in 1..=MAX_SESSIONS as u64 {
            logged_in(access.login("pw", me(), start + Duration::from_secs(k)));
        }
        let cookie = format!("{COOKIE}={first}");
        let now = start + Duration::from_secs(MAX_SESSIONS as u64 + 1);
        assert_eq!(
            access.check(None, Some(&cookie), me(), now),
            Verdict::Unauthorised
        );
        assert_eq!(access.sessions.lock().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn wrong_passwords_by_basic_and_by_the_form_share_one_throttle() {
        let access = Access::with_password("correct horse");
        let now = Instant::now();
        let wrong = basic("anyone:battery staple");
        let mut answers = Vec::new();
        for k in 0..8 {
            answers.push(if k % 2 == 0 {
                access.check(Some(&wrong), None, me(), now)
            } else {
                match access.login("staple", me(), now) {
                    Login::Wrong => Verdict::Unauthorised,
                    Login::Throttled(d) => Verdict::Throttled(d),
                    Login::In(_) => Verdict::Allowed,
                }
            });
        }
        let checked = answers
            .iter()
            .filter(|v| **v == Verdict::Unauthorised)
            .count();
        assert_eq!(
            checked,
            crate::web::throttle::CLIENT_BURST as usize,
            "{answers:?}"
        );
        // Held back, even with the right password: the answer tells nothing of it.
        let right = basic("anyone:correct horse");
        assert!(matches!(
            access.check(Some(&right), None, me(), now),
            Verdict::Throttled(_)
        ));
        // Another address gets in at once.
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(
            access.check(Some(&right), None, other, now),
            Verdict::Allowed
        );
    }
}
