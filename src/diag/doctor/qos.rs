//! Lossless-RoCE settings of a port: PFC on the priority RoCE uses, ECN/DCQCN.

use std::path::Path;

use crate::node::dcb::{DcbAnswer, DcbError};
use crate::node::ethtool::{EthtoolError, RawStat};

use super::report::{Finding, Severity};
use super::trust::priorities;

/// Which priorities have PFC enabled, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfcView {
    /// Bit `p` set: PFC enabled on priority `p`.
    pub enabled: u8,
    pub source: String,
}

/// mlx5 creates `rx_prio<p>_pause` only for priorities with PFC enabled, so their presence tells
/// the PFC set without DCB netlink; `None` when the driver has no mlx5-style per-priority
/// statistics at all.
pub fn inferred_pfc(stats: &[RawStat]) -> Option<u8> {
    let has = |name: &str| stats.iter().any(|(n, _)| n == name);
    if !stats.iter().any(|(n, _)| n.starts_with("rx_prio0_")) {
        return None;
    }
    Some(
        (0..8)
            .filter(|p| has(&format!("rx_prio{p}_pause")))
            .fold(0u8, |mask, p| mask | 1 << p),
    )
}

/// PFC from DCB netlink when it answers with a PFC attribute, else inferred from the driver
/// statistics (saying why DCB netlink was not used); `Err` says why neither could tell.
pub fn pfc_view(
    dcb: &Result<DcbAnswer, DcbError>,
    stats: &Result<Vec<RawStat>, EthtoolError>,
    netdev: &str,
) -> Result<PfcView, String> {
    let why_not_dcb = match dcb {
        Ok(DcbAnswer { pfc: Some(pfc), .. }) => {
            return Ok(PfcView {
                enabled: pfc.pfc_en,
                source: "DCB netlink".into(),
            })
        }
        Ok(_) => "its answer has no PFC attribute".to_string(),
        Err(e) => e.to_string(),
    };
    match stats {
        Ok(stats) => match inferred_pfc(stats) {
            Some(enabled) => Ok(PfcView {
                enabled,
                source: format!(
                    "inferred from mlx5's rx_prio<p>_pause statistics; DCB netlink: {why_not_dcb}"
                ),
            }),
            None => Err(format!(
                "DCB netlink: {why_not_dcb}; {netdev}'s driver has no mlx5-style per-priority \
                 statistics"
            )),
        },
        Err(e) => Err(format!(
            "DCB netlink: {why_not_dcb}; driver statistics unreadable ({e})"
        )),
    }
}

/// PFC on `priority`, the priority RoCE uses (`how` says how that was found, or is empty when
/// it is the `--roce-priority` setting).
pub fn check_pfc(
    view: &Result<PfcView, String>,
    device: &str,
    port: u32,
    netdev: &str,
    priority: u8,
    how: &str,
) -> Finding {
    let view = match view {
        Ok(view) => view,
        Err(why) => {
            return Finding::port(
                "pfc",
                device,
                port,
                Severity::Info,
                format!("cannot tell PFC: {why}"),
            )
        }
    };
    let source = &view.source;
    let fix = format!(
        "enable PFC on priority {priority} on the NIC (mlnx_qos -i {netdev} --pfc with a 1 at \
         position {priority}, dcb pfc set dev {netdev} prio-pfc {priority}:on, or DCBX from the \
         switch) and on the switch ports, or run lossy RoCE with ECN on purpose"
    );
    let how = if how.is_empty() {
        String::new()
    } else {
        format!(" ({how})")
    };
    if view.enabled & (1 << priority) != 0 {
        Finding::port(
            "pfc",
            device,
            port,
            Severity::Ok,
            format!("PFC enabled on priority {priority}{how} ({source})"),
        )
    } else if view.enabled == 0 {
        Finding::port(
            "pfc",
            device,
            port,
            Severity::Warn,
            format!("PFC enabled on no priority ({source})"),
        )
        .with_fix(fix)
    } else {
        Finding::port(
            "pfc",
            device,
            port,
            Severity::Warn,
            format!(
                "PFC enabled on priority {} but not on the RoCE priority {priority}{how} ({source})",
                priorities(view.enabled)
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
