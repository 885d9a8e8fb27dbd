//! Events during a simulated run: links losing part of their bandwidth for a while, nodes
//! turned off. One actor plays them at their times.

use std::str::FromStr;

use super::Shared;
use super::engine::{Link, now};
use super::net::{FOREVER, Port, SimMsg, Wake};
use crate::error::{FlesError, Result};

/// A node of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRef {
    Input(usize),
    Compute(usize),
}

/// Something that happens to the platform during a run, at simulated seconds.
#[derive(Debug, Clone, PartialEq)]
pub enum SimEvent {
    /// Links whose names contain `links` (every link if empty) lose `share` of their
    /// bandwidth from `from` to `to`.
    BandwidthDrop { from: f64, to: f64, share: f64, links: String },
    /// A node is turned off at `at`: it stops answering, and its peers find it by its silence.
    Off { node: NodeRef, at: f64 },
}

impl FromStr for SimEvent {
    type Err = wirespeed::ParseError;

    /// `drop:FROM-TO:SHARE[:LINKS]` (seconds, a share below 1, a part of link names) or
    /// `off:input:N@AT` / `off:compute:N@AT`.
    fn from_str(s: &str) -> std::result::Result<Self, wirespeed::ParseError> {
        let expected = "drop:FROM-TO:SHARE[:LINKS] or off:input|compute:N@SECONDS";
        let bad = || wirespeed::ParseError::new("event", s, expected);
        let seconds = |v: &str| v.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(bad);
        if let Some(rest) = s.strip_prefix("drop:") {
            let mut parts = rest.splitn(3, ':');
            let (span, share) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
            let (from, to) = span.split_once('-').ok_or_else(bad)?;
            let (from, to, share) = (seconds(from)?, seconds(to)?, seconds(share)?);
            if to <= from || share >= 1.0 {
                let expected = "a drop that ends after it starts, and takes less than all (a share below 1)";
                return Err(wirespeed::ParseError::new("event", s, expected));
            }
            return Ok(SimEvent::BandwidthDrop { from, to, share, links: parts.next().unwrap_or("").into() });
        }
        let rest = s.strip_prefix("off:").ok_or_else(bad)?;
        let (who, at) = rest.split_once('@').ok_or_else(bad)?;
        let (role, n) = who.split_once(':').ok_or_else(bad)?;
        let n: usize = n.parse().map_err(|_| bad())?;
        let node = match role {
            "input" => NodeRef::Input(n),
            "compute" => NodeRef::Compute(n),
            _ => return Err(bad()),
        };
        Ok(SimEvent::Off { node, at: seconds(at)? })
    }
}

/// The platform's links whose names hold `name`: at least one.
pub(super) fn named_links(name: &str) -> Result<Vec<Link>> {
    let named: Vec<Link> = Link::all().into_iter().filter(|l| l.name().contains(name)).collect();
    if named.is_empty() {
        let some: Vec<String> = Link::all().iter().take(4).map(Link::name).collect();
        return Err(FlesError::Config(format!(
            "no link's name holds {name:?} (the platform's links are named as {})",
            some.join(", ")
        )));
    }
    Ok(named)
}

/// One step of the events' timeline.
enum Step {
    /// Multiply the bandwidth of the links of event `i` by this factor.
    Scale(usize, f64),
    TurnOff(NodeRef),
}

/// The events' actor: plays each step at its time, and once the run is over tells every node
/// to stop.
pub(super) fn run(sh: &Shared, port: &mut Port) -> Result<()> {
    let s = &sh.settings;
    let mut timeline: Vec<(f64, Step)> = Vec::new();
    let mut links: Vec<Vec<Link>> = Vec::new();
    for (i, e) in s.events.iter().enumerate() {
        match e {
            SimEvent::BandwidthDrop { from, to, share, links: name } => {
                timeline.push((*from, Step::Scale(i, 1.0 - share)));
                timeline.push((*to, Step::Scale(i, 1.0 / (1.0 - share))));
                links.push(named_links(name)?);
            }
            SimEvent::Off { node, at } => {
                timeline.push((*at, Step::TurnOff(*node)));
                links.push(Vec::new());
            }
        }
    }
    timeline.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut steps = timeline.into_iter();
    let mut next = steps.next();
    loop {
        let wait = next.as_ref().map_or(FOREVER, |(at, _)| (at - now()).max(0.0));
        match port.next(wait)? {
            Wake::Msg(_, SimMsg::Over) => break,
            Wake::Timeout => {}
            _ => continue,
        }
        let Some((_, step)) = next.take() else { break };
        match step {
            Step::Scale(i, factor) => links[i].iter().for_each(|l| l.set_bandwidth(l.bandwidth() * factor)),
            Step::TurnOff(node) => port.send(sh.id(node), SimMsg::Die),
        }
        next = steps.next();
    }
    // Every node waits for this before its actor ends, so no transfer to it fails.
    for id in 0..sh.events_id() {
        port.send(id, SimMsg::Over);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events() {
        assert_eq!(
            "drop:0.1-0.2:0.25".parse(),
            Ok(SimEvent::BandwidthDrop { from: 0.1, to: 0.2, share: 0.25, links: String::new() })
        );
        assert_eq!(
            "drop:1-2:0.5:node-3".parse(),
            Ok(SimEvent::BandwidthDrop { from: 1.0, to: 2.0, share: 0.5, links: "node-3".into() })
        );
        assert_eq!("off:compute:3@0.05".parse(), Ok(SimEvent::Off { node: NodeRef::Compute(3), at: 0.05 }));
        assert_eq!("off:input:0@1".parse(), Ok(SimEvent::Off { node: NodeRef::Input(0), at: 1.0 }));
        for bad in ["drop:2-1:0.25", "drop:0-1:1", "drop:0-1", "off:gpu:1@2", "off:input:x@1", "flood"] {
            assert!(bad.parse::<SimEvent>().is_err(), "{bad}");
        }
    }
}
