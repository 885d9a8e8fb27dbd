//! Hosts made of Linux network namespaces: each has its own interface on one bridge in the
//! test's namespace, so traffic between two of them crosses the bridge and never reaches the
//! test's own stack.

use std::process::Command;

pub struct Hosts {
    bridge: String,
    names: Vec<String>,
    /// Each host's interface on the bridge, on our side.
    ports: Vec<String>,
    pub addrs: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Hosts {
    /// `n` hosts at 10.T.P.2, 10.T.P.3, … on a bridge at 10.T.P.1 (T, P from our process id,
    /// so parallel runs do not collide). Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
    pub fn new(n: usize) -> Result<Hosts, String> {
        let pid = std::process::id();
        let net = format!("10.{}.{}", 200 + (pid >> 8) % 50, pid & 0xff);
        let mut h = Hosts { bridge: format!("wsbr{pid}"), names: Vec::new(), ports: Vec::new(), addrs: Vec::new() };
        ip(&["link", "add", &h.bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &h.bridge])?;
        ip(&["link", "set", &h.bridge, "up"])?;
        for i in 0..n {
            let (ns, port, addr) = (format!("ws{pid}h{i}"), format!("ws{pid}p{i}"), format!("{net}.{}", i + 2));
            ip(&["netns", "add", &ns])?;
            h.names.push(ns.clone());
            ip(&["link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["link", "set", &port, "master", &h.bridge, "up"])?;
            h.ports.push(port);
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            h.addrs.push(addr);
        }
        Ok(h)
    }

    /// `n` hosts with an sshd on each (dropped before the hosts, so no process is left in a
    /// namespace); `None`, after saying so, where we are not root.
    pub fn with_sshd(n: usize) -> Option<(Hosts, super::Sshd)> {
        use std::os::unix::fs::MetadataExt;
        let hosts = match Hosts::new(n) {
            Ok(h) => h,
            // /proc/self belongs to our effective user.
            Err(e) if std::fs::metadata("/proc/self").unwrap().uid() != 0 => {
                eprintln!("skipped: network namespaces need root ({e})");
                return None;
            }
            Err(e) => panic!("cannot make hosts of network namespaces: {e}"),
        };
        let on: Vec<_> = (0..n).map(|i| (Some(hosts.names[i].as_str()), hosts.addrs[i].as_str())).collect();
        let sshd = super::Sshd::start_on(&on);
        Some((hosts, sshd))
    }

    pub fn namespace(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Bytes host `i` has received from the bridge so far.
    pub fn received(&self, i: usize) -> u64 {
        self.counter(&self.ports[i], "tx_bytes")
    }

    /// Bytes the test's own namespace has received over the bridge so far.
    pub fn received_here(&self) -> u64 {
        self.counter(&self.bridge, "rx_bytes")
    }

    fn counter(&self, dev: &str, name: &str) -> u64 {
        let p = format!("/sys/class/net/{dev}/statistics/{name}");
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")).trim().parse().unwrap()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it ours.
        for ns in &self.names {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
