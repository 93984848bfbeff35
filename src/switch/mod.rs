//! Switch telemetry. So far: vendor profiles as data, and the decoding of SNMP varbinds into
//! normalized samples. The pollers (SNMP, gNMI) and the switch metrics build on this.

pub mod config;
pub mod gnmi;
pub(crate) mod gnmi_map;
pub mod metrics;
pub mod pfc;
pub mod poll_error;
pub mod poller;
pub mod profile;
pub mod secret;
pub mod settings;
pub mod shard;
pub mod snmp;
pub mod targets;
