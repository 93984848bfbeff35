//! The network namespace this process runs in: which interfaces and addresses it sees, and what
//! that says about how the pod got its RDMA devices (ops.md 3.5).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::report::{Finding, Severity};
use super::DoctorError;

/// Interfaces of the namespace and their addresses.
#[derive(Debug, Default, Clone)]
pub struct NetnsView {
    pub interfaces: BTreeMap<String, Vec<IpAddr>>,
}

impl NetnsView {
    /// Loads a view from a file: one interface a line, its name then its addresses
    /// (`ens1f0np0 10.0.0.1 fd00::1/64`; a prefix length is ignored); `#` starts a comment.
    pub fn from_file(path: &Path) -> Result<NetnsView, DoctorError> {
        let text = std::fs::read_to_string(path).map_err(|source| DoctorError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        parse_view(path, &text)
    }

    /// Asks the kernel (getifaddrs) about the namespace of this process.
    pub fn from_kernel() -> Result<NetnsView, DoctorError> {
        let mut view = NetnsView::default();
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs fills `head` with a list we free below, once.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(DoctorError::Getifaddrs(std::io::Error::last_os_error()));
        }
        let mut cursor = head;
        while !cursor.is_null() {
            // SAFETY: `cursor` is a node of the list getifaddrs returned, not yet freed.
            let entry = unsafe { &*cursor };
            cursor = entry.ifa_next;
            if entry.ifa_name.is_null() {
                continue;
            }
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(entry.ifa_name) }
                .to_string_lossy()
                .into_owned();
            let addresses = view.interfaces.entry(name).or_default();
            // SAFETY: ifa_addr, when set, points to a sockaddr whose family says its real type.
            if let Some(address) = unsafe { ip_of(entry.ifa_addr) } {
                addresses.push(address);
            }
        }
        // SAFETY: frees the list from getifaddrs exactly once; no reference into it survives.
        unsafe { libc::freeifaddrs(head) };
        Ok(view)
    }

    pub fn has(&self, netdev: &str) -> bool {
        self.interfaces.contains_key(netdev)
    }

    /// Addresses RoCE can use: IPv6 link-local ones always have a GID and NCCL ignores them.
    pub(crate) fn routable_addresses(&self, netdev: &str) -> Vec<IpAddr> {
        self.interfaces
            .get(netdev)
            .into_iter()
            .flatten()
            .filter(|a| !is_link_local_v6(a))
            .copied()
            .collect()
    }
}

/// # Safety
/// `address` is null or points to a valid sockaddr of its `sa_family`.
unsafe fn ip_of(address: *const libc::sockaddr) -> Option<IpAddr> {
    if address.is_null() {
        return None;
    }
    match i32::from(unsafe { (*address).sa_family }) {
        libc::AF_INET => {
            let v4 = unsafe { &*(address as *const libc::sockaddr_in) };
            Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            let v6 = unsafe { &*(address as *const libc::sockaddr_in6) };
            Some(IpAddr::from(v6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

fn is_link_local_v6(address: &IpAddr) -> bool {
    matches!(address, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

fn parse_view(path: &Path, text: &str) -> Result<NetnsView, DoctorError> {
    let mut view = NetnsView::default();
    for (index, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let mut addresses: Vec<IpAddr> = Vec::new();
        for word in words {
            let address = word.split('/').next().unwrap_or(word);
            addresses.push(address.parse().map_err(|_| DoctorError::NetnsView {
                path: path.to_path_buf(),
                line: index + 1,
                reason: format!("{word:?} is not an IP address"),
            })?);
        }
        view.interfaces
            .entry(name.to_string())
            .or_default()
            .extend(addresses);
    }
    Ok(view)
}

/// How this process seems to reach its RoCE netdevs, judged by which of them it sees.
pub(crate) fn guess_mode(
    view: &NetnsView,
    roce_netdevs: &[String],
    vf_netdevs: &[String],
) -> Finding {
    let visible: Vec<&String> = roce_netdevs.iter().filter(|n| view.has(n)).collect();
    let others: Vec<&str> = view
        .interfaces
        .keys()
        .filter(|n| !roce_netdevs.contains(n))
        .map(String::as_str)
        .collect();
    let message = if roce_netdevs.is_empty() {
        "no RoCE ports: nothing to look for in the network namespace".to_string()
    } else if visible.iter().any(|n| vf_netdevs.contains(n)) {
        format!(
            "SR-IOV VF netdevs in this namespace ({}): SR-IOV CNI / Multus",
            join(&visible)
        )
    } else if visible.len() == roce_netdevs.len() {
        format!(
            "all {} RoCE netdevs visible: host network (or every port moved in)",
            roce_netdevs.len()
        )
    } else if visible.is_empty() {
        format!(
            "none of the {} RoCE netdevs is in this namespace (it has: {}): a pod on its CNI \
             network only",
            roce_netdevs.len(),
            others.join(", ")
        )
    } else {
        format!(
            "{} of {} RoCE netdevs in this namespace ({}): host devices moved in by Multus \
             (host-device CNI)",
            visible.len(),
            roce_netdevs.len(),
            join(&visible)
        )
    };
    Finding::host("network-mode", Severity::Info, message)
}

/// The port's netdev exists in this namespace and has an address RoCE can use.
///
/// `partial` is true when some RoCE netdevs are here and some are not (host-device / SR-IOV
/// pods get a few ports on purpose): a missing one is then a warning about NCCL_IB_HCA, not a
/// failure.
pub(crate) fn check_netdev(
    view: &NetnsView,
    device: &str,
    port: u32,
    netdev: Option<&str>,
    partial: bool,
) -> Vec<Finding> {
    let Some(netdev) = netdev else {
        return vec![Finding::port(
            "netdev",
            device,
            port,
            Severity::Fail,
            "RoCE port without a netdev (empty GID table)",
        )
        .with_fix("check that the mlx5_core Ethernet netdev exists and is up on the host")];
    };
    if !view.has(netdev) {
        let finding = Finding::port(
            "netdev",
            device,
            port,
            Severity::Fail,
            format!(
                "netdev {netdev} is not in this network namespace: RoCE cannot use this port here"
            ),
        );
        return vec![if partial {
            Finding {
                severity: Severity::Warn,
                ..finding
            }
            .with_fix(format!(
                "this pod got other ports on purpose? then keep NCCL/UCX off {device} \
                 (NCCL_IB_HCA lists only the devices whose netdev is here)"
            ))
        } else {
            finding.with_fix(
                "the pod only has its CNI interface: use host networking (hostNetwork: true) or \
                 Multus with the host-device / SR-IOV CNI to give it the RoCE netdev",
            )
        }];
    }
    let addresses = view.routable_addresses(netdev);
    if addresses.is_empty() {
        return vec![Finding::port(
            "ip-address",
            device,
            port,
            Severity::Fail,
            format!(
                "{netdev} has no IPv4 or global IPv6 address: RoCE v2 has no GID to use \
                 (NCCL: \"No IP address found for device\")"
            ),
        )
        .with_fix(
            "give the interface an address (host network config, or the IPAM section of the \
             Multus NetworkAttachmentDefinition)",
        )];
    }
    vec![Finding::port(
        "netdev",
        device,
        port,
        Severity::Ok,
        format!("{netdev} in this namespace, addresses {}", join(&addresses)),
    )]
}

/// Whether the device's PCI function is an SR-IOV VF: it has a `physfn` link to its PF (looked
/// at, not followed: the PF's directory need not be visible).
pub(crate) fn is_vf(sysfs: &Path, device: &str) -> bool {
    let pci: PathBuf = sysfs.join("class/infiniband").join(device).join("device");
    std::fs::symlink_metadata(pci.join("physfn")).is_ok()
}

fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_view_file() {
        let view = parse_view(
            Path::new("view"),
            "# pod view\nlo 127.0.0.1 ::1\neth0 10.244.1.5/24\nens1f0np0 fe80::1 fd00::1\n",
        )
        .unwrap();
        assert!(view.has("eth0"));
        assert_eq!(
            view.routable_addresses("ens1f0np0"),
            vec!["fd00::1".parse::<IpAddr>().unwrap()]
        );
        assert!(parse_view(Path::new("view"), "eth0 nonsense\n").is_err());
    }
}
