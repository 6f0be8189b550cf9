//! What the integration tests share of the machine, in one process and its test threads:
//! its CPU time, and UDP port 14550.
//!
//! - A test whose timings are its point and that loads the machine (a flight at 20,000
//!   chunks/s, Node clients decoding everything), or that runs commands with an operator's
//!   waits (the guide), takes [`alone`]: while its guard lives no other test that runs
//!   processes or makes folders runs. One reader-writer lock: every test thread takes a
//!   share the first time it makes a folder or starts a process ([`beside_others`], called
//!   by [`fresh_dir`](super::procs::fresh_dir) and
//!   [`Proc`](super::procs::Proc)) and keeps it until the thread ends, which the harness does
//!   at the test's end; [`alone`] takes it whole. Threads a test spawns itself (unnamed: the
//!   harness names its test threads after the tests) take no share, so a test never waits
//!   for its own helpers; nor does the main thread (`--test-threads=1`: nothing runs beside
//!   anything).
//! - UDP 14550 is where ground stations and the guide's daemons listen (as an operator types
//!   it) and where every PX4 SITL sends by itself: a daemon listening there would find
//!   another test's PX4 and take its log stream. A PX4 takes [`sending_to_14550`], a test
//!   that listens there [`listening_on_14550`]: PX4s run beside each other, never beside it.
//!   Either is taken before the test makes a folder or starts a process (as `Px4::start` and
//!   the guide's runner do): a share of the machine held while waiting for the port could
//!   wait forever on a test that waits to run alone.

use std::cell::{Cell, RefCell};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

static MACHINE: RwLock<()> = RwLock::new(());
static UDP_14550: RwLock<()> = RwLock::new(());

thread_local! {
    /// This test thread's share of the machine, taken once and dropped with the thread.
    static SHARE: RefCell<Option<RwLockReadGuard<'static, ()>>> = const { RefCell::new(None) };
    /// How many [`Alone`] guards this thread holds (a call nested in another counts too).
    static ALONE: Cell<usize> = const { Cell::new(0) };
    /// This thread listens on UDP 14550 (a PX4 it starts itself needs no share of it).
    static LISTENING: Cell<bool> = const { Cell::new(false) };
}

/// While it lives, the test holding it runs alone. Dropping it lets the others run again.
pub struct Alone {
    /// The machine, taken whole; `None` for a nested guard.
    _machine: Option<RwLockWriteGuard<'static, ()>>,
}

/// Waits until no other test holds a share, then keeps the machine to this test until the
/// guard is dropped. The test's own share is given up first (it may already have made
/// folders); a second call while the first guard lives returns at once.
pub fn alone() -> Alone {
    if ALONE.get() > 0 {
        ALONE.set(ALONE.get() + 1);
        return Alone { _machine: None };
    }
    SHARE.with(|share| share.borrow_mut().take());
    let machine = MACHINE.write().unwrap_or_else(PoisonError::into_inner);
    ALONE.set(1);
    Alone {
        _machine: Some(machine),
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        ALONE.set(ALONE.get() - 1);
    }
}

/// This test thread's share of the machine, taken if it has none yet (waiting while a test
/// runs alone); nothing on a thread that is not a test's own, or that runs alone.
pub fn beside_others() {
    let thread = std::thread::current();
    if matches!(thread.name(), None | Some("main")) || ALONE.get() > 0 {
        return;
    }
    SHARE.with(|share| {
        let mut share = share.borrow_mut();
        if share.is_none() {
            *share = Some(MACHINE.read().unwrap_or_else(PoisonError::into_inner));
        }
    });
}

/// A share of UDP 14550 for a PX4, which sends there: waits while another test listens
/// there; `None` for the test that listens itself (its own PX4, as the guide starts one).
pub fn sending_to_14550() -> Option<RwLockReadGuard<'static, ()>> {
    if LISTENING.get() {
        return None;
    }
    Some(UDP_14550.read().unwrap_or_else(PoisonError::into_inner))
}

/// UDP 14550, for the test that listens there until the guard is dropped: waits until no
/// PX4 of another test runs, and keeps any from starting meanwhile.
pub struct Listening {
    _port: RwLockWriteGuard<'static, ()>,
}

/// Takes UDP 14550 for this test (see [`Listening`]).
pub fn listening_on_14550() -> Listening {
    let port = UDP_14550.write().unwrap_or_else(PoisonError::into_inner);
    LISTENING.set(true);
    Listening { _port: port }
}

impl Drop for Listening {
    fn drop(&mut self) {
        LISTENING.set(false);
    }
}
