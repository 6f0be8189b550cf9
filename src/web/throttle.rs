//! Wrong passwords, throttled (plain state: a client's address and `now` in, a verdict out).
//! Beyond loopback the page asks for a password, by its login form or by HTTP Basic; without
//! a limit, an attacker on the companion's network could try thousands a second.
//!
//! Each password tried costs a token before it is checked, and a right one gives it back, so
//! only wrong ones are ever paid for:
//! - every client address has [`CLIENT_BURST`] tokens, one more every [`REFILL_EVERY`];
//! - the addresses that guessed wrong within [`SUSPECT_FOR`] also share [`GLOBAL_BURST`]
//!   tokens, one more every [`REFILL_EVERY`], so that many addresses together go no faster.
//!
//! A password tried without a token is not checked at all: the answer (429, with when to try
//! again) says nothing of it. An address that never guessed wrong is not held back by the
//! others' guesses, so the operator with the right password gets in at once during an attack
//! from elsewhere; the price is that each address's first wrong password in
//! [`SUSPECT_FOR`] is always checked. At one guess every 10 s, a list of ten million common
//! passwords takes over three years; each further address adds a guess an hour.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Wrong passwords an address may try at once.
pub const CLIENT_BURST: f64 = 5.0;
/// Wrong passwords all suspect addresses together may try at once.
pub const GLOBAL_BURST: f64 = 10.0;
/// A token comes back this often, to each address and to the shared budget.
pub const REFILL_EVERY: Duration = Duration::from_secs(10);
/// An address that guessed wrong is a suspect this long.
pub const SUSPECT_FOR: Duration = Duration::from_secs(3600);
/// Addresses remembered at most; past it, an address not seen is taken as a suspect.
const MAX_CLIENTS: usize = 4096;
/// How often the log sums the wrong passwords up.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);

/// A budget of tokens that refills at one per [`REFILL_EVERY`].
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    at: Instant,
}

impl Bucket {
    fn full(capacity: f64, now: Instant) -> Self {
        Self {
            tokens: capacity,
            capacity,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let gained =
            now.saturating_duration_since(self.at).as_secs_f64() / REFILL_EVERY.as_secs_f64();
        self.tokens = (self.tokens + gained).min(self.capacity);
        self.at = now;
    }

    /// How long until a token is there.
    fn wait(&self) -> Duration {
        REFILL_EVERY.mul_f64((1.0 - self.tokens).max(0.0))
    }
}

#[derive(Debug, Clone, Copy)]
struct Client {
    bucket: Bucket,
    last_wrong: Option<Instant>,
    /// Said in the log that it is held back, since its last right password.
    said: bool,
}

/// What to do with a password about to be tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Check it; then tell [`Throttle::outcome`] whether it was right.
    Check(Ticket),
    /// Do not check it: answer 429, try again after this.
    Refuse { retry_after: Duration },
}

/// What a checked password was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    shared: bool,
}

/// What the log says, at most once a [`REPORT_EVERY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// Wrong passwords checked since the last report.
    pub wrong: u64,
    /// Passwords refused unchecked since the last report.
    pub refused: u64,
    /// Addresses that guessed wrong since the last report.
    pub addresses: usize,
}

/// See the module docs.
#[derive(Debug)]
pub struct Throttle {
    clients: HashMap<IpAddr, Client>,
    global: Bucket,
    pending: Report,
    reported_at: Instant,
    /// Addresses that guessed wrong since the last report.
    guessers: Vec<IpAddr>,
}

impl Throttle {
    pub fn new(now: Instant) -> Self {
        Self {
            clients: HashMap::new(),
            global: Bucket::full(GLOBAL_BURST, now),
            pending: Report::default(),
            reported_at: now,
            guessers: Vec::new(),
        }
    }

    /// `client` is about to try a password at `now`.
    pub fn before(&mut self, client: IpAddr, now: Instant) -> Gate {
        self.global.refill(now);
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            self.clients.retain(|_, c| {
                c.last_wrong
                    .is_some_and(|t| now.saturating_duration_since(t) < SUSPECT_FOR)
            });
        }
        let remembered = self.clients.len() < MAX_CLIENTS || self.clients.contains_key(&client);
        let mut fresh = Client {
            bucket: Bucket::full(CLIENT_BURST, now),
            last_wrong: None,
            said: false,
        };
        let c = if remembered {
            self.clients.entry(client).or_insert(fresh)
        } else {
            // Too many addresses to remember: this one pays as a suspect.
            fresh.last_wrong = Some(now);
            &mut fresh
        };
        c.bucket.refill(now);
        let suspect = c
            .last_wrong
            .is_some_and(|t| now.saturating_duration_since(t) < SUSPECT_FOR);
        let refused = if c.bucket.tokens < 1.0 {
            Some(c.bucket.wait())
        } else if suspect && self.global.tokens < 1.0 {
            Some(self.global.wait())
        } else {
            None
        };
        if let Some(retry_after) = refused {
            self.pending.refused += 1;
            // Said once per address it remembers (the rest are in the minute's sum).
            if !c.said && remembered {
                c.said = true;
                tracing::warn!(
                    client = %client,
                    retry_after_s = retry_after.as_secs_f64().ceil(),
                    "wrong passwords from this address: its next ones are refused unchecked, one \
                     every 10 s at most"
                );
            }
            metrics::counter!(crate::monitor::catalogue::HTTP_PASSWORDS.name, "outcome" => "refused")
                .increment(1);
            return Gate::Refuse {
                retry_after: retry_after.max(Duration::from_secs(1)),
            };
        }
        c.bucket.tokens -= 1.0;
        if suspect {
            self.global.tokens -= 1.0;
        }
        Gate::Check(Ticket { shared: suspect })
    }

    /// The password `ticket` was given for was `right` (or wrong), at `now`.
    pub fn outcome(&mut self, client: IpAddr, ticket: Ticket, right: bool, now: Instant) {
        let c = self.clients.get_mut(&client);
        if right {
            if let Some(c) = c {
                c.bucket.tokens = (c.bucket.tokens + 1.0).min(c.bucket.capacity);
                c.said = false;
            }
            if ticket.shared {
                self.global.tokens = (self.global.tokens + 1.0).min(self.global.capacity);
            }
            return;
        }
        if let Some(c) = c {
            c.last_wrong = Some(now);
        }
        self.pending.wrong += 1;
        if !self.guessers.contains(&client) && self.guessers.len() < MAX_CLIENTS {
            self.guessers.push(client);
        }
        metrics::counter!(crate::monitor::catalogue::HTTP_PASSWORDS.name, "outcome" => "wrong")
            .increment(1);
    }

    /// What happened since the last report, once a [`REPORT_EVERY`] when anything did.
    pub fn report(&mut self, now: Instant) -> Option<Report> {
        if now.saturating_duration_since(self.reported_at) < REPORT_EVERY {
            return None;
        }
        self.reported_at = now;
        let mut r = std::mem::take(&mut self.pending);
        r.addresses = std::mem::take(&mut self.guessers).len();
        (r.wrong > 0 || r.refused > 0).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Tries a wrong password from `client` at `now`: whether it was checked.
    fn guess(t: &mut Throttle, client: IpAddr, now: Instant) -> bool {
        match t.before(client, now) {
            Gate::Check(ticket) => {
                t.outcome(client, ticket, false, now);
                true
            }
            Gate::Refuse { .. } => false,
        }
    }

    #[test]
    fn an_address_gets_a_few_guesses_then_one_every_ten_seconds() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0);
        let attacker = ip("10.0.0.66");
        let checked = (0..1000).filter(|_| guess(&mut t, attacker, t0)).count();
        assert_eq!(checked, CLIENT_BURST as usize);
        let Gate::Refuse { retry_after } = t.before(attacker, t0) else {
            panic!("a guess past the burst is checked");
        };
        assert_eq!(retry_after, REFILL_EVERY);
        // An hour on, as fast as it can: one every 10 s.
        let mut now = t0;
        let mut checked = 0;
        for _ in 0..36_000 {
            now += Duration::from_millis(100);
            checked += usize::from(guess(&mut t, attacker, now));
        }
        assert!((359..=361).contains(&checked), "{checked} in an hour");
        let r = t.report(now).unwrap();
        assert_eq!(
            (r.addresses, r.wrong as usize),
            (1, CLIENT_BURST as usize + checked)
        );
        assert_eq!(t.report(now), None);
    }

    #[test]
    fn many_addresses_together_go_no_faster_and_the_operator_still_gets_in() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0);
        let mut now = t0;
        let mut checked = 0;
        // 200 addresses, each guessing every 100 ms for 10 minutes.
        for step in 0..6000u32 {
            now = t0 + Duration::from_millis(100) * step;
            let a = ip(&format!("10.0.{}.{}", step % 200 / 100, step % 100 + 1));
            checked += usize::from(guess(&mut t, a, now));
        }
        // Each address's first guess, the shared burst, then one every 10 s.
        let bound = 200 + GLOBAL_BURST as usize + 60 + 1;
        assert!(checked <= bound, "{checked} guesses checked, bound {bound}");
        // The operator, from an address that never guessed wrong, is let in at once.
        let operator = ip("10.0.9.9");
        let Gate::Check(ticket) = t.before(operator, now) else {
            panic!("the operator is held back");
        };
        t.outcome(operator, ticket, true, now);
        // And again and again (a script with Basic): a right password costs nothing.
        for _ in 0..100 {
            let Gate::Check(ticket) = t.before(operator, now) else {
                panic!("the operator's script is held back");
            };
            t.outcome(operator, ticket, true, now);
        }
    }
}
