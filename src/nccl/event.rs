//! What one NCCL message says about transport choice, GPUDirect RDMA and settings.
//!
//! Format strings from ops.md §6.2; matching follows §6.3: stable substrings first (cheap
//! `contains`), a regex only on the few lines that pass, so that version drift in the rest of a
//! line does not break detection.

use std::sync::LazyLock;

use regex::Regex;

/// One HCA port NCCL's IB transport uses: `[0]mlx5_0:1/RoCE`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Hca {
    pub index: u32,
    pub name: String,
    pub port: u32,
    /// `IB`, `RoCE` or `UNSPECIFIED` (NCCL_IB_LLSTR).
    pub link_layer: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `NCCL version 2.x.y+cudaX` banner.
    Version(String),
    /// `Using network IB|Socket|<plugin>` (init.cc, v2.18+).
    NetworkChosen(String),
    /// `NET/IB : Using [0]mlx5_0:1/RoCE ...; OOB ...`: a network transport initialised, with the
    /// HCA ports it found (none parsed from older wordings such as `Using device mlx5_0`).
    NetDevices { net: String, hcas: Vec<Hca> },
    /// `NET/IB : No device found.`, `... No IP address found for device ...`, `Could not find a
    /// usable IB device`: the IB transport is not usable.
    IbNoDevice,
    /// A verbs call failed (`ibv_create_qp`, `ibv_modify_qp`, `ibv_reg_mr`, ...): its name.
    VerbsFailure(String),
    /// `NET/IB : Got completion from peer ... with status=12 ...` (older: `with error 12,`): a
    /// work request completed with an error status (`ibv_wc_status`), the transfer is lost.
    CompletionError { status: u32 },
    /// `NET/IB : mlx5_0:1 async fatal event: ...`: the HCA reported a fatal error.
    IbFatalEvent,
    /// `Got non-fatal async event: port error(10)`, `GID table changed`: a disturbance of the
    /// port NCCL survives; evidence, not a failure.
    IbEvent,
    /// `NET/Socket : Using [0]eth0:10.0.0.1<0>`: the interfaces.
    SocketInterfaces(Vec<String>),
    /// `Failed to initialize NET plugin X` / `Failed to initialize any NET plugin`.
    PluginInitFailed(String),
    /// `NET/Plugin: Could not find ...` and older `No plugin found` wordings: informational
    /// (no external plugin installed), the internal IB transport may still be used.
    PluginNotFound,
    /// `NET/<net> : GPU Direct RDMA Enabled|Disabled for HCA <n> '<name>'`, or the older
    /// per-GPU form `... for GPU <x> / HCA <n> ...` (no name).
    Gdr {
        net: String,
        enabled: bool,
        hca_index: Option<u32>,
        hca_name: Option<String>,
    },
    /// `Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA`.
    NetChannel {
        net: String,
        gdrdma: bool,
        local_rank: Option<u32>,
    },
    /// `comm 0x... rank R nranks N ... commId 0x...`.
    CommRank { rank: u32, comm_id: Option<String> },
    /// `<NAME> set by environment to <value>`.
    Setting { name: String, value: String },
    /// Any WARN record (connection errors, plugin failures, async IB events).
    Warning(String),
}

static IB_HCA: LazyLock<Regex> = LazyLock::new(|| {
    // `[%d]%s:%d[:rail][:plane]/<IB|RoCE|UNSPECIFIED>`
    Regex::new(r"\[(\d+)\]([^\s:\[\]]+):(\d+)(?::[^/\s]*)?/(IB|RoCE|UNSPECIFIED)").expect("static")
});
static SOCKET_IF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\[(\d+)\]([^\s:\[\]]+):(\S+)").expect("static"));
static GDR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:NET/([^:]+?)\s*:\s*)?GPU Direct RDMA (Enabled|Disabled) for (?:HCA (\d+) '([^']*)'|GPU \S+ / HCA (\d+))")
        .expect("static")
});
static CHANNEL: LazyLock<Regex> = LazyLock::new(|| {
    // Bus ids in brackets are hex before v2.18 (`2[c7000]`), device indexes after (`6[2]`); the
    // net name may hold a space (`NET/AWS Libfabric/1`); PXN adds the proxy rank (`/3(1)/`).
    Regex::new(r"^Channel \d+(?:/\d+)? : (\d+)\[[0-9a-fA-F]+\] -> (\d+)\[[0-9a-fA-F]+\](?: \[(send|receive)\])? via NET/([^/\[\]]+?)/\d+(?:\(\d+\))?(\S*)")
        .expect("static")
});
static COMM_RANK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks \d+(?:.*\bcommId (0x[0-9a-fA-F]+))?")
        .expect("static")
});
static SETTING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(NCCL_[A-Z0-9_]+) set by environment to (.*)$").expect("static")
});
/// `with status=12 opcode=...` (v2.19+) or `with error 12, opcode ...` (older), with or without
/// the peer (`from peer 10.0.0.2<4242> `).
static COMPLETION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Got completion (?:from peer \S+ )?with (?:status=|error )(\d{1,5})")
        .expect("static")
});
/// aws-ofi-nccl sets NCCL_PROTO itself where the fabric cannot do LL/LL128:
/// `NET/OFI Setting NCCL_PROTO to "simple"` (v1.13), `Setting NCCL_PROTO='simple' to ...`.
static PLUGIN_PROTO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"Setting NCCL_PROTO(?: to |=)["']?([A-Za-z0-9^,;:]+)"#).expect("static")
});
/// A per-device line of the IB transport: `NET/IB: [0] mlx5_3:1/IB` (v2.3),
/// `NET/IB: [2] mlx5_2:uverbs2:1/RoCE provider=Mlx5 ...` (v2.27).
static IB_DEVICE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\[(\d+)\] ?([^\s:\[\]]+):(?:uverbs\d+:)?(\d+)/(IB|RoCE|UNSPECIFIED)\b")
        .expect("static")
});
/// Ray's log deduplication appends ` [repeated 15x across cluster]` to a line.
static RAY_REPEATED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\s*\[repeated \d+x across cluster\]$").expect("static"));

/// Verbs calls whose failure NCCL reports; QP and memory registration failures point at
/// memlock, the RDMA cgroup or the NIC's QP limits.
pub(crate) const VERBS_CALLS: &[&str] = &[
    "ibv_create_qp",
    "ibv_modify_qp",
    "ibv_reg_mr",
    "ibv_reg_dmabuf_mr",
    "ibv_create_cq",
    "ibv_alloc_pd",
    "ibv_open_device",
];

/// `NET/<name> : <rest>` with the spacing of any version (`NET/IB : `, `NET/IB: `,
/// `NET/IB :SHARP`); the name may hold a space (`NET/AWS Libfabric`).
fn net_message(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("NET/")?;
    let (net, tail) = rest.split_once(':')?;
    let net = net.trim_end();
    // At most two words (`AWS Libfabric`): `NET/OFI Using CUDA runtime: ...` names no net.
    if net.is_empty() || net.contains('/') || net.split(' ').count() > 2 {
        return None;
    }
    Some((net, tail.trim_start()))
}

/// Classifies one message; `None` for the many lines that say nothing we use.
pub fn classify(message: &str, warn: bool) -> Option<Event> {
    let message = message.trim();
    let message = match RAY_REPEATED.find(message) {
        Some(suffix) => &message[..suffix.start()],
        None => message,
    };
    // `NCCL version 2.18.5+cuda12.2`; RCCL: `RCCL version : 2.22.3-HEAD:271856d`.
    if let Some(rest) = message
        .strip_prefix("NCCL version ")
        .or_else(|| message.strip_prefix("RCCL version"))
    {
        let version = rest
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .next()?;
        return Some(Event::Version(version.to_string()));
    }
    // The whole rest: plugin names may hold a space (`Using network AWS Libfabric`), and the
    // channel lines name the net the same way.
    // v2.3 said `Using internal Network IB`.
    if let Some(net) = message
        .strip_prefix("Using network ")
        .or_else(|| message.strip_prefix("Using internal Network "))
    {
        let net = net.trim();
        if net.is_empty() {
            return None;
        }
        return Some(Event::NetworkChosen(net.to_string()));
    }
    if let Some(event) = net_event(message) {
        return Some(event);
    }
    // Without libibverbs (a container without the RDMA userspace) IB cannot start.
    if message.contains("Could not find a usable IB device")
        || message.contains("Failed to open libibverbs")
    {
        return Some(Event::IbNoDevice);
    }
    if let Some(status) = completion_status(message) {
        return Some(Event::CompletionError { status });
    }
    if message.contains("async fatal event") {
        return Some(Event::IbFatalEvent);
    }
    if message.contains("Got non-fatal async event") || message.contains("GID table changed") {
        return Some(Event::IbEvent);
    }
    if let Some(call) = VERBS_CALLS.iter().find(|call| {
        message.find(**call).is_some_and(|at| {
            !message[at + call.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    }) {
        if warn || message.contains("failed") {
            return Some(Event::VerbsFailure((*call).to_string()));
        }
    }
    if message.contains("GPU Direct RDMA ") {
        if let Some(event) = gdr(message) {
            return Some(event);
        }
    }
    if message.contains(" via NET/") {
        if let Some(c) = CHANNEL.captures(message) {
            let send = c.get(3).is_none_or(|d| d.as_str() == "send");
            // `[send]` prints the local rank first, `[receive]` the peer first (net.cc).
            let local = if send { c.get(1) } else { c.get(2) };
            return Some(Event::NetChannel {
                net: c.get(4)?.as_str().to_string(),
                gdrdma: c.get(5)?.as_str().contains("/GDRDMA"),
                local_rank: local.and_then(|m| m.as_str().parse().ok()),
            });
        }
    }
    if let Some(rest) = message
        .find("Failed to initialize")
        .map(|at| &message[at..])
        .filter(|rest| rest.contains("NET plugin"))
    {
        let name = rest
            .strip_prefix("Failed to initialize NET plugin ")
            .unwrap_or("any");
        return Some(Event::PluginInitFailed(name.trim().to_string()));
    }
    if message.contains("No plugin found") {
        return Some(Event::PluginNotFound);
    }
    if message.contains(" set by environment to ") {
        if let Some(c) = SETTING.captures(message) {
            return Some(Event::Setting {
                name: c.get(1)?.as_str().to_string(),
                value: setting_value(c.get(2)?.as_str()).to_string(),
            });
        }
    }
    if message.contains("Setting NCCL_PROTO") {
        if let Some(c) = PLUGIN_PROTO.captures(message) {
            return Some(Event::Setting {
                name: "NCCL_PROTO".to_string(),
                value: c.get(1)?.as_str().to_string(),
            });
        }
    }
    if message.contains("comm 0x") && message.contains(" rank ") {
        if let Some(c) = COMM_RANK.captures(message) {
            if let Ok(rank) = c.get(1)?.as_str().parse() {
                return Some(Event::CommRank {
                    rank,
                    comm_id: c.get(2).map(|m| m.as_str().to_ascii_lowercase()),
                });
            }
        }
    }
    if warn {
        return Some(Event::Warning(message.to_string()));
    }
    None
}

/// The `ibv_wc_status` of a `Got completion ... with status=N` line, anywhere in `text`.
pub(crate) fn completion_status(text: &str) -> Option<u32> {
    if !text.contains("Got completion ") {
        return None;
    }
    COMPLETION.captures(text)?.get(1)?.as_str().parse().ok()
}

/// What a `NET/<name> : ...` message says about that transport.
fn net_event(message: &str) -> Option<Event> {
    let (net, rest) = net_message(message)?;
    if net == "Plugin" {
        if rest.contains("Could not find") || rest.contains("No plugin found") {
            return Some(Event::PluginNotFound);
        }
        return None;
    }
    if net != "Socket"
        && (rest.starts_with("No device found")
            || rest.starts_with("No IP address found")
            || rest.contains("Could not find a usable"))
    {
        return Some(Event::IbNoDevice);
    }
    if let Some(interfaces) = rest.strip_prefix("Using").filter(|_| net == "Socket") {
        let interfaces = SOCKET_IF
            .captures_iter(interfaces)
            .filter_map(|c| Some(format!("{}:{}", c.get(2)?.as_str(), c.get(3)?.as_str())))
            .collect();
        return Some(Event::SocketInterfaces(interfaces));
    }
    if let Some(list) = rest.strip_prefix("Using") {
        // `NET/IB : Using [RO]; OOB eth0:...` follows `No device found.` (v2.27): no device.
        let devices = list.split(';').next().unwrap_or_default().trim();
        if devices.is_empty() || devices == "[RO]" {
            return None;
        }
        let hcas = IB_HCA.captures_iter(rest).filter_map(hca).collect();
        return Some(Event::NetDevices {
            net: net.to_string(),
            hcas,
        });
    }
    if let Some(c) = IB_DEVICE_LINE.captures(rest) {
        return Some(Event::NetDevices {
            net: net.to_string(),
            hcas: hca(c).into_iter().collect(),
        });
    }
    None
}

/// A value as NCCL echoes it: integer parameters end with a period (`"%s set by environment
/// to %lld."`), string ones do not (`NCCL_SOCKET_IFNAME ... to eth0`).
fn setting_value(raw: &str) -> &str {
    let value = raw.trim();
    match value.strip_suffix('.') {
        Some(number) if number.parse::<i64>().is_ok() => number,
        _ => value,
    }
}

fn hca(c: regex::Captures<'_>) -> Option<Hca> {
    Some(Hca {
        index: c.get(1)?.as_str().parse().ok()?,
        name: c.get(2)?.as_str().to_string(),
        port: c.get(3)?.as_str().parse().ok()?,
        link_layer: c.get(4)?.as_str().to_string(),
    })
}

fn gdr(message: &str) -> Option<Event> {
    let c = GDR.captures(message)?;
    Some(Event::Gdr {
        // The per-GPU form (v2.18-v2.28 paths.cc) carries no net name: it is IB's.
        net: c.get(1).map_or("IB", |m| m.as_str()).to_string(),
        enabled: c.get(2)?.as_str() == "Enabled",
        hca_index: c
            .get(3)
            .or_else(|| c.get(5))
            .and_then(|m| m.as_str().parse().ok()),
        hca_name: c.get(4).map(|m| m.as_str().to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_devices_with_link_layers() {
        let event = classify(
            "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>",
            false,
        );
        let Some(Event::NetDevices { hcas, .. }) = event else {
            panic!("{event:?}")
        };
        assert_eq!(hcas.len(), 2);
        assert_eq!(hcas[0].name, "mlx5_0");
        assert_eq!(hcas[0].link_layer, "RoCE");
        assert_eq!(hcas[1].link_layer, "IB");
    }

    #[test]
    fn rail_and_plane_suffixes() {
        let Some(Event::NetDevices { hcas, .. }) = classify(
            "NET/IB : Using [0]mlx5_0:1:0:1/IB ; OOB ib0:10.1.0.1<0>",
            false,
        ) else {
            panic!()
        };
        assert_eq!((hcas[0].port, hcas[0].link_layer.as_str()), (1, "IB"));
    }

    #[test]
    fn gdr_both_forms() {
        assert_eq!(
            classify("NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'", false),
            Some(Event::Gdr {
                net: "IB".into(),
                enabled: true,
                hca_index: Some(0),
                hca_name: Some("mlx5_0".into())
            })
        );
        assert_eq!(
            classify(
                "GPU Direct RDMA Disabled for GPU 1b000 / HCA 2 (distance 7 > 4)",
                false
            ),
            Some(Event::Gdr {
                net: "IB".into(),
                enabled: false,
                hca_index: Some(2),
                hca_name: None
            })
        );
    }

    #[test]
    fn channels_send_and_receive() {
        assert_eq!(
            classify(
                "Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
                false
            ),
            Some(Event::NetChannel {
                net: "IB".into(),
                gdrdma: true,
                local_rank: Some(0)
            })
        );
        assert_eq!(
            classify("Channel 01/0 : 0[0] -> 1[0] [send] via NET/Socket/0", false),
            Some(Event::NetChannel {
                net: "Socket".into(),
                gdrdma: false,
                local_rank: Some(0)
            })
        );
    }

    #[test]
    fn settings_and_banner() {
        assert_eq!(
            classify("NCCL_PROTO set by environment to Simple", false),
            Some(Event::Setting {
                name: "NCCL_PROTO".into(),
                value: "Simple".into()
            })
        );
        assert_eq!(
            classify("NCCL version 2.21.5+cuda12.4", false),
            Some(Event::Version("2.21.5+cuda12.4".into()))
        );
    }

    #[test]
    fn comm_rank_with_comm_id() {
        assert_eq!(
            classify("ncclCommInitRank comm 0x5581e0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3f000 commId 0xABC123 - Init START", false),
            Some(Event::CommRank { rank: 3, comm_id: Some("0xabc123".into()) })
        );
        assert_eq!(
            classify(
                "comm 0x7f00 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
                false
            ),
            Some(Event::CommRank {
                rank: 1,
                comm_id: None
            })
        );
    }

    #[test]
    fn integer_settings_lose_their_period_strings_keep_theirs() {
        let setting = |m: &str| match classify(m, false) {
            Some(Event::Setting { name, value }) => (name, value),
            other => panic!("{m}: {other:?}"),
        };
        assert_eq!(
            setting("NCCL_IB_DISABLE set by environment to 1."),
            ("NCCL_IB_DISABLE".into(), "1".into())
        );
        assert_eq!(
            setting("NCCL_SOCKET_IFNAME set by environment to ^docker,lo,veth"),
            ("NCCL_SOCKET_IFNAME".into(), "^docker,lo,veth".into())
        );
        assert_eq!(
            setting("NCCL_PROTO set by environment to simple"),
            ("NCCL_PROTO".into(), "simple".into())
        );
        // Ray's deduplication suffix is not part of the value.
        assert_eq!(
            setting("NCCL_CUMEM_ENABLE set by environment to 0. [repeated 15x across cluster]"),
            ("NCCL_CUMEM_ENABLE".into(), "0".into())
        );
        // aws-ofi-nccl sets NCCL_PROTO itself on fabrics without LL/LL128 (two wordings).
        assert_eq!(
            setting("NET/OFI Setting NCCL_PROTO to \"simple\""),
            ("NCCL_PROTO".into(), "simple".into())
        );
        assert_eq!(
            setting("NET/OFI Setting NCCL_PROTO='simple' to prevent data corruption (reason: byte delivery ordering not supported)"),
            ("NCCL_PROTO".into(), "simple".into())
        );
    }

    #[test]
    fn completion_errors_of_every_wording() {
        for (message, status) in [
            ("NET/IB : Got completion from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00::1 remoteGidsfd00::2", 12),
            ("NET/IB: Got completion from peer 10.99.91.63<51161> with status=4 opcode=32614 len=32614 vendor err 81 (Send) localGid ::ffff:10.99.92.59 remoteGids::ffff:10.99.91.63 hca mlx5_1", 4),
            ("NET/IB : Got completion from peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)", 4),
            ("NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129", 12),
        ] {
            assert_eq!(
                classify(message, true),
                Some(Event::CompletionError { status }),
                "{message}"
            );
        }
        assert_eq!(
            classify(
                "NET/IB : mlx5_0:1 async fatal event: local catastrophic error",
                true
            ),
            Some(Event::IbFatalEvent)
        );
        assert_eq!(
            classify(
                "NET/IB : mlx5_1:1 Got non-fatal async event: port error(10)",
                true
            ),
            Some(Event::IbEvent)
        );
    }

    #[test]
    fn ib_device_forms_old_and_new() {
        // v2.27 after `No device found.`: no device at all.
        assert_eq!(
            classify("NET/IB : Using [RO]; OOB eth0:192.168.69.159<0>", false),
            None
        );
        // v2.3 per-device lines and the v2.27 detail line.
        for (message, name, layer) in [
            ("NET/IB: [0] mlx5_3:1/IB", "mlx5_3", "IB"),
            (
                "NET/IB: [2] mlx5_2:uverbs2:1/RoCE provider=Mlx5 speed=400000 context=0x5563d0080110 ar=0",
                "mlx5_2",
                "RoCE",
            ),
        ] {
            let Some(Event::NetDevices { net, hcas }) = classify(message, false) else {
                panic!("{message}")
            };
            assert_eq!(net, "IB");
            assert_eq!((hcas[0].name.as_str(), hcas[0].port, hcas[0].link_layer.as_str()), (name, 1, layer));
        }
        assert_eq!(
            classify("Using internal Network IB", false),
            Some(Event::NetworkChosen("IB".into()))
        );
        assert_eq!(
            classify("Failed to open libibverbs.so[.1]", true),
            Some(Event::IbNoDevice)
        );
        // A symbol probe of the mlx5 provider is not a failed verbs call.
        assert_eq!(
            classify("dlvsym failed on mlx5dv_reg_dmabuf_mr - /lib/x86_64-linux-gnu/libmlx5.so.1: undefined symbol: mlx5dv_reg_dmabuf_mr, version MLX5_1.25 version MLX5_1.25", false),
            None
        );
    }

    #[test]
    fn plugin_lines() {
        assert_eq!(
            classify("Failed to initialize NET plugin IB", false),
            Some(Event::PluginInitFailed("IB".into()))
        );
        assert_eq!(
            classify(
                "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
                false
            ),
            Some(Event::PluginNotFound)
        );
    }
}
