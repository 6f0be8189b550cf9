//! A slow link, as the kernel makes one, for the upload tests and the load bench: a network
//! namespace of its own joined to this one by a veth pair, the namespace's end shaped by a
//! `tbf` qdisc to a rate (what leaves the namespace goes at that rate; what comes back, at
//! the machine's speed). A program run in the namespace ([`SlowLink::command`]) reaches this
//! side at [`SlowLink::host_ip`] through it. Needs `ip` and `tc` and the right to make
//! namespaces (root); dropped, the namespace and the pair go.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// See the module docs.
pub struct SlowLink {
    ns: String,
    host_ip: String,
    /// Bits per second.
    pub rate_bits: u64,
}

fn ip(args: &[&str]) -> Result<(), String> {
    run(Command::new("ip").args(args))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl SlowLink {
    /// A link limited to `mbit` Mbit/s from the namespace out, or why it cannot be made.
    pub fn new(mbit: u32) -> Result<Self, String> {
        static MADE: AtomicU32 = AtomicU32::new(0);
        // Names and a /30 of 10.64.0.0/10 of their own, per process and link.
        let k = (std::process::id() * 8 + MADE.fetch_add(1, Ordering::Relaxed)) % (1 << 14);
        let ns = format!("ulrslow{k}");
        let (host_dev, ns_dev) = (format!("ulrh{k}"), format!("ulrn{k}"));
        let net = format!("10.{}.{}", 64 + (k >> 8), k & 255);
        let (host_ip, ns_ip) = (format!("{net}.1"), format!("{net}.2"));
        let _ = ip(&["netns", "del", &ns]);
        ip(&["netns", "add", &ns])?;
        let link = SlowLink {
            ns: ns.clone(),
            host_ip: host_ip.clone(),
            rate_bits: u64::from(mbit) * 1_000_000,
        };
        ip(&[
            "link", "add", &host_dev, "type", "veth", "peer", "name", &ns_dev, "netns", &ns,
        ])?;
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_dev])?;
        ip(&["link", "set", &host_dev, "up"])?;
        let in_ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        in_ns(&["addr", "add", &format!("{ns_ip}/30"), "dev", &ns_dev])?;
        in_ns(&["link", "set", &ns_dev, "up"])?;
        in_ns(&["link", "set", "lo", "up"])?;
        run(Command::new("ip").args(["netns", "exec", &ns, "tc"]).args([
            "qdisc",
            "add",
            "dev",
            &ns_dev,
            "root",
            "tbf",
            "rate",
            &format!("{mbit}mbit"),
            "burst",
            "64kb",
            "latency",
            "100ms",
        ]))?;
        Ok(link)
    }

    /// This side's address, as the namespace reaches it.
    pub fn host_ip(&self) -> &str {
        &self.host_ip
    }

    /// `program` to be run in the namespace (`ip netns exec NS program`, which execs it: its
    /// resource use is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        c
    }

    /// The link's rate in bytes per second.
    pub fn bytes_per_second(&self) -> f64 {
        self.rate_bits as f64 / 8.0
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = ip(&["netns", "del", &self.ns]);
    }
}
