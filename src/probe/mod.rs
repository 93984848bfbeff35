//! Active probing between RDMA NICs, the R-Pingmesh way (DESIGN.md, "Active probing"): each
//! local port answers probes on a UD queue pair and sends its own to a rotating set of peers.
//!
//! This is the transport-free core, usable by the verbs transport and by the simulator alike:
//! - [`packet`]: the probe's wire format, decoded without trusting the peer;
//! - [`responder`]: what a responder answers, bounded per source and in total;
//! - [`restarts`]: where each peer port answers now, and whether an unanswered probe was lost
//!   or went to a peer that was restarting;
//! - [`rtt`]: the network round trip with the responder's own delay taken out;
//! - [`targets`]: which peers a port probes in a round (Hostmesh's intra-host mesh, a rotating
//!   sample of the same rail, a few ports on other rails) and with which flow labels;
//! - [`vote`]: from one window's probe counts to the NICs, hosts, leaves, uplinks or spine to
//!   blame, against the background loss, several faults at once (docs/localization.md);
//! - [`localize`]: the vote over counts by name, for the landing page.

pub mod agent;
pub mod class;
pub mod collector;
pub mod config;
pub mod localize;
pub mod memory;
pub mod metrics;
pub mod packet;
pub mod peer_book;
pub mod peers;
pub mod ping;
pub(crate) mod ping_target;
pub mod rails;
pub mod responder;
pub mod restarts;
pub mod rtt;
pub mod sleep;
pub mod stats;
pub mod targets;
pub mod transport;
pub mod verbs;
pub mod vote;
