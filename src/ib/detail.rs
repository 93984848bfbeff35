//! One switch's every counter, on demand: what `/ib/switch?target=` serves. A scrape of a large
//! subnet carries what an operator needs at every scrape (errors-only: links, counters that
//! moved, degraded links); the rest of one switch (its traffic counters, zero error counters,
//! every link's width and speed) is asked for when someone looks at that switch.
//!
//! Served from the last scan only: nothing is queried, so a request reaches no switch and no
//! node beyond what the scan read. In full mode a switch's families are a copy of its lines in
//! the text every scrape serves; in errors-only mode that text lacks them, so the scan's switches
//! are kept (their counters are compact, [`super::counters`]) and the one asked for is encoded
//! when asked, to the same bytes full mode would serve.

use std::sync::Arc;

use super::encoded::{PortFamilies, SwitchId};
use super::model::{FabricScan, Guid, IbNode, NodeKind};
use super::selection::Selection;

/// Why a target names no switch of the last scan. The texts are the endpoint's answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetailError {
    #[error("no InfiniBand subnet scan has finished yet")]
    NoScan,
    #[error("the last InfiniBand subnet scan failed: {0}")]
    ScanFailed(String),
    #[error(
        "no switch {0:?} in the last scan's {1} switches read here (a GUID, 0x0002c90300a1b2c3 \
         or 0002:c903:00a1:b2c3, or a NodeDescription; a switch of another shard or excluded by \
         the switch selection is not read here)"
    )]
    Unknown(String, usize),
    #[error(
        "{count} switches have the NodeDescription {description:?}: name one by its GUID ({guids})"
    )]
    Ambiguous {
        description: String,
        count: usize,
        guids: String,
    },
}

/// What one switch's detail is made from.
#[derive(Debug)]
enum Held {
    /// The full text every scrape serves: a switch's lines are copied out.
    Served(Arc<PortFamilies>),
    /// Errors-only: the switches read, by GUID as `switches` lists them, encoded when asked.
    Kept(Vec<IbNode>),
}

/// The last scan's switches, for the detail endpoint.
#[derive(Debug)]
pub struct SwitchDetails {
    /// The switches read, sorted by GUID.
    switches: Vec<SwitchId>,
    held: Held,
}

impl SwitchDetails {
    /// Takes what the details need of `scan`, whose ports were encoded as `ports`: nothing
    /// more when `ports` is the full text, else the switches `selection` kept (the HCAs and the
    /// rest of the scan are dropped here).
    pub fn keep(scan: FabricScan, ports: &Arc<PortFamilies>, selection: &Selection) -> Self {
        let switches = ports.switches().to_vec();
        if !ports.errors_only() {
            return SwitchDetails {
                switches,
                held: Held::Served(ports.clone()),
            };
        }
        let mut kept: Vec<IbNode> = scan
            .nodes
            .into_iter()
            .filter(|n| {
                n.kind == NodeKind::Switch && selection.keeps_switch(n.guid, &n.description)
            })
            .collect();
        kept.shrink_to_fit();
        SwitchDetails {
            switches,
            held: Held::Kept(kept),
        }
    }

    /// Switches read by the last scan.
    pub fn len(&self) -> usize {
        self.switches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.switches.is_empty()
    }

    /// The GUID of switch number `index`, in GUID order.
    pub fn guid(&self, index: usize) -> Option<Guid> {
        self.switches.get(index).map(|s| s.guid)
    }

    /// The switch `target` names: its GUID in either form, or its NodeDescription when no
    /// other switch has the same.
    fn find(&self, target: &str) -> Result<usize, DetailError> {
        let target = target.trim();
        if let Ok(guid) = target.parse::<Guid>() {
            return self
                .switches
                .binary_search_by_key(&guid, |s| s.guid)
                .map_err(|_| self.unknown(target));
        }
        let named: Vec<usize> = (0..self.switches.len())
            .filter(|&i| self.switches[i].description == target)
            .collect();
        match named[..] {
            [one] => Ok(one),
            [] => Err(self.unknown(target)),
            _ => Err(DetailError::Ambiguous {
                description: target.to_owned(),
                count: named.len(),
                guids: named
                    .iter()
                    .take(8)
                    .map(|&i| self.switches[i].guid.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// An answer echoes at most 80 characters of what it was asked.
    fn unknown(&self, target: &str) -> DetailError {
        DetailError::Unknown(target.chars().take(80).collect(), self.switches.len())
    }

    /// Every family of the switch `target` names, with every counter its ports had.
    pub fn switch(&self, target: &str) -> Result<PortFamilies, DetailError> {
        let index = self.find(target)?;
        let families = match &self.held {
            Held::Served(ports) => ports.switch(index),
            Held::Kept(nodes) => Some(PortFamilies::encode_switches(
                nodes.get(index).into_iter(),
                false,
            )),
        };
        families.ok_or_else(|| self.unknown(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::body::PreEncoded;
    use crate::exposition::Format;
    use crate::ib::model::{CounterValues, IbPort, LinkSpeed, LinkWidth, RemoteEnd};

    fn port(number: u8, wait: u64) -> IbPort {
        IbPort {
            number,
            active_width: Some(LinkWidth(4)),
            enabled_width: Some(LinkWidth(4)),
            active_speed: Some(LinkSpeed::Ndr),
            enabled_speed: Some(LinkSpeed::Ndr),
            remote: Some(RemoteEnd {
                guid: Guid(0xb83f_d203_0029_0000 + u64::from(number)),
                port: 1,
                description: format!("gpu-{number:02} mlx5_0"),
                kind: NodeKind::Hca,
            }),
            counters: [
                ("PortXmitData", 1000 + u64::from(number)),
                ("PortXmitWait", wait),
                ("SymbolErrorCounter", 0),
            ]
            .into_iter()
            .collect::<CounterValues>(),
            ..IbPort::default()
        }
    }

    /// Three switches, two with the same description, and an HCA.
    fn scan() -> FabricScan {
        let switch = |guid: u64, description: &str| IbNode {
            guid: Guid(guid),
            kind: NodeKind::Switch,
            description: description.into(),
            ports: (1..=4).map(|p| port(p, guid + u64::from(p))).collect(),
        };
        FabricScan {
            nodes: vec![
                switch(0x10, "leaf-01"),
                switch(0x20, "SwitchIB Mellanox Technologies"),
                switch(0x30, "SwitchIB Mellanox Technologies"),
                IbNode {
                    guid: Guid(0x40),
                    kind: NodeKind::Hca,
                    description: "gpu-01 mlx5_0".into(),
                    ports: vec![port(1, 0)],
                },
            ],
            ..FabricScan::default()
        }
    }

    fn text(families: &PortFamilies) -> String {
        let mut out = Vec::new();
        families.write(Format::OpenMetrics, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn details(errors_only: bool) -> SwitchDetails {
        let scan = scan();
        let ports = Arc::new(PortFamilies::encode(
            &scan,
            errors_only,
            &Selection::default(),
        ));
        SwitchDetails::keep(scan, &ports, &Selection::default())
    }

    #[test]
    fn a_switch_is_found_by_guid_in_both_forms_or_by_a_unique_description() {
        let details = details(false);
        for target in ["0x10", "0000:0000:0000:0010", "leaf-01", " leaf-01 "] {
            let detail = details.switch(target).unwrap();
            let out = text(&detail);
            assert!(out.contains(r#"switch="leaf-01""#), "{target}: {out}");
            assert!(!out.contains("SwitchIB"), "{target}: {out}");
        }
        assert!(matches!(
            details.switch("SwitchIB Mellanox Technologies"),
            Err(DetailError::Ambiguous { count: 2, .. })
        ));
        assert!(text(&details.switch("0x30").unwrap()).contains("0000:0000:0000:0030"));
        match details.switch(&"x".repeat(5000)) {
            Err(DetailError::Unknown(echoed, 3)) => assert_eq!(echoed.len(), 80),
            other => panic!("{other:?}"),
        }
        for unknown in ["0x40", "0x99", "spine-09", ""] {
            assert!(
                matches!(details.switch(unknown), Err(DetailError::Unknown(..))),
                "{unknown}"
            );
        }
    }

    #[test]
    fn a_switch_is_every_counter_of_its_ports_and_nothing_of_the_others() {
        let detail = details(false).switch("0x20").unwrap();
        let out = text(&detail);
        // 4 ports x (3 counters, link info, 4 gauges).
        assert_eq!(detail.series(), 4 * 8, "{out}");
        assert_eq!(out.lines().filter(|l| !l.starts_with('#')).count(), 32);
        assert!(
            out.contains("rdma_ib_switch_port_symbol_error_total{"),
            "{out}"
        );
        assert!(out.contains("rdma_ib_link_speed_enabled_gbps{"), "{out}");
        assert!(!out.contains("0000:0000:0000:0010"), "{out}");
    }

    #[test]
    fn errors_only_details_are_the_bytes_full_mode_serves() {
        let (full, errors_only) = (details(false), details(true));
        assert!(matches!(full.held, Held::Served(_)));
        assert!(matches!(errors_only.held, Held::Kept(ref n) if n.len() == 3));
        for target in ["0x10", "0x20", "0x30"] {
            let (a, b) = (
                full.switch(target).unwrap(),
                errors_only.switch(target).unwrap(),
            );
            assert_eq!(text(&a), text(&b), "{target}");
            assert_eq!(a.series(), b.series());
        }
    }
}
