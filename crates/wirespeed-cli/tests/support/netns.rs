//! Hosts made of Linux network namespaces, each with its own stack, interface on one bridge in
//! the test's namespace, and sshd, so traffic between two of them crosses the bridge and never
//! reaches the test's own stack. They are made by tests/hosts.py, the one helper the Rust,
//! Python and shell tests share, whose guard removes them even if this process dies.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub struct Hosts {
    dir: String,
    bridge: String,
    /// The bridge's network, as 10.T.P.0/24.
    pub subnet: String,
    names: Vec<String>,
    /// Each host's interface on the bridge, on our side.
    veths: Vec<String>,
    pub addrs: Vec<String>,
}

fn helper(args: &[&str]) -> Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/hosts.py");
    let out = Command::new("python3").arg(script).args(args).output().map_err(|e| format!("python3: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("hosts.py {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Hosts {
    /// `n` hosts with an sshd on each, on port 22 of each host's address; `None`, after saying
    /// so, where we are not root.
    pub fn with_sshd(n: usize) -> Option<(Hosts, super::Sshd)> {
        use std::os::unix::fs::MetadataExt;
        let json = match helper(&["up", &n.to_string(), "--owner", &std::process::id().to_string()]) {
            Ok(j) => j,
            // /proc/self belongs to our effective user.
            Err(e) if std::fs::metadata("/proc/self").unwrap().uid() != 0 => {
                eprintln!("skipped: network namespaces need root ({e})");
                return None;
            }
            Err(e) => panic!("cannot make hosts of network namespaces: {e}"),
        };
        let v: Value = serde_json::from_str(&json).expect("hosts.py prints JSON");
        let field = |h: &Value, k: &str| h[k].as_str().expect("a host's field").to_string();
        let hosts = v["hosts"].as_array().expect("hosts");
        let h = Hosts {
            dir: v["dir"].as_str().expect("dir").to_string(),
            bridge: v["bridge"].as_str().expect("bridge").to_string(),
            subnet: v["subnet"].as_str().expect("subnet").to_string(),
            names: hosts.iter().map(|h| field(h, "ns")).collect(),
            veths: hosts.iter().map(|h| field(h, "veth")).collect(),
            addrs: hosts.iter().map(|h| field(h, "addr")).collect(),
        };
        let port = v["ssh_port"].as_u64().expect("ssh_port") as u16;
        let sshd = super::Sshd::reached_with(port, PathBuf::from(v["ssh_key"].as_str().expect("ssh_key")));
        Some((h, sshd))
    }

    /// Host `i`'s namespace, which is also its name on every host.
    pub fn namespace(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// `program` to be run on host `i`.
    pub fn command(&self, i: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i], program]);
        c
    }

    /// Sets host `i`'s link "up" or "down".
    pub fn link(&self, i: usize, how: &str) {
        helper(&["link", &self.dir, &i.to_string(), how]).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Kills every process on host `i` at once, or only those whose command name is `comm`;
    /// the host's kernel stays, and answers.
    pub fn kill(&self, i: usize, comm: Option<&str>) {
        let i = i.to_string();
        let args: Vec<&str> = ["kill", &self.dir, &i].into_iter().chain(comm).collect();
        helper(&args).unwrap_or_else(|e| panic!("{e}"));
    }

    /// How many processes on host `i` have the command name `comm`.
    pub fn running(&self, i: usize, comm: &str) -> usize {
        let out = Command::new("ip").args(["netns", "pids", &self.names[i]]).output().expect("ip netns pids");
        let pids = String::from_utf8_lossy(&out.stdout).into_owned();
        let named = |pid: &&str| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm);
        pids.split_whitespace().filter(named).count()
    }

    /// Bytes host `i` has received from the bridge so far.
    pub fn received(&self, i: usize) -> u64 {
        self.counter(&self.veths[i], "tx_bytes")
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
        if let Err(e) = helper(&["down", &self.dir]) {
            eprintln!("{e}");
        }
    }
}
