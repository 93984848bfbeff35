//! Why a pod-attribution source could not be read. Each variant has a fixed `reason` label so
//! the collector can count failures by kind.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A failure of one source (a file, a directory, the kubelet's socket). I/O errors are shared
/// so results can be cloned into snapshots.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PodsError {
    #[error("{}: no such socket (is the kubelet's pod-resources API mounted?)", path.display())]
    SocketMissing { path: PathBuf },
    #[error("{}: permission denied", path.display())]
    PermissionDenied { path: PathBuf },
    #[error("pod-resources API unavailable: {detail}")]
    Unavailable { detail: String },
    #[error("pod-resources API: no answer within {after:?}")]
    Timeout { after: Duration },
    #[error("pod-resources API: List not implemented by this kubelet: {detail}")]
    Unimplemented { detail: String },
    #[error("pod-resources API: {code}: {detail}")]
    Rpc { code: String, detail: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: Arc<std::io::Error>,
    },
    #[error("{}: more than {limit} entries", path.display())]
    TooMany { path: PathBuf, limit: usize },
    #[error("{}: malformed: {detail}", path.display())]
    Malformed { path: PathBuf, detail: String },
}

impl PodsError {
    /// The `reason` label for this failure; one of [`PodsError::REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            PodsError::SocketMissing { .. } => "socket_missing",
            PodsError::PermissionDenied { .. } => "permission",
            PodsError::Unavailable { .. } => "unavailable",
            PodsError::Timeout { .. } => "timeout",
            PodsError::Unimplemented { .. } => "unimplemented",
            PodsError::Rpc { .. } => "rpc",
            PodsError::Io { .. } => "io",
            PodsError::TooMany { .. } => "too_many",
            PodsError::Malformed { .. } => "malformed",
        }
    }

    pub const REASONS: [&'static str; 9] = [
        "socket_missing",
        "permission",
        "unavailable",
        "timeout",
        "unimplemented",
        "rpc",
        "io",
        "too_many",
        "malformed",
    ];

    /// An I/O error on `path`, with permission problems told apart (the usual deployment
    /// mistake: the exporter's container lacks the host path or the capability).
    pub(crate) fn io(path: &std::path::Path, error: std::io::Error) -> PodsError {
        if error.kind() == std::io::ErrorKind::PermissionDenied {
            PodsError::PermissionDenied {
                path: path.to_path_buf(),
            }
        } else {
            PodsError::Io {
                path: path.to_path_buf(),
                source: Arc::new(error),
            }
        }
    }
}

impl PartialEq for PodsError {
    fn eq(&self, other: &PodsError) -> bool {
        self.to_string() == other.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_once() {
        let samples = [
            PodsError::SocketMissing { path: "/s".into() },
            PodsError::PermissionDenied { path: "/s".into() },
            PodsError::Unavailable { detail: "x".into() },
            PodsError::Timeout {
                after: Duration::from_secs(1),
            },
            PodsError::Unimplemented { detail: "x".into() },
            PodsError::Rpc {
                code: "internal".into(),
                detail: "x".into(),
            },
            PodsError::io("/f".as_ref(), std::io::Error::other("x")),
            PodsError::TooMany {
                path: "/d".into(),
                limit: 1,
            },
            PodsError::Malformed {
                path: "/f".into(),
                detail: "x".into(),
            },
        ];
        let reasons: Vec<&str> = samples.iter().map(PodsError::reason).collect();
        assert_eq!(reasons, PodsError::REASONS);
        let denied = PodsError::io(
            "/f".as_ref(),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert_eq!(denied.reason(), "permission");
    }
}
