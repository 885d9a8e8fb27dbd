//! `fles run -m`: live metrics into a real InfluxDB (Debian's 1.6, through FLESnet's `influx1:`
//! sink), a line-protocol file, and a Prometheus endpoint that Prometheus's own `promtool`
//! checks while the run goes on.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An InfluxDB server of its own, stopped when dropped.
struct Influx {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Influx {
    fn start() -> Influx {
        let dir = tempfile::tempdir().unwrap();
        let (port, rpc) = (free_port(), free_port());
        let d = dir.path().display();
        let config = format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:{rpc}\"\n[meta]\ndir = \"{d}/meta\"\n\
             [data]\ndir = \"{d}/data\"\nwal-dir = \"{d}/wal\"\n[http]\nbind-address = \"127.0.0.1:{port}\"\n\
             log-enabled = false\n"
        );
        std::fs::write(dir.path().join("influx.conf"), config).unwrap();
        let child = Command::new("influxd")
            .arg("-config")
            .arg(dir.path().join("influx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("influxd (Debian's influxdb package; scripts/bootstrap.sh installs it)");
        let influx = Influx { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while influx.query("", "CREATE DATABASE fles").is_none() {
            assert!(Instant::now() < deadline, "influxd did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        influx
    }

    /// InfluxQL's answer, as JSON; None while the server is not up.
    fn query(&self, db: &str, q: &str) -> Option<serde_json::Value> {
        let out = Command::new("curl")
            .args(["-sf", "-XPOST", &format!("http://127.0.0.1:{}/query", self.port)])
            .args(["--data-urlencode", &format!("db={db}"), "--data-urlencode", &format!("q={q}")])
            .output()
            .unwrap();
        out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
    }
}

impl Drop for Influx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_runs_metrics_reach_influxdb_a_file_and_prometheus_live() {
    let influx = Influx::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.lp");
    let prometheus = free_port();
    let run = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "run", "--local=2:2", "--timeslices=4000", "--timeslice-size=20", "--rate=0.01"])
        .arg(format!("-minflux1:127.0.0.1:{}:fles", influx.port))
        .arg(format!("--monitor=file:{}", file.display()))
        .arg(format!("--monitor=prometheus:127.0.0.1:{prometheus}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While it runs: Prometheus's own checker takes the endpoint's text.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let got = Command::new("curl").args(["-sf", &format!("http://127.0.0.1:{prometheus}/metrics")]).output();
        let text = got.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        if text.contains("wirespeed_fles_input_gbps") && text.contains("wirespeed_fles_compute_buffer_fill") {
            break text;
        }
        assert!(Instant::now() < deadline, "no metrics: {text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package)");
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{said}{}\n{text}", String::from_utf8_lossy(&checked.stdout));
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // InfluxDB has every node's series, the last point of each compute node its total.
    let last = influx.query("fles", "SELECT last(timeslices) FROM fles_compute GROUP BY node").unwrap();
    let series = last["results"][0]["series"].as_array().expect("compute series").clone();
    let total: u64 = series.iter().map(|s| s["values"][0][1].as_u64().unwrap()).sum();
    assert_eq!((series.len(), total), (2, 4000), "{last}");
    let inputs = influx.query("fles", "SELECT count(gbps) FROM fles_input GROUP BY node").unwrap();
    assert_eq!(inputs["results"][0]["series"].as_array().map(Vec::len), Some(2), "{inputs}");
    // The file holds the same points, a line each, as InfluxDB's line protocol.
    let lines = std::fs::read_to_string(&file).unwrap();
    assert!(lines.lines().all(|l| l.starts_with("fles_compute,host=") || l.starts_with("fles_input,host=")));
    assert!(lines.lines().any(|l| l.contains(",node=1 timeslices=2000,")), "{lines}");
}

#[test]
fn a_bad_sink_is_one_clear_line() {
    for (sink, says) in [("influx2:h", "expected influx2:HOST"), ("udp:x", "expected file:, influx1:")] {
        let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
            .args(["fles", "run", "--local=1:1", "--timeslices=1", &format!("--monitor={sink}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
    }
}
