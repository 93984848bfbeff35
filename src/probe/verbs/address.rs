//! What an address handle says, as a pure function of the local port and the destination
//! (issue 60, item 11), so that the rule is tested without a device; `verbs.rs` only turns an
//! [`AhSpec`] into `ibv_ah_attr`.
//!
//! RoCE routes every packet by its GRH: `is_global` always, the destination GID, no LID.
//! InfiniBand routes by LID inside a subnet: `dlid` is the peer's LID (an address handle with
//! DLID 0 goes nowhere), and a GRH only where the destination GID's subnet prefix differs from
//! the local port's (a router needs it), or where the port says every handle must carry one
//! (`IBV_QPF_GRH_REQUIRED`, ibv_query_port(3)). Across subnets `dlid` is the LID the peer's
//! packets came from (the router's) or, for a probe, the LID the peer published.
#![forbid(unsafe_code)]

use crate::probe::responder::subnet_prefix;
use crate::probe::transport::{Address, SendOptions};

/// The GRH hop limit: enough for any fabric's routers, as libibverbs' own handles from a
/// completion use 0xff.
pub(super) const HOP_LIMIT: u8 = 64;

/// What the port's link layer is (`ibv_port_attr.link_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LinkLayer {
    InfiniBand,
    Ethernet,
}

/// What an address handle needs of the local port, learned when the endpoint is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PortLink {
    pub port_num: u8,
    pub link_layer: LinkLayer,
    /// The GID the endpoint sends from and its table index (InfiniBand: index 0, the port GID).
    pub gid: [u8; 16],
    pub gid_index: u8,
    /// The port's LID on InfiniBand (`None` on RoCE, or while the subnet manager assigned none).
    pub lid: Option<u16>,
    /// `IBV_QPF_GRH_REQUIRED`: every handle carries a GRH.
    pub grh_required: bool,
}

impl PortLink {
    pub(super) fn infiniband(&self) -> bool {
        self.link_layer == LinkLayer::InfiniBand
    }
}

/// The fields of one `ibv_ah_attr`; also the address-handle cache's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct AhSpec {
    pub dlid: u16,
    pub is_global: bool,
    pub sgid_index: u8,
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub port_num: u8,
}

/// The address handle from `local` to `to`, riding as `options` say.
pub(super) fn ah_spec(local: &PortLink, to: &Address, options: &SendOptions) -> AhSpec {
    let (dlid, is_global) = match local.link_layer {
        LinkLayer::Ethernet => (0, true),
        LinkLayer::InfiniBand => {
            // A destination known by its LID alone (a probe without a GRH from an agent of
            // this subnet that is not a peer) has no GID to route on: same subnet.
            let other_subnet =
                to.gid != [0; 16] && subnet_prefix(&to.gid) != subnet_prefix(&local.gid);
            (to.lid.unwrap_or(0), other_subnet || local.grh_required)
        }
    };
    AhSpec {
        dlid,
        is_global,
        sgid_index: local.gid_index,
        dgid: to.gid,
        flow_label: options.flow_label & 0xf_ffff,
        hop_limit: HOP_LIMIT,
        traffic_class: options.traffic_class,
        sl: options.service_level,
        port_num: local.port_num,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ib_gid(prefix: u8, guid: u8) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, prefix]);
        gid[8] = 0x0c;
        gid[15] = guid;
        gid
    }

    fn ib_port() -> PortLink {
        PortLink {
            port_num: 1,
            link_layer: LinkLayer::InfiniBand,
            gid: ib_gid(0x80, 1),
            gid_index: 0,
            lid: Some(3),
            grh_required: false,
        }
    }

    fn options() -> SendOptions {
        SendOptions {
            flow_label: 0x12_3456,
            traffic_class: 104,
            service_level: 3,
            peer: true,
        }
    }

    fn to(gid: [u8; 16], lid: Option<u16>) -> Address {
        Address {
            gid,
            qpn: 300,
            qkey: 1,
            lid,
        }
    }

    #[test]
    fn infiniband_in_one_subnet_goes_by_lid_without_a_grh() {
        let spec = ah_spec(&ib_port(), &to(ib_gid(0x80, 2), Some(0x2a)), &options());
        assert_eq!(spec.dlid, 0x2a);
        assert!(!spec.is_global);
        assert_eq!((spec.sl, spec.port_num), (3, 1));
    }

    #[test]
    fn infiniband_to_another_subnet_adds_the_grh_to_the_lid() {
        let far = ib_gid(0x81, 2);
        let spec = ah_spec(&ib_port(), &to(far, Some(0x2a)), &options());
        assert_eq!(spec.dlid, 0x2a);
        assert!(spec.is_global);
        assert_eq!(spec.dgid, far);
        assert_eq!(spec.sgid_index, 0);
        assert_eq!(spec.flow_label, 0x2_3456, "20 bits");
        assert_eq!((spec.traffic_class, spec.hop_limit), (104, HOP_LIMIT));
    }

    /// A port that requires a GRH gets one in its own subnet too; a LID-only destination
    /// (no GID) stays in the subnet.
    #[test]
    fn a_port_that_requires_the_grh_always_has_one() {
        let port = PortLink {
            grh_required: true,
            ..ib_port()
        };
        let spec = ah_spec(&port, &to(ib_gid(0x80, 2), Some(0x2a)), &options());
        assert!(spec.is_global);
        assert_eq!(spec.dlid, 0x2a);
        let lid_only = ah_spec(&ib_port(), &to([0; 16], Some(9)), &options());
        assert!(!lid_only.is_global);
        assert_eq!(lid_only.dlid, 9);
    }

    #[test]
    fn roce_goes_by_the_grh_with_no_lid() {
        let port = PortLink {
            link_layer: LinkLayer::Ethernet,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
            gid_index: 3,
            lid: None,
            ..ib_port()
        };
        let dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
        // Even with a LID in the address (none is published on RoCE), the handle has none.
        let spec = ah_spec(&port, &to(dgid, Some(7)), &options());
        assert_eq!(
            spec,
            AhSpec {
                dlid: 0,
                is_global: true,
                sgid_index: 3,
                dgid,
                flow_label: 0x2_3456,
                hop_limit: HOP_LIMIT,
                traffic_class: 104,
                sl: 3,
                port_num: 1,
            }
        );
    }
}
