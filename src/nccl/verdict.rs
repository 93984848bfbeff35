//! From processes to jobs: what each rank used, one verdict per job, and warnings about
//! debugging settings left on. Detection rules of ops.md §6.3.

use std::collections::BTreeSet;

use serde::Serialize;

use super::process::{Evidence, ProcessLog, SignalKind};

/// The transport a process ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// IB verbs (InfiniBand or RoCE), internal or through a plugin such as IBext.
    Rdma,
    Socket,
    /// No `Using network` and no NET channel: single-node job, or the log stops early.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gdr {
    Enabled,
    Disabled,
    /// Some HCAs or connections with GPUDirect RDMA, some without.
    Partial,
    Unknown,
}

impl Gdr {
    /// Every value of the `gdr` label, for the docs check.
    pub const ALL: &[Gdr] = &[Gdr::Enabled, Gdr::Disabled, Gdr::Partial, Gdr::Unknown];

    pub fn as_label(self) -> &'static str {
        match self {
            Gdr::Enabled => "enabled",
            Gdr::Disabled => "disabled",
            Gdr::Partial => "partial",
            Gdr::Unknown => "unknown",
        }
    }
}

/// One process, summarized.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessSummary {
    pub host: String,
    pub pid: u32,
    pub ranks: Vec<u32>,
    pub nccl_version: Option<String>,
    /// As NCCL names it (`IB`, `Socket`, `IBext_v8`), empty when none was chosen.
    pub network: String,
    pub transport: Transport,
    /// `IB`, `RoCE`, `IB+RoCE`, or empty.
    pub link_layer: String,
    pub gdr: Gdr,
    pub hcas: Vec<super::event::Hca>,
    pub socket_interfaces: Vec<String>,
    pub channels_gdrdma: u32,
    pub channels_host_staged: u32,
    pub settings: Vec<(String, String)>,
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    RdmaWithGdr,
    RdmaWithoutGdr,
    /// All on IB/RoCE, GPUDirect RDMA on some ranks only.
    RdmaMixedGdr,
    /// All on IB/RoCE; no line tells whether GPUDirect RDMA is used (no inter-node connection
    /// in the logs).
    RdmaGdrUnknown,
    SocketFallback,
    /// Some ranks chose no network while others chose IB.
    MissingNetwork,
    /// No rank chose a network: nothing to judge.
    Unknown,
}

impl VerdictKind {
    /// Whether the command should exit 1 for it.
    pub(crate) fn is_failure(self) -> bool {
        matches!(
            self,
            VerdictKind::SocketFallback | VerdictKind::MissingNetwork
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Warning {
    pub setting: String,
    pub value: String,
    pub message: &'static str,
    pub evidence: Evidence,
}

/// A verbs call that failed, with where to look.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub call: String,
    /// What failed beyond the call's name: the work completion status
    /// (`status 12 (IBV_WC_RETRY_EXC_ERR)`), or `async fatal event`.
    pub detail: Option<String>,
    pub hint: &'static str,
    pub evidence: Evidence,
}

/// NCCL WARN lines kept per job as errors: the first ones say what broke.
const MAX_JOB_ERRORS: usize = 8;

#[derive(Debug, Clone, Serialize)]
pub struct Job {
    /// NCCL `commId` shared by its ranks; `None` when the logs carry none (all input, one job).
    pub comm_id: Option<String>,
    pub verdict: VerdictKind,
    pub summary: String,
    pub processes: Vec<ProcessSummary>,
    pub warnings: Vec<Warning>,
    /// Failed verbs calls (QP creation, memory registration, work completions with an error
    /// status, fatal HCA events): the job cannot have run as meant.
    pub failures: Vec<Failure>,
    /// Other NCCL WARN lines (connection refused, CUDA errors, ...): NCCL prints WARN only
    /// for errors. Non-fatal port events are evidence, not errors.
    pub errors: Vec<Evidence>,
}

impl Job {
    /// Whether the command should exit 1 for it.
    pub fn failed(&self) -> bool {
        self.verdict.is_failure() || !self.failures.is_empty() || !self.errors.is_empty()
    }
}

pub(crate) fn summarize(process: &ProcessLog) -> ProcessSummary {
    let chosen = process.networks.last().map(|(net, _)| net.clone());
    // Before v2.18 there is no `Using network`: the channels' net name says it, and without
    // channels (a log cut short, an excerpt) the transport that initialised: IB's, else the
    // sockets NCCL falls back to when IB is not usable. `NET/Socket : Using` alone is no
    // fallback: v2.4 prints it for the bootstrap network before IB starts.
    let has = |kind: SignalKind| process.signals.iter().any(|(k, _)| *k == kind);
    let socket_in_use = has(SignalKind::SocketInUse)
        && (has(SignalKind::IbNoDevice) || has(SignalKind::PluginInitFailed));
    let network = chosen
        .or_else(|| {
            process
                .channels
                .keys()
                .find(|n| n.as_str() != "Socket")
                .or_else(|| process.channels.keys().next())
                .cloned()
        })
        .or_else(|| {
            process
                .initialized_nets
                .iter()
                .find(|n| n.as_str() != "Socket")
                .cloned()
        })
        .or_else(|| socket_in_use.then(|| "Socket".to_string()))
        .unwrap_or_default();
    let transport = match network.as_str() {
        "" => Transport::None,
        "Socket" => Transport::Socket,
        _ => Transport::Rdma,
    };
    let (with, without) = process.channels.get(&network).copied().unwrap_or((0, 0));
    let gdr = if transport != Transport::Rdma {
        Gdr::Unknown
    } else if with + without > 0 {
        // Per-connection truth beats per-HCA capability (§6.3: no /GDRDMA = host-staged).
        ratio_state(with > 0, without > 0)
    } else {
        let enabled = process.gdr_by_hca.values().any(|e| *e);
        let disabled = process.gdr_by_hca.values().any(|e| !*e);
        ratio_state(enabled, disabled)
    };
    let link_layers: BTreeSet<&str> = process
        .hcas
        .iter()
        .map(|h| h.link_layer.as_str())
        .filter(|l| *l != "UNSPECIFIED")
        .collect();
    let link_layer = if transport == Transport::Rdma {
        link_layers.into_iter().collect::<Vec<_>>().join("+")
    } else {
        String::new()
    };
    let mut evidence: Vec<Evidence> = Vec::new();
    evidence.extend(process.networks.last().map(|(_, e)| e.clone()));
    evidence.extend(process.hca_evidence.clone());
    evidence.extend(process.gdr_evidence.iter().take(2).cloned());
    evidence.extend(process.channel_evidence.iter().take(1).cloned());
    evidence.extend(
        process
            .signals
            .iter()
            .filter(|(kind, _)| *kind != SignalKind::PluginNotFound)
            .map(|(_, e)| e.clone()),
    );
    evidence.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    evidence.dedup();
    ProcessSummary {
        host: process.host.clone(),
        pid: process.pid,
        ranks: process.ranks.iter().copied().collect(),
        nccl_version: process.version.clone(),
        network,
        transport,
        link_layer,
        gdr,
        hcas: process.hcas.clone(),
        socket_interfaces: process.socket_interfaces.clone(),
        channels_gdrdma: with,
        channels_host_staged: without,
        settings: process
            .settings
            .iter()
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect(),
        evidence,
    }
}

fn processes_word(n: usize) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

fn ratio_state(some_on: bool, some_off: bool) -> Gdr {
    match (some_on, some_off) {
        (true, false) => Gdr::Enabled,
        (false, true) => Gdr::Disabled,
        (true, true) => Gdr::Partial,
        (false, false) => Gdr::Unknown,
    }
}

/// Groups processes into jobs: processes sharing a `commId` are one job (union of shared ids,
/// since a rank may sit in several communicators); without any commId, all input is one job.
pub fn jobs(processes: &[ProcessLog]) -> Vec<Job> {
    let mut groups: Vec<(BTreeSet<String>, Vec<usize>)> = Vec::new();
    let mut without_id: Vec<usize> = Vec::new();
    for (index, process) in processes.iter().enumerate() {
        if process.comm_ids.is_empty() {
            without_id.push(index);
            continue;
        }
        let mut ids = process.comm_ids.clone();
        let mut members = vec![index];
        // Merge every existing group that shares an id with this process.
        let mut kept = Vec::with_capacity(groups.len());
        for (group_ids, group_members) in groups.drain(..) {
            if group_ids.is_disjoint(&ids) {
                kept.push((group_ids, group_members));
            } else {
                ids.extend(group_ids);
                members.extend(group_members);
            }
        }
        kept.push((ids, members));
        groups = kept;
    }
    let mut jobs: Vec<Job> = groups
        .into_iter()
        .map(|(ids, mut members)| {
            members.sort_unstable();
            judge(ids.into_iter().next(), &members, processes)
        })
        .collect();
    if !without_id.is_empty() {
        jobs.push(judge(None, &without_id, processes));
    }
    jobs
}

fn judge(comm_id: Option<String>, members: &[usize], processes: &[ProcessLog]) -> Job {
    let summaries: Vec<ProcessSummary> = members
        .iter()
        .filter_map(|&i| processes.get(i))
        .map(summarize)
        .collect();
    let warnings = members
        .iter()
        .filter_map(|&i| processes.get(i))
        .flat_map(debug_settings)
        .fold(Vec::<Warning>::new(), |mut all, w| {
            // One warning per setting and value for the job, with its first evidence.
            if !all
                .iter()
                .any(|x| x.setting == w.setting && x.value == w.value)
            {
                all.push(w);
            }
            all
        });
    let logs: Vec<&ProcessLog> = members.iter().filter_map(|&i| processes.get(i)).collect();
    let (verdict, summary) = verdict(&summaries, &split_fallback(&logs));
    let failures = members
        .iter()
        .filter_map(|&i| processes.get(i))
        .flat_map(verbs_failures)
        .fold(Vec::<Failure>::new(), |mut all, f| {
            if !all.iter().any(|x| x.call == f.call && x.detail == f.detail) {
                all.push(f);
            }
            all
        });
    let mut errors: Vec<Evidence> = members
        .iter()
        .filter_map(|&i| processes.get(i))
        .flat_map(|p| &p.signals)
        .filter(|(kind, _)| *kind == SignalKind::Warning)
        .map(|(_, evidence)| evidence.clone())
        .collect();
    errors.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    errors.dedup();
    errors.truncate(MAX_JOB_ERRORS);
    Job {
        comm_id,
        verdict,
        summary,
        processes: summaries,
        warnings,
        failures,
        errors,
    }
}

/// Names a process by its ranks when known, else by host:pid.
fn who(p: &ProcessSummary) -> String {
    if p.ranks.is_empty() {
        format!("{}:{}", p.host, p.pid)
    } else {
        let ranks: Vec<String> = p.ranks.iter().map(u32::to_string).collect();
        format!("{} ({}:{})", ranks.join(","), p.host, p.pid)
    }
}

/// The processes of a job that said IB found no device (or the IB plugin failed), and those
/// that said which socket interfaces they use. Each line of a multi-node log names its own host
/// and pid, so an excerpt (a `grep`, a cut) can hold the two halves of one fallback in different
/// processes: where no process chose a network, together they are the job on sockets.
struct SplitFallback {
    no_ib_device: Vec<String>,
    on_sockets: Vec<String>,
}

fn split_fallback(logs: &[&ProcessLog]) -> SplitFallback {
    let has = |p: &ProcessLog, kinds: &[SignalKind]| {
        p.signals.iter().any(|(kind, _)| kinds.contains(kind))
    };
    let named = |kinds: &[SignalKind]| {
        logs.iter()
            .filter(|p| has(p, kinds))
            .map(|p| format!("{}:{}", p.host, p.pid))
            .collect()
    };
    SplitFallback {
        no_ib_device: named(&[SignalKind::IbNoDevice, SignalKind::PluginInitFailed]),
        on_sockets: named(&[SignalKind::SocketInUse]),
    }
}

fn verdict(processes: &[ProcessSummary], split: &SplitFallback) -> (VerdictKind, String) {
    let of = |t: Transport| processes.iter().filter(move |p| p.transport == t);
    let names =
        |list: Vec<&ProcessSummary>| list.into_iter().map(who).collect::<Vec<_>>().join(", ");
    let socket: Vec<_> = of(Transport::Socket).collect();
    let rdma: Vec<_> = of(Transport::Rdma).collect();
    // A process without network counts only once its log shows it joined a communicator
    // (a rank): one that printed only settings or banners (an excerpt, a `grep`) says nothing.
    let none: Vec<_> = of(Transport::None)
        .filter(|p| !p.ranks.is_empty())
        .collect();
    let total = processes.len();
    if !socket.is_empty() {
        let scope = if socket.len() == total {
            "all ranks".to_string()
        } else {
            format!(
                "{} of {} processes; the others on IB/RoCE (mixed)",
                socket.len(),
                total
            )
        };
        return (
            VerdictKind::SocketFallback,
            format!("SOCKET FALLBACK on ranks {} ({scope})", names(socket)),
        );
    }
    if rdma.is_empty() && !split.no_ib_device.is_empty() && !split.on_sockets.is_empty() {
        return (
            VerdictKind::SocketFallback,
            format!(
                "SOCKET FALLBACK: no IB device found on {} and socket interfaces in use on {}; no process chose another network",
                split.no_ib_device.join(", "),
                split.on_sockets.join(", ")
            ),
        );
    }
    if rdma.is_empty() {
        return (
            VerdictKind::Unknown,
            "no network chosen in these logs (single-node job, or NCCL_DEBUG=INFO output incomplete)".into(),
        );
    }
    if !none.is_empty() {
        return (
            VerdictKind::MissingNetwork,
            format!(
                "NO NETWORK chosen on ranks {} while {} other processes use IB/RoCE",
                names(none),
                rdma.len()
            ),
        );
    }
    let layers: BTreeSet<&str> = rdma
        .iter()
        .flat_map(|p| p.link_layer.split('+'))
        .filter(|l| !l.is_empty())
        .collect();
    let over = if layers.is_empty() {
        "IB/RoCE".to_string()
    } else {
        layers.into_iter().collect::<Vec<_>>().join("+")
    };
    let with: Vec<_> = rdma
        .iter()
        .filter(|p| p.gdr == Gdr::Enabled)
        .copied()
        .collect();
    let without: Vec<_> = rdma
        .iter()
        .filter(|p| p.gdr == Gdr::Disabled)
        .copied()
        .collect();
    if with.len() == rdma.len() {
        (
            VerdictKind::RdmaWithGdr,
            format!(
                "all {} on {over} with GPUDirect RDMA",
                processes_word(rdma.len())
            ),
        )
    } else if without.len() == rdma.len() {
        (
            VerdictKind::RdmaWithoutGdr,
            format!(
                "all {} on {over} without GPUDirect RDMA (host-staged through bounce buffers)",
                processes_word(rdma.len())
            ),
        )
    } else if rdma.iter().all(|p| p.gdr == Gdr::Unknown) {
        (
            VerdictKind::RdmaGdrUnknown,
            format!(
                "all {} on {over}; GPUDirect RDMA not seen (no inter-node connection in these logs)",
                processes_word(rdma.len())
            ),
        )
    } else {
        let others: Vec<_> = rdma
            .iter()
            .filter(|p| p.gdr != Gdr::Enabled)
            .copied()
            .collect();
        (
            VerdictKind::RdmaMixedGdr,
            format!(
                "mixed: all on {over}, GPUDirect RDMA not (or not known to be) enabled on ranks {}",
                names(others)
            ),
        )
    }
}

/// The failed verbs calls of a process, each with the causes worth checking first.
fn verbs_failures(process: &ProcessLog) -> Vec<Failure> {
    let completions = process
        .signals
        .iter()
        .filter_map(|(kind, evidence)| match kind {
            SignalKind::CompletionError => Some(completion_failure(evidence)),
            SignalKind::IbFatalEvent => Some(Failure {
                call: "ibv_get_async_event".into(),
                detail: Some("async fatal event".into()),
                hint: "the HCA itself: its firmware and driver (dmesg, mlxlink/ibstat), then the cable or transceiver; the device needs a reset",
                evidence: evidence.clone(),
            }),
            _ => None,
        });
    process
        .signals
        .iter()
        .filter(|(kind, _)| *kind == SignalKind::VerbsFailure)
        .map(|(_, evidence)| {
            let call = super::event::VERBS_CALLS
                .iter()
                .find(|call| evidence.text.contains(**call))
                .copied()
                .unwrap_or("verbs call");
            let hint = match call {
                "ibv_create_qp" | "ibv_modify_qp" | "ibv_create_cq" => {
                    "queue pair resources: RC QPs grow with peers x channels (NCCL_IB_QPS_PER_CONNECTION, NCCL_MAX_NCHANNELS); check the NIC's QP limit (ibv_devinfo -v max_qp), the RDMA cgroup (rdma.max hca_object) and locked memory (ulimit -l; containers: memlock unlimited)"
                }
                "ibv_reg_mr" | "ibv_reg_dmabuf_mr" => {
                    "memory registration: locked memory (ulimit -l; containers: memlock unlimited), the RDMA cgroup, and for GPU memory the peer-memory module (nvidia_peermem) or DMA-BUF support"
                }
                _ => "the RDMA device: permissions on /dev/infiniband, the device plugin's devices in the container, the driver state (dmesg)",
            };
            Failure {
                call: call.to_string(),
                detail: None,
                hint,
                evidence: evidence.clone(),
            }
        })
        .chain(completions)
        .collect()
}

/// `ibv_wc_status` names (verbs.h), by value.
const WC_STATUS: &[&str] = &[
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
];

/// A work completion with an error status: what the status points at.
fn completion_failure(evidence: &Evidence) -> Failure {
    let status = super::event::completion_status(&evidence.text);
    let name = status
        .and_then(|s| WC_STATUS.get(usize::try_from(s).ok()?))
        .copied()
        .unwrap_or("unknown status");
    let hint = match status {
        Some(12 | 13 | 20) => {
            "the path to the peer: packets were lost until the retries ran out. Links and their error counters on both ends, the GID index (NCCL_IB_GID_INDEX) and the peer's address, MTU, PFC/ECN on the RoCE priority (pause storms, drops), routing; ib_write_bw between the two hosts"
        }
        Some(4 | 8 | 10) => {
            "memory access by the NIC: GPUDirect RDMA (nvidia_peermem or DMA-BUF, PCIe ACS and the IOMMU), memory registration; compare with NCCL_NET_GDR_LEVEL=0"
        }
        Some(5) => "a work request flushed after an earlier error on the same queue pair: look at the first completion error",
        _ => "the link and the peer first (ibstat, the port's error counters), then the driver and firmware versions on both hosts",
    };
    Failure {
        call: "ibv_poll_cq".into(),
        detail: Some(match status {
            Some(s) => format!("work completion status {s} ({name})"),
            None => "work completion error".into(),
        }),
        hint,
        evidence: evidence.clone(),
    }
}

/// Settings meant for isolating faults that cost performance when left on.
fn debug_settings(process: &ProcessLog) -> Vec<Warning> {
    let mut warnings = Vec::new();
    for (name, (value, evidence)) in &process.settings {
        let v = value.trim();
        let message = match name.as_str() {
            "NCCL_PROTO" if super::proto::only_simple(v) => {
                "restricts NCCL to its slowest protocol (Simple); meant for isolating faults"
            }
            "NCCL_IB_DISABLE" if v == "1" => "disables IB/RoCE: NCCL uses TCP sockets",
            "NCCL_NET_GDR_LEVEL" if v == "0" || v.eq_ignore_ascii_case("LOC") => {
                "disables GPUDirect RDMA: transfers are staged through host memory"
            }
            "NCCL_P2P_DISABLE" if v == "1" => {
                "disables GPU peer-to-peer (NVLink/PCIe): intra-node traffic goes through host memory"
            }
            "NCCL_SHM_DISABLE" if v == "1" => "disables shared-memory transport between local processes",
            _ => continue,
        };
        warnings.push(Warning {
            setting: name.clone(),
            value: value.clone(),
            message,
            evidence: evidence.clone(),
        });
    }
    warnings
}
