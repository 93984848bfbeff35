//! Running one infiniband-diags tool with bounds: a timeout (and the scan's deadline, whichever
//! comes first), a cap on what it may print, no stdin. The child is its own process group and
//! the whole group is killed on timeout, so a wrapper script's `sleep` cannot hold the pipe
//! open after its shell is gone.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a tool may print on stderr before the rest is thrown away: its messages are short.
const MAX_STDERR_BYTES: u64 = 16 << 10;

#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub deadline: Instant,
    pub max_output_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("could not start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("{program} did not finish within {timeout:?}; killed")]
    Timeout { program: String, timeout: Duration },
    #[error("{program} was still running at the scan deadline; killed")]
    Deadline { program: String },
    #[error("{program} printed more than {limit} bytes; killed")]
    TooLarge { program: String, limit: usize },
    /// Exited non-zero (or by a signal): its last stderr line says why, e.g.
    /// `ibnetdiscover: iberror: failed: discover failed` or `mad_rpc_open_port: can't open UMAD
    /// port`.
    #[error("{program} failed ({status}): {message}")]
    Failed {
        program: String,
        status: String,
        message: String,
    },
}

/// Runs `program args` and returns its stdout (lossy UTF-8) when it exits 0 within the limits.
pub fn run(program: &Path, args: &[String], limits: RunLimits) -> Result<String, RunError> {
    let name = program.display().to_string();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| RunError::Spawn {
            program: name.clone(),
            source,
        })?;
    let pgid = child.id() as libc::pid_t;
    let cap = limits.max_output_bytes as u64 + 1;
    let over_cap = Arc::new(AtomicBool::new(false));
    let stdout = child.stdout.take().map(|out| {
        let over_cap = over_cap.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = out.take(cap).read_to_end(&mut bytes);
            if bytes.len() as u64 >= cap {
                over_cap.store(true, Ordering::Relaxed);
            }
            bytes
        })
    });
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = (&mut err).take(MAX_STDERR_BYTES).read_to_end(&mut bytes);
            let _ = io::copy(&mut err, &mut io::sink());
            bytes
        })
    });
    let started = Instant::now();
    let end = (started + limits.timeout).min(limits.deadline);
    let mut nap = Duration::from_micros(100);
    let outcome: Result<ExitStatus, RunError> = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(source) => {
                break Err(RunError::Spawn {
                    program: name.clone(),
                    source,
                })
            }
        }
        if over_cap.load(Ordering::Relaxed) {
            break Err(RunError::TooLarge {
                program: name.clone(),
                limit: limits.max_output_bytes,
            });
        }
        let now = Instant::now();
        if now >= end {
            break Err(if end < started + limits.timeout {
                RunError::Deadline {
                    program: name.clone(),
                }
            } else {
                RunError::Timeout {
                    program: name.clone(),
                    timeout: limits.timeout,
                }
            });
        }
        std::thread::sleep(nap.min(end - now));
        nap = (nap * 2).min(Duration::from_millis(5));
    };
    // The group may hold children of the tool (a wrapper's pipeline): none outlives the run.
    // SAFETY: kill(2) with a negative pid signals our child's group; no memory is involved.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    if outcome.is_err() {
        let _ = child.wait();
    }
    let out = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
    let err = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let status = outcome?;
    if out.len() as u64 >= cap {
        return Err(RunError::TooLarge {
            program: name,
            limit: limits.max_output_bytes,
        });
    }
    if !status.success() {
        return Err(RunError::Failed {
            program: name,
            status: status.to_string(),
            message: failure_message(&err, &out),
        });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The tools' last words: libibmad's `ibwarn` lines go to stderr, the final `iberror: failed:`
/// line to stdout (infiniband-diags 44). The last two non-empty stderr lines and the last
/// stdout line, at most 500 characters.
fn failure_message(stderr: &[u8], stdout: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    let out = String::from_utf8_lossy(stdout);
    let mut lines: Vec<&str> = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let keep = lines.len().saturating_sub(2);
    lines.drain(..keep);
    if let Some(last) = out.lines().map(str::trim).rfind(|l| !l.is_empty()) {
        lines.push(last);
    }
    if lines.is_empty() {
        return "no message".to_owned();
    }
    lines.join("; ").chars().take(500).collect()
}
