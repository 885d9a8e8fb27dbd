#!/usr/bin/env python3
"""Hosts made of Linux network namespaces, for the Rust, Python and shell tests alike.

Each host has its own network stack, its own interface (eth0) on one bridge in the caller's
namespace, its own sshd, and a name that the others resolve (/etc/netns/NS/hosts, which
`ip netns exec` puts in place of /etc/hosts). They share the file system. A guard process
removes them all once their owner is gone, so nothing is left when a test crashes.

    hosts.py up N [--owner PID] [--mtu M]   make N hosts; prints them as JSON (see `describe`)
    hosts.py down DIR                       remove them (every process in them is killed)
    hosts.py link DIR I up|down             set host I's link up or down
    hosts.py rate DIR I RATE|none           cap host I's link both ways (tc tbf, e.g. 1gbit)
    hosts.py mtu DIR M                      set the MTU on the bridge and every link
    hosts.py freeze|thaw DIR I              SIGSTOP or SIGCONT every process on host I
    hosts.py kill DIR I [COMM]              SIGKILL every process on host I (its kernel stays),
                                            or every one whose command name is COMM
    hosts.py vanish DIR I                   kill host I's processes and delete its namespace
    hosts.py sweep                          remove the hosts of owners that are gone

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2, tc and sshd.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = Path("/run/wirespeed-hosts")
SSHD = "/usr/sbin/sshd"


def run(*args, check=True):
    out = subprocess.run(args, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def ssh_args(state):
    return ["-F", "/dev/null", "-p", str(state["ssh_port"]), "-i", state["ssh_key"],
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]


def describe(state):
    """What `up` prints: dir, bridge, subnet, ssh_port, ssh_key, ssh (ssh's arguments before the
    host), and hosts: each with name (resolvable on every host), ns, addr and veth (its link's
    end on the bridge)."""
    return {**state, "ssh": ssh_args(state)}


def load(d):
    return json.loads((Path(d) / "state.json").read_text())


def save(state):
    (Path(state["dir"]) / "state.json").write_text(json.dumps(state))


def up(n, owner, mtu=None):
    ident = os.getpid()
    d = STATE / str(ident)
    d.mkdir(parents=True)
    net = f"10.{200 + (ident >> 8) % 50}.{ident & 0xff}"
    state = {"dir": str(d), "owner": owner, "owner_start": start_time(owner), "bridge": f"wsb{ident}",
             "subnet": f"{net}.0/24", "gateway": f"{net}.1", "hosts": [], "sshd_pids": [], "guard": 0,
             "ssh_port": 22, "ssh_key": str(d / "user_key")}
    save(state)
    try:
        run("ip", "link", "add", state["bridge"], "type", "bridge")
        run("ip", "addr", "add", f"{net}.1/24", "dev", state["bridge"])
        run("ip", "link", "set", state["bridge"], "up")
        for i in range(n):
            h = {"name": f"ws{ident}h{i}", "ns": f"ws{ident}h{i}", "addr": f"{net}.{i + 2}", "veth": f"wsv{ident}h{i}"}
            run("ip", "netns", "add", h["ns"])
            state["hosts"].append(h)
            save(state)
            run("ip", "link", "add", h["veth"], "type", "veth", "peer", "name", "eth0", "netns", h["ns"])
            run("ip", "link", "set", h["veth"], "master", state["bridge"], "up")
            run("ip", "-n", h["ns"], "addr", "add", f"{h['addr']}/24", "dev", "eth0")
            run("ip", "-n", h["ns"], "link", "set", "eth0", "up")
            run("ip", "-n", h["ns"], "link", "set", "lo", "up")
        names = "127.0.0.1 localhost\n" + "".join(f"{h['addr']} {h['name']}\n" for h in state["hosts"])
        for h in state["hosts"]:
            etc = Path("/etc/netns") / h["ns"]
            etc.mkdir(parents=True, exist_ok=True)
            # The hosts share this machine's host name (not its UTS namespace): on each it
            # names that host, as a cluster node's own name does.
            (etc / "hosts").write_text(names + f"{h['addr']} {socket.gethostname()}\n")
        if mtu:
            set_mtu(state, mtu)
        start_sshd(state)
        save(state)
        state["guard"] = start_guard(d)
        save(state)
    except BaseException:
        down(d)
        raise
    return state


def start_time(pid):
    """The start time of `pid` (so that a reused pid is not taken for the owner), or 0."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def start_sshd(state):
    d = Path(state["dir"])
    for name in ["host_key", "user_key"]:
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name))
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation wants it
    for i, h in enumerate(state["hosts"]):
        conf = d / f"sshd_config{i}"
        conf.write_text(f"Port 22\nListenAddress {h['addr']}\nHostKey {d}/host_key\n"
                        f"AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd{i}.pid\nStrictModes no\n"
                        "UsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n"
                        "KbdInteractiveAuthentication no\nSubsystem sftp internal-sftp\nMaxStartups 100\n"
                        "MaxSessions 100\nAcceptEnv WIRESPEED_*\n")
        p = subprocess.Popen(["ip", "netns", "exec", h["ns"], SSHD, "-D", "-e", "-f", str(conf)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        state["sshd_pids"].append(p.pid)
    deadline = time.time() + 20
    for h in state["hosts"]:
        while subprocess.run(["ssh", *ssh_args(state), h["addr"], "true"], capture_output=True).returncode != 0:
            if time.time() > deadline:
                raise RuntimeError(f"sshd on {h['addr']} did not come up")
            time.sleep(0.1)


def start_guard(d):
    """A process of its own session that removes the hosts once their owner is gone."""
    p = subprocess.Popen([sys.executable, __file__, "guard", str(d)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return p.pid


def owner_gone(state):
    return start_time(state["owner"]) != state["owner_start"]


def guard(d):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while (Path(d) / "state.json").exists():
        if owner_gone(load(d)):
            down(d, from_guard=True)
            return
        time.sleep(0.5)


def pids(ns):
    return [int(p) for p in run("ip", "netns", "pids", ns, check=False).split()]


def signal_all(ns, sig, comm=None):
    for p in pids(ns):
        try:
            if comm is None or Path(f"/proc/{p}/comm").read_text().strip() == comm:
                os.kill(p, sig)
        except (ProcessLookupError, FileNotFoundError):
            pass


def remove_host(h):
    signal_all(h["ns"], signal.SIGKILL)
    # Deleting a namespace deletes its end of the veth pair, and with it ours.
    run("ip", "netns", "del", h["ns"], check=False)
    run("ip", "link", "del", h["veth"], check=False)
    shutil.rmtree(Path("/etc/netns") / h["ns"], ignore_errors=True)


def down(d, from_guard=False):
    d = Path(d)
    try:
        state = load(d)
    except (OSError, ValueError):
        shutil.rmtree(d, ignore_errors=True)
        return
    if state.get("guard") and not from_guard:
        try:
            os.kill(state["guard"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in state.get("sshd_pids", []):
        try:
            os.killpg(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for h in state["hosts"]:
        remove_host(h)
    run("ip", "link", "del", state["bridge"], check=False)
    shutil.rmtree(d, ignore_errors=True)


def host(state, i):
    return state["hosts"][int(i)]


def set_mtu(state, mtu):
    run("ip", "link", "set", state["bridge"], "mtu", str(mtu))
    for h in state["hosts"]:
        run("ip", "link", "set", h["veth"], "mtu", str(mtu))
        run("ip", "-n", h["ns"], "link", "set", "eth0", "mtu", str(mtu))


def set_rate(state, i, rate):
    """A token bucket on both ends of host i's link: what leaves it and what reaches it; "none"
    takes it away."""
    h = host(state, i)
    if rate == "none":
        run("ip", "netns", "exec", h["ns"], "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        run("tc", "qdisc", "del", "dev", h["veth"], "root", check=False)
        return
    bits = parse_rate(rate)
    # A burst of at least a few jumbo frames, and about 1 ms of the rate, as tc-tbf(8) advises.
    burst = max(64 * 1024, bits // 8 // 1000)
    for prefix in (["ip", "netns", "exec", h["ns"]], []):
        dev = "eth0" if prefix else h["veth"]
        run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
            "latency", "50ms")


def parse_rate(rate):
    units = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "bit": 1}
    for u, m in units.items():
        if rate.endswith(u):
            return int(float(rate[: -len(u)]) * m)
    raise ValueError(f"a rate such as 1gbit, not {rate!r}")


def set_link(state, i, how):
    """Host i's link down or up; once up, it carries frames again before this returns, and no
    host remembers it as unreachable (a neighbour entry that failed while it was down)."""
    h = host(state, i)
    run("ip", "link", "set", h["veth"], how)
    if how != "up":
        return
    port = Path("/sys/class/net") / h["veth"]
    deadline = time.time() + 10
    while (port / "operstate").read_text().strip() != "up" or (port / "brport/state").read_text().strip() != "3":
        if time.time() > deadline:
            raise RuntimeError(f"{h['veth']} did not come up")
        time.sleep(0.02)
    for other in state["hosts"]:
        run("ip", "-n", other["ns"], "neigh", "flush", "all", check=False)
    run("ip", "neigh", "flush", "dev", state["bridge"], check=False)


def sweep():
    """Removes the hosts of owners that are gone, and any of our namespaces or bridges whose
    state is gone (left by a run that was itself killed mid-way)."""
    if STATE.exists():
        for d in STATE.iterdir():
            try:
                gone = owner_gone(load(d))
            except (OSError, ValueError):
                # No state yet: an `up` may be writing it. Left for a minute, it is a leftover.
                try:
                    gone = time.time() - d.stat().st_mtime > 60
                except OSError:
                    continue
            if gone:
                down(d)
    for ns in run("ip", "netns", "list", check=False).split("\n"):
        m = re.match(r"(ws(\d+)h\d+)\b", ns)
        if m and not (STATE / m[2]).exists():
            remove_host({"ns": m[1], "veth": f"wsv{m[2]}h0"})
    for link in re.findall(r"^\d+: (wsb(\d+)):", run("ip", "-o", "link", "show", "type", "bridge", check=False), re.M):
        if not (STATE / link[1]).exists():
            run("ip", "link", "del", link[0], check=False)


class Hosts:
    """The Python face: `with Hosts(3) as h:` ... h.addr(1), h.ssh(0, "cmd"), h.link(2, "down")."""

    def __init__(self, n, mtu=None):
        sweep()
        self.state = up(n, os.getpid(), mtu)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()

    def down(self):
        down(self.state["dir"])

    def addr(self, i):
        return self.state["hosts"][i]["addr"]

    def name(self, i):
        return self.state["hosts"][i]["name"]

    def ns(self, i):
        return self.state["hosts"][i]["ns"]

    def exec_args(self, i, *args):
        """Arguments that run `args` on host i (straight into its namespace, no ssh)."""
        return ["ip", "netns", "exec", self.ns(i), *map(str, args)]

    def run(self, i, *args, env=None, timeout=120):
        """Runs `args` on host i, with `env` added to ours; its CompletedProcess, text."""
        return subprocess.run(self.exec_args(i, *args), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})

    def ssh_args(self, i, *args):
        return ["ssh", *ssh_args(self.state), self.addr(i), *map(str, args)]

    def link(self, i, how):
        set_link(self.state, i, how)

    def rate(self, i, rate):
        set_rate(self.state, i, rate)

    def freeze(self, i):
        signal_all(self.ns(i), signal.SIGSTOP)

    def thaw(self, i):
        signal_all(self.ns(i), signal.SIGCONT)

    def kill(self, i, comm=None):
        signal_all(self.ns(i), signal.SIGKILL, comm)

    def vanish(self, i):
        remove_host(self.state["hosts"][i])

    def received(self, i):
        """Bytes host i has received from the bridge so far."""
        return int(Path(f"/sys/class/net/{self.state['hosts'][i]['veth']}/statistics/tx_bytes").read_text())


def module_fixture(n):
    """A pytest fixture of `n` Hosts for a test module: skipped where we are not root."""
    import pytest

    @pytest.fixture(scope="module")
    def hosts():
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root")
        with Hosts(n) as h:
            yield h

    return hosts


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "up":
        owner = int(args[args.index("--owner") + 1]) if "--owner" in args else os.getppid()
        mtu = int(args[args.index("--mtu") + 1]) if "--mtu" in args else None
        sweep()
        print(json.dumps(describe(up(int(args[0]), owner, mtu))))
    elif cmd == "down":
        down(args[0])
    elif cmd == "guard":
        guard(args[0])
    elif cmd == "sweep":
        sweep()
    elif cmd == "link":
        set_link(load(args[0]), args[1], args[2])
    elif cmd == "rate":
        set_rate(load(args[0]), args[1], args[2])
    elif cmd == "mtu":
        set_mtu(load(args[0]), int(args[1]))
    elif cmd in ("freeze", "thaw", "kill"):
        how = {"freeze": signal.SIGSTOP, "thaw": signal.SIGCONT, "kill": signal.SIGKILL}[cmd]
        signal_all(host(load(args[0]), args[1])["ns"], how, args[2] if len(args) > 2 else None)
    elif cmd == "vanish":
        remove_host(host(load(args[0]), args[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (RuntimeError, ValueError, IndexError, OSError) as e:
        print(f"hosts.py: {e}", file=sys.stderr)
        sys.exit(1)
