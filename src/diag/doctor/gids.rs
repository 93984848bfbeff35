//! The RoCE GID table of a port: which addresses have a RoCE v2 GID on which netdev. RoCE v2
//! addresses peers by GID, so an IP address without its GID is invisible to RDMA.

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use super::report::{Finding, Severity};

/// One populated entry of `ports/<n>/gids/<index>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GidEntry {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// `gid_attrs/types/<index>`: `IB/RoCE v1` or `RoCE v2`.
    pub kind: String,
    /// `gid_attrs/ndevs/<index>`.
    pub netdev: Option<String>,
}

/// Reads the populated entries; empty slots (all zero) and unreadable attributes are skipped,
/// as the kernel answers EINVAL for the attributes of an empty slot.
pub(crate) fn read_table(port_dir: &Path) -> Vec<GidEntry> {
    let Ok(entries) = std::fs::read_dir(port_dir.join("gids")) else {
        return Vec::new();
    };
    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim().to_string())
    };
    let mut table: Vec<GidEntry> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|index| {
            let name = index.to_string();
            let gid: Ipv6Addr = read(port_dir.join("gids").join(&name))?.parse().ok()?;
            if gid.is_unspecified() {
                return None;
            }
            Some(GidEntry {
                index,
                gid,
                kind: read(port_dir.join("gid_attrs/types").join(&name))?,
                netdev: read(port_dir.join("gid_attrs/ndevs").join(&name)),
            })
        })
        .collect();
    table.sort_by_key(|e| e.index);
    table
}

/// The GID an address gets: IPv4 as `::ffff:a.b.c.d`, IPv6 as itself.
pub(crate) fn gid_of(address: IpAddr) -> Ipv6Addr {
    match address {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// One finding per address: the RoCE v2 GID index NCCL/UCX would pick, or its absence.
pub(crate) fn check_addresses(
    table: &[GidEntry],
    device: &str,
    port: u32,
    netdev: &str,
    addresses: &[IpAddr],
) -> Vec<Finding> {
    addresses
        .iter()
        .map(|&address| {
            let gid = gid_of(address);
            let found = table.iter().find(|e| {
                e.gid == gid && e.kind == "RoCE v2" && e.netdev.as_deref() == Some(netdev)
            });
            match found {
                Some(entry) => Finding::port(
                    "gid",
                    device,
                    port,
                    Severity::Ok,
                    format!(
                        "RoCE v2 GID index {} for {address} on {netdev}",
                        entry.index
                    ),
                ),
                None => Finding::port(
                    "gid",
                    device,
                    port,
                    Severity::Fail,
                    format!("no RoCE v2 GID for {address} on {netdev}"),
                )
                .with_fix(
                    "the kernel fills the GID table from the netdev's addresses: check that the \
                     address sits on this netdev itself (a bond or VLAN on top has its own), \
                     that RoCE v2 is enabled (cma_roce_mode), and re-add the address",
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses_are_mapped() {
        let gid: Ipv6Addr = "0000:0000:0000:0000:0000:ffff:0a00:0001".parse().unwrap();
        assert_eq!(gid_of("10.0.0.1".parse().unwrap()), gid);
    }
}
