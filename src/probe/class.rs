//! The traffic class a port's probes and answers ride: the one the host's RoCE traffic uses,
//! so that probes cross the lossless priority they are meant to test (a probe on class 0 rides
//! the best-effort queue and misses a PFC or ECN problem of the RDMA priority). In order:
//! 1. `probe.traffic_class` when set;
//! 2. MLNX_OFED's global `tc/<port>/traffic_class`: the kernel stamps it on every QP of the
//!    port, the probes' included, so it is what they carry whatever is asked;
//! 3. the NIC's DCB settings (DCB netlink, as `doctor` reads them): with DSCP trust, DSCP 26 if
//!    it maps to a PFC-enabled priority, else the lowest DSCP that maps to one;
//! 4. DSCP 26 (traffic class 104): the RoCE DSCP of NVIDIA's lossless configurations and of
//!    most fabrics' (docs/deploy.md).

use std::path::Path;

use crate::node::dcb::{DcbAnswer, DcbSource, DscpLookup, Trust};

/// The DSCP probes ride when nothing says which one RoCE uses.
pub(crate) const DEFAULT_DSCP: u8 = 26;
/// [`DEFAULT_DSCP`] as a GRH traffic class (DSCP << 2, ECN bits 0).
pub(crate) const DEFAULT_TRAFFIC_CLASS: u8 = DEFAULT_DSCP << 2;

/// Where a port's class came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    OfedGlobal,
    Dcb,
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Config => "probe.traffic_class",
            Source::OfedGlobal => "MLNX_OFED tc/<port>/traffic_class",
            Source::Dcb => "the NIC's DSCP trust and PFC priorities (DCB netlink)",
            Source::Default => "the default, DSCP 26",
        }
    }
}

/// A port's class and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    pub traffic_class: u8,
    pub source: Source,
}

/// The class, from what could be read (module doc for the order).
pub fn choose(config: Option<u8>, ofed_global: Option<u8>, dcb: Option<&DcbAnswer>) -> Class {
    let (traffic_class, source) = if let Some(value) = config {
        (value, Source::Config)
    } else if let Some(value) = ofed_global {
        (value, Source::OfedGlobal)
    } else if let Some(dscp) = dcb.and_then(lossless_dscp) {
        (dscp << 2, Source::Dcb)
    } else {
        (DEFAULT_TRAFFIC_CLASS, Source::Default)
    };
    Class {
        traffic_class,
        source,
    }
}

/// With DSCP trust and PFC on some priority: [`DEFAULT_DSCP`] if the DSCP map sends it to a
/// lossless priority, else the lowest DSCP it sends to one. `None` with PCP trust (the DSCP
/// picks no priority there) or where nothing is lossless.
fn lossless_dscp(dcb: &DcbAnswer) -> Option<u8> {
    if dcb.trust().0 != Trust::Dscp {
        return None;
    }
    let lossless = dcb.pfc?.pfc_en;
    let to_lossless = |dscp: u8| matches!(dcb.dscp_priority(dscp), DscpLookup::Priority(p) if lossless & (1 << p) != 0);
    if to_lossless(DEFAULT_DSCP) {
        return Some(DEFAULT_DSCP);
    }
    (0..64).find(|&dscp| to_lossless(dscp))
}

/// The global class of MLNX_OFED's `<class>/<device>/tc/<port>/traffic_class`, where there is
/// one (`class` is sysfs' `class/infiniband`).
fn ofed_global(class: &Path, device: &str, port: u8) -> Option<u8> {
    let path = class
        .join(device)
        .join("tc")
        .join(port.to_string())
        .join("traffic_class");
    let text = crate::bounded_read::read_to_string(&path, 4096).ok()?;
    crate::diag::doctor::trust::parse_ofed_traffic_class(&text)
        .ok()?
        .global
}

/// The class of `device` port `port`, whose RoCE netdev is `netdev` (empty on InfiniBand).
pub(crate) fn of_port(
    config: Option<u8>,
    class: &Path,
    device: &str,
    port: u8,
    netdev: &str,
    dcb: &dyn DcbSource,
) -> Class {
    if let Some(value) = config {
        return choose(Some(value), None, None);
    }
    let ofed = ofed_global(class, device, port);
    let answer = (ofed.is_none() && !netdev.is_empty())
        .then(|| dcb.ieee(netdev).ok())
        .flatten();
    choose(None, ofed, answer.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::dcb::{uapi, DcbApp, IeeePfc};

    /// DSCP trust (mlx5 fills the APP table with all 64 DSCPs), `map` giving each DSCP's
    /// priority, PFC on the priorities of `pfc_en`.
    fn dscp_trust(map: impl Fn(u8) -> u8, pfc_en: u8) -> DcbAnswer {
        DcbAnswer {
            pfc: Some(IeeePfc {
                pfc_en,
                ..IeeePfc::default()
            }),
            apps: (0..64)
                .map(|dscp| DcbApp {
                    selector: uapi::APP_SEL_DSCP,
                    priority: map(dscp),
                    protocol: u16::from(dscp),
                })
                .collect(),
            ..DcbAnswer::default()
        }
    }

    #[test]
    fn probes_ride_the_lossless_class_by_default() {
        // Nothing readable: DSCP 26, not the best-effort class 0.
        assert_eq!(
            choose(None, None, None),
            Class {
                traffic_class: 104,
                source: Source::Default
            }
        );
        assert_eq!(
            crate::probe::config::ProbeConfig::default()
                .settings()
                .send
                .traffic_class,
            104
        );
        // The operator's choice, then MLNX_OFED's global class, win.
        let dcb = dscp_trust(|d| d >> 3, 1 << 3);
        assert_eq!(choose(Some(0), Some(106), Some(&dcb)).traffic_class, 0);
        assert_eq!(
            choose(None, Some(106), Some(&dcb)),
            Class {
                traffic_class: 106,
                source: Source::OfedGlobal
            }
        );
        // DSCP 24-31 to priority 3 (the 8-per-priority map), PFC on 3: DSCP 26 is lossless.
        assert_eq!(choose(None, None, Some(&dcb)).traffic_class, 104);
        // Only DSCP 46 maps to the lossless priority 5: that one.
        let dcb = dscp_trust(|d| if d == 46 { 5 } else { 0 }, 1 << 5);
        assert_eq!(
            choose(None, None, Some(&dcb)),
            Class {
                traffic_class: 46 << 2,
                source: Source::Dcb
            }
        );
        // PCP trust (no DSCP entries), or no lossless priority: the default.
        let pcp = DcbAnswer {
            pfc: Some(IeeePfc {
                pfc_en: 1 << 3,
                ..IeeePfc::default()
            }),
            ..DcbAnswer::default()
        };
        assert_eq!(choose(None, None, Some(&pcp)).source, Source::Default);
        let lossy = dscp_trust(|d| d >> 3, 0);
        assert_eq!(choose(None, None, Some(&lossy)).source, Source::Default);
    }

    /// Every probe and every answer of a port leaves on the port's own class, whatever the
    /// loop's settings say (their default is class 0).
    #[test]
    fn probes_and_answers_leave_on_their_ports_class() {
        use std::sync::{Arc, Mutex};
        use std::time::Duration;

        use crate::probe::agent::{Agent, LocalPort, Settings};
        use crate::probe::memory::MemoryFabric;
        use crate::probe::targets::Port;

        let seen: Arc<Mutex<Vec<(u32, u8)>>> = Arc::default();
        let record = seen.clone();
        let fabric = MemoryFabric::new(Box::new(move |_, to, options| {
            record.lock().unwrap().push((to.qpn, options.traffic_class));
            Some(10_000)
        }));
        let ports = (0..2u8)
            .map(|n| {
                let mut gid = [0u8; 16];
                gid[15] = n + 1;
                LocalPort {
                    port: Port {
                        host: "h".into(),
                        device: format!("rxe{n}"),
                        port: 1,
                        rail: u32::from(n),
                        leaf: None,
                    },
                    netdev: String::new(),
                    traffic_class: 104,
                    responder: Box::new(fabric.endpoint(gid, 100, 9)),
                    prober: Box::new(fabric.endpoint(gid, 200, 9)),
                }
            })
            .collect();
        let settings = Settings {
            targets: crate::probe::targets::Settings {
                min_round: Duration::from_millis(20),
                ..Default::default()
            },
            ..Settings::default()
        };
        assert_eq!(settings.send.traffic_class, 0);
        let agent = Agent::spawn(ports, settings).unwrap();
        crate::testutil::poll_until(
            Duration::from_secs(10),
            || agent.stats(),
            |stats| stats.ports.iter().all(|p| p.answered[0] >= 2),
        );
        drop(agent);
        let seen = seen.lock().unwrap();
        // Probes went to the responders (QPN 100), answers to the probers (200).
        assert!(seen.iter().any(|(qpn, _)| *qpn == 100), "{seen:?}");
        assert!(seen.iter().any(|(qpn, _)| *qpn == 200), "{seen:?}");
        assert!(seen.iter().all(|(_, class)| *class == 104), "{seen:?}");
    }

    #[test]
    fn mlnx_ofeds_global_class_is_read_from_sysfs() {
        let sys = tempfile::tempdir().unwrap();
        let class = sys.path().join("class/infiniband");
        let tc = class.join("mlx5_0/tc/1");
        std::fs::create_dir_all(&tc).unwrap();
        std::fs::write(tc.join("traffic_class"), "Global tclass=98\n").unwrap();
        #[derive(Debug)]
        struct NoDcb;
        impl DcbSource for NoDcb {
            fn ieee(&self, netdev: &str) -> Result<DcbAnswer, crate::node::dcb::DcbError> {
                Err(crate::node::dcb::DcbError::NotSupported {
                    netdev: netdev.into(),
                })
            }
        }
        let read = |device| of_port(None, &class, device, 1, "eth0", &NoDcb);
        assert_eq!(
            read("mlx5_0"),
            Class {
                traffic_class: 98,
                source: Source::OfedGlobal
            }
        );
        assert_eq!(read("mlx5_1").source, Source::Default);
        assert_eq!(
            of_port(Some(0), &class, "mlx5_0", 1, "eth0", &NoDcb).traffic_class,
            0
        );
    }
}
