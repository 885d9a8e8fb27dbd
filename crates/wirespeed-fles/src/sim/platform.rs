//! The platforms a simulation runs on: SimGrid XML written for the number of hosts needed, or
//! any SimGrid platform file.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{FlesError, Result};

/// Where the nodes run.
#[derive(Debug, Clone, PartialEq)]
pub enum Platform {
    /// A Cray XC40: Aries routers in a dragonfly.
    Xc40,
    /// A two-level fat tree with full bisection bandwidth, as InfiniBand EDR clusters are built.
    FatTree,
    /// One switch: each host has its own link of `bandwidth` bytes a second and `latency`
    /// seconds each way (a route crosses two), and the switch never limits.
    Switch { bandwidth: f64, latency: f64 },
    /// A SimGrid platform file; nodes take its hosts in natural order of their names.
    File(PathBuf),
}

/// SimGrid's default network model (LV08) multiplies every latency by this factor; the shipped
/// platforms divide by it so that an empty message takes the measured end-to-end latency.
const LV08_LATENCY_FACTOR: f64 = 13.01;

impl FromStr for Platform {
    type Err = wirespeed::ParseError;

    fn from_str(s: &str) -> std::result::Result<Self, wirespeed::ParseError> {
        match s {
            "xc40" => Ok(Platform::Xc40),
            "fat-tree" => Ok(Platform::FatTree),
            _ if s.starts_with("switch:") => {
                let bad =
                    || wirespeed::ParseError::new("platform", s, "switch:BANDWIDTH:LATENCY, as switch:10GBps:1us");
                let (bw, lat) = s["switch:".len()..].split_once(':').ok_or_else(bad)?;
                let bandwidth = quantity(bw, &[("GBps", 1e9), ("MBps", 1e6), ("Gbps", 1e9 / 8.0), ("Bps", 1.0)]);
                let latency = quantity(lat, &[("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)]);
                match (bandwidth, latency) {
                    (Some(bandwidth), Some(latency)) if bandwidth > 0.0 && latency >= 0.0 => {
                        Ok(Platform::Switch { bandwidth, latency })
                    }
                    _ => Err(bad()),
                }
            }
            _ if s.ends_with(".xml") => Ok(Platform::File(PathBuf::from(s))),
            _ => Err(wirespeed::ParseError::new(
                "platform",
                s,
                "xc40, fat-tree, switch:BANDWIDTH:LATENCY or a platform file (.xml)",
            )),
        }
    }
}

/// "10GBps" with units [("GBps", 1e9), ...]: the number times its unit's factor.
fn quantity(s: &str, units: &[(&str, f64)]) -> Option<f64> {
    let (unit, factor) = units.iter().find(|(u, _)| s.ends_with(u))?;
    s[..s.len() - unit.len()].parse::<f64>().ok().filter(|v| v.is_finite()).map(|v| v * factor)
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Platform::Xc40 => f.write_str("xc40"),
            Platform::FatTree => f.write_str("fat-tree"),
            Platform::Switch { bandwidth, latency } => {
                write!(f, "switch:{}GBps:{}us", bandwidth / 1e9, latency * 1e6)
            }
            Platform::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Platform {
    /// SimGrid settings the platform implies, before the user's own (which win). The shipped
    /// clusters are RDMA fabrics: no TCP acknowledgements flow back, which SimGrid's
    /// cross-traffic would model as a second flow beside each transfer, doubling what its
    /// solver works on (at 128 nodes: 53 s of wall time against 29, every figure the same).
    pub fn sim_defaults(&self) -> &'static [&'static str] {
        match self {
            Platform::Xc40 | Platform::FatTree => &["network/crosstraffic:0"],
            Platform::Switch { .. } | Platform::File(_) => &[],
        }
    }

    /// The platform file for at least `hosts` hosts: written into `dir` unless it is the
    /// user's own.
    pub fn file(&self, hosts: usize, dir: &Path) -> Result<PathBuf> {
        let xml = match self {
            Platform::File(p) => return Ok(p.clone()),
            Platform::Xc40 => xc40(hosts),
            Platform::FatTree => fat_tree(hosts),
            Platform::Switch { bandwidth, latency } => switch(hosts, *bandwidth, *latency),
        };
        let path = dir.join(format!("platform-{}.xml", std::process::id()));
        std::fs::write(&path, xml).map_err(|e| FlesError::Config(format!("writing {}: {e}", path.display())))?;
        Ok(path)
    }
}

fn document(cluster: &str) -> String {
    format!(
        "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n\
         <platform version=\"4.1\">\n  {cluster}\n</platform>\n"
    )
}

/// A Cray XC40 as large as `hosts` needs, in whole dragonfly groups.
///
/// Aries, as Cray describes it (Alverson, Froese, Kaplan, Roweth: "Cray XC Series Network",
/// WP-Aries01-1112, 2012; NeSI's "XC50 Aries Network Architecture" gives the same figures):
/// 4 nodes per Aries router, 16 routers per chassis joined all-to-all over the backplane
/// (rank 1), 6 chassis per group (two cabinets) whose routers of the same slot are joined by 3
/// copper links (rank 2, 15 links in 5 connectors), and optical links between groups (rank 3).
/// Electrical links run 3 lanes of 14 Gb/s, 5.25 GB/s each way; optical ones 12.5 Gb/s lanes,
/// about 4.7 GB/s. SimGrid's DRAGONFLY gives every link one bandwidth, so all take 5.25 GB/s,
/// the host's own link too (the NIC's PCIe 3 x16 host interface allows more, the network
/// port no more). We give each pair of groups 24 optical links (a mid-sized system's cabling).
/// Aries' MPI latency between nearby nodes is about 1.3 µs: spread over a route's 5 links and
/// divided by LV08's latency factor, that makes 20 ns a link.
fn xc40(hosts: usize) -> String {
    const PER_GROUP: usize = 6 * 16 * 4;
    let groups = hosts.div_ceil(PER_GROUP).max(1);
    let lat = 1.3e-6 / 5.0 / LV08_LATENCY_FACTOR;
    document(&format!(
        "<cluster id=\"xc40\" prefix=\"node-\" suffix=\"\" radical=\"0-{}\" speed=\"1Gf\" bw=\"5.25GBps\" \
         lat=\"{:.1}ns\" topology=\"DRAGONFLY\" topo_parameters=\"{groups},24;6,3;16,1;4\" \
         sharing_policy=\"SPLITDUPLEX\"/>",
        groups * PER_GROUP - 1,
        lat * 1e9,
    ))
}

/// A two-level fat tree of InfiniBand EDR (100 Gb/s, 12.5 GB/s each way) switches: 16 hosts
/// per leaf and 16 spines, so that every leaf has as much bandwidth up as down. EDR's MPI
/// latency is about 1 µs over a route's 4 links.
fn fat_tree(hosts: usize) -> String {
    let leaves = hosts.div_ceil(16).max(2);
    let lat = 1.0e-6 / 4.0 / LV08_LATENCY_FACTOR;
    document(&format!(
        "<cluster id=\"fat-tree\" prefix=\"node-\" suffix=\"\" radical=\"0-{}\" speed=\"1Gf\" bw=\"12.5GBps\" \
         lat=\"{:.1}ns\" topology=\"FAT_TREE\" topo_parameters=\"2;16,{leaves};1,16;1,1\" \
         sharing_policy=\"SPLITDUPLEX\"/>",
        leaves * 16 - 1,
        lat * 1e9,
    ))
}

/// One switch that never limits: a route is the sender's link up and the receiver's down.
fn switch(hosts: usize, bandwidth: f64, latency: f64) -> String {
    document(&format!(
        "<cluster id=\"switch\" prefix=\"node-\" suffix=\"\" radical=\"0-{}\" speed=\"1Gf\" bw=\"{bandwidth}Bps\" \
         lat=\"{latency}s\" bb_bw=\"{}Bps\" bb_lat=\"0s\" sharing_policy=\"SPLITDUPLEX\"/>",
        hosts.max(1) - 1,
        bandwidth * hosts.max(1) as f64,
    ))
}

/// Host names in natural order: "node-2" before "node-10".
pub fn natural_order(mut hosts: Vec<String>) -> Vec<String> {
    let key = |h: &String| {
        let digits = h.len() - h.bytes().rev().take_while(u8::is_ascii_digit).count();
        (h[..digits].to_string(), h[digits..].parse::<u64>().unwrap_or(0), h.clone())
    };
    hosts.sort_by_cached_key(key);
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_platforms() {
        assert_eq!("xc40".parse(), Ok(Platform::Xc40));
        assert_eq!("fat-tree".parse(), Ok(Platform::FatTree));
        assert_eq!("switch:10GBps:1us".parse(), Ok(Platform::Switch { bandwidth: 1e10, latency: 1e-6 }));
        assert_eq!("switch:8Gbps:2ms".parse(), Ok(Platform::Switch { bandwidth: 1e9, latency: 2e-3 }));
        assert_eq!("my.xml".parse(), Ok(Platform::File("my.xml".into())));
        assert!("switch:fast:1us".parse::<Platform>().is_err());
        assert!("torus".parse::<Platform>().is_err());
    }

    #[test]
    fn sizes_the_clusters_to_the_hosts() {
        assert!(xc40(384).contains("radical=\"0-383\"") && xc40(384).contains("\"1,24;6,3;16,1;4\""));
        assert!(xc40(1024).contains("radical=\"0-1151\"") && xc40(1024).contains("\"3,24;"));
        assert!(fat_tree(1024).contains("radical=\"0-1023\"") && fat_tree(1024).contains("2;16,64;1,16;1,1"));
    }

    #[test]
    fn orders_hosts_naturally() {
        let hosts = ["node-10", "node-2", "a", "node-1"].map(String::from).to_vec();
        assert_eq!(natural_order(hosts), ["a", "node-1", "node-2", "node-10"]);
    }
}
