//! The seam between the probe loops and the NIC: one UD endpoint (a queue pair with its
//! completion queue) that posts sends and hands back completions. `verbs.rs` implements it on
//! libibverbs; the tests and the simulator implement it in memory.

use std::os::fd::RawFd;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::responder::Source;
use super::rtt::{Clock, Timestamps};

/// What a peer needs to send to an endpoint, as an agent publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Address {
    /// The port's GID (for RoCE v2, the IPv4-mapped one), 16 bytes.
    #[serde(with = "gid_text")]
    pub gid: [u8; 16],
    pub qpn: u32,
    pub qkey: u32,
    /// The port's LID on InfiniBand, where address handles go by LID (the GID only across
    /// subnets); `None` on RoCE. Left out of the JSON when `None`, so RoCE addresses print as
    /// before, and an older agent's JSON (which has none) still parses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lid: Option<u16>,
}

/// How a send rides the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendOptions {
    /// The GRH flow label (RoCE v2 derives the UDP source port from it); 0 lets the kernel pick.
    pub flow_label: u32,
    /// The GRH traffic class (DSCP << 2 for RoCE v2), so probes can ride the RDMA priority.
    pub traffic_class: u8,
    /// The service level (the priority on InfiniBand, and on RoCE without DSCP trust).
    pub service_level: u8,
    /// The destination is in the peer set (an agent that publishes its address): its address
    /// handle may be made on the loop. Other destinations' handles are made off it, since a
    /// forged source's neighbour may never answer.
    pub peer: bool,
}

/// A completion, in the endpoint's clock ([`Endpoint::clock`]), nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A payload arrived (the GRH already stripped) from `source`.
    Received {
        payload: Vec<u8>,
        source: Source,
        at_ns: u64,
    },
    /// The send posted with `wr_id` completed (`ok: false`: it failed, e.g. the AH went bad).
    Sent { wr_id: u64, ok: bool, at_ns: u64 },
    /// The endpoint found its queue pair broken (`reason`, e.g. `qp_error`: a receive the
    /// buffers could not hold put it in the error state) and built a new one: its address (the
    /// QPN) has changed, and sends in flight were lost with the old one.
    Reset { reason: &'static str },
}

/// Why an endpoint could not be opened or used; `reason` is its label.
#[derive(Debug, Error)]
pub enum TransportError {
    /// No libibverbs on this host, or no kernel RDMA support: probing is off, nothing else is.
    #[error("RDMA verbs unavailable: {0}")]
    Unavailable(String),
    #[error("{device}: {message}")]
    Device { device: String, message: String },
    #[error("{call}: {source}")]
    Verbs {
        call: &'static str,
        source: std::io::Error,
    },
    /// The device went away (unplugged, `rdma link delete`, driver unloaded).
    #[error("the device is gone")]
    Gone,
    /// No address handle to the destination yet: it is being resolved off the loop (a
    /// neighbour that does not answer would otherwise stall every port). Nothing was sent.
    #[error("the address handle is being resolved")]
    AddressPending,
}

impl TransportError {
    pub fn reason(&self) -> &'static str {
        match self {
            TransportError::Unavailable(_) => "unavailable",
            TransportError::Device { .. } => "device",
            TransportError::Verbs { .. } => "verbs",
            TransportError::Gone => "gone",
            TransportError::AddressPending => "address_pending",
        }
    }
}

/// One UD endpoint.
pub trait Endpoint: Send {
    fn address(&self) -> Address;
    /// Where completion times come from.
    fn clock(&self) -> Clock;
    /// How completion times become nanoseconds (the `timestamps` label); an endpoint whose
    /// device stamps in cycles or wall-clock time says which.
    fn timestamps(&self) -> Timestamps {
        match self.clock() {
            Clock::Hardware => Timestamps::Cycles,
            Clock::Software => Timestamps::Software,
        }
    }
    /// Posts one send of `payload` to `to`, tagged `wr_id`; returns the time of the post in the
    /// endpoint's clock.
    fn send(
        &mut self,
        to: Address,
        options: SendOptions,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<u64, TransportError>;
    /// Appends the completions there are to `events`, waiting up to `wait` for the first.
    fn poll(&mut self, events: &mut Vec<Event>, wait: Duration) -> Result<(), TransportError>;
    /// The endpoint's clock now.
    fn now_ns(&self) -> u64;
    /// A descriptor that turns readable when a completion comes, once [`Endpoint::arm`]ed, so
    /// the loop can sleep until there is work; `None`: the loop polls this endpoint on a timer.
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
    /// Called before the polls that precede a sleep: takes the wake-up the descriptor gave
    /// (`woken`: it was readable) and asks for one at the next completion. A completion that
    /// came before this call wakes no one: the polls after it find it. Returns how long the
    /// loop may sleep at most before polling this endpoint whatever the descriptor says
    /// (`None`: as long as it likes), e.g. until the next health check.
    fn arm(&mut self, _woken: bool) -> Result<Option<Duration>, TransportError> {
        Ok(None)
    }
    /// Releases the device. The loop calls it on both endpoints of a port once either finds
    /// the device gone: a removal waits for every user to close it (soft-RoCE cannot force
    /// them), and the endpoint that had not looked yet would hold it open until the process ends.
    fn close(&mut self) {}
}

/// A GID as the text the kernel prints in sysfs (`fe80:0000:...`, eight groups of four hex
/// digits), so the address endpoint reads like `/sys/class/infiniband/*/ports/*/gids/*`.
pub mod gid_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn format(gid: &[u8; 16]) -> String {
        gid.chunks(2)
            .map(|pair| format!("{:02x}{:02x}", pair[0], pair[1]))
            .collect::<Vec<_>>()
            .join(":")
    }

    pub fn parse(text: &str) -> Option<[u8; 16]> {
        let groups: Vec<&str> = text.split(':').collect();
        if groups.len() != 8 {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, group) in groups.iter().enumerate() {
            if group.len() != 4 {
                return None;
            }
            let value = u16::from_str_radix(group, 16).ok()?;
            gid[2 * i..2 * i + 2].copy_from_slice(&value.to_be_bytes());
        }
        Some(gid)
    }

    pub fn serialize<S: Serializer>(gid: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(gid))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| serde::de::Error::custom(format!("not a GID: {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_sysfs_prints_gids() {
        let address = Address {
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7],
            qpn: 17,
            qkey: 0x1111_1111,
            lid: None,
        };
        let json = serde_json::to_string(&address).unwrap();
        assert_eq!(
            json,
            r#"{"gid":"0000:0000:0000:0000:0000:ffff:0a00:0007","qpn":17,"qkey":286331153}"#
        );
        assert_eq!(serde_json::from_str::<Address>(&json).unwrap(), address);
        for bad in [
            "",
            "fe80::1",
            "0000:0000:0000:0000:0000:ffff:0a00",
            "zzzz:0000:0000:0000:0000:ffff:0a00:0007",
        ] {
            assert!(gid_text::parse(bad).is_none(), "{bad}");
        }
    }

    /// An InfiniBand port publishes its LID beside its GID; an address without one (RoCE, or
    /// an agent older than LIDs) still reads, as `None`.
    #[test]
    fn infiniband_addresses_carry_their_lid() {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&[0x0c, 0x42, 0xa1, 0x03, 0x00, 0x6b, 0x2e, 0x10]);
        let address = Address {
            gid,
            qpn: 17,
            qkey: 0x1111_1111,
            lid: Some(0x2a),
        };
        let json = serde_json::to_string(&address).unwrap();
        assert_eq!(
            json,
            r#"{"gid":"fe80:0000:0000:0000:0c42:a103:006b:2e10","qpn":17,"qkey":286331153,"lid":42}"#
        );
        assert_eq!(serde_json::from_str::<Address>(&json).unwrap(), address);
        let older =
            r#"{"gid":"fe80:0000:0000:0000:0c42:a103:006b:2e10","qpn":17,"qkey":286331153}"#;
        assert_eq!(
            serde_json::from_str::<Address>(older).unwrap(),
            Address {
                lid: None,
                ..address
            }
        );
    }
}
