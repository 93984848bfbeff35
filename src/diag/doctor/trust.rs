//! Which priority RoCE traffic really uses: the traffic class its packets carry, the NIC's trust
//! mode (DSCP or PCP) and its DSCP -> priority map.
//!
//! The traffic class: MLNX_OFED's global `tc/<port>/traffic_class` when set (the kernel applies
//! it to every QP that goes through `modify_qp`, NCCL's included), else `--roce-tclass` /
//! `NCCL_IB_TC`, else 0 (NCCL's default). rdma_cm's `default_roce_tos` is shown, but it applies
//! to RDMA-CM connections only, which NCCL does not make.

use std::path::{Path, PathBuf};

use crate::node::dcb::{DcbAnswer, DcbError, DscpLookup, Trust, TrustEvidence};

use super::report::{Finding, Severity};

/// Sysfs and configfs knobs are one short line.
const MAX_KNOB_BYTES: u64 = 4096;

/// The IP traffic class (ToS byte) RoCE packets carry, and where that was learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TrafficClass {
    pub value: u8,
    pub source: String,
}

impl TrafficClass {
    pub fn dscp(&self) -> u8 {
        self.value >> 2
    }
}

/// The priority RoCE traffic lands on, and how that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RocePriority {
    pub priority: u8,
    pub how: String,
}

/// What MLNX_OFED's `traffic_class` file holds: `Global tclass=<N>` when a global value is set,
/// then one line per rule (`src_ip=...,dst_ip=...,tclass=<N>`); empty when neither.
/// (`traffic_class_show` in MLNX_OFED's drivers/infiniband/hw/mlx5/main_ext.c.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OfedTrafficClass {
    pub global: Option<u8>,
    pub rules: usize,
}

pub fn parse_ofed_traffic_class(text: &str) -> Result<OfedTrafficClass, String> {
    let mut parsed = OfedTrafficClass {
        global: None,
        rules: 0,
    };
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(value) = line.strip_prefix("Global tclass=") {
            let value = value
                .trim()
                .parse::<u8>()
                .map_err(|e| format!("global tclass {value:?}: {e}"))?;
            parsed.global = Some(value);
        } else if line.contains("tclass=") {
            parsed.rules += 1;
        } else {
            return Err(format!("unexpected line {line:?}"));
        }
    }
    Ok(parsed)
}

fn read_knob(path: &Path) -> Option<Result<String, String>> {
    match crate::bounded_read::read_to_string(path, MAX_KNOB_BYTES) {
        Ok(text) => Some(Ok(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// The traffic class RoCE uses on `device` port `port`, with the facts learned on the way.
pub(crate) fn roce_traffic_class(
    sysfs: &Path,
    device: &str,
    port: u32,
    flag: Option<u8>,
) -> (TrafficClass, Vec<Finding>) {
    let mut findings = Vec::new();
    let ofed: PathBuf = sysfs
        .join("class/infiniband")
        .join(device)
        .join("tc")
        .join(port.to_string())
        .join("traffic_class");
    let mut global = None;
    match read_knob(&ofed).map(|r| r.and_then(|t| parse_ofed_traffic_class(&t))) {
        None => {}
        Some(Err(e)) => findings.push(Finding::port(
            "traffic-class",
            device,
            port,
            Severity::Info,
            format!("{} unreadable: {e}", ofed.display()),
        )),
        Some(Ok(tc)) => {
            global = tc.global;
            if tc.rules > 0 {
                findings.push(Finding::port(
                    "traffic-class",
                    device,
                    port,
                    Severity::Info,
                    format!(
                        "{} per-address traffic class rules in MLNX_OFED's tc/{port}/traffic_class: \
                         traffic to those addresses may use another priority than shown here",
                        tc.rules
                    ),
                ));
            }
        }
    }
    let cm = sysfs
        .join("kernel/config/rdma_cm")
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("default_roce_tos");
    if let Some(Ok(text)) = read_knob(&cm) {
        if let Ok(tos) = text.trim().parse::<u8>() {
            findings.push(Finding::port(
                "traffic-class",
                device,
                port,
                Severity::Info,
                format!(
                    "rdma_cm default_roce_tos {tos} (DSCP {}): applies to RDMA-CM connections \
                     only; NCCL sets its own with NCCL_IB_TC",
                    tos >> 2
                ),
            ));
        }
    }
    let tclass = match (global, flag) {
        (Some(value), flag) => TrafficClass {
            value,
            source: match flag {
                Some(f) if f != value => format!(
                    "MLNX_OFED sysfs tc/{port}/traffic_class, which overrides the {f} asked for"
                ),
                _ => format!("MLNX_OFED sysfs tc/{port}/traffic_class"),
            },
        },
        (None, Some(value)) => TrafficClass {
            value,
            source: "--roce-tclass / NCCL_IB_TC".into(),
        },
        (None, None) => TrafficClass {
            value: 0,
            source: "NCCL_IB_TC unset: NCCL's default".into(),
        },
    };
    (tclass, findings)
}

/// The trust mode and the priority the traffic class maps to; `None` where that cannot be told.
pub(crate) fn check_trust(
    dcb: &Result<DcbAnswer, DcbError>,
    tclass: &TrafficClass,
    device: &str,
    port: u32,
    netdev: &str,
    is_vf: bool,
) -> (Vec<Finding>, Option<RocePriority>) {
    let finding =
        |check, severity, message: String| Finding::port(check, device, port, severity, message);
    let answer = match dcb {
        Ok(answer) => answer,
        Err(e) => {
            return (
                vec![finding(
                    "qos-trust",
                    Severity::Info,
                    format!("trust mode and DSCP map unknown: DCB netlink: {e}"),
                )],
                None,
            )
        }
    };
    let (trust, evidence) = answer.trust();
    let evidence = match evidence {
        TrustEvidence::TrustTable => "DCB netlink, the driver's trust table".to_string(),
        TrustEvidence::DscpEntries(n) => format!("DCB netlink: {n} DSCP entries in the APP table"),
        TrustEvidence::NoDscpEntries => {
            "DCB netlink: no DSCP entry in the APP table, which mlx5 fills when trust is DSCP"
                .to_string()
        }
    };
    let dscp = tclass.dscp();
    let class = format!(
        "traffic class {} ({}) = DSCP {dscp}",
        tclass.value, tclass.source
    );
    match trust {
        Trust::Pcp if is_vf && answer.dscp_entries() == 0 => (
            vec![finding(
                "qos-trust",
                Severity::Info,
                format!(
                    "trust mode not visible on a VF ({evidence}; the PF's settings apply), RoCE \
                     {class}"
                ),
            )],
            None,
        ),
        Trust::Pcp if dscp != 0 => (
            vec![finding(
                "qos-trust",
                Severity::Warn,
                format!(
                    "trust PCP ({evidence}): the NIC ignores the DSCP of RoCE {class}; it \
                     classifies by the VLAN PCP, and untagged frames land on priority 0"
                ),
            )
            .with_fix(format!(
                "trust DSCP: mlnx_qos -i {netdev} --trust dscp (or dcb app add dev {netdev} \
                 dscp-prio {dscp}:<lossless priority>), or mark the priority in the VLAN PCP \
                 (NCCL_IB_SL) on a VLAN netdev"
            ))],
            None,
        ),
        Trust::Pcp => (
            vec![finding(
                "qos-trust",
                Severity::Info,
                format!(
                    "trust PCP ({evidence}): RoCE's priority is its VLAN PCP (the QP's service \
                     level, NCCL_IB_SL); untagged frames are priority 0"
                ),
            )],
            None,
        ),
        Trust::Dscp => {
            let trust_finding = finding(
                "qos-trust",
                Severity::Ok,
                format!("trust DSCP ({evidence})"),
            );
            match answer.dscp_priority(dscp) {
                DscpLookup::Priority(priority) => (
                    vec![
                        trust_finding,
                        finding(
                            "roce-priority",
                            Severity::Ok,
                            format!("RoCE {class} -> priority {priority} (DCB netlink APP table)"),
                        ),
                    ],
                    Some(RocePriority {
                        priority,
                        how: format!("DSCP {dscp} -> priority {priority} in the DCB APP table"),
                    }),
                ),
                DscpLookup::Several(mask) => (
                    vec![
                        trust_finding,
                        finding(
                            "roce-priority",
                            Severity::Warn,
                            format!(
                                "RoCE {class} has DCB APP entries to priorities {}: which one \
                                 the NIC uses is up to the driver",
                                priorities(mask)
                            ),
                        )
                        .with_fix(format!(
                            "keep one: dcb app show dev {netdev} dscp-prio, then dcb app del \
                             dev {netdev} dscp-prio {dscp}:<priority>"
                        )),
                    ],
                    None,
                ),
                DscpLookup::Unmapped => (
                    vec![
                        trust_finding,
                        finding(
                            "roce-priority",
                            Severity::Info,
                            format!("RoCE {class}, which has no entry in the DCB APP table"),
                        ),
                    ],
                    None,
                ),
            }
        }
    }
}

/// The priorities of a bitmap, `3,5`.
pub fn priorities(mask: u8) -> String {
    (0..8)
        .filter(|p| mask & (1 << p) != 0)
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::dcb::DcbApp;

    fn default_map() -> DcbAnswer {
        DcbAnswer {
            apps: (0..64)
                .map(|d| DcbApp {
                    selector: 5,
                    priority: (d >> 3) as u8,
                    protocol: d,
                })
                .collect(),
            ..DcbAnswer::default()
        }
    }

    fn tclass(value: u8) -> TrafficClass {
        TrafficClass {
            value,
            source: "test".into(),
        }
    }

    #[test]
    fn ofed_traffic_class_text() {
        assert_eq!(
            parse_ofed_traffic_class("Global tclass=106\n"),
            Ok(OfedTrafficClass {
                global: Some(106),
                rules: 0
            })
        );
        assert_eq!(
            parse_ofed_traffic_class(""),
            Ok(OfedTrafficClass {
                global: None,
                rules: 0
            })
        );
        let with_rule = "Global tclass=106\nsrc_ip=0.0.0.0,dst_ip=10.0.0.0/8,tclass=160\n";
        assert_eq!(parse_ofed_traffic_class(with_rule).map(|t| t.rules), Ok(1));
        assert!(parse_ofed_traffic_class("Global tclass=300\n").is_err());
        assert!(parse_ofed_traffic_class("garbage\n").is_err());
    }

    /// Real `traffic_class` contents (corpus kind `mlx5-traffic-class`), each with its expected
    /// reading; a sample without one fails.
    #[test]
    fn real_traffic_class_samples_read_as_expected() {
        for (path, expected) in crate::corpus::corpus("mlx5-traffic-class").with_expected_files() {
            let text = std::fs::read_to_string(&path).unwrap();
            let parsed = parse_ofed_traffic_class(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let got = format!(
                "global: {}\nrules: {}\n",
                parsed.global.map_or("none".to_string(), |g| g.to_string()),
                parsed.rules
            );
            assert_eq!(got, expected, "{}", path.display());
        }
    }

    #[test]
    fn the_global_tclass_wins_over_the_flag_and_the_default_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        let (tc, _) = roce_traffic_class(dir.path(), "mlx5_0", 1, None);
        assert_eq!(tc.value, 0);
        assert!(tc.source.contains("NCCL's default"), "{}", tc.source);
        let (tc, _) = roce_traffic_class(dir.path(), "mlx5_0", 1, Some(106));
        assert_eq!((tc.value, tc.dscp()), (106, 26));
        let knob = dir.path().join("class/infiniband/mlx5_0/tc/1");
        std::fs::create_dir_all(&knob).unwrap();
        std::fs::write(knob.join("traffic_class"), "Global tclass=160\n").unwrap();
        let (tc, _) = roce_traffic_class(dir.path(), "mlx5_0", 1, Some(106));
        assert_eq!(tc.value, 160);
        assert!(tc.source.contains("overrides the 106"), "{}", tc.source);
    }

    #[test]
    fn trust_dscp_maps_the_traffic_class() {
        let (findings, priority) =
            check_trust(&Ok(default_map()), &tclass(106), "mlx5_0", 1, "eth0", false);
        assert_eq!(priority.map(|p| p.priority), Some(3));
        assert!(findings.iter().all(|f| f.severity == Severity::Ok));
        assert!(
            findings[1].message.contains("DSCP 26 -> priority 3"),
            "{findings:?}"
        );
    }

    #[test]
    fn trust_pcp_with_dscp_marking_is_a_warning_but_not_on_a_vf() {
        let pcp = DcbAnswer::default();
        let (findings, priority) =
            check_trust(&Ok(pcp.clone()), &tclass(106), "m", 1, "eth0", false);
        assert_eq!(priority, None);
        assert_eq!(findings[0].severity, Severity::Warn);
        assert!(findings[0].fix.as_deref().unwrap().contains("--trust dscp"));
        let (findings, _) = check_trust(&Ok(pcp.clone()), &tclass(0), "m", 1, "eth0", false);
        assert_eq!(findings[0].severity, Severity::Info);
        let (findings, _) = check_trust(&Ok(pcp), &tclass(106), "m", 1, "eth0", true);
        assert_eq!(findings[0].severity, Severity::Info);
        assert!(findings[0].message.contains("VF"));
    }

    #[test]
    fn without_dcb_nothing_is_claimed() {
        let err = Err(DcbError::NotSupported {
            netdev: "veth0".into(),
        });
        let (findings, priority) = check_trust(&err, &tclass(106), "m", 1, "veth0", false);
        assert_eq!(priority, None);
        assert_eq!(findings[0].severity, Severity::Info);
        assert!(
            findings[0].message.contains("no DCB support"),
            "{findings:?}"
        );
    }
}
