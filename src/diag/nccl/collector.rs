//! `serve`'s optional NCCL collector: at each scrape, re-reads a directory of NCCL debug logs
//! (NCCL_DEBUG_FILE, one file per process) and exposes what each process chose.
//!
//! Bounded per scrape: the newest `max_files` files changed within `max_age`, the last
//! `max_bytes_per_file` of each. It shares `rdma_exporter_collector_success` with the node
//! collector, so it encodes the node collector's families too (one family per name, as the
//! text format requires).

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::process::LogParser;
use super::verdict::{summarize, ProcessSummary, Transport};
use crate::exposition::{Families, Kind, Value};
use crate::node::NodeCollector;

#[derive(Debug, Clone)]
pub struct NcclLogLimits {
    pub max_files: usize,
    pub max_bytes_per_file: u64,
    pub max_age: Duration,
}

impl Default for NcclLogLimits {
    fn default() -> Self {
        NcclLogLimits {
            max_files: 256,
            // Init lines come first, but a long job's file is mostly later output: the tail of a
            // rotated or appended file still holds the last communicator's setup.
            max_bytes_per_file: 4 << 20,
            max_age: Duration::from_secs(24 * 3600),
        }
    }
}

#[derive(Debug)]
pub struct NcclCollector {
    pub log_dir: PathBuf,
    pub limits: NcclLogLimits,
    /// Encoded in the same exposition (see the module comment); `None` with the node off.
    pub node: Option<Arc<NodeCollector>>,
}

/// What one scrape of the directory found.
pub struct DirScan {
    pub ok: bool,
    pub processes: Vec<ProcessSummary>,
    pub duration: Duration,
}

impl NcclCollector {
    pub fn scan(&self) -> DirScan {
        let started = Instant::now();
        let mut parser = LogParser::new();
        let ok = match recent_files(&self.log_dir, &self.limits) {
            Ok(files) => {
                for path in files {
                    // A file removed or unreadable since listing is skipped, not fatal.
                    if let Ok(bytes) = read_tail(&path, self.limits.max_bytes_per_file) {
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
            duration: started.elapsed(),
        }
    }
}

fn recent_files(dir: &Path, limits: &NcclLogLimits) -> std::io::Result<Vec<PathBuf>> {
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

fn read_tail(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > max {
        file.seek(SeekFrom::Start(len - max))?;
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
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
    let labels = vec![("collector", Cow::Borrowed("nccl"))];
    families.gauge(
        "rdma_exporter_collector_success",
        crate::node::SUCCESS_HELP,
        labels.clone(),
        Value::U64(u64::from(scan.ok)),
    );
    families.gauge(
        "rdma_exporter_collector_duration_seconds",
        crate::node::DURATION_HELP,
        labels,
        Value::F64(scan.duration.as_secs_f64()),
    );
}

impl Collector for NcclCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let scan = self.scan();
        let mut nccl = Families::default();
        add_metrics(&mut nccl, &scan);
        match &self.node {
            Some(node) => node.scrape(|node_families| {
                crate::exposition::encode_merged(&[node_families, &nccl], &mut encoder)
            }),
            None => nccl.encode(&mut encoder),
        }
    }
}
