//! Pod names by UID from the kubelet's log directories: `/var/log/pods/<namespace>_<pod>_<uid>/`
//! (`BuildPodLogsDirectory` in kubernetes `pkg/kubelet/kuberuntime/helpers.go` joins the three
//! with `_`). No API server, no credentials: the directory exists for every pod the kubelet runs.
//!
//! The split is unambiguous: namespaces are DNS labels and pod names DNS subdomains (RFC 1123:
//! lowercase letters, digits, `-`, and `.` for names), UIDs are hex with dashes: none holds
//! `_`. A name with another `_` is not the kubelet's and is skipped.

use std::collections::HashMap;
use std::path::Path;

use super::cgroup::normalized_uid;
use super::error::PodsError;
use super::PodName;

/// More pod log directories than any node runs (the kubelet's `maxPods` is 110 by default, a
/// few hundred at most): past it the directory is not what we think it is.
pub(crate) const MAX_ENTRIES: usize = 10_000;

/// UID (with dashes) -> namespace and pod name, from the entries of `pod_logs_dir`.
pub fn read(pod_logs_dir: &Path) -> Result<HashMap<String, PodName>, PodsError> {
    read_bounded(pod_logs_dir, MAX_ENTRIES)
}

/// [`read`] with `limit` entries at most (an error past it, rather than a partial answer that
/// would look whole).
pub fn read_bounded(
    pod_logs_dir: &Path,
    limit: usize,
) -> Result<HashMap<String, PodName>, PodsError> {
    let entries = std::fs::read_dir(pod_logs_dir).map_err(|e| PodsError::io(pod_logs_dir, e))?;
    let mut names = HashMap::new();
    for (seen, entry) in entries.enumerate() {
        if seen >= limit {
            return Err(PodsError::TooMany {
                path: pod_logs_dir.to_path_buf(),
                limit,
            });
        }
        let entry = entry.map_err(|e| PodsError::io(pod_logs_dir, e))?;
        // Not followed: the kubelet makes real directories.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Some((uid, name)) = entry.file_name().to_str().and_then(parse) {
            names.insert(uid, name);
        }
    }
    Ok(names)
}

/// `<namespace>_<pod>_<uid>` -> (uid, name).
pub fn parse(dir_name: &str) -> Option<(String, PodName)> {
    let (rest, uid) = dir_name.rsplit_once('_')?;
    let (namespace, pod) = rest.split_once('_')?;
    let valid = |s: &str, dot: bool| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dot && b == b'.')
            })
    };
    if !valid(namespace, false) || namespace.len() > 63 || !valid(pod, true) {
        return None;
    }
    let uid = normalized_uid(uid).filter(|_| !uid.contains('_'))?;
    Some((
        uid,
        PodName {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(namespace: &str, pod: &str) -> PodName {
        PodName {
            namespace: namespace.into(),
            pod: pod.into(),
        }
    }

    #[test]
    fn directory_names_split_into_namespace_pod_and_uid() {
        assert_eq!(
            parse("kube-system_kube-proxy-6r5bz_0599875a-ef2c-4d42-a648-51541e8a0110"),
            Some((
                "0599875a-ef2c-4d42-a648-51541e8a0110".into(),
                name("kube-system", "kube-proxy-6r5bz")
            ))
        );
        // Static pods: a 32-hex UID; dotted pod names.
        assert_eq!(
            parse("kube-system_etcd-node-1.example.com_187bff14cccb94f179e943eacce55bb3"),
            Some((
                "187bff14cccb94f179e943eacce55bb3".into(),
                name("kube-system", "etcd-node-1.example.com")
            ))
        );
        for bad in [
            "",
            "lost+found",
            "ns_pod",
            "ns_po_d_0599875a-ef2c-4d42-a648-51541e8a0110",
            "ns_pod_not-a-uid",
            "_pod_0599875a-ef2c-4d42-a648-51541e8a0110",
            "ns__0599875a-ef2c-4d42-a648-51541e8a0110",
            "Ns_pod_0599875a-ef2c-4d42-a648-51541e8a0110",
            "ns_pod_0599875a_ef2c_4d42_a648_51541e8a0110",
            "né_pod_0599875a-ef2c-4d42-a648-51541e8a0110",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_directory_is_read_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for entry in [
            "default_trainer-0_5f1c2a3b-1111-4222-8333-944445555666",
            "kube-system_kube-proxy-6r5bz_0599875a-ef2c-4d42-a648-51541e8a0110",
            "not-a-pod",
        ] {
            std::fs::create_dir(dir.path().join(entry)).unwrap();
        }
        // A file with a pod-like name is not a pod's log directory.
        std::fs::write(
            dir.path()
                .join("default_file_aaaaaaaa-1111-4222-8333-944445555666"),
            "",
        )
        .unwrap();
        let names = read(dir.path()).unwrap();
        assert_eq!(names.len(), 2);
        assert_eq!(
            names["5f1c2a3b-1111-4222-8333-944445555666"],
            name("default", "trainer-0")
        );
        let err = read_bounded(dir.path(), 3).unwrap_err();
        assert_eq!(err.reason(), "too_many");
        assert_eq!(read_bounded(dir.path(), 4).unwrap(), names);
        let missing = read(&dir.path().join("absent")).unwrap_err();
        assert_eq!(missing.reason(), "io");
    }
}
