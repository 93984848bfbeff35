//! The numbers of the `nldev` family of NETLINK_RDMA, as used here.
//!
//! Source: `include/uapi/rdma/rdma_netlink.h`, read from rdma-core's copy
//! `kernel-headers/rdma/rdma_netlink.h` at linux-rdma/rdma-core commit
//! 691953d8d502f54088f776c5ba2aeed0a5ac945d (its last header update, 6739d1ed6, "Update kernel
//! headers", 2026-07-23). The enums are ABI ("don't change the order or add anything between"),
//! so these values hold for every kernel that knows the name. Value types (u8/u32/u64, string)
//! are the header's comments, checked against `nldev_policy` in the kernel's
//! `drivers/infiniband/core/nldev.c`.

/// `NETLINK_RDMA` of `include/uapi/linux/netlink.h`: the socket protocol.
pub const NETLINK_RDMA: i32 = 20;
/// `RDMA_NL_NLDEV`: the client number in the message type.
pub(crate) const RDMA_NL_NLDEV: u16 = 5;

/// `RDMA_NL_GET_TYPE(client, op) = (client << 10) + op`.
pub const fn msg_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// `RDMA_NL_GET_OP(type)`: the low 10 bits.
pub const fn op_of(kind: u16) -> u16 {
    kind & ((1 << 10) - 1)
}

// enum rdma_nldev_command
pub const CMD_GET: u16 = 1;
pub(crate) const CMD_PORT_GET: u16 = 5;
pub(crate) const CMD_SYS_GET: u16 = 6;
pub const CMD_RES_GET: u16 = 9;
pub const CMD_RES_QP_GET: u16 = 10;
pub const CMD_STAT_GET: u16 = 17;

// enum rdma_nldev_attr
/// Alignment padding before 64-bit values (`nla_put_u64_64bit`); skipped like any unknown one.
#[cfg(test)]
pub(crate) const ATTR_PAD: u16 = 0;
pub const ATTR_DEV_INDEX: u16 = 1; // u32
pub const ATTR_DEV_NAME: u16 = 2; // string
/// u32. In a `CMD_GET` answer: the device's number of ports; elsewhere a port number (from 1).
pub const ATTR_PORT_INDEX: u16 = 3;
pub(crate) const ATTR_RES_SUMMARY: u16 = 15; // nested
pub(crate) const ATTR_RES_SUMMARY_ENTRY: u16 = 16; // nested
pub(crate) const ATTR_RES_SUMMARY_ENTRY_NAME: u16 = 17; // string
pub(crate) const ATTR_RES_SUMMARY_ENTRY_CURR: u16 = 18; // u64
pub(crate) const ATTR_RES_QP: u16 = 19; // nested
pub(crate) const ATTR_RES_QP_ENTRY: u16 = 20; // nested
pub(crate) const ATTR_RES_LQPN: u16 = 21; // u32
pub(crate) const ATTR_RES_TYPE: u16 = 26; // u8
pub(crate) const ATTR_RES_STATE: u16 = 27; // u8
/// u32; only for user objects, and only when the owner is visible in the reader's pid namespace.
pub(crate) const ATTR_RES_PID: u16 = 28;
/// string; only for kernel objects (user ones: read `/proc/PID/comm`).
pub(crate) const ATTR_RES_KERN_NAME: u16 = 29;
pub const ATTR_STAT_HWCOUNTERS: u16 = 80; // nested
pub const ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81; // nested
pub const ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82; // string
pub const ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83; // u64

/// The command's name as `NetlinkError` reports it.
pub(crate) fn command_name(op: u16) -> &'static str {
    match op {
        CMD_GET => "CMD_GET",
        CMD_PORT_GET => "CMD_PORT_GET",
        CMD_SYS_GET => "CMD_SYS_GET",
        CMD_RES_GET => "CMD_RES_GET",
        CMD_RES_QP_GET => "CMD_RES_QP_GET",
        CMD_STAT_GET => "CMD_STAT_GET",
        _ => "CMD_UNKNOWN",
    }
}
