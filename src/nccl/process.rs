//! Accumulates the events of every process (host, pid) found in the logs.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};

use super::event::{classify, Event, Hca};
use super::line::{bare_record, records_with_hosts, Level, Record};

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
/// `Using network` lines kept per process (the last one is the choice): one per communicator.
const MAX_NETWORKS: usize = 16;
/// Distinct entries kept per process in each of its sets (ranks, communicators, HCAs,
/// interfaces, settings, channel nets): far above what a process has, bounded for garbage.
const MAX_PER_PROCESS: usize = 256;
/// Dropped processes a parser counts one by one by default; beyond, its count stays there.
pub(crate) const MAX_DROPPED_COUNTED: usize = 1 << 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum SignalKind {
    IbNoDevice,
    /// A verbs call failed: QP creation or modification, memory registration.
    VerbsFailure,
    /// A work request completed with an error status; the status is in the evidence text.
    CompletionError,
    /// The HCA reported an async fatal event.
    IbFatalEvent,
    /// A non-fatal async event of a port (port error, GID table change).
    IbEvent,
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
    /// Network transports that said `NET/<name> : Using ...` (initialised).
    pub initialized_nets: BTreeSet<String>,
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
///
/// With a cap ([`LogParser::with_max_processes`]), the first `max_processes` processes met are
/// kept and later ones are only counted ([`LogParser::processes_dropped`]): a log with
/// thousands of `host:pid` prefixes costs bounded memory. Feed the newest files first to keep
/// the current jobs.
#[derive(Debug)]
pub struct LogParser {
    processes: BTreeMap<(String, u32), ProcessLog>,
    /// Hosts seen so far, to split records glued together (see `records_with_hosts`); at most
    /// `max_processes` of them.
    hosts: BTreeSet<String>,
    max_processes: usize,
    /// Hashes of the processes left out for the cap, at most `max_dropped_counted`.
    dropped: HashSet<u64>,
    max_dropped_counted: usize,
    /// Whether evidence carries its file name and text (the `nccl` command quotes them; the
    /// collector exports neither and saves two allocations per line).
    evidence_text: bool,
}

impl Default for LogParser {
    fn default() -> Self {
        LogParser::with_max_processes(usize::MAX)
    }
}

impl LogParser {
    /// A parser without a cap: the `nccl` command reads what it is given.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that keeps at most `max_processes` processes (host, pid).
    pub(crate) fn with_max_processes(max_processes: usize) -> Self {
        LogParser {
            processes: BTreeMap::new(),
            hosts: BTreeSet::new(),
            max_processes,
            dropped: HashSet::new(),
            max_dropped_counted: MAX_DROPPED_COUNTED,
            evidence_text: true,
        }
    }

    /// Evidence keeps only line numbers, no file name or text.
    pub(crate) fn without_evidence_text(mut self) -> Self {
        self.evidence_text = false;
        self
    }

    /// Counts at most `max` dropped processes one by one (memory: 8 bytes and change each).
    pub(crate) fn set_max_dropped_counted(&mut self, max: usize) {
        self.max_dropped_counted = max;
    }

    /// The processes so far, sorted by host and pid.
    pub fn processes(&self) -> impl Iterator<Item = &ProcessLog> {
        self.processes.values()
    }

    /// Distinct processes left out because the cap was reached (saturates at
    /// [`MAX_DROPPED_COUNTED`]).
    pub(crate) fn processes_dropped(&self) -> u64 {
        self.dropped.len() as u64
    }

    /// Whether a record of `host:pid` is kept; counts it as dropped when not.
    fn admits(&mut self, host: &str, pid: u32) -> bool {
        if self.processes.len() < self.max_processes
            || self.processes.contains_key(&(host.to_string(), pid))
        {
            return true;
        }
        if self.dropped.len() < self.max_dropped_counted {
            self.dropped.insert(process_hash(host, pid));
        }
        false
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
            let (leading, mut found) = records_with_hosts(line, |host| self.hosts.contains(host));
            if found.is_empty() {
                if let Some(Event::Version(v)) = leading
                    .find("NCCL version ")
                    .and_then(|at| classify(&leading[at..], false))
                {
                    file_version = Some(v);
                }
                // A quoted excerpt without prefixes: one process, named after its input.
                match bare_record(line) {
                    Some(record) => found.push(Record {
                        host: source,
                        ..record
                    }),
                    None => continue,
                }
            }
            for record in found {
                if record.pid != 0
                    && self.hosts.len() < self.max_processes
                    && !self.hosts.contains(record.host)
                {
                    self.hosts.insert(record.host.to_string());
                }
                let Some(event) = classify(record.message, record.level == Level::Warn) else {
                    continue;
                };
                if !self.admits(record.host, record.pid) {
                    continue;
                }
                let key = (record.host.to_string(), record.pid);
                seen_here.insert(key.clone());
                let process = self.processes.entry(key).or_insert_with(|| ProcessLog {
                    host: record.host.to_string(),
                    pid: record.pid,
                    ..ProcessLog::default()
                });
                let evidence = if self.evidence_text {
                    Evidence {
                        file: source.to_string(),
                        line: index + 1,
                        text: shorten(line.trim()),
                    }
                } else {
                    Evidence {
                        file: String::new(),
                        line: index + 1,
                        text: String::new(),
                    }
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

/// A process's key as the dropped counts hash it.
pub(crate) fn process_hash(host: &str, pid: u32) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (host, pid).hash(&mut hasher);
    hasher.finish()
}

/// Inserts unless the set is full.
fn bounded_insert<T: Ord>(set: &mut BTreeSet<T>, value: T) {
    if set.len() < MAX_PER_PROCESS {
        set.insert(value);
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
            Event::NetworkChosen(net) => {
                if self.networks.len() == MAX_NETWORKS {
                    self.networks.remove(0);
                }
                self.networks.push((net, evidence));
            }
            Event::NetDevices { net, hcas } => {
                bounded_insert(&mut self.initialized_nets, net);
                for hca in hcas {
                    if self.hcas.len() < MAX_PER_PROCESS && !self.hcas.contains(&hca) {
                        self.hcas.push(hca);
                    }
                }
                self.hca_evidence.get_or_insert(evidence);
            }
            Event::IbNoDevice => self.signal(SignalKind::IbNoDevice, evidence),
            Event::VerbsFailure(_) => self.signal(SignalKind::VerbsFailure, evidence),
            Event::CompletionError { .. } => self.signal(SignalKind::CompletionError, evidence),
            Event::IbFatalEvent => self.signal(SignalKind::IbFatalEvent, evidence),
            Event::IbEvent => self.signal(SignalKind::IbEvent, evidence),
            Event::SocketInterfaces(interfaces) => {
                for interface in interfaces {
                    if self.socket_interfaces.len() < MAX_PER_PROCESS
                        && !self.socket_interfaces.contains(&interface)
                    {
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
                    if self.gdr_by_hca.len() < MAX_PER_PROCESS
                        || self.gdr_by_hca.contains_key(&name)
                    {
                        self.gdr_by_hca.insert(name, enabled);
                    }
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
                if self.channels.len() < MAX_PER_PROCESS || self.channels.contains_key(&net) {
                    let counts = self.channels.entry(net).or_default();
                    if gdrdma {
                        counts.0 = counts.0.saturating_add(1);
                    } else {
                        counts.1 = counts.1.saturating_add(1);
                    }
                }
                if let Some(rank) = local_rank {
                    bounded_insert(&mut self.ranks, rank);
                }
                if self.channel_evidence.len() < MAX_PER_SIGNAL {
                    self.channel_evidence.push(evidence);
                }
            }
            Event::CommRank { rank, comm_id } => {
                bounded_insert(&mut self.ranks, rank);
                if let Some(id) = comm_id {
                    bounded_insert(&mut self.comm_ids, id);
                }
            }
            Event::Setting { name, value } => {
                if self.settings.len() < MAX_PER_PROCESS || self.settings.contains_key(&name) {
                    self.settings
                        .insert(shorten(&name), (shorten(&value), evidence));
                }
            }
            Event::Warning(_) => self.signal(SignalKind::Warning, evidence),
        }
    }

    /// Takes in what `later` (the same process, read after) says, as if its lines had been fed
    /// after this one's: the collector parses file by file and merges.
    pub(crate) fn absorb(&mut self, later: &ProcessLog) {
        if later.version.is_some() {
            self.version.clone_from(&later.version);
        }
        for rank in &later.ranks {
            bounded_insert(&mut self.ranks, *rank);
        }
        for id in &later.comm_ids {
            bounded_insert(&mut self.comm_ids, id.clone());
        }
        for network in &later.networks {
            if self.networks.len() == MAX_NETWORKS {
                self.networks.remove(0);
            }
            self.networks.push(network.clone());
        }
        for hca in &later.hcas {
            if self.hcas.len() < MAX_PER_PROCESS && !self.hcas.contains(hca) {
                self.hcas.push(hca.clone());
            }
        }
        if self.hca_evidence.is_none() {
            self.hca_evidence.clone_from(&later.hca_evidence);
        }
        for interface in &later.socket_interfaces {
            if self.socket_interfaces.len() < MAX_PER_PROCESS
                && !self.socket_interfaces.contains(interface)
            {
                self.socket_interfaces.push(interface.clone());
            }
        }
        for (hca, enabled) in &later.gdr_by_hca {
            if self.gdr_by_hca.len() < MAX_PER_PROCESS || self.gdr_by_hca.contains_key(hca) {
                self.gdr_by_hca.insert(hca.clone(), *enabled);
            }
        }
        let room = MAX_PER_SIGNAL.saturating_sub(self.gdr_evidence.len());
        self.gdr_evidence
            .extend(later.gdr_evidence.iter().take(room).cloned());
        for (net, (with, without)) in &later.channels {
            if self.channels.len() < MAX_PER_PROCESS || self.channels.contains_key(net) {
                let counts = self.channels.entry(net.clone()).or_default();
                counts.0 = counts.0.saturating_add(*with);
                counts.1 = counts.1.saturating_add(*without);
            }
        }
        let room = MAX_PER_SIGNAL.saturating_sub(self.channel_evidence.len());
        self.channel_evidence
            .extend(later.channel_evidence.iter().take(room).cloned());
        for (kind, evidence) in &later.signals {
            self.signal(*kind, evidence.clone());
        }
        for (name, setting) in &later.settings {
            if self.settings.len() < MAX_PER_PROCESS || self.settings.contains_key(name) {
                self.settings.insert(name.clone(), setting.clone());
            }
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
    fn the_process_cap_keeps_the_first_processes_and_counts_the_others() {
        let mut parser = LogParser::with_max_processes(3);
        let mut text = String::new();
        for i in 0..10 {
            text.push_str(&format!("h{i}:{i}:1 [0] NCCL INFO Using network IB\n"));
        }
        // A kept process keeps being followed, a dropped one is counted once.
        text.push_str("h1:1:1 [0] NCCL INFO Using network Socket\n");
        text.push_str("h9:9:1 [0] NCCL INFO Using network Socket\n");
        parser.feed("new.log", text.as_bytes());
        parser.feed("old.log", b"h4:4:1 [0] NCCL INFO Using network IB\n");
        assert_eq!(parser.processes_dropped(), 7);
        assert!(parser.hosts.len() <= 3);
        let processes = parser.finish();
        let keys: Vec<_> = processes.iter().map(|p| (p.host.as_str(), p.pid)).collect();
        assert_eq!(keys, [("h0", 0), ("h1", 1), ("h2", 2)]);
        assert_eq!(processes[1].networks.last().unwrap().0, "Socket");
    }

    #[test]
    fn one_process_cannot_grow_without_bound() {
        let mut parser = LogParser::new();
        let mut text = String::new();
        for i in 0..2_000 {
            text.push_str(&format!(
                "h:1:1 [0] NCCL INFO Using network IB\nh:1:1 [0] NCCL INFO comm 0x1 rank {i} nRanks 9999 commId 0x{i:x}\n"
            ));
        }
        parser.feed("a.log", text.as_bytes());
        let process = &parser.finish()[0];
        assert_eq!(process.networks.len(), MAX_NETWORKS);
        assert_eq!(process.networks.last().unwrap().1.line, 3_999);
        assert_eq!(process.ranks.len(), MAX_PER_PROCESS);
        assert_eq!(process.comm_ids.len(), MAX_PER_PROCESS);
    }

    #[test]
    fn absorbing_a_later_part_is_feeding_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl");
        for name in [
            "mixed/rank0.log",
            "ib-gdr/gpu-node-01.4101.log",
            "ib-no-gdr.log",
            "socket-fallback.log",
            "plugin-failure.log",
            "proto-simple.log",
            "roce.log",
        ] {
            let text = std::fs::read_to_string(root.join(name)).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let (earlier, later) = lines.split_at(lines.len() / 2);
            let (earlier, later) = (earlier.join("\n"), later.join("\n"));
            let mut whole = LogParser::new();
            whole.feed("f", earlier.as_bytes());
            whole.feed("f", later.as_bytes());
            let mut first = LogParser::new();
            first.feed("f", earlier.as_bytes());
            let mut second = LogParser::new();
            second.feed("f", later.as_bytes());
            let mut merged = first.processes;
            for (key, process) in second.processes {
                match merged.get_mut(&key) {
                    Some(known) => known.absorb(&process),
                    None => {
                        merged.insert(key, process);
                    }
                }
            }
            let summaries = |processes: Vec<ProcessLog>| {
                let list: Vec<_> = processes
                    .iter()
                    .map(super::super::verdict::summarize)
                    .collect();
                serde_json::to_value(list).unwrap()
            };
            assert_eq!(
                summaries(merged.into_values().collect()),
                summaries(whole.finish()),
                "{name}"
            );
        }
    }

    #[test]
    fn garbage_is_ignored() {
        let mut parser = LogParser::new();
        parser.feed("g", &[0xff, 0xfe, b'\n', b'N', b'C', 0x80, b'\n']);
        parser.feed("g2", b"x:1:1 [0] NCCL INFO \xff\xfe Using network IB");
        assert!(parser.finish().is_empty());
    }
}
