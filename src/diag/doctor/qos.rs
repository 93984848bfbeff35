//! Lossless-RoCE settings of a port: PFC on the priority RoCE uses, ECN/DCQCN.

use std::path::Path;

use crate::node::dcb::{DcbAnswer, DcbError};
use crate::node::ecn_settings;
use crate::node::ethtool::{EthtoolError, RawStat};

use super::report::{Finding, Severity};
use super::trust::priorities;

/// Which priorities have PFC enabled, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PfcView {
    /// Bit `p` set: PFC enabled on priority `p`.
    pub enabled: u8,
    pub source: String,
}

/// mlx5 creates `rx_prio<p>_pause` only for priorities with PFC enabled, so their presence tells
/// the PFC set without DCB netlink; `None` when the driver has no mlx5-style per-priority
/// statistics at all.
pub(crate) fn inferred_pfc(stats: &[RawStat]) -> Option<u8> {
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
pub(crate) fn pfc_view(
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
pub(crate) fn check_pfc(
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

/// ECN/DCQCN from MLNX_OFED's `class/net/<netdev>/ecn/roce_{np,rp}/enable/<p>`, read as the
/// exporter reads it (`node::ecn_settings`); upstream kernels keep these in debugfs, so their
/// absence is no problem. A file that cannot be read or parsed (an empty one is the driver's
/// failed firmware query) is said to be unreadable, never taken for "off".
pub(crate) fn check_ecn(
    sysfs: &Path,
    device: &str,
    port: u32,
    netdev: &str,
    priority: u8,
) -> Finding {
    let class_net = sysfs.join("class/net");
    let ecn = class_net.join(netdev).join("ecn");
    let finding = |severity, message: String| Finding::port("ecn", device, port, severity, message);
    let request = ecn_settings::Request {
        priorities: 1u8.checked_shl(u32::from(priority)).unwrap_or(0),
        parameters: false,
    };
    let read = ecn_settings::read(&class_net, netdev, request);
    let Some(settings) = read.settings.filter(|_| read.errors.is_empty()) else {
        return match read.errors.first() {
            None => finding(
                Severity::Info,
                format!(
                    "ECN/DCQCN settings not visible on this kernel (no {}; upstream mlx5 keeps \
                     them in debugfs)",
                    ecn.display()
                ),
            ),
            Some(error) => finding(
                Severity::Warn,
                format!(
                    "ECN setting of priority {priority} unreadable ({}: {}): firmware query \
                     failed or the file is garbled",
                    error.path.display(),
                    error.detail
                ),
            ),
        };
    };
    let np = settings.enabled(ecn_settings::Point::Notification, priority);
    let rp = settings.enabled(ecn_settings::Point::Reaction, priority);
    if np == Some(true) && rp == Some(true) {
        return finding(
            Severity::Ok,
            format!("ECN enabled on priority {priority} (notification and reaction point)"),
        );
    }
    let describe = |on: Option<bool>, name: &str| match on {
        Some(true) => None,
        Some(false) => Some(name.to_string()),
        None => Some(format!("{name} not shown")),
    };
    let off: Vec<String> = [
        describe(np, "roce_np (CNPs sent)"),
        describe(rp, "roce_rp (rate reaction)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    finding(
        Severity::Warn,
        format!("ECN off on priority {priority}: {}", off.join(", ")),
    )
    .with_fix(format!(
        "echo 1 > {}/roce_np/enable/{priority} and {}/roce_rp/enable/{priority}",
        ecn.display(),
        ecn.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `class/net/eth0/ecn` tree with these `enable/3` contents (`None`: no file).
    fn tree(np: Option<&str>, rp: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let ecn = dir.path().join("class/net/eth0/ecn");
        for (role, value) in [("roce_np", np), ("roce_rp", rp)] {
            let enable = ecn.join(role).join("enable");
            std::fs::create_dir_all(&enable).unwrap();
            if let Some(value) = value {
                std::fs::write(enable.join("3"), value).unwrap();
            }
        }
        dir
    }

    fn check(dir: &tempfile::TempDir) -> Finding {
        check_ecn(dir.path(), "mlx5_0", 1, "eth0", 3)
    }

    #[test]
    fn both_points_on_is_ok_and_one_off_is_named() {
        let on = check(&tree(Some("1\n"), Some("1\n")));
        assert_eq!(on.severity, Severity::Ok, "{on:?}");
        let np_off = check(&tree(Some("0\n"), Some("1\n")));
        assert_eq!(np_off.severity, Severity::Warn);
        assert!(
            np_off.message.ends_with("priority 3: roce_np (CNPs sent)"),
            "{np_off:?}"
        );
    }

    /// An empty file (the driver's failed firmware query) or a garbled one is unreadable, not
    /// "off": doctor used to read anything but "1" as off.
    #[test]
    fn an_empty_or_garbled_enable_file_is_unreadable_not_off() {
        for value in ["", "on\n"] {
            let finding = check(&tree(Some(value), Some("1\n")));
            assert_eq!(finding.severity, Severity::Warn, "{value:?}");
            assert!(
                finding.message.contains("unreadable") && !finding.message.contains(" off "),
                "{value:?}: {finding:?}"
            );
        }
    }

    #[test]
    fn a_missing_priority_file_is_not_shown_and_no_ecn_directory_is_info() {
        let missing = check(&tree(Some("1\n"), None));
        assert!(
            missing
                .message
                .contains("roce_rp (rate reaction) not shown"),
            "{missing:?}"
        );
        let none = check_ecn(tempfile::tempdir().unwrap().path(), "mlx5_0", 1, "eth0", 3);
        assert_eq!(none.severity, Severity::Info, "{none:?}");
    }
}
