//! `serve`'s optional NCCL collector: at each scrape, re-reads a directory of NCCL debug logs
//! (NCCL_DEBUG_FILE, one file per process) and exposes what each process chose.
//!
//! Bounded per scrape: the newest `max_files` files changed within `max_age`, the last
//! `max_bytes_per_file` of each.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::process::LogParser;
use super::verdict::{summarize, ProcessSummary, Transport};
use crate::collector::{Collector, Outcome, Output};
use crate::exposition::{Families, Kind, Value};

/// The `nccl:` section of the config file: which logs the collector reads at each scrape.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NcclConfig {
    /// Directory of NCCL_DEBUG_FILE outputs; the collector is off without it.
    pub log_dir: Option<PathBuf>,
    /// Files changed longer ago than this are skipped (finished jobs).
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub max_age: Duration,
    /// Files read per scrape, newest first.
    pub max_files: usize,
    /// Bytes read from the end of each file.
    pub max_bytes_per_file: u64,
}

impl Default for NcclConfig {
    fn default() -> Self {
        NcclConfig {
            log_dir: None,
            max_age: Duration::from_secs(24 * 3600),
            max_files: 256,
            // Init lines come first, but a long job's file is mostly later output: the tail of a
            // rotated or appended file still holds the last communicator's setup.
            max_bytes_per_file: 4 << 20,
        }
    }
}

#[derive(Debug)]
pub struct NcclCollector {
    log_dir: PathBuf,
    limits: NcclConfig,
}

/// What one scrape of the directory found.
pub struct DirScan {
    pub ok: bool,
    pub processes: Vec<ProcessSummary>,
}

impl NcclCollector {
    /// The collector a config asks for: none without `log_dir`.
    pub fn new(config: &NcclConfig) -> Option<NcclCollector> {
        Some(NcclCollector {
            log_dir: config.log_dir.clone()?,
            limits: config.clone(),
        })
    }

    pub fn scan(&self) -> DirScan {
        let mut parser = LogParser::new();
        let ok = match recent_files(&self.log_dir, &self.limits) {
            Ok(files) => {
                for path in files {
                    // A file removed or unreadable since listing is skipped, not fatal.
                    if let Ok(bytes) =
                        crate::bounded_read::read_tail(&path, self.limits.max_bytes_per_file)
                    {
                        parser.feed(&path.display().to_string(), &bytes);
                    }
                }
                true
            }
            Err(e) => {
                tracing::debug!("nccl log dir {}: {e}", self.log_dir.display());
                false
            }
        };
        DirScan {
            ok,
            processes: parser.finish().iter().map(summarize).collect(),
        }
    }
}

fn recent_files(dir: &Path, limits: &NcclConfig) -> std::io::Result<Vec<PathBuf>> {
    let now = SystemTime::now();
    let mut files: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        let Ok(modified) = meta.modified() else {
            continue;
        };
        let age = now.duration_since(modified).unwrap_or_default();
        if meta.is_file() && age <= limits.max_age {
            files.push((modified, entry.path()));
        }
    }
    // Newest first, so that the cap drops old jobs.
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    files.truncate(limits.max_files);
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// Adds the NCCL families of one scan.
pub fn add_metrics<'a>(families: &mut Families<'a>, scan: &'a DirScan) {
    let mut fallbacks = 0u64;
    for p in &scan.processes {
        let pid: Cow<'a, str> = Cow::Owned(p.pid.to_string());
        let added = families.add(
            "rdma_nccl_process_info",
            Kind::Info,
            "A process found in the NCCL debug logs: the network NCCL chose (empty: none), link layer of its HCAs, GPUDirect RDMA state.",
            vec![
                ("host", Cow::Borrowed(p.host.as_str())),
                ("pid", pid.clone()),
                ("network", Cow::Borrowed(p.network.as_str())),
                ("link_layer", Cow::Borrowed(p.link_layer.as_str())),
                ("gdr", Cow::Borrowed(p.gdr.as_label())),
            ],
            Value::U64(1),
        );
        debug_assert!(added.is_ok(), "{added:?}");
        let socket = p.transport == Transport::Socket;
        fallbacks += u64::from(socket);
        families.gauge(
            "rdma_nccl_socket_fallback",
            "1 if the process's NCCL uses TCP sockets instead of IB/RoCE.",
            vec![("host", Cow::Borrowed(p.host.as_str())), ("pid", pid)],
            Value::U64(u64::from(socket)),
        );
    }
    families.gauge(
        "rdma_nccl_socket_fallback_processes",
        "Processes in the NCCL debug logs whose NCCL uses TCP sockets.",
        Vec::new(),
        Value::U64(fallbacks),
    );
}

impl Collector for NcclCollector {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn collect(&self, out: &mut Output<'_, '_>) -> Result<Outcome, std::fmt::Error> {
        let scan = self.scan();
        let mut families = Families::default();
        add_metrics(&mut families, &scan);
        out.encode(&families)?;
        Ok(Outcome::ok(scan.ok))
    }
}
