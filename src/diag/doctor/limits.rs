//! Locked-memory limit and CAP_IPC_LOCK: verbs pin every registered buffer, and the kernel
//! charges the pinned pages to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.

use std::path::Path;

use super::report::{Finding, Severity};

/// Bit of CAP_IPC_LOCK in the capability sets of `/proc/<pid>/status`.
const CAP_IPC_LOCK_BIT: u32 = 14;

const MEMLOCK_FIX: &str = "set ulimit -l unlimited (memlock in /etc/security/limits.conf, \
     LimitMEMLOCK=infinity in systemd, --ulimit memlock=-1:-1 or the container runtime's \
     default ulimits for containers)";

/// The soft RLIMIT_MEMLOCK: `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemlockLimit {
    pub bytes: Option<u64>,
}

/// Reads `Max locked memory` from `<procfs>/self/limits` (so fixtures can give it), falling
/// back to getrlimit(2) when that file cannot be read.
pub(crate) fn memlock_limit(procfs: &Path) -> (MemlockLimit, String) {
    let path = procfs.join("self/limits");
    if let Some(limit) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| parse_limits(&text))
    {
        return (limit, path.display().to_string());
    }
    let mut rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rlimit) };
    let bytes = (rc == 0 && rlimit.rlim_cur != libc::RLIM_INFINITY).then_some(rlimit.rlim_cur);
    (MemlockLimit { bytes }, "getrlimit".to_string())
}

/// The soft limit column of the `Max locked memory` line.
fn parse_limits(text: &str) -> Option<MemlockLimit> {
    let rest = text
        .lines()
        .find_map(|line| line.strip_prefix("Max locked memory"))?;
    let soft = rest.split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(MemlockLimit { bytes: None });
    }
    soft.parse()
        .ok()
        .map(|bytes| MemlockLimit { bytes: Some(bytes) })
}

/// Whether CAP_IPC_LOCK is in `CapEff` of `<procfs>/self/status`; `None` when unreadable.
pub(crate) fn has_ipc_lock(procfs: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(procfs.join("self/status")).ok()?;
    let hex = text.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << CAP_IPC_LOCK_BIT) != 0)
}

pub fn check(procfs: &Path) -> Vec<Finding> {
    let ipc_lock = has_ipc_lock(procfs);
    let mut findings = vec![match ipc_lock {
        Some(true) => Finding::host("ipc-lock", Severity::Ok, "CAP_IPC_LOCK is effective"),
        Some(false) => Finding::host(
            "ipc-lock",
            Severity::Fail,
            "CAP_IPC_LOCK is not in the effective capability set: memory registration is \
             bounded by the memlock limit",
        )
        .with_fix(
            "add IPC_LOCK to the container's capabilities (securityContext.capabilities.add: \
             [\"IPC_LOCK\"], docker --cap-add IPC_LOCK)",
        ),
        None => Finding::host(
            "ipc-lock",
            Severity::Info,
            format!(
                "could not read CapEff from {}",
                procfs.join("self/status").display()
            ),
        ),
    }];
    let (limit, source) = memlock_limit(procfs);
    findings.push(match limit.bytes {
        None => Finding::host(
            "memlock",
            Severity::Ok,
            format!("locked memory unlimited ({source})"),
        ),
        // With CAP_IPC_LOCK the kernel does not charge verbs pinning to the limit, but
        // libraries that check the limit themselves (UCX, some MPI builds) still complain.
        Some(bytes) if ipc_lock == Some(true) => Finding::host(
            "memlock",
            Severity::Warn,
            format!(
                "locked memory limited to {} ({source}); CAP_IPC_LOCK lifts it for verbs, \
                 but libraries that check the limit may refuse",
                human_bytes(bytes)
            ),
        )
        .with_fix(MEMLOCK_FIX),
        Some(bytes) => Finding::host(
            "memlock",
            Severity::Fail,
            format!(
                "locked memory limited to {} ({source}): registering GPU/host buffers fails \
                 with ENOMEM",
                human_bytes(bytes)
            ),
        )
        .with_fix(MEMLOCK_FIX),
    });
    findings
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.0} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_soft_memlock_column() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max locked memory         65536                unlimited            bytes\n";
        assert_eq!(
            parse_limits(text),
            Some(MemlockLimit { bytes: Some(65536) })
        );
        let text = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_limits(text), Some(MemlockLimit { bytes: None }));
    }
}
