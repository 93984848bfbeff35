//! Accumulates the events of every process (host, pid) found in the logs.

use std::collections::{BTreeMap, BTreeSet};

use super::event::{classify, Event, Hca};
use super::line::{records_with_hosts, Level};

/// Where a line came from: `file:line`, and the line itself (shortened).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Evidence {
    pub file: String,
    pub line: usize,
    pub text: String,
}

impl std::fmt::Display for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.text)
    }
}

/// Longest evidence text kept: enough for any NCCL line worth quoting, bounded for garbage.
const EVIDENCE_CHARS: usize = 240;
/// Evidence lines kept per kind of signal and process, so a log full of WARNs stays small.
const MAX_PER_SIGNAL: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum SignalKind {
    IbNoDevice,
    PluginInitFailed,
    PluginNotFound,
    SocketInUse,
    Warning,
}

/// Everything one process said. Lists keep the order of the log.
#[derive(Debug, Clone, Default)]
pub struct ProcessLog {
    pub host: String,
    pub pid: u32,
    pub version: Option<String>,
    pub ranks: BTreeSet<u32>,
    pub comm_ids: BTreeSet<String>,
    /// Every `Using network X`, one per communicator; the last one is the effective choice.
    pub networks: Vec<(String, Evidence)>,
    pub hcas: Vec<Hca>,
    pub hca_evidence: Option<Evidence>,
    pub socket_interfaces: Vec<String>,
    /// GDR per HCA: by name where the line names it, else by index (older per-GPU lines).
    pub gdr_by_hca: BTreeMap<String, bool>,
    pub gdr_evidence: Vec<Evidence>,
    /// NET channels per net name: (with /GDRDMA, without).
    pub channels: BTreeMap<String, (u32, u32)>,
    pub channel_evidence: Vec<Evidence>,
    pub signals: Vec<(SignalKind, Evidence)>,
    /// `NCCL_X set by environment to V`: last value wins, as in the environment.
    pub settings: BTreeMap<String, (String, Evidence)>,
}

/// Feeds logs file by file; `finish` hands the processes over, sorted by host and pid.
#[derive(Debug, Default)]
pub struct LogParser {
    processes: BTreeMap<(String, u32), ProcessLog>,
    /// Hosts seen so far, to split records glued together (see `records_with_hosts`).
    hosts: BTreeSet<String>,
}

impl LogParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses one input named `source` (file name in evidence). Never fails: bytes that are not
    /// UTF-8 are replaced, lines that are not NCCL's are skipped.
    pub fn feed(&mut self, source: &str, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        // The banner may come without prefix (NCCL_LOG_VERSION level): it belongs to the
        // processes of the same file.
        let mut file_version: Option<String> = None;
        let mut seen_here: BTreeSet<(String, u32)> = BTreeSet::new();
        for (index, raw) in text.split('\n').enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let (leading, found) = records_with_hosts(line, |host| self.hosts.contains(host));
            if found.is_empty() {
                if let Some(Event::Version(v)) = leading
                    .find("NCCL version ")
                    .and_then(|at| classify(&leading[at..], false))
                {
                    file_version = Some(v);
                }
                continue;
            }
            for record in found {
                if !self.hosts.contains(record.host) {
                    self.hosts.insert(record.host.to_string());
                }
                let Some(event) = classify(record.message, record.level == Level::Warn) else {
                    continue;
                };
                let key = (record.host.to_string(), record.pid);
                seen_here.insert(key.clone());
                let process = self.processes.entry(key).or_insert_with(|| ProcessLog {
                    host: record.host.to_string(),
                    pid: record.pid,
                    ..ProcessLog::default()
                });
                let evidence = Evidence {
                    file: source.to_string(),
                    line: index + 1,
                    text: shorten(line.trim()),
                };
                process.apply(event, evidence);
            }
        }
        if let Some(version) = file_version {
            for key in seen_here {
                if let Some(process) = self.processes.get_mut(&key) {
                    process.version.get_or_insert_with(|| version.clone());
                }
            }
        }
    }

    pub fn finish(self) -> Vec<ProcessLog> {
        self.processes.into_values().collect()
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(EVIDENCE_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

impl ProcessLog {
    fn apply(&mut self, event: Event, evidence: Evidence) {
        match event {
            Event::Version(v) => self.version = Some(v),
            Event::NetworkChosen(net) => self.networks.push((net, evidence)),
            Event::IbDevices(hcas) => {
                for hca in hcas {
                    if !self.hcas.contains(&hca) {
                        self.hcas.push(hca);
                    }
                }
                self.hca_evidence.get_or_insert(evidence);
            }
            Event::IbNoDevice => self.signal(SignalKind::IbNoDevice, evidence),
            Event::SocketInterfaces(interfaces) => {
                for interface in interfaces {
                    if !self.socket_interfaces.contains(&interface) {
                        self.socket_interfaces.push(interface);
                    }
                }
                self.signal(SignalKind::SocketInUse, evidence);
            }
            Event::PluginInitFailed(_) => self.signal(SignalKind::PluginInitFailed, evidence),
            Event::PluginNotFound => self.signal(SignalKind::PluginNotFound, evidence),
            Event::Gdr {
                net,
                enabled,
                hca_index,
                hca_name,
            } => {
                // Socket prints the same line for its interfaces (`'lo'`): not an HCA.
                if net == "Socket" {
                    return;
                }
                let name = hca_name
                    .or_else(|| {
                        let index = hca_index?;
                        self.hcas
                            .iter()
                            .find(|h| h.index == index)
                            .map(|h| h.name.clone())
                    })
                    .or_else(|| hca_index.map(|i| format!("HCA {i}")));
                if let Some(name) = name {
                    self.gdr_by_hca.insert(name, enabled);
                }
                if self.gdr_evidence.len() < MAX_PER_SIGNAL {
                    self.gdr_evidence.push(evidence);
                }
            }
            Event::NetChannel {
                net,
                gdrdma,
                local_rank,
            } => {
                let counts = self.channels.entry(net).or_default();
                if gdrdma {
                    counts.0 += 1;
                } else {
                    counts.1 += 1;
                }
                if let Some(rank) = local_rank {
                    self.ranks.insert(rank);
                }
                if self.channel_evidence.len() < MAX_PER_SIGNAL {
                    self.channel_evidence.push(evidence);
                }
            }
            Event::CommRank { rank, comm_id } => {
                self.ranks.insert(rank);
                if let Some(id) = comm_id {
                    self.comm_ids.insert(id);
                }
            }
            Event::Setting { name, value } => {
                self.settings.insert(name, (value, evidence));
            }
            Event::Warning(_) => self.signal(SignalKind::Warning, evidence),
        }
    }

    fn signal(&mut self, kind: SignalKind, evidence: Evidence) {
        if self.signals.iter().filter(|(k, _)| *k == kind).count() < MAX_PER_SIGNAL {
            self.signals.push((kind, evidence));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_process_and_keeps_line_numbers() {
        let mut parser = LogParser::new();
        parser.feed(
            "a.log",
            b"NCCL version 2.18.5+cuda12.2\nh1:10:10 [0] NCCL INFO Using network IB\nh2:20:20 [0] NCCL INFO Using network Socket\n",
        );
        let processes = parser.finish();
        assert_eq!(processes.len(), 2);
        assert_eq!(processes[0].host, "h1");
        assert_eq!(processes[0].networks[0].1.line, 2);
        assert_eq!(processes[1].version.as_deref(), Some("2.18.5+cuda12.2"));
    }

    #[test]
    fn garbage_is_ignored() {
        let mut parser = LogParser::new();
        parser.feed("g", &[0xff, 0xfe, b'\n', b'N', b'C', 0x80, b'\n']);
        parser.feed("g2", b"x:1:1 [0] NCCL INFO \xff\xfe Using network IB");
        assert!(parser.finish().is_empty());
    }
}
