//! Secrets of switch targets, shared by SNMP (communities, SNMPv3 passwords) and gNMI
//! (passwords): where the config says they are, and the value once read, which never prints.

use std::fmt;
use std::path::{Path, PathBuf};

/// A community string or password: never printed, logged or exported.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret comes from: a file or an environment variable, never the config file itself
/// (config files get pasted into tickets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    Env(String),
}

impl SecretSource {
    /// `<what>_file` and `<what>_env` as written: at most one of them.
    pub(crate) fn from_pair(
        file: Option<PathBuf>,
        env: Option<String>,
        what: &str,
    ) -> Result<Option<Self>, String> {
        match (file, env) {
            (Some(file), None) => Ok(Some(SecretSource::File(file))),
            (None, Some(var)) => Ok(Some(SecretSource::Env(var))),
            (None, None) => Ok(None),
            (Some(_), Some(_)) => Err(format!("set only one of {what}_file and {what}_env")),
        }
    }

    /// Reads the secret; errors name the file or variable, never the value.
    pub fn read(&self) -> Result<Secret, String> {
        match self {
            SecretSource::File(path) => read_value_file(path).map(Secret),
            SecretSource::Env(var) => std::env::var(var)
                .map(Secret)
                .map_err(|_| format!("environment variable {var} is not set")),
        }
    }
}

/// A file holding one value (a secret, or a user name kept next to it), without its final
/// line break.
pub(crate) fn read_value_file(path: &Path) -> Result<String, String> {
    // Bounded and non-blocking like every file the exporter reads: a secret is a line.
    crate::bounded_read::read_to_string(path, 64 << 10)
        .map(|text| text.trim_end_matches(['\n', '\r']).to_string())
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let secret = Secret::new("s3cret");
        let text = format!(
            "{secret:?} {:?}",
            Some((String::from("user"), secret.clone()))
        );
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(secret.expose(), "s3cret");
    }

    #[test]
    fn read_from_file_or_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("community");
        std::fs::write(&path, "public\r\n").unwrap();
        let secret = SecretSource::File(path.clone()).read().unwrap();
        assert_eq!(secret.expose(), "public");
        let missing = SecretSource::File(dir.path().join("nope"))
            .read()
            .unwrap_err();
        assert!(missing.contains("nope"), "{missing}");
        let unset = SecretSource::Env("RFE_TEST_UNSET_SECRET".into())
            .read()
            .unwrap_err();
        assert_eq!(
            unset,
            "environment variable RFE_TEST_UNSET_SECRET is not set"
        );
    }
}
