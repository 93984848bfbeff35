//! What `ib-report` finds in a merged scan: links trained below what they should (width or
//! speed below the enabled one; where no output says what is enabled, below the other end's
//! enabled or the fabric's most common width and speed), ports with error counters, and ports
//! whose PortXmitWait is high next to the data they sent (IB's counterpart of PFC pause).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::ib::diags::is_saturated;
use crate::ib::diags::merge::Merged;
use crate::ib::model::{CounterValues, Guid, IbNode, IbPort, LinkSpeed, LinkWidth};

/// The counters that count errors: IBTA PortCounters' error fields, and any other field named
/// as an error, discard or drop (PortRcvErrorDetails' `PortMalformedPktErrors`...).
pub(crate) fn is_error_counter(name: &str) -> bool {
    matches!(
        name,
        "SymbolErrorCounter" | "LinkErrorRecoveryCounter" | "LinkDownedCounter" | "VL15Dropped"
    ) || name.contains("Error")
        || name.contains("Discard")
        || name.contains("Dropped")
}

/// One end of a link, as the report names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct End {
    pub description: String,
    /// Sysfs form (`0002:c903:006e:29b0`), as `rdma_ib_link_info{switch_guid}` has it; `None`
    /// for counters known only by LID (a perfquery output without topology).
    pub guid: Option<String>,
    /// The tools' form (`0x0002c903006e29b0`).
    pub guid_hex: Option<String>,
    pub lid: Option<u16>,
    pub port: u8,
    pub kind: Option<&'static str>,
}

impl End {
    fn of(node: &IbNode, port: &IbPort) -> End {
        End {
            description: node.description.clone(),
            guid: Some(node.guid.to_string()),
            guid_hex: Some(format!("0x{:016x}", node.guid.0)),
            lid: port.lid,
            port: port.number,
            kind: Some(node.kind.as_label()),
        }
    }

    fn far(port: &IbPort, nodes: &[IbNode]) -> Option<End> {
        if let Some(r) = &port.remote_lid_only {
            return Some(End {
                description: r.description.clone(),
                guid: None,
                guid_hex: None,
                lid: Some(r.lid),
                port: r.port,
                kind: None,
            });
        }
        let r = port.remote.as_ref()?;
        let lid = nodes
            .binary_search_by_key(&r.guid, |n| n.guid)
            .ok()
            .and_then(|i| nodes[i].ports.iter().find(|p| p.number == r.port))
            .and_then(|p| p.lid);
        Some(End {
            description: r.description.clone(),
            guid: Some(r.guid.to_string()),
            guid_hex: Some(format!("0x{:016x}", r.guid.0)),
            lid,
            port: r.port,
            kind: Some(r.kind.as_label()),
        })
    }

    /// The text form: `"desc" 0x… port 5`, or `LID 2052 port 1` (`"desc" LID 2052 port 1`
    /// where a description is known).
    pub fn text(&self) -> String {
        match &self.guid_hex {
            Some(g) => format!("{:?} {g} port {}", self.description, self.port),
            None => {
                let lid = self.lid.map_or("?".to_owned(), |l| l.to_string());
                match self.description.as_str() {
                    "" => format!("LID {lid} port {}", self.port),
                    description => format!("{description:?} LID {lid} port {}", self.port),
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DegradedLink {
    pub near: End,
    pub far: Option<End>,
    pub width: Option<String>,
    pub speed: Option<String>,
    pub expected_width: Option<String>,
    pub expected_speed: Option<String>,
    /// `enabled` (the port's own enabled width/speed), `remote_enabled`, or `fabric_common`
    /// (no output said what is enabled: the most common width/speed of the fabric's links).
    pub compared_with: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterValue {
    pub name: String,
    pub value: u64,
    /// At the maximum of its width: the true count is at least this.
    pub saturated: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorPort {
    pub port: End,
    pub far: Option<End>,
    pub counters: Vec<CounterValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CongestedPort {
    pub port: End,
    pub far: Option<End>,
    pub xmit_wait: u64,
    pub xmit_wait_saturated: bool,
    /// PortXmitData in 4-octet words, when known.
    pub xmit_data_words: Option<u64>,
    /// PortXmitWait ticks per PortXmitData word.
    pub wait_per_word: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Findings {
    pub degraded_links: Vec<DegradedLink>,
    pub error_ports: Vec<ErrorPort>,
    pub congested_ports: Vec<CongestedPort>,
    /// The most common active width and speed of the fabric's links, the yardstick of
    /// `fabric_common`.
    pub common_width: Option<String>,
    pub common_speed: Option<String>,
}

impl Findings {
    pub(crate) fn is_clean(&self) -> bool {
        self.degraded_links.is_empty()
            && self.error_ports.is_empty()
            && self.congested_ports.is_empty()
    }
}

fn mode<T: Ord + Copy>(values: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    // Ties go to the faster/wider value: BTreeMap iterates ascending and max_by_key keeps
    // the last maximum.
    counts.into_iter().max_by_key(|&(_, n)| n).map(|(v, _)| v)
}

/// `congestion_ratio`: PortXmitWait ticks per transmitted word above which a port is congested.
pub fn find(merged: &Merged, congestion_ratio: f64) -> Findings {
    let nodes = &merged.scan.nodes;
    let linked = || {
        nodes
            .iter()
            .flat_map(|n| n.ports.iter())
            .filter(|p| p.remote.is_some() || p.remote_lid_only.is_some())
    };
    let common_width: Option<LinkWidth> = mode(linked().filter_map(|p| p.active_width));
    let common_speed: Option<LinkSpeed> = mode(linked().filter_map(|p| p.active_speed));
    let mut out = Findings {
        common_width: common_width.map(|w| w.to_string()),
        common_speed: common_speed.map(|s| s.as_label().to_owned()),
        ..Findings::default()
    };
    let mut seen_links: BTreeSet<((Guid, u8), (Guid, u8))> = BTreeSet::new();
    for node in nodes {
        for port in &node.ports {
            let far = End::far(port, nodes);
            if let Some(remote) = &port.remote {
                let a = (node.guid, port.number);
                let b = (remote.guid, remote.port);
                let key = if a <= b { (a, b) } else { (b, a) };
                if !seen_links.contains(&key) {
                    let remote_port = nodes
                        .binary_search_by_key(&remote.guid, |n| n.guid)
                        .ok()
                        .and_then(|i| nodes[i].ports.iter().find(|p| p.number == remote.port));
                    if let Some(d) = degraded(
                        node,
                        port,
                        remote_port,
                        far.clone(),
                        common_width,
                        common_speed,
                    ) {
                        seen_links.insert(key);
                        out.degraded_links.push(d);
                    }
                }
            } else if port.remote_lid_only.is_some() {
                // The far node is not in the output (a partial scan): the near end's own
                // enabled width and speed still tell whether the link trained below them.
                let d = degraded(node, port, None, far.clone(), common_width, common_speed);
                out.degraded_links.extend(d);
            }
            check_counters(
                &mut out,
                End::of(node, port),
                far,
                &port.counters,
                congestion_ratio,
            );
        }
    }
    for block in &merged.unplaced {
        let Some(number) = block.port else { continue };
        let end = End {
            description: String::new(),
            guid: None,
            guid_hex: None,
            lid: block.lid,
            port: number,
            kind: None,
        };
        check_counters(&mut out, end, None, &block.counters, congestion_ratio);
    }
    out
}

fn degraded(
    node: &IbNode,
    port: &IbPort,
    remote: Option<&IbPort>,
    far: Option<End>,
    common_width: Option<LinkWidth>,
    common_speed: Option<LinkSpeed>,
) -> Option<DegradedLink> {
    let (width, speed) = (port.active_width, port.active_speed);
    let remote_width = remote.and_then(|r| r.enabled_width);
    let remote_speed = remote.and_then(|r| r.enabled_speed);
    let (expected_width, expected_speed, compared_with) =
        if port.enabled_width.is_some() || port.enabled_speed.is_some() {
            (port.enabled_width, port.enabled_speed, "enabled")
        } else if remote_width.is_some() || remote_speed.is_some() {
            (remote_width, remote_speed, "remote_enabled")
        } else {
            (common_width, common_speed, "fabric_common")
        };
    let below_width = matches!((width, expected_width), (Some(a), Some(e)) if a < e);
    let below_speed = matches!((speed, expected_speed), (Some(a), Some(e)) if a < e);
    if !(below_width || below_speed) {
        return None;
    }
    Some(DegradedLink {
        near: End::of(node, port),
        far,
        width: width.map(|w| w.to_string()),
        speed: speed.map(|s| s.as_label().to_owned()),
        expected_width: expected_width.map(|w| w.to_string()),
        expected_speed: expected_speed.map(|s| s.as_label().to_owned()),
        compared_with,
    })
}

fn check_counters(
    out: &mut Findings,
    end: End,
    far: Option<End>,
    counters: &CounterValues,
    congestion_ratio: f64,
) {
    let errors: Vec<CounterValue> = counters
        .iter()
        .filter(|&(name, value)| value > 0 && is_error_counter(name))
        .map(|(name, value)| CounterValue {
            name: name.to_owned(),
            value,
            saturated: is_saturated(name, value),
        })
        .collect();
    if let Some(wait) = counters.get("PortXmitWait") {
        let data = counters.get("PortXmitData");
        let ratio = data.filter(|&d| d > 0).map(|d| wait as f64 / d as f64);
        let saturated = is_saturated("PortXmitWait", wait);
        let congested = match ratio {
            Some(r) => r >= congestion_ratio,
            // Nothing to compare with: only a counter pinned at its maximum says much.
            None => saturated || (wait > 0 && data == Some(0)),
        };
        if congested {
            out.congested_ports.push(CongestedPort {
                port: end.clone(),
                far: far.clone(),
                xmit_wait: wait,
                xmit_wait_saturated: saturated,
                xmit_data_words: data,
                wait_per_word: ratio,
            });
        }
    }
    if !errors.is_empty() {
        out.error_ports.push(ErrorPort {
            port: end,
            far,
            counters: errors,
        });
    }
}
