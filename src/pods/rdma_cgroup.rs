//! Each pod's RDMA cgroup: `rdma.current` and `rdma.max`, one line per RDMA device,
//! `mlx5_0 hca_handle=2 hca_object=2000`, a limit never set reading `max` (kernel
//! `Documentation/admin-guide/cgroup-v1/rdma.rst`, and the "RDMA" section of
//! `Documentation/admin-guide/cgroup-v2.rst`; the kernel prints every registered device, so a
//! device without use reads 0). The files exist in non-root cgroups only, and only where the
//! rdma controller is enabled: a pod without `rdma.current` is skipped.
//!
//! Pod cgroups are found below the cgroup root in either layout the kubelet makes:
//! v2 `<root>/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/` (systemd) or
//! `<root>/kubepods/<qos>/pod<uid>/` (cgroupfs), kind's `kubelet.slice/kubelet-kubepods…` too;
//! v1 the same below `<root>/rdma/`.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use super::cgroup::pod_uid_of_segment;
use super::error::PodsError;
use super::{PodRdmaCgroup, RdmaCgroupDevice};

/// One device line per RDMA device: a few KiB even on a large node.
const MAX_RDMA_FILE: u64 = 64 * 1024;

/// How far and how wide [`scan`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Directory levels below a starting point (`<root>` or `<root>/rdma`); pods sit at 3
    /// (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod….slice`), 4 with kind's
    /// prefix.
    pub max_depth: usize,
    /// Directory entries looked at in all; past it the scan fails with `too_many`.
    pub max_entries: usize,
}

impl Default for ScanLimits {
    fn default() -> ScanLimits {
        ScanLimits {
            max_depth: 6,
            max_entries: 50_000,
        }
    }
}

/// The RDMA cgroup of every pod below `cgroup_root` (`/sys/fs/cgroup`), sorted by pod UID.
pub fn scan(cgroup_root: &Path, limits: &ScanLimits) -> Result<Vec<PodRdmaCgroup>, PodsError> {
    if !cgroup_root.is_dir() {
        return Err(PodsError::io(
            cgroup_root,
            io::Error::new(io::ErrorKind::NotFound, "no cgroup root here"),
        ));
    }
    let mut walk = Walk {
        limits: *limits,
        entries: 0,
        pods: BTreeMap::new(),
    };
    // v2 (and a v1 root with its kubepods at the top, as a test tree may be), then v1's
    // rdma hierarchy.
    for start in [cgroup_root.to_path_buf(), cgroup_root.join("rdma")] {
        if start.is_dir() {
            walk.dir(&start, 0)?;
        }
    }
    Ok(walk.pods.into_values().collect())
}

struct Walk {
    limits: ScanLimits,
    entries: usize,
    pods: BTreeMap<String, PodRdmaCgroup>,
}

impl Walk {
    fn dir(&mut self, dir: &Path, depth: usize) -> Result<(), PodsError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            // A pod cgroup removed while we walk.
            Err(e) if vanished(&e) && depth > 0 => return Ok(()),
            Err(e) => return Err(PodsError::io(dir, e)),
        };
        for entry in entries {
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(PodsError::TooMany {
                    path: dir.to_path_buf(),
                    limit: self.limits.max_entries,
                });
            }
            let Ok(entry) = entry else { continue };
            // Not followed: cgroupfs has no links, and a link is not a cgroup.
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            match pod_uid_of_segment(name).filter(|_| !name.contains(':')) {
                Some(uid) => {
                    if self.pods.contains_key(&uid) {
                        continue;
                    }
                    if let Some(devices) = read_pod(&path)? {
                        self.pods.insert(
                            uid.clone(),
                            PodRdmaCgroup {
                                pod_uid: uid,
                                devices,
                            },
                        );
                    }
                }
                None if depth < self.limits.max_depth && leads_to_pods(name) => {
                    self.dir(&path, depth + 1)?;
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// The directories between the root and the pods: `kubepods*`, kind's `kubelet*`, cgroupfs's
/// QoS classes. Nothing else is entered (`system.slice` can hold thousands of units).
fn leads_to_pods(name: &str) -> bool {
    name.contains("kubepods")
        || name.contains("kubelet")
        || name == "burstable"
        || name == "besteffort"
}

fn vanished(e: &io::Error) -> bool {
    // ENODEV: a file of a cgroup being removed.
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// `None` when the pod has no `rdma.current` (controller off, or the pod just went away).
fn read_pod(dir: &Path) -> Result<Option<BTreeMap<String, RdmaCgroupDevice>>, PodsError> {
    let Some(current) = read_file(&dir.join("rdma.current"))? else {
        return Ok(None);
    };
    let mut devices = BTreeMap::new();
    for (device, values) in parse(&dir.join("rdma.current"), &current)? {
        let entry: &mut RdmaCgroupDevice = devices.entry(device).or_default();
        entry.hca_handle = values.hca_handle.unwrap_or(0);
        entry.hca_object = values.hca_object.unwrap_or(0);
    }
    if let Some(max) = read_file(&dir.join("rdma.max"))? {
        for (device, values) in parse(&dir.join("rdma.max"), &max)? {
            let entry = devices.entry(device).or_default();
            entry.max_hca_handle = values.hca_handle;
            entry.max_hca_object = values.hca_object;
        }
    }
    Ok(Some(devices))
}

fn read_file(path: &Path) -> Result<Option<String>, PodsError> {
    match crate::bounded_read::read_to_string(path, MAX_RDMA_FILE) {
        Ok(text) => Ok(Some(text)),
        Err(e) if vanished(&e) => Ok(None),
        Err(e) => Err(PodsError::io(path, e)),
    }
}

/// One line's values; `None` is `max` (or, in `rdma.current`, absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RdmaValues {
    pub hca_handle: Option<u64>,
    pub hca_object: Option<u64>,
}

/// The lines of `rdma.current` or `rdma.max`: device name, then `key=value` pairs. Unknown keys
/// are skipped: patches proposed upstream add `qp`, `mr`, `mr_mem` and an `index=N` for devices
/// sharing a name. A value neither a number nor `max` is malformed.
pub fn parse(path: &Path, text: &str) -> Result<Vec<(String, RdmaValues)>, PodsError> {
    let malformed = |detail: String| PodsError::Malformed {
        path: path.to_path_buf(),
        detail,
    };
    let mut lines = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let Some(device) = fields.next() else {
            continue;
        };
        let mut values = RdmaValues::default();
        for field in fields {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| malformed(format!("{field:?} is not key=value")))?;
            let value = match value {
                "max" => None,
                v => Some(
                    v.parse::<u64>()
                        .map_err(|_| malformed(format!("{field:?}: not a count")))?,
                ),
            };
            match key {
                "hca_handle" => values.hca_handle = value,
                "hca_object" => values.hca_object = value,
                _ => {}
            }
        }
        lines.push((device.to_string(), values));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const UID_A: &str = "5f1c2a3b-1111-4222-8333-944445555666";
    const UID_B: &str = "0599875a-ef2c-4d42-a648-51541e8a0110";

    fn pod(dir: &Path, current: Option<&str>, max: Option<&str>) {
        fs::create_dir_all(dir).unwrap();
        if let Some(text) = current {
            fs::write(dir.join("rdma.current"), text).unwrap();
        }
        if let Some(text) = max {
            fs::write(dir.join("rdma.max"), text).unwrap();
        }
        // A container below the pod: never read as a pod.
        fs::create_dir_all(dir.join("cri-containerd-0123.scope")).unwrap();
    }

    fn device(handle: u64, object: u64, max: (Option<u64>, Option<u64>)) -> RdmaCgroupDevice {
        RdmaCgroupDevice {
            hca_handle: handle,
            hca_object: object,
            max_hca_handle: max.0,
            max_hca_object: max.1,
        }
    }

    fn check(root: &Path, a: &Path, b: &Path, off: &Path) {
        pod(
            a,
            Some("mlx5_0 hca_handle=2 hca_object=2000\nmlx5_1 hca_handle=0 hca_object=0\n"),
            Some("mlx5_0 hca_handle=4 hca_object=max\nmlx5_1 hca_handle=max hca_object=max\n"),
        );
        pod(b, Some("mlx5_0 hca_handle=1 hca_object=17\n"), None);
        pod(off, None, None);
        let pods = scan(root, &ScanLimits::default()).unwrap();
        let uids: Vec<&str> = pods.iter().map(|p| p.pod_uid.as_str()).collect();
        assert_eq!(uids, [UID_B, UID_A]);
        let a = &pods[1].devices;
        assert_eq!(a["mlx5_0"], device(2, 2000, (Some(4), None)));
        assert_eq!(a["mlx5_1"], device(0, 0, (None, None)));
        assert_eq!(pods[0].devices["mlx5_0"], device(1, 17, (None, None)));
    }

    #[test]
    fn systemd_v2_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (a, b) = (UID_A.replace('-', "_"), UID_B.replace('-', "_"));
        let kubepods = root.join("kubepods.slice");
        fs::create_dir_all(root.join("system.slice/containerd.service")).unwrap();
        check(
            root,
            &kubepods.join(format!("kubepods-burstable.slice/kubepods-burstable-pod{a}.slice")),
            // Guaranteed: right under kubepods.slice.
            &kubepods.join(format!("kubepods-pod{b}.slice")),
            &kubepods.join(
                "kubepods-besteffort.slice/kubepods-besteffort-pod11111111_2222_4333_8444_555555555555.slice",
            ),
        );
    }

    #[test]
    fn cgroupfs_v2_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        check(
            root,
            &root.join(format!("kubepods/burstable/pod{UID_A}")),
            &root.join(format!("kubepods/besteffort/pod{UID_B}")),
            &root.join("kubepods/pod11111111-2222-4333-8444-555555555555"),
        );
    }

    #[test]
    fn kind_prefix_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (a, b) = (UID_A.replace('-', "_"), UID_B.replace('-', "_"));
        let base = root.join("kubelet.slice/kubelet-kubepods.slice");
        check(
            root,
            &base.join(format!(
                "kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{a}.slice"
            )),
            &base.join(format!("kubelet-kubepods-pod{b}.slice")),
            &base.join("kubelet-kubepods-pod11111111_2222_4333_8444_555555555555.slice"),
        );
    }

    #[test]
    fn v1_rdma_hierarchy_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // Other v1 hierarchies hold the same pods without rdma files.
        fs::create_dir_all(root.join(format!("memory/kubepods/burstable/pod{UID_A}"))).unwrap();
        let rdma = root.join("rdma");
        check(
            root,
            &rdma.join(format!("kubepods/burstable/pod{UID_A}")),
            &rdma.join(format!("kubepods/pod{UID_B}")),
            &rdma.join("kubepods/besteffort/pod11111111-2222-4333-8444-555555555555"),
        );
    }

    #[test]
    fn bounds_and_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(
            scan(&root.join("absent"), &ScanLimits::default())
                .unwrap_err()
                .reason(),
            "io"
        );
        for i in 0..20 {
            pod(
                &root.join(format!(
                    "kubepods/besteffort/pod{i:08}-1111-4222-8333-944445555666"
                )),
                Some("mlx5_0 hca_handle=0 hca_object=0\n"),
                None,
            );
        }
        let tight = ScanLimits {
            max_depth: 6,
            max_entries: 10,
        };
        assert_eq!(scan(root, &tight).unwrap_err().reason(), "too_many");
        let shallow = ScanLimits {
            max_depth: 0,
            max_entries: 1000,
        };
        assert!(scan(root, &shallow).unwrap().is_empty());
        assert_eq!(scan(root, &ScanLimits::default()).unwrap().len(), 20);

        let bad = root.join(format!("kubepods/pod{UID_A}"));
        pod(&bad, Some("mlx5_0 hca_handle=lots\n"), None);
        assert_eq!(
            scan(root, &ScanLimits::default()).unwrap_err().reason(),
            "malformed"
        );
        fs::write(bad.join("rdma.current"), "x".repeat(100_000)).unwrap();
        assert_eq!(
            scan(root, &ScanLimits::default()).unwrap_err().reason(),
            "io"
        );
    }

    #[test]
    fn lines_parse_leniently_but_never_guess_numbers() {
        let p = Path::new("rdma.max");
        let parsed = parse(
            p,
            "mlx5_0 hca_handle=max hca_object=12 qp=5 mr_mem=max\n\n  \nmlx5_1\n",
        )
        .unwrap();
        assert_eq!(
            parsed,
            [
                (
                    "mlx5_0".to_string(),
                    RdmaValues {
                        hca_handle: None,
                        hca_object: Some(12)
                    }
                ),
                ("mlx5_1".to_string(), RdmaValues::default()),
            ]
        );
        for bad in [
            "mlx5_0 hca_handle",
            "mlx5_0 hca_object=-1",
            "mlx5_0 hca_handle=1e3",
        ] {
            assert_eq!(parse(p, bad).unwrap_err().reason(), "malformed", "{bad}");
        }
    }
}
