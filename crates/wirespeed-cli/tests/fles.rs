//! `wirespeed fles run --local`: real input and compute node processes on this host.

mod support;

use std::process::Command;

use support::archives::{boost_tsa_reader, read_with_boost, wait_until_under_way, whole_timeslices};

fn fles_run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wirespeed")).args(["fles", "run"]).args(args).output().unwrap()
}

fn run_and_report(transport: &str, scheduler: &str) -> (serde_json::Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.json");
    let out = fles_run(&[
        "--local=3:2",
        &format!("--transport={transport}"),
        &format!("--scheduler={scheduler}"),
        "--timeslices=300",
        "--timeslice-size=20",
        "--microslice-size=500",
        "--microslice-spread=100",
        "--buffer-size=1048576",
        "--interval-length=10",
        "--timeout=20",
        &format!("--report={}", report.display()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("300 timeslices in"), "{text}");
    (serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap(), dir)
}

#[test]
fn plots_draw_a_report() {
    let (_, dir) = run_and_report("shm", "rr");
    let svg = dir.path().join("run.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "plot"])
        .arg(dir.path().join("run.json"))
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    for caption in ["Bandwidth over time", "Timeslice completion time", "Buffer fill", "3 inputs, 2 compute nodes, rr"]
    {
        assert!(text.contains(caption), "{caption}");
    }
    std::fs::write(dir.path().join("not.json"), "{\"a\": 1}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "plot"])
        .arg(dir.path().join("not.json"))
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a report"));
}

#[test]
fn every_timeslice_arrives_complete_with_both_schedulers() {
    for (transport, scheduler) in [("shm", "dfs"), ("tcp", "rr"), ("tcp", "dfs")] {
        let (r, _) = run_and_report(transport, scheduler);
        assert_eq!(r["timeslices"], 300, "{transport} {scheduler}");
        assert_eq!(r["incomplete"], 0);
        for key in ["p50", "p99", "max"] {
            assert!(r["completion_ms"][key].as_f64().unwrap() >= 0.0);
        }
        assert!(r["aggregate_gbps"].as_f64().unwrap() > 0.0);
        let fill = r["buffer_fill_max"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&fill), "{fill}");
        let per_node: u64 = r["computes"].as_array().unwrap().iter().map(|c| c["timeslices"].as_u64().unwrap()).sum();
        assert_eq!(per_node, 300);
        if scheduler == "dfs" {
            // 300 timeslices in intervals of 10: every compute node measured the intervals.
            assert!(r["computes"][0]["intervals"].as_array().unwrap().len() >= 25);
        }
    }
}

#[test]
fn bad_settings_get_one_clear_line() {
    for (args, says) in [
        (&["--local=0:2"][..], "not a count of nodes"),
        (&["--local=2:2", "--output=parquet:/nowhere"][..], "expected null, tsa:PATH, arrow:PATH or shm:NAME"),
        (&["--timeslices=4"][..], "--local I:C on this host, or --inputs I under mpirun"),
        (&["--local=1:1", "--timeslices=4", "--output=tsa:/nonexistent-dir/run.tsa"][..], "nonexistent-dir"),
        (&["--local=1:1", "--buffer-size=1000", "--timeout=5"][..], "more than the 1000-byte ring"),
    ] {
        let out = fles_run(args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn archives_are_written_per_compute_node_and_only_appear_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.tsa");
    let out = fles_run(&[
        "--local=2:2",
        "--timeslices=20",
        "--timeslice-size=10",
        &format!("--output=tsa:{}", path.display()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["run.0.tsa", "run.1.tsa"], "no part files left");
    // A reader built from Boost.Serialization with FLESnet's class layouts loads each archive
    // and finds every CRC right: 10 timeslices of 2 components of 11 microslices each.
    let reader = boost_tsa_reader(dir.path());
    for name in names {
        let text = read_with_boost(&reader, &dir.path().join(name));
        assert!(text.starts_with("archive type 0 compression 0 host "), "{text}");
        assert_eq!(text.lines().last(), Some("ok 10 20 220"), "{text}");
    }
}

#[test]
fn arrow_output_has_one_row_per_microslice() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.arrow");
    let out = fles_run(&[
        "--local=2:1",
        "--timeslices=6",
        "--timeslice-size=5",
        "--microslice-spread=50",
        &format!("--output=arrow:{}", path.display()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = std::fs::File::open(&path).unwrap();
    let batches: Vec<_> = arrow_ipc::reader::FileReader::try_new(file, None).unwrap().map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 6, "one batch per timeslice");
    for (t, b) in batches.iter().enumerate() {
        assert_eq!(b.num_rows(), 2 * 6, "2 components of 5 + 1 microslices");
        assert!(
            b.column_by_name("timeslice").unwrap().as_primitive::<UInt64Type>().values().iter().all(|&x| x == t as u64)
        );
        let sizes = b.column_by_name("size").unwrap().as_primitive::<UInt32Type>();
        let content = b.column_by_name("content").unwrap().as_binary::<i64>();
        for r in 0..b.num_rows() {
            assert_eq!(content.value(r).len(), sizes.value(r) as usize);
        }
    }
}

#[test]
fn ctrl_c_finishes_the_timeslices_begun() {
    use std::os::unix::process::CommandExt;

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.json");
    let path = dir.path().join("run.tsa");
    // No --timeslices: the run goes on until interrupted. Ctrl-C reaches the whole group.
    let child = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "run", "--local=2:2", "--timeslice-size=10"])
        .arg(format!("--report={}", report.display()))
        .arg(format!("--output=tsa:{}", path.display()))
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let n = r["timeslices"].as_u64().unwrap();
    assert!(n > 0);
    // Both archives hold every timeslice below the agreed end, half each. Which node has the
    // odd one depends on the DFS interval's offset where the end falls.
    let mut per_node: Vec<u64> =
        r["computes"].as_array().unwrap().iter().map(|c| c["timeslices"].as_u64().unwrap()).collect();
    per_node.sort();
    assert_eq!(per_node, [n / 2, n.div_ceil(2)]);
    assert!(dir.path().join("run.0.tsa").exists() && dir.path().join("run.1.tsa").exists());
}

/// Starts `fles run` with `args` (which write an archive into `dir`), sends `signal` to its
/// node `role` `index` once the run is under way and at least `after` from the start, and
/// returns the run's report.
fn run_and_signal(
    dir: &std::path::Path,
    args: &[&str],
    (role, index): (&str, usize),
    signal: &str,
    after: std::time::Duration,
) -> serde_json::Value {
    let report = dir.join("run.json");
    let child = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "run"])
        .args(args)
        .arg(format!("--report={}", report.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    wait_until_under_way(dir);
    std::thread::sleep(after.saturating_sub(started.elapsed()));
    let pattern = format!("role={role} --index={index} ");
    let sent = Command::new("pkill")
        .arg(format!("-{signal}"))
        .arg("-P")
        .arg(child.id().to_string())
        .arg("-f")
        .arg(&pattern)
        .status();
    assert!(sent.unwrap().success(), "no {role} {index} to signal");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let name = if role == "input" { format!("input {index}") } else { format!("compute node {index}") };
    assert!(stderr.contains(&name), "{stderr}");
    serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap()
}

#[test]
fn an_input_killed_mid_run_leaves_its_timeslices_incomplete_and_the_rest_whole() {
    let dir = tempfile::tempdir().unwrap();
    let output = format!("--output=tsa:{}", dir.path().join("run.tsa").display());
    let args = ["--local=3:2", "--timeslices=2000", "--timeslice-size=20", "--rate=0.02", &output];
    let r = run_and_signal(dir.path(), &args, ("input", 1), "KILL", std::time::Duration::from_millis(1200));
    assert_eq!(r["timeslices"], 2000, "every timeslice delivered, none twice");
    let incomplete = r["incomplete"].as_u64().unwrap();
    assert!(incomplete > 0 && incomplete < 2000, "{incomplete}");
    assert_eq!(r["lost_inputs"], serde_json::json!([1]));
    let per_node: Vec<u64> =
        r["computes"].as_array().unwrap().iter().map(|c| c["timeslices"].as_u64().unwrap()).collect();
    assert_eq!(per_node, [1000, 1000]);
    // FLESnet's classes load the archives, incomplete timeslices (two components) included.
    let reader = boost_tsa_reader(dir.path());
    for c in 0..2 {
        let text = read_with_boost(&reader, &dir.path().join(format!("run.{c}.tsa")));
        assert!(text.lines().last().unwrap().starts_with("ok 1000 "), "{text}");
        assert!(text.contains("components 2 ") && text.contains("components 3 "), "{text}");
    }
}

#[test]
fn an_input_gone_silent_is_given_up_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let output = format!("--output=tsa:{}", dir.path().join("run.tsa").display());
    let args = ["--local=3:2", "--timeslices=1500", "--timeslice-size=20", "--rate=0.02", "--timeout=4", &output];
    let r = run_and_signal(dir.path(), &args, ("input", 2), "STOP", std::time::Duration::from_millis(800));
    assert_eq!(r["timeslices"], 1500);
    assert!(r["incomplete"].as_u64().unwrap() > 0);
    assert_eq!(r["lost_inputs"], serde_json::json!([2]));
}

#[test]
fn a_compute_node_killed_mid_run_leaves_its_timeslices_to_the_others_none_lost_none_twice() {
    for (transport, scheduler) in [("shm", "dfs"), ("tcp", "rr"), ("ucx", "dfs")] {
        kill_compute_node_1(transport, scheduler);
    }
}

/// With more threads spinning than the machine has cores, nodes are descheduled for long
/// stretches: slow, not dead. Killing one compute node loses it alone.
#[test]
fn a_compute_node_killed_on_a_busy_machine_is_the_only_one_lost() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cores + 1)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    kill_compute_node_1("shm", "dfs");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    hogs.into_iter().for_each(|h| h.join().unwrap());
}

/// Kills compute node 1 of a 3:3 run mid-way: the two left build everything it had not
/// finished, and no input is lost.
fn kill_compute_node_1(transport: &str, scheduler: &str) {
    let dir = tempfile::tempdir().unwrap();
    let output = format!("--output=tsa:{}", dir.path().join("run.tsa").display());
    let args = [
        "--local=3:3",
        "--timeslices=3000",
        "--timeslice-size=20",
        "--rate=0.01",
        &format!("--transport={transport}"),
        &format!("--scheduler={scheduler}"),
        &output,
    ];
    let r = run_and_signal(dir.path(), &args, ("compute", 1), "KILL", std::time::Duration::from_millis(1500));
    assert_eq!(r["lost_computes"], serde_json::json!([1]), "{transport}");
    assert_eq!(r["lost_inputs"], serde_json::json!([]), "{transport}");
    assert_eq!(r["incomplete"], 0);
    // The two left write whole archives; the lost node's part file holds what it had
    // finished, its last timeslice perhaps cut short. Together: every timeslice once.
    let reader = boost_tsa_reader(dir.path());
    let mut all = Vec::new();
    for c in [0, 2] {
        let text = read_with_boost(&reader, &dir.path().join(format!("run.{c}.tsa")));
        assert!(text.lines().last().unwrap().starts_with("ok "), "{text}");
        all.extend(whole_timeslices(3, &reader, &dir.path().join(format!("run.{c}.tsa"))));
    }
    let survivors = all.len();
    assert_eq!(r["timeslices"], survivors as u64);
    all.extend(whole_timeslices(3, &reader, &dir.path().join(".run.1.tsa.part")));
    all.sort_unstable();
    let twice = all.windows(2).filter(|w| w[0] == w[1]).count();
    all.dedup();
    assert_eq!(all, (0..3000).collect::<Vec<u64>>(), "{transport}: none lost");
    // One the lost node wrote but did not live to give back may be built again.
    assert!(twice <= 1, "{transport}: {twice} built twice");
    assert!(survivors >= 2000, "{transport}: {survivors}");
}

#[test]
fn a_compute_node_gone_silent_is_left_out_and_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let output = format!("--output=tsa:{}", dir.path().join("run.tsa").display());
    let args = ["--local=2:3", "--timeslices=1500", "--timeslice-size=20", "--rate=0.01", "--timeout=4", &output];
    let r = run_and_signal(dir.path(), &args, ("compute", 2), "STOP", std::time::Duration::from_millis(800));
    assert_eq!(r["lost_computes"], serde_json::json!([2]));
    assert_eq!(r["incomplete"], 0);
    let t = r["timeslices"].as_u64().unwrap();
    assert!((1000..1500).contains(&t), "{t}: the silent node kept what it had finished");
}

/// `--pattern flesnet` writes FLESnet's ramp; the compute node checks every word of it (our own
/// implementation of FLESnet's rule) and finds a flipped byte.
#[test]
fn flesnets_pattern_is_checked_word_by_word() {
    let out = fles_run(&["--local=2:1", "--timeslices=50", "--pattern=flesnet", "--microslice-size=203"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("50 timeslices in"));
    let out = fles_run(&["--local=2:1", "--timeslices=50", "--pattern=flesnet", "--corrupt=7"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not FLESnet's ramp pattern"), "{err}");
}

/// `tsa:PATH?zstd&per-file=N`: zstd-compressed archives of N timeslices each, numbered as
/// FLESnet's OutputArchiveSequence numbers them, each renamed into place once whole; the Boost
/// reader (decompressing as FLESnet's InputArchive does) loads every one; `--replay` reads
/// a compressed archive back.
#[test]
fn compressed_sequences_are_written_as_flesnet_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run_%n.tsa");
    let out = fles_run(&[
        "--local=2:1",
        "--timeslices=25",
        "--timeslice-size=10",
        &format!("--output=tsa:{}?zstd&per-file=10", path.display()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["run_0000.tsa", "run_0001.tsa", "run_0002.tsa"]);
    let reader = boost_tsa_reader(dir.path());
    for (name, count) in names.iter().zip([10, 10, 5]) {
        let text = read_with_boost(&reader, &dir.path().join(name));
        assert!(text.starts_with("archive type 0 compression 1 "), "{text}");
        assert_eq!(text.lines().last(), Some(format!("ok {count} {} {}", 2 * count, 22 * count).as_str()), "{text}");
    }
    let replayed = fles_run(&[
        "--local=2:1",
        "--timeslices=30",
        &format!("--replay={}", dir.path().join("run_0001.tsa").display()),
    ]);
    assert!(replayed.status.success(), "{}", String::from_utf8_lossy(&replayed.stderr));
}

/// `--timeslice-duration`: microslices of 100 µs (idx = k · 100,000 ns), timeslices of 1 ms
/// with 150 µs before and 250 µs after. By hand: timeslice t starts at t ms and holds the
/// microslice covering t ms − 150 µs (k = 10t − 2, from t = 1) up to the last starting before
/// (t + 1) ms + 250 µs (k = 10t + 12); timeslice 0 starts at microslice 0.
#[test]
fn timeslices_are_cut_by_time_as_flesnet_cuts_them() {
    use wirespeed_fles::model::ComponentView;
    use wirespeed_fles::source::TsaReader;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("time.tsa");
    let out = fles_run(&[
        "--local=2:1",
        "--timeslices=6",
        "--timeslice-duration=1000000",
        "--overlap-before=150000",
        "--overlap-after=250000",
        "--microslice-duration=100000",
        &format!("--output=tsa:{}", path.display()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut r = TsaReader::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap())).unwrap();
    for t in 0..6u64 {
        let ts = r.next_timeslice().unwrap().unwrap();
        let d = ts.descriptor;
        assert_eq!((d.index, d.start_time, d.duration, d.flags), (t, t * 1_000_000, 1_000_000, 0));
        assert_eq!(d.num_core_microslices, 10);
        let first = if t == 0 { 0 } else { 10 * t - 2 };
        for (bytes, count) in &ts.components {
            let c = ComponentView::new(bytes, *count).unwrap();
            let idx: Vec<u64> = (0..c.len()).map(|m| c.descriptor(m).unwrap().idx).collect();
            let expected: Vec<u64> = (first..=10 * t + 12).map(|k| k * 100_000).collect();
            assert_eq!(idx, expected, "timeslice {t}");
        }
    }
    assert_eq!(r.next_timeslice().unwrap(), None);
    let out = fles_run(&["--local=1:1", "--timeslice-duration=1000", "--timeslice-size=5"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--replay a.msa,b.msa`: each input replays its own microslice archive in full, cut by the
/// run's slicing; what comes out is its source, microslice for microslice (offsets made back
/// to back), and the run ends with the last whole timeslice the archives hold.
#[test]
fn microslice_archives_replay_in_full() {
    use wirespeed_fles::model::{ComponentView, MicrosliceDescriptor, ramp};
    use wirespeed_fles::output::MsaWriter;
    use wirespeed_fles::source::TsaReader;
    let dir = tempfile::tempdir().unwrap();
    // Input i: 95 microslices of FLESnet's ramp for channel i, 100 µs apart, 80 to 200 bytes.
    let source = |i: u16| -> Vec<(MicrosliceDescriptor, Vec<u8>)> {
        let mut offset = 0;
        (0..95u64)
            .map(|k| {
                let mut content = vec![0u8; 80 + 8 * ((k as usize * 7 + i as usize) % 16)];
                let crc = ramp::fill(i, &mut content);
                let d = MicrosliceDescriptor {
                    hdr_id: 0xDD,
                    hdr_ver: 1,
                    eq_id: ramp::EQ_ID,
                    flags: 0,
                    sys_id: ramp::SYS_ID,
                    sys_ver: ramp::SYS_VER,
                    idx: k * 100_000,
                    crc,
                    size: content.len() as u32,
                    offset,
                };
                offset += content.len() as u64 + 1000; // gaps in the stream: replay closes them
                (d, content)
            })
            .collect()
    };
    let mut paths = Vec::new();
    for i in 0..2 {
        let path = dir.path().join(format!("in{i}.msa"));
        let mut w = MsaWriter::new(std::fs::File::create(&path).unwrap(), 0, "h", "u").unwrap();
        for (d, content) in source(i) {
            w.write(&d, &content).unwrap();
        }
        w.finish().unwrap();
        paths.push(path.display().to_string());
    }
    let out_path = dir.path().join("out.tsa");
    let out = fles_run(&[
        "--local=2:1",
        "--timeslice-duration=1000000",
        "--overlap-after=100000",
        &format!("--replay={}", paths.join(",")),
        &format!("--output=tsa:{}", out_path.display()),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // 95 microslices hold 9 whole timeslices of 10 plus one after (the 10th would need k = 100).
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("9 timeslices in"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut r = TsaReader::new(std::io::BufReader::new(std::fs::File::open(&out_path).unwrap())).unwrap();
    let sources = [source(0), source(1)];
    for t in 0..9usize {
        let ts = r.next_timeslice().unwrap().unwrap();
        for (i, (bytes, count)) in ts.components.iter().enumerate() {
            let c = ComponentView::new(bytes, *count).unwrap();
            c.verify(i as u16).unwrap();
            let expected = &sources[i][10 * t..10 * t + 11];
            for (m, (d, content)) in expected.iter().enumerate() {
                let (got, got_content) = c.microslice(m).unwrap();
                assert_eq!((got.idx, got.crc, got.size, got_content), (d.idx, d.crc, d.size, &content[..]));
            }
            assert_eq!(c.len(), 11);
        }
    }
    assert_eq!(r.next_timeslice().unwrap(), None);
    let too_many = fles_run(&[
        "--local=2:1",
        "--timeslices=50",
        "--timeslice-duration=1000000",
        "--overlap-after=100000",
        &format!("--replay={}", paths.join(",")),
    ]);
    assert!(!too_many.status.success());
    let err = String::from_utf8_lossy(&too_many.stderr);
    assert!(err.contains("hold 9 whole timeslices"), "{err}");
}

/// `--verify`: all (the default) and sample (every 16th timeslice) find a flipped byte in a
/// timeslice they check; sample and none let one they do not check through, and say so.
#[test]
fn verify_checks_what_it_says() {
    for (verify, corrupt, passes) in
        [("all", "33", false), ("sample", "32", false), ("sample", "33", true), ("none", "32", true)]
    {
        let out = fles_run(&[
            "--local=2:1",
            "--timeslices=60",
            &format!("--verify={verify}"),
            &format!("--corrupt={corrupt}"),
        ]);
        assert_eq!(out.status.success(), passes, "{verify} {corrupt}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.contains(&format!("(--verify {verify})")), passes && verify != "all", "{text}");
    }
}
