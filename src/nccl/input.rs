//! Turns the command's FILE arguments into named inputs: files, directories (NCCL_DEBUG_FILE
//! writes one file per process), globs the shell left quoted, and `-` for standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{pattern}: {message}")]
    Pattern { pattern: String, message: String },
}

/// One input: its name for evidence lines and its bytes.
pub struct Input {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Reads every input named; the first unreadable one is the error (exit 2).
pub fn read_all(arguments: &[PathBuf]) -> Result<Vec<Input>, InputError> {
    let mut inputs = Vec::new();
    for argument in arguments {
        if argument.as_os_str() == "-" {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|source| read_error(Path::new("<stdin>"), source))?;
            inputs.push(Input {
                name: "<stdin>".into(),
                bytes,
            });
            continue;
        }
        for path in expand(argument)? {
            let bytes = std::fs::read(&path).map_err(|source| read_error(&path, source))?;
            inputs.push(Input {
                name: path.display().to_string(),
                bytes,
            });
        }
    }
    Ok(inputs)
}

fn read_error(path: &Path, source: std::io::Error) -> InputError {
    InputError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// A path as it stands, a directory's regular files (sorted), or a glob's matches.
fn expand(argument: &Path) -> Result<Vec<PathBuf>, InputError> {
    if argument.is_dir() {
        return files_in(argument);
    }
    let text = argument.to_string_lossy();
    if argument.exists() || !text.contains(['*', '?', '[']) {
        return Ok(vec![argument.to_path_buf()]);
    }
    let pattern_error = |message: String| InputError::Pattern {
        pattern: text.to_string(),
        message,
    };
    let mut paths = Vec::new();
    for entry in glob::glob(&text).map_err(|e| pattern_error(e.to_string()))? {
        let path = entry.map_err(|e| {
            let path = e.path().to_path_buf();
            read_error(&path, e.into())
        })?;
        if path.is_dir() {
            paths.extend(files_in(&path)?);
        } else {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(pattern_error("no file matches".into()));
    }
    Ok(paths)
}

pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    let entries = std::fs::read_dir(dir).map_err(|source| read_error(dir, source))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| read_error(dir, source))?;
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}
