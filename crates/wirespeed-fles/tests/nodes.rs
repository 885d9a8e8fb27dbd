//! Inputs and compute nodes over real connections, each node on its own thread: every
//! timeslice arrives complete, with every CRC right, once, in order at each compute node.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use wirespeed::{Config, Key};
use wirespeed_fles::frames::HostFrames;
use wirespeed_fles::model::Slicing;
use wirespeed_fles::node::RingSizes;
use wirespeed_fles::run::{ComputeListener, Settings, run_input};
use wirespeed_fles::sched::{DfsSettings, Kind};
use wirespeed_fles::source::Pattern;

fn url(fabric: &str, c: usize) -> String {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    match fabric {
        "shm" => {
            format!("shm://{}/wirespeed-fles-{}-{run}-{c}.sock", std::env::temp_dir().display(), std::process::id())
        }
        _ => format!("{fabric}://127.0.0.1:0"),
    }
}

/// How a run ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    After(u64),
    /// Every node is told to stop (as by a Ctrl-C that reaches them all).
    StopAll,
    /// Only compute node 0 is told to stop (a signal to one process).
    StopOneCompute,
}

/// Components of 11 microslices of 400 to 800 bytes, 64 KiB data rings.
fn settings(inputs: usize, computes: usize, scheduler: Kind, descs: u64, timeslices: Option<u64>) -> Settings {
    Settings {
        inputs,
        computes,
        scheduler,
        slicing: Slicing::count(10, 1),
        microslice_size: 600,
        microslice_spread: 200,
        pattern: Default::default(),
        input_rate: 0.0,
        replay: None,
        rings: RingSizes { data: 1 << 16, descs },
        timeslices,
        timeout: Duration::from_secs(20),
        corrupt: None,
        stop: Arc::new(AtomicBool::new(false)),
        monitor: None,
    }
}

fn run(fabric: &str, inputs: usize, computes: usize, scheduler: Kind) {
    run_until(fabric, inputs, computes, scheduler, End::After(60));
}

fn run_until(fabric: &str, inputs: usize, computes: usize, scheduler: Kind, end: End) {
    let key = Key::new("fles test key").unwrap();
    let config = Config::default();
    let limit = match end {
        End::After(n) => Some(n),
        _ => None,
    };
    let s = settings(inputs, computes, scheduler, 64, limit);
    let stop_one = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(inputs + computes));
    let listeners: Vec<_> =
        (0..computes).map(|c| ComputeListener::bind(&url(fabric, c), &key, &config).unwrap()).collect();
    let urls: Vec<String> = listeners.iter().map(|l| l.url().to_string()).collect();
    let mut computes_done = Vec::new();
    for (c, l) in listeners.into_iter().enumerate() {
        let (mut s, b) = (s.clone(), barrier.clone());
        if end == End::StopOneCompute {
            s.stop = if c == 0 { stop_one.clone() } else { Arc::new(AtomicBool::new(false)) };
        }
        computes_done.push(std::thread::spawn(move || {
            let mut seen = Vec::new();
            let summary = l
                .run(
                    &s,
                    c,
                    || {
                        b.wait();
                        Ok(())
                    },
                    |ts| {
                        assert_eq!(ts.components.len(), s.inputs);
                        for (i, v) in ts.components.iter().enumerate() {
                            v.verify(i as u16)?;
                            assert_eq!(v.len() as u64, s.slicing.per_component());
                            assert_eq!(v.descriptor(0).unwrap().idx, ts.index * s.slicing.core);
                        }
                        seen.push(ts.index);
                        Ok(())
                    },
                )
                .unwrap();
            (seen, summary)
        }));
    }
    let mut inputs_done = Vec::new();
    for i in 0..inputs {
        let (mut s, b, urls, key, config) = (s.clone(), barrier.clone(), urls.clone(), key.clone(), config.clone());
        if end == End::StopOneCompute {
            s.stop = Arc::new(AtomicBool::new(false));
        }
        inputs_done.push(std::thread::spawn(move || {
            run_input(&s, i, &urls, &key, &config, || {
                b.wait();
                Ok(())
            })
            .unwrap()
        }));
    }
    if end != End::After(60) {
        std::thread::sleep(Duration::from_millis(300));
        s.stop.store(true, Ordering::SeqCst);
        stop_one.store(true, Ordering::SeqCst);
    }
    let sent: Vec<u64> = inputs_done.into_iter().map(|i| i.join().unwrap().components).collect();
    let last = sent[0];
    assert!(sent.iter().all(|&n| n == last), "every input sent every timeslice below the end: {sent:?}");
    if let End::After(n) = end {
        assert_eq!(last, n);
    }
    for (c, h) in computes_done.into_iter().enumerate() {
        let (seen, summary) = h.join().unwrap();
        let want: Vec<u64> = (0..last).filter(|t| t % computes as u64 == c as u64).collect();
        assert_eq!(seen, want, "compute node {c}: every timeslice once, in order");
        assert_eq!(summary.completions.len(), want.len());
    }
}

fn dfs() -> Kind {
    Kind::Dfs(DfsSettings { interval_length: 6, ..DfsSettings::default() })
}

#[test]
fn round_robin_over_tcp() {
    run("tcp", 3, 2, Kind::RoundRobin);
}

#[test]
fn dfs_over_tcp() {
    run("tcp", 2, 3, dfs());
}

#[test]
fn dfs_over_ucx() {
    run("ucx", 2, 2, dfs());
}

#[test]
fn round_robin_over_ofi_tcp() {
    run("ofi+tcp", 2, 2, Kind::RoundRobin);
}

#[test]
fn round_robin_over_shm() {
    run("shm", 2, 2, Kind::RoundRobin);
}

#[test]
fn dfs_over_shm() {
    run("shm", 3, 3, dfs());
}

#[test]
fn a_run_without_a_limit_winds_down_when_stopped() {
    run_until("shm", 3, 2, Kind::RoundRobin, End::StopAll);
    run_until("tcp", 2, 3, dfs(), End::StopAll);
}

#[test]
fn a_stop_at_one_compute_node_winds_down_the_whole_run() {
    run_until("shm", 2, 2, dfs(), End::StopOneCompute);
}

/// Inputs on threads of their own, held at `barrier` with the compute node.
fn start_inputs(
    n: usize,
    s: &Settings,
    urls: &[String],
    barrier: &Arc<Barrier>,
) -> Vec<std::thread::JoinHandle<wirespeed_fles::run::InputSummary>> {
    let key = Key::new("fles test key").unwrap();
    (0..n)
        .map(|i| {
            let (s, b, urls, key) = (s.clone(), barrier.clone(), urls.to_vec(), key.clone());
            std::thread::spawn(move || {
                run_input(&s, i, &urls, &key, &Config::default(), || {
                    b.wait();
                    Ok(())
                })
                .unwrap()
            })
        })
        .collect()
}

#[test]
fn the_iterator_hands_out_timeslices_that_are_released_when_dropped_in_any_order() {
    let key = Key::new("fles test key").unwrap();
    let config = Config::default();
    // Room for a few components only: holding timeslices must not stall the run for good.
    let s = settings(2, 1, Kind::RoundRobin, 8, Some(50));
    let barrier = Arc::new(Barrier::new(3));
    let listener = ComputeListener::bind(&url("shm", 0), &key, &config).unwrap();
    let urls = vec![listener.url().to_string()];
    let b = barrier.clone();
    let mut timeslices = listener
        .timeslices(s.clone(), 0, move || {
            b.wait();
            Ok(())
        })
        .unwrap();
    let inputs = start_inputs(2, &s, &urls, &barrier);
    let mut held = Vec::new();
    let mut seen = Vec::new();
    for ts in timeslices.by_ref() {
        for (i, c) in ts.components().iter().enumerate() {
            c.verify(i as u16).unwrap();
        }
        seen.push(ts.index);
        held.push(ts);
        if held.len() == 3 {
            // Newest first.
            while let Some(t) = held.pop() {
                drop(t);
            }
        }
    }
    drop(held);
    assert_eq!(seen, (0..50).collect::<Vec<u64>>());
    for i in inputs {
        assert_eq!(i.join().unwrap().components, 50);
    }
    assert_eq!(timeslices.finish().unwrap().timeslices, 50);
}

#[test]
fn frames_hold_each_timeslice_contiguously_as_the_inputs_sent_it() {
    let key = Key::new("fles test key").unwrap();
    let config = Config::default();
    let s = settings(3, 1, dfs(), 8, Some(60));
    let barrier = Arc::new(Barrier::new(4));
    let listener = ComputeListener::bind(&url("tcp", 0), &key, &config).unwrap();
    let urls = vec![listener.url().to_string()];
    let b = barrier.clone();
    // Three frames of room for three components of at most 11 · (32 + 800) bytes.
    let memory = HostFrames::new(3, 3 * (11 * 832 + 256));
    let mut frames = listener
        .frames(
            s.clone(),
            0,
            move || {
                b.wait();
                Ok(())
            },
            memory,
        )
        .unwrap();
    let inputs = start_inputs(3, &s, &urls, &barrier);
    let mut seen = Vec::new();
    let mut held = Vec::new();
    for f in frames.by_ref() {
        assert_eq!((f.check.microslices, f.check.bad), (33, 0));
        assert_eq!(f.parts.iter().map(|p| p.input).collect::<Vec<_>>(), [0, 1, 2]);
        for p in &f.parts {
            let sent = Pattern::new(p.input as u16, 600, 200).component(f.index, s.slicing);
            // SAFETY: host frame memory, alive while the frame is held.
            let there = unsafe { std::slice::from_raw_parts((f.address as *const u8).add(p.offset), p.len) };
            assert_eq!(there, &sent[..], "timeslice {} input {}", f.index, p.input);
        }
        seen.push(f.index);
        held.push(f);
        if held.len() == 2 {
            held.remove(0); // the older one back first; one frame stays free for completion
        }
    }
    drop(held);
    assert_eq!(seen, (0..60).collect::<Vec<u64>>());
    for i in inputs {
        assert_eq!(i.join().unwrap().components, 60);
    }
    assert_eq!(frames.finish().unwrap().timeslices, 60);
}
