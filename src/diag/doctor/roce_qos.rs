//! The QoS path of one RoCE port, end to end: the traffic class RoCE packets carry, the trust
//! mode and DSCP map that turn it into a priority, PFC and ECN on that priority, where the bytes
//! really went, and the MTU. Every finding names its source (DCB netlink, a sysfs knob, the
//! driver statistics).

use std::path::Path;

use crate::node::dcb::DcbSource;
use crate::node::ethtool::EthtoolSource;

use super::report::{Finding, Severity};
use super::{mtu, prio_traffic, qos, trust};

/// The priority checked when nothing tells the one RoCE uses: the common lossless choice.
pub(crate) const DEFAULT_ROCE_PRIORITY: u8 = 3;

/// What the checks of one port need besides the port.
pub struct Sources<'a> {
    pub sysfs: &'a Path,
    pub ethtool: &'a dyn EthtoolSource,
    pub dcb: &'a dyn DcbSource,
    /// `--roce-priority`, when given.
    pub roce_priority: Option<u8>,
    /// `--roce-tclass` / `NCCL_IB_TC`, when given.
    pub roce_tclass: Option<u8>,
    /// Every RoCE netdev of the node with its MTU, for the MTU comparison.
    pub mtus: &'a [(String, u32)],
}

pub struct Port<'a> {
    pub device: &'a str,
    pub port: u32,
    pub netdev: &'a str,
    pub is_vf: bool,
}

pub fn check(sources: &Sources, port: &Port) -> Vec<Finding> {
    let Port {
        device,
        port: number,
        netdev,
        is_vf,
    } = *port;
    let mut findings = Vec::new();
    let dcb = sources.dcb.ieee(netdev);
    let stats = sources.ethtool.stats(netdev);

    let (tclass, tclass_facts) =
        trust::roce_traffic_class(sources.sysfs, device, number, sources.roce_tclass);
    findings.extend(tclass_facts);
    let (trust_findings, effective) =
        trust::check_trust(&dcb, &tclass, device, number, netdev, is_vf);
    findings.extend(trust_findings);

    let (priority, how) = match (&effective, sources.roce_priority) {
        (Some(found), Some(given)) if found.priority != given => {
            findings.push(
                Finding::port(
                    "roce-priority",
                    device,
                    number,
                    Severity::Warn,
                    format!(
                        "RoCE traffic lands on priority {} ({}), not on the priority {given} of \
                         --roce-priority",
                        found.priority, found.how
                    ),
                )
                .with_fix(format!(
                    "mark RoCE for priority {given}: a traffic class whose DSCP maps to it \
                     (NCCL_IB_TC = DSCP * 4), or move the DSCP (dcb app replace dev {netdev} \
                     dscp-prio {}:{given})",
                    tclass.dscp()
                )),
            );
            (found.priority, found.how.clone())
        }
        (Some(found), _) => (found.priority, found.how.clone()),
        (None, given) => (given.unwrap_or(DEFAULT_ROCE_PRIORITY), String::new()),
    };

    let pfc = qos::pfc_view(&dcb, &stats, netdev);
    findings.push(qos::check_pfc(&pfc, device, number, netdev, priority, &how));
    findings.push(qos::check_ecn(
        sources.sysfs,
        device,
        number,
        netdev,
        priority,
    ));
    if let Ok(stats) = &stats {
        findings.push(prio_traffic::check(stats, &pfc, device, number, netdev));
    }
    let mtu = mtu::read_mtu(sources.sysfs, netdev);
    findings.push(mtu::check(device, number, netdev, &mtu, sources.mtus));
    findings
}
