//! Are there RDMA devices, and can this process open their character devices?

use std::io::ErrorKind;
use std::path::Path;

use crate::node::sysfs::NodeSnapshot;

use super::report::{Finding, Severity};

const RESOURCE_FIX: &str = "mount /dev/infiniband into the container, or request the rdma/… \
     resource of the RDMA device plugin (e.g. rdma/rdma_shared_device_a: 1) so it injects them";

/// `class/infiniband` present and non-empty.
pub(crate) fn check_presence(sysfs: &Path, snapshot: &NodeSnapshot) -> Finding {
    let class = sysfs.join("class/infiniband");
    if snapshot.devices.is_empty() {
        return Finding::host(
            "devices",
            Severity::Fail,
            format!("no RDMA devices in {}", class.display()),
        )
        .with_fix(
            "on a host: load the driver (modprobe mlx5_ib for ConnectX; check dmesg and \
             lspci); in a pod: request the RDMA device plugin's resource (rdma/…) or the SR-IOV \
             VF resource, and check that the node has RDMA NICs",
        );
    }
    let names: Vec<&str> = snapshot.devices.iter().map(|d| d.name.as_str()).collect();
    Finding::host(
        "devices",
        Severity::Ok,
        format!("{} RDMA devices: {}", names.len(), names.join(", ")),
    )
}

/// `<dev>/infiniband/uverbs*` and `rdma_cm`: present and openable read-write, which is what
/// libibverbs and librdmacm do first.
pub(crate) fn check_dev_files(dev: &Path) -> Vec<Finding> {
    let dir = dev.join("infiniband");
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("uverbs"))
            .collect(),
        Err(e) => {
            let message = match e.kind() {
                ErrorKind::NotFound => format!("{} does not exist", dir.display()),
                _ => format!("{}: {e}", dir.display()),
            };
            return vec![Finding::host("dev-files", Severity::Fail, message).with_fix(RESOURCE_FIX)];
        }
    };
    names.sort();
    let mut findings = Vec::new();
    if names.is_empty() {
        findings.push(
            Finding::host(
                "dev-files",
                Severity::Fail,
                format!("no uverbs devices in {}", dir.display()),
            )
            .with_fix(RESOURCE_FIX),
        );
    }
    names.push("rdma_cm".to_string());
    let mut opened = Vec::new();
    for name in names {
        let path = dir.join(&name);
        match open_rw(&path) {
            Ok(()) => opened.push(name),
            Err(e) => findings.push(
                Finding::host(
                    "dev-files",
                    Severity::Fail,
                    format!("cannot open {}: {}", path.display(), explain(&e)),
                )
                .with_fix(RESOURCE_FIX),
            ),
        }
    }
    if !opened.is_empty() {
        findings.push(Finding::host(
            "dev-files",
            Severity::Ok,
            format!("opened read-write: {}", opened.join(", ")),
        ));
    }
    findings
}

/// Opens and closes at once; NONBLOCK so that a FIFO in a fixture cannot hang the run.
fn open_rw(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map(drop)
}

fn explain(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound => "missing (not mounted into this container)".into(),
        ErrorKind::PermissionDenied => {
            "permission denied (file mode, or the container's device cgroup does not allow it)"
                .into()
        }
        _ => e.to_string(),
    }
}
