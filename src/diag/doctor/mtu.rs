//! The netdev's MTU against the RoCE port's active MTU. For RoCE the kernel derives the port's
//! active MTU from the netdev's: `iboe_get_mtu` (include/rdma/ib_addr.h) takes off the RoCE
//! headers (GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 = 96 bytes, include/rdma/
//! ib_pack.h) and rounds down to an IB MTU; mlx5 reports the smaller of that and 4096. Sysfs has
//! no `active_mtu` file (ibv_devinfo shows it), so the figure here is that derivation.

use std::path::Path;

use super::report::{Finding, Severity};

/// The bytes `iboe_get_mtu` takes off the netdev MTU.
pub(crate) const ROCE_HEADER_BYTES: u32 = 96;
/// The largest IB MTU, and the one a lossless RDMA fabric is built for.
pub(crate) const FULL_ROCE_MTU: u32 = 4096;
/// The classic Ethernet MTU: above it, jumbo frames were set on purpose.
const ETHERNET_MTU: u32 = 1500;

/// The RoCE active MTU a netdev MTU gives, as `iboe_get_mtu` computes it; `None` below 256.
pub(crate) fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.saturating_sub(ROCE_HEADER_BYTES);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| room >= *m)
}

/// `class/net/<netdev>/mtu`.
pub(crate) fn read_mtu(sysfs: &Path, netdev: &str) -> Result<u32, String> {
    let path = sysfs.join("class/net").join(netdev).join("mtu");
    let text = crate::bounded_read::read_to_string(&path, 64)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("{}: {:?}: {e}", path.display(), text.trim()))
}

/// One port's finding; `siblings` are the other RoCE netdevs of the node with their MTU.
pub fn check(
    device: &str,
    port: u32,
    netdev: &str,
    mtu: &Result<u32, String>,
    siblings: &[(String, u32)],
) -> Finding {
    let finding = |severity, message: String| Finding::port("mtu", device, port, severity, message);
    let mtu = match mtu {
        Ok(mtu) => *mtu,
        Err(e) => return finding(Severity::Info, format!("netdev MTU unreadable: {e}")),
    };
    let source = "derived as the kernel does it, iboe_get_mtu: netdev MTU minus 96 header bytes; \
                  sysfs has no active_mtu";
    let fix = format!(
        "ip link set {netdev} mtu 9000 (at least {}), and the same MTU on the switch ports",
        FULL_ROCE_MTU + ROCE_HEADER_BYTES
    );
    let Some(active) = roce_active_mtu(mtu) else {
        return finding(
            Severity::Warn,
            format!("netdev MTU {mtu} is too small for RoCE (below 256 after 96 header bytes)"),
        )
        .with_fix(fix);
    };
    if active == FULL_ROCE_MTU {
        return finding(
            Severity::Ok,
            format!("netdev MTU {mtu} -> RoCE active MTU {active} ({source})"),
        );
    }
    let jumbo_sibling = siblings
        .iter()
        .filter(|(name, m)| name != netdev && *m > mtu)
        .max_by_key(|(_, m)| *m);
    if let Some((name, sibling)) = jumbo_sibling.filter(|(_, m)| *m > ETHERNET_MTU) {
        let theirs = roce_active_mtu(*sibling).unwrap_or(0);
        return finding(
            Severity::Warn,
            format!(
                "netdev MTU {mtu} -> RoCE active MTU {active}, while {name} runs {sibling} \
                 (RoCE {theirs}): an MTU mismatch between the RoCE ports ({source})"
            ),
        )
        .with_fix(fix);
    }
    if mtu > ETHERNET_MTU {
        return finding(
            Severity::Warn,
            format!(
                "netdev MTU {mtu} -> RoCE active MTU {active}: jumbo frames are set but too small \
                 for a {FULL_ROCE_MTU}-byte RoCE MTU ({source})"
            ),
        )
        .with_fix(fix);
    }
    finding(
        Severity::Info,
        format!(
            "netdev MTU {mtu} -> RoCE active MTU {active}: RoCE sends {active}-byte payloads; \
             jumbo frames (netdev MTU {} or more, where the switches carry them) give \
             {FULL_ROCE_MTU} ({source})",
            FULL_ROCE_MTU + ROCE_HEADER_BYTES
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_as_iboe_get_mtu_computes_it() {
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(4192), Some(4096));
        assert_eq!(roce_active_mtu(4191), Some(2048));
        assert_eq!(roce_active_mtu(4000), Some(2048));
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(1119), Some(512));
        assert_eq!(roce_active_mtu(351), None);
        assert_eq!(roce_active_mtu(0), None);
    }

    #[test]
    fn findings_by_case() {
        let none: &[(String, u32)] = &[];
        assert_eq!(check("m", 1, "a", &Ok(9000), none).severity, Severity::Ok);
        assert_eq!(check("m", 1, "a", &Ok(1500), none).severity, Severity::Info);
        let jumbo_too_small = check("m", 1, "a", &Ok(4000), none);
        assert_eq!(jumbo_too_small.severity, Severity::Warn);
        assert!(jumbo_too_small.message.contains("RoCE active MTU 2048"));
        let siblings = [("a".to_string(), 1500), ("b".to_string(), 9000)];
        let mismatch = check("m", 1, "a", &Ok(1500), &siblings);
        assert_eq!(mismatch.severity, Severity::Warn);
        assert!(
            mismatch.message.contains("while b runs 9000 (RoCE 4096)"),
            "{}",
            mismatch.message
        );
        assert_eq!(
            check("m", 1, "b", &Ok(9000), &siblings).severity,
            Severity::Ok
        );
        assert_eq!(check("m", 1, "a", &Ok(300), none).severity, Severity::Warn);
        assert_eq!(
            check("m", 1, "a", &Err("gone".into()), none).severity,
            Severity::Info
        );
    }

    #[test]
    fn the_mtu_file_is_read_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("class/net/eth0");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(net.join("mtu"), "9000\n").unwrap();
        assert_eq!(read_mtu(dir.path(), "eth0"), Ok(9000));
        std::fs::write(net.join("mtu"), "lots\n").unwrap();
        assert!(read_mtu(dir.path(), "eth0").unwrap_err().contains("lots"));
        assert!(read_mtu(dir.path(), "eth1").is_err());
    }
}
