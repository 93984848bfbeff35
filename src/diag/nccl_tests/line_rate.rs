//! The NIC bandwidth one GPU of the run has: `--line-rate` as given, or this host's active RDMA
//! ports from sysfs shared among its GPUs.
//!
//! From sysfs: the ports at the fastest active rate are the compute rails (storage and
//! management NICs are usually slower, or few); with at least one such port per GPU each GPU
//! gets `floor(ports / GPUs)` of them (10 ports for 8 GPUs is one each: the two left over are
//! not the GPUs'), with fewer ports than GPUs the GPUs share them (4 ports for 8 GPUs is half a
//! port each). The GPUs are counted on the PCI bus (NVIDIA and AMD display controllers and
//! accelerators), so a run on fewer GPUs than the node has is not credited with their NICs;
//! without any the run's ranks per host stand in, and without those one port per GPU is
//! assumed.

use std::path::Path;

use serde::Serialize;

use crate::bounded_read;
use crate::node::sysfs::{read_node, DeviceFilter};

/// The kernel's id of an ACTIVE port (`state` reads `4: ACTIVE`).
const PORT_ACTIVE: u32 = 4;

/// PCI vendor ids of GPU makers: NVIDIA, AMD.
const GPU_VENDORS: [&str; 2] = ["0x10de", "0x1002"];

/// PCI class prefixes of GPUs: VGA, 3D and other display controllers, processing
/// accelerators (AMD Instinct MI300 reports 0x1200).
const GPU_CLASSES: [&str; 4] = ["0x0300", "0x0302", "0x0380", "0x1200"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `--line-rate`.
    Flag,
    /// This host's `class/infiniband/*/ports/*/rate`.
    Sysfs,
}

/// One active RDMA port that counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortRate {
    pub device: String,
    pub port: u32,
    pub link_layer: Option<String>,
    pub rate_gbit_per_s: f64,
}

/// What one GPU's share of the NICs is, and where that came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineRate {
    pub source: Source,
    /// Gb/s (10^9 bits per second) of NIC bandwidth per GPU.
    pub per_gpu_gbit_per_s: f64,
    /// The fastest active ports (sysfs only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortRate>,
    /// GPUs per node the ports are shared among (sysfs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<usize>,
    /// Where that count came from: `pci` (this host's GPUs) or `run` (ranks per host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_counted_from: Option<&'static str>,
    /// Ports' worth of bandwidth each GPU has (sysfs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nics_per_gpu: Option<f64>,
    /// How the figure was arrived at, in words.
    pub how: String,
}

impl LineRate {
    pub(crate) fn from_flag(gbit_per_s: f64) -> LineRate {
        LineRate {
            source: Source::Flag,
            per_gpu_gbit_per_s: gbit_per_s,
            ports: Vec::new(),
            gpus_per_node: None,
            gpus_counted_from: None,
            nics_per_gpu: None,
            how: format!("--line-rate {gbit_per_s} Gb/s per GPU"),
        }
    }

    /// GB/s, the unit of nccl-tests' bandwidth columns.
    pub(crate) fn per_gpu_gbyte_per_s(&self) -> f64 {
        self.per_gpu_gbit_per_s / 8.0
    }
}

/// This host's share per GPU, or `None` when no RDMA port is active with a known rate.
/// `run_ranks_per_host` counts the GPUs when the PCI bus shows none.
pub(crate) fn from_sysfs(sysfs: &Path, run_ranks_per_host: Option<usize>) -> Option<LineRate> {
    let snapshot = read_node(sysfs, &DeviceFilter::default());
    let active: Vec<PortRate> = snapshot
        .devices
        .iter()
        .flat_map(|d| {
            d.ports.iter().filter_map(|p| {
                let active = p.state.as_ref().is_some_and(|(id, _)| *id == PORT_ACTIVE);
                let rate = p.rate_bytes_per_second.filter(|r| *r > 0.0)?;
                active.then(|| PortRate {
                    device: d.name.clone(),
                    port: p.number,
                    link_layer: p.link_layer.clone(),
                    rate_gbit_per_s: rate * 8.0 / 1e9,
                })
            })
        })
        .collect();
    let gpus = match gpus_on_host(sysfs) {
        Some(n) => Some((n, "pci")),
        None => run_ranks_per_host.filter(|n| *n > 0).map(|n| (n, "run")),
    };
    share(active, gpus)
}

/// GPUs on the PCI bus: `<sysfs>/bus/pci/devices/*/{vendor,class}`.
fn gpus_on_host(sysfs: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(sysfs.join("bus/pci/devices")).ok()?;
    let count = entries
        .flatten()
        .filter(|entry| {
            let read = |name: &str| bounded_read::read_to_string(&entry.path().join(name), 64);
            let (Ok(vendor), Ok(class)) = (read("vendor"), read("class")) else {
                return false;
            };
            GPU_VENDORS.contains(&vendor.trim())
                && GPU_CLASSES.iter().any(|c| class.trim().starts_with(c))
        })
        .count();
    (count > 0).then_some(count)
}

/// The per-GPU share of the fastest ports (see the module doc).
fn share(active: Vec<PortRate>, gpus: Option<(usize, &'static str)>) -> Option<LineRate> {
    let fastest = active
        .iter()
        .map(|p| p.rate_gbit_per_s)
        .fold(0.0_f64, f64::max);
    if fastest <= 0.0 {
        return None;
    }
    let ports: Vec<PortRate> = active
        .into_iter()
        .filter(|p| p.rate_gbit_per_s >= fastest)
        .collect();
    let count = ports.len();
    let nics_per_gpu = match gpus {
        Some((gpus, _)) if count >= gpus => (count / gpus) as f64,
        Some((gpus, _)) => count as f64 / gpus as f64,
        None => 1.0,
    };
    let per_gpu = fastest * nics_per_gpu;
    let how = match gpus {
        Some((gpus, from)) => {
            let counted = if from == "pci" {
                "GPU(s) on this host's PCI bus"
            } else {
                "GPU(s) per node in the run"
            };
            format!(
                "{count} active RDMA port(s) at {fastest} Gb/s on this host for {gpus} {counted}: {nics_per_gpu} port(s) per GPU = {per_gpu} Gb/s"
            )
        }
        None => format!(
            "{count} active RDMA port(s) at {fastest} Gb/s on this host; GPUs per node unknown, one port per GPU assumed = {per_gpu} Gb/s"
        ),
    };
    Some(LineRate {
        source: Source::Sysfs,
        per_gpu_gbit_per_s: per_gpu,
        ports,
        gpus_per_node: gpus.map(|(n, _)| n),
        gpus_counted_from: gpus.map(|(_, from)| from),
        nics_per_gpu: Some(nics_per_gpu),
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(rates: &[f64]) -> Vec<PortRate> {
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| PortRate {
                device: format!("mlx5_{i}"),
                port: 1,
                link_layer: Some("Ethernet".into()),
                rate_gbit_per_s: *r,
            })
            .collect()
    }

    #[test]
    fn spare_ports_beyond_one_per_gpu_are_not_counted() {
        let rate = share(ports(&[400.0; 10]), Some((8, "run"))).unwrap();
        assert_eq!(rate.per_gpu_gbit_per_s, 400.0);
        assert_eq!(rate.per_gpu_gbyte_per_s(), 50.0);
        assert_eq!(rate.nics_per_gpu, Some(1.0));
    }

    #[test]
    fn two_ports_per_gpu_and_shared_ports() {
        // OCI BM.GPU4.8: 16 x 100 Gb/s for 8 A100s.
        assert_eq!(
            share(ports(&[100.0; 16]), Some((8, "run")))
                .unwrap()
                .per_gpu_gbit_per_s,
            200.0
        );
        // 4 ConnectX-7 for 8 GPUs.
        assert_eq!(
            share(ports(&[400.0; 4]), Some((8, "run")))
                .unwrap()
                .per_gpu_gbit_per_s,
            200.0
        );
    }

    #[test]
    fn slower_ports_are_not_rails() {
        let mut all = ports(&[400.0; 8]);
        all.extend(ports(&[25.0, 25.0]));
        let rate = share(all, Some((8, "run"))).unwrap();
        assert_eq!(rate.ports.len(), 8);
        assert_eq!(rate.per_gpu_gbit_per_s, 400.0);
    }

    #[test]
    fn unknown_gpus_and_no_ports() {
        let rate = share(ports(&[200.0, 200.0]), None).unwrap();
        assert_eq!(rate.per_gpu_gbit_per_s, 200.0);
        assert!(rate.how.contains("one port per GPU assumed"));
        assert_eq!(share(Vec::new(), Some((8, "run"))), None);
    }

    #[test]
    fn reads_the_fixture_node() {
        let sysfs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cx7-roce/sys");
        let rate = from_sysfs(&sysfs, Some(8)).unwrap();
        assert_eq!(rate.source, Source::Sysfs);
        assert_eq!(rate.ports.len(), 10);
        assert_eq!(rate.per_gpu_gbit_per_s, 400.0);
        assert_eq!(rate.gpus_counted_from, Some("run"));
        assert_eq!(from_sysfs(Path::new("/nonexistent-sysfs"), Some(8)), None);
    }

    #[test]
    fn gpus_are_counted_on_the_pci_bus() {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("bus/pci/devices");
        let add = |name: &str, vendor: &str, class: &str| {
            let d = devices.join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        };
        for i in 0..8 {
            add(&format!("0000:{i:02x}:00.0"), "0x10de", "0x030200");
        }
        add("0000:a0:00.0", "0x10de", "0x068000"); // NVSwitch: a bridge, not a GPU
        add("0000:a1:00.0", "0x15b3", "0x020700"); // ConnectX
        add("0000:a2:00.0", "0x1002", "0x120000"); // AMD Instinct
        add("0000:a3:00.0", "0x1a03", "0x030000"); // ASPEED BMC VGA
        assert_eq!(gpus_on_host(dir.path()), Some(9));
        assert_eq!(gpus_on_host(Path::new("/nonexistent-sysfs")), None);
    }
}
