//! Which pod and container a process belongs to, read from its cgroup path
//! (`/proc/<pid>/cgroup`).
//!
//! The rules, as the kubelet and the runtimes name cgroups:
//! - the kubelet names a pod's cgroup `pod<UID>` (`podCgroupNamePrefix` in kubernetes
//!   `pkg/kubelet/cm/pod_container_manager_linux.go`), under `kubepods/<qos>/` or, for
//!   Guaranteed pods, right under `kubepods/`;
//! - with the systemd driver every component becomes a slice named after its ancestors
//!   (`kubepods-burstable-pod<UID>.slice`) and `-` in the UID becomes `_`, since systemd reads
//!   `-` as nesting (`ConvertCgroupNameToSystemd`, `pkg/kubelet/cm/cgroup_manager_linux.go`);
//!   kind and some distributions put the whole tree under a prefix (`/kubelet.slice/kubelet-…`,
//!   `/docker/<id>/kubepods/…`), and a cgroup namespace shows it as `/../…`;
//! - the container leaf is the runtime's: `cri-containerd-<id>.scope`, `crio-<id>.scope`,
//!   `docker-<id>.scope` (systemd) or the bare ID (cgroupfs), the ID being 64 hex digits as
//!   cadvisor matches it (`[a-z0-9]{64}`, `lib/container/containerd/factory.go` and
//!   `lib/container/crio/factory.go`, which also skips the `crio-conmon-` monitor scopes);
//! - containerd whose runc uses systemd cgroups while the kubelet does not writes runc's
//!   `slice:prefix:name` form literally: `…/kubepods-besteffort-pod<UID>.slice:cri-containerd:<id>`.
//!
//! Decisions: a process in a pod's cgroup but in no container leaf (none in practice: cgroup v2
//! keeps processes out of inner nodes) is `None`, as is a host process or a container outside
//! any pod (plain docker). Sandbox (pause) containers are containers like the others: their IDs
//! appear in no pod-resources answer, and pause opens no queue pair.

use std::path::Path;

use super::error::PodsError;
use super::{ContainerRef, Runtime};

/// `/proc/<pid>/cgroup` is one line per hierarchy; thousands of bytes at most.
const MAX_CGROUP_FILE: u64 = 64 * 1024;

/// The container a `/proc/<pid>/cgroup` text names: the first line whose path names a pod and a
/// container (cgroup v2's single `0::` line; in v1 or hybrid files some lines, e.g. `rdma:/`,
/// may name none).
pub(crate) fn container_of(cgroup_file: &str) -> Option<ContainerRef> {
    cgroup_lines(cgroup_file).find_map(|(_, path)| container_of_path(path))
}

/// [`container_of`] on `<proc_root>/<pid>/cgroup`. A process gone before its file is read is
/// `Ok(None)`: callers race exiting processes all the time.
pub(crate) fn container_of_pid(
    proc_root: &Path,
    pid: u32,
) -> Result<Option<ContainerRef>, PodsError> {
    let path = proc_root.join(pid.to_string()).join("cgroup");
    match crate::bounded_read::read_to_string(&path, MAX_CGROUP_FILE) {
        Ok(text) => Ok(container_of(&text)),
        // ESRCH: the process exited between open and read.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(e) => Err(PodsError::io(&path, e)),
    }
}

/// The pod-level cgroup directory a `/proc/<pid>/cgroup` text names, relative to the cgroup
/// root (v2: the mount point; v1: the `rdma` hierarchy), e.g.
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`: where the pod's
/// `rdma.current` and `rdma.max` are. The `rdma` line is preferred, then v2's `0::` line.
/// `None` for a host process, a path seen through a cgroup namespace (`/../…`: not relative to
/// the root), and runc's `slice:prefix:id` form (no pod-level directory exists there).
// No caller outside the tests yet: kept, with its real samples, for a reader of the pod's
// `rdma.current` and `rdma.max` (it was `pub` and unused until the rooms got doors).
#[cfg(test)]
pub(crate) fn pod_cgroup_dir(cgroup_file: &str) -> Option<String> {
    let lines: Vec<(&str, &str)> = cgroup_lines(cgroup_file).collect();
    let rdma = lines
        .iter()
        .filter(|(controllers, _)| controllers.split(',').any(|c| c == "rdma"));
    let unified = lines
        .iter()
        .filter(|(controllers, _)| controllers.is_empty());
    rdma.chain(unified)
        .chain(lines.iter())
        .find_map(|(_, path)| pod_dir_of_path(path))
}

/// The pod UID a cgroup directory name carries: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid>.slice` (systemd), with dashes. Static pods have 32-hex UIDs (a
/// hash of their manifest) and keep them as they are.
pub(crate) fn pod_uid_of_segment(segment: &str) -> Option<String> {
    let name = segment.strip_suffix(".slice").unwrap_or(segment);
    name.match_indices("pod").find_map(|(at, _)| {
        let starts_a_name = at == 0 || name[..at].ends_with('-');
        if starts_a_name {
            normalized_uid(&name[at + 3..])
        } else {
            None
        }
    })
}

/// `(controllers, path)` of each well-formed line. The path keeps any `:` it contains.
fn cgroup_lines(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _hierarchy = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?.trim_end();
        Some((controllers, path))
    })
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// The innermost pod component and the container leaf right below it.
fn container_of_path(path: &str) -> Option<ContainerRef> {
    let segments = segments(path);
    for (at, segment) in segments.iter().enumerate().rev() {
        if let Some(found) = runc_systemd_form(segment) {
            return Some(found);
        }
        if let Some(pod_uid) = pod_uid_of_segment(segment) {
            let (runtime, container_id) = container_leaf(segments.get(at + 1)?)?;
            return Some(ContainerRef {
                pod_uid,
                container_id,
                runtime,
            });
        }
    }
    None
}

#[cfg(test)]
fn pod_dir_of_path(path: &str) -> Option<String> {
    let segments = segments(path);
    if segments.contains(&"..") {
        return None;
    }
    let at = segments
        .iter()
        .rposition(|s| !s.contains(':') && pod_uid_of_segment(s).is_some())?;
    Some(format!("/{}", segments[..=at].join("/")))
}

/// runc's systemd `cgroupsPath` written as a directory name: `<pod slice>:<prefix>:<id>`
/// (opencontainers/runc `docs/systemd.md`).
fn runc_systemd_form(segment: &str) -> Option<ContainerRef> {
    let mut parts = segment.split(':');
    let (slice, prefix, id) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_container_id(id) {
        return None;
    }
    Some(ContainerRef {
        pod_uid: pod_uid_of_segment(slice)?,
        container_id: id.to_string(),
        runtime: runtime_of_prefix(prefix)?,
    })
}

fn runtime_of_prefix(prefix: &str) -> Option<Runtime> {
    match prefix {
        "cri-containerd" => Some(Runtime::Containerd),
        "crio" => Some(Runtime::CriO),
        "docker" => Some(Runtime::Docker),
        // `crio-conmon` and the like: a runtime's helper, not the container.
        _ => None,
    }
}

/// A container cgroup's name: `<prefix>-<id>[.scope]` or the bare ID.
fn container_leaf(leaf: &str) -> Option<(Runtime, String)> {
    let name = leaf.strip_suffix(".scope").unwrap_or(leaf);
    let (runtime, id) = match name.rsplit_once('-') {
        Some((prefix, id)) => (runtime_of_prefix(prefix)?, id),
        None => (Runtime::Unknown, name),
    };
    is_container_id(id).then(|| (runtime, id.to_string()))
}

/// 64 lowercase hex digits: containerd, CRI-O and docker IDs alike.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A UID as `8-4-4-4-12` hex digits separated by `-` or (systemd) `_`, returned with dashes; or
/// 32 hex digits (static pods).
pub(crate) fn normalized_uid(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let hex = |b: &u8| b.is_ascii_hexdigit();
    if bytes.len() == 32 && bytes.iter().all(hex) {
        return Some(text.to_string());
    }
    if bytes.len() != 36 {
        return None;
    }
    let separator = bytes[8];
    if separator != b'-' && separator != b'_' {
        return None;
    }
    let well_formed = bytes.iter().enumerate().all(|(i, b)| match i {
        8 | 13 | 18 | 23 => *b == separator,
        _ => hex(b),
    });
    well_formed.then(|| text.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0f99ad5f45163ed14ab8eaf92ed34bb4a631d007f8755a7d79be614bcb0df0ef";
    const UID: &str = "ff49d0be-16b7-4a49-bb9e-8ec1f1f4e27f";

    fn expect(path: &str, runtime: Runtime) {
        let found = container_of(&format!("0::{path}\n"))
            .unwrap_or_else(|| panic!("nothing found in {path}"));
        assert_eq!(
            (
                found.pod_uid.as_str(),
                found.container_id.as_str(),
                found.runtime
            ),
            (UID, ID, runtime),
            "{path}"
        );
    }

    #[test]
    fn every_layout_names_its_pod_and_container() {
        let u = UID.replace('-', "_");
        for (path, runtime) in [
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"), Runtime::Containerd),
            (format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"), Runtime::CriO),
            (format!("/kubepods.slice/kubepods-pod{u}.slice/docker-{ID}.scope"), Runtime::Docker),
            (format!("/kubepods/burstable/pod{UID}/{ID}"), Runtime::Unknown),
            (format!("/kubepods/pod{UID}/{ID}"), Runtime::Unknown),
            (format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope"), Runtime::Containerd),
            (format!("/system.slice/containerd.service/kubepods-burstable-pod{u}.slice:cri-containerd:{ID}"), Runtime::Containerd),
            (format!("/../../burstable/pod{UID}/{ID}"), Runtime::Unknown),
            // A cgroup the container made inside its own: still that container.
            (format!("/kubepods/pod{UID}/{ID}/init.scope"), Runtime::Unknown),
        ] {
            expect(&path, runtime);
        }
    }

    #[test]
    fn static_pods_keep_their_hash_uid() {
        let text = format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod187bff14cccb94f179e943eacce55bb3.slice/cri-containerd-{ID}.scope");
        let found = container_of(&text).unwrap();
        assert_eq!(found.pod_uid, "187bff14cccb94f179e943eacce55bb3");
    }

    #[test]
    fn no_container_no_answer() {
        let u = UID.replace('-', "_");
        for text in [
            String::new(),
            "0::/\n".into(),
            "0::/init.scope\n".into(),
            "0::/system.slice/containerd.service\n".into(),
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
            format!("0::/kubepods/burstable/pod{UID}"),
            format!("1:name=systemd:/kubepods.slice/kubepods-pod{u}.slice/crio-conmon-{ID}.scope"),
            format!("0::/kubepods/pod{UID}/{ID}.mount"),
            format!("0::/kubepods/pod{UID}/{}", &ID[1..]),
            format!("0::/kubepods/pod{}/{ID}", &UID[1..]),
            format!("0::/docker/{ID}"),
            "garbage without colons\n::\n:\n0:\n".into(),
        ] {
            assert_eq!(container_of(&text), None, "{text}");
        }
    }

    #[test]
    fn the_pod_directory_prefers_the_rdma_hierarchy() {
        let u = UID.replace('-', "_");
        let slice =
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice");
        let text = format!(
            "12:cpuset:/kubepods/pod{UID}/{ID}\n3:rdma:{slice}/cri-containerd-{ID}.scope\n0::/system.slice/x.service\n"
        );
        assert_eq!(pod_cgroup_dir(&text).as_deref(), Some(slice.as_str()));
        assert_eq!(
            pod_cgroup_dir(&format!("0::{slice}\n")).as_deref(),
            Some(slice.as_str())
        );
        assert_eq!(pod_cgroup_dir(&format!("0::/../pod{UID}/{ID}")), None);
        assert_eq!(
            pod_cgroup_dir(&format!(
                "0::/system.slice/containerd.service/kubepods-pod{u}.slice:cri-containerd:{ID}"
            )),
            None
        );
        assert_eq!(pod_cgroup_dir("0::/init.scope"), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let alphabet = b"0123456789abcdef-_:/.podkubeslicescrionl\n";
        for _ in 0..2000 {
            let mut text = String::new();
            for _ in 0..(seed % 200) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push(alphabet[(seed % alphabet.len() as u64) as usize] as char);
            }
            let _ = container_of(&text);
            let _ = pod_cgroup_dir(&text);
        }
        // Multi-byte text where byte offsets would split a character.
        let _ = container_of("0::/pod€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€/x");
        let _ = pod_uid_of_segment("éépod");
    }

    #[test]
    fn a_vanished_process_is_none_and_others_are_read() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(container_of_pid(dir.path(), 42), Ok(None));
        std::fs::create_dir(dir.path().join("7")).unwrap();
        std::fs::write(
            dir.path().join("7/cgroup"),
            format!("0::/kubepods/pod{UID}/{ID}\n"),
        )
        .unwrap();
        let found = container_of_pid(dir.path(), 7).unwrap().unwrap();
        assert_eq!(found.container_id, ID);
    }

    /// Real `/proc/<pid>/cgroup` texts and cgroup paths (corpus kind `cgroup`, sources in its
    /// `SOURCES.md`), each with its expected answer.
    #[test]
    fn real_samples_give_their_expected_answers() {
        for (sample, expected) in crate::corpus::corpus("cgroup").with_expected_files() {
            let text = std::fs::read_to_string(&sample).unwrap();
            let input = match sample.extension().and_then(|e| e.to_str()) {
                Some("cgroup") => text,
                // A bare cgroup path, as a cgroup v2 line would carry it.
                Some("path") => format!("0::{}\n", text.trim()),
                other => panic!(
                    "{}: a sample is .cgroup or .path, not {other:?}",
                    sample.display()
                ),
            };
            let mut lines = expected.lines();
            let container = match container_of(&input) {
                Some(c) => format!("{} {} {}", c.pod_uid, c.container_id, c.runtime.as_label()),
                None => "none".into(),
            };
            assert_eq!(
                Some(container.as_str()),
                lines.next(),
                "{}",
                sample.display()
            );
            let dir_line = format!(
                "pod_dir {}",
                pod_cgroup_dir(&input).unwrap_or_else(|| "none".into())
            );
            assert_eq!(
                Some(dir_line.as_str()),
                lines.next(),
                "{}",
                sample.display()
            );
        }
    }
}
