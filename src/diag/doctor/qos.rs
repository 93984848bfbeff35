//! Lossless-RoCE settings of a port: PFC on the RoCE priority, ECN/DCQCN, traffic class.

use std::path::Path;

use crate::node::ethtool::EthtoolSource;

use super::report::{Finding, Severity};

/// PFC from the driver statistics: mlx5 creates `rx_prio<p>_pause` only for priorities with PFC
/// enabled, so their presence tells the PFC set without DCB netlink.
pub fn check_pfc(
    ethtool: &dyn EthtoolSource,
    device: &str,
    port: u32,
    netdev: &str,
    priority: u8,
) -> Finding {
    let stats = match ethtool.stats(netdev) {
        Ok(stats) => stats,
        Err(e) => {
            return Finding::port(
                "pfc",
                device,
                port,
                Severity::Info,
                format!("cannot tell PFC: driver statistics unreadable ({e})"),
            )
        }
    };
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    if !names.iter().any(|n| n.starts_with("rx_prio0_")) {
        return Finding::port(
            "pfc",
            device,
            port,
            Severity::Info,
            format!("cannot tell PFC: {netdev}'s driver has no mlx5-style per-priority statistics"),
        );
    }
    let enabled: Vec<u8> = (0..8)
        .filter(|p| names.contains(&format!("rx_prio{p}_pause").as_str()))
        .collect();
    let source = "inferred from mlx5's rx_prio<p>_pause statistics, DCB netlink not queried";
    let fix = format!(
        "enable PFC on priority {priority} on the NIC (mlnx_qos -i {netdev} --pfc with a 1 at \
         position {priority}, or DCBX from the switch) and on the switch ports, or run lossy \
         RoCE with ECN on purpose"
    );
    if enabled.contains(&priority) {
        Finding::port(
            "pfc",
            device,
            port,
            Severity::Ok,
            format!("PFC enabled on priority {priority} ({source})"),
        )
    } else if enabled.is_empty() {
        Finding::port(
            "pfc",
            device,
            port,
            Severity::Warn,
            format!("PFC enabled on no priority ({source})"),
        )
        .with_fix(fix)
    } else {
        let list: Vec<String> = enabled.iter().map(u8::to_string).collect();
        Finding::port(
            "pfc",
            device,
            port,
            Severity::Warn,
            format!(
                "PFC enabled on priority {} but not on the RoCE priority {priority} ({source})",
                list.join(",")
            ),
        )
        .with_fix(fix)
    }
}

/// ECN/DCQCN from MLNX_OFED's `class/net/<netdev>/ecn/roce_{np,rp}/enable/<p>`; upstream kernels
/// keep these in debugfs, so their absence is no problem.
pub fn check_ecn(sysfs: &Path, device: &str, port: u32, netdev: &str, priority: u8) -> Finding {
    let ecn = sysfs.join("class/net").join(netdev).join("ecn");
    let read = |role: &str| {
        std::fs::read_to_string(ecn.join(role).join("enable").join(priority.to_string()))
            .ok()
            .map(|t| t.trim() == "1")
    };
    match (read("roce_np"), read("roce_rp")) {
        (None, None) => Finding::port(
            "ecn",
            device,
            port,
            Severity::Info,
            format!(
                "ECN/DCQCN settings not visible on this kernel (no {}; upstream mlx5 keeps them \
                 in debugfs)",
                ecn.display()
            ),
        ),
        (Some(true), Some(true)) => Finding::port(
            "ecn",
            device,
            port,
            Severity::Ok,
            format!("ECN enabled on priority {priority} (notification and reaction point)"),
        ),
        (np, rp) => {
            let off: Vec<&str> = [(np, "roce_np (CNPs sent)"), (rp, "roce_rp (rate reaction)")]
                .into_iter()
                .filter(|(on, _)| *on != Some(true))
                .map(|(_, name)| name)
                .collect();
            Finding::port(
                "ecn",
                device,
                port,
                Severity::Warn,
                format!("ECN off on priority {priority}: {}", off.join(", ")),
            )
            .with_fix(format!(
                "echo 1 > {}/roce_np/enable/{priority} and {}/roce_rp/enable/{priority}",
                ecn.display(),
                ecn.display()
            ))
        }
    }
}

/// MLNX_OFED's `class/infiniband/<dev>/tc/<port>/traffic_class`, shown when present.
pub fn traffic_class(sysfs: &Path, device: &str, port: u32) -> Option<Finding> {
    let path = sysfs
        .join("class/infiniband")
        .join(device)
        .join("tc")
        .join(port.to_string())
        .join("traffic_class");
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    Some(Finding::port(
        "traffic-class",
        device,
        port,
        Severity::Info,
        if text.is_empty() {
            "no traffic class set for RoCE (DSCP from the application or the default)".to_string()
        } else {
            format!("traffic class: {}", text.replace('\n', "; "))
        },
    ))
}
