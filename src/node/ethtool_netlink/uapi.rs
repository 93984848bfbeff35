//! The numbers of generic netlink and of the `ethtool` family, as used here. Checked against
//! `include/uapi/linux/genetlink.h` (`GENL_ID_CTRL`, `CTRL_CMD_*`, `CTRL_ATTR_*`, `struct
//! genlmsghdr`), `include/uapi/linux/ethtool_netlink_generated.h` (torvalds/linux @ 1176978e;
//! the FEC histogram enum from the ethtool tool's UAPI copy updated to kernel commit
//! 491c5dc98b84, 2025), `include/uapi/linux/ethtool.h` (`enum ethtool_link_mode_bit_indices`)
//! and `net/ethtool/fec.c` (`fec_put_stats`, `fec_put_hist`, `fec_fill_reply`). Before kernel
//! 6.7 the same enums lived in `include/uapi/linux/ethtool_netlink.h`, with the same values.

/// `NETLINK_GENERIC` of `include/uapi/linux/netlink.h`.
pub(crate) const NETLINK_GENERIC: libc::c_int = 16;

/// `sizeof(struct genlmsghdr)`: `cmd` u8, `version` u8, `reserved` u16.
pub(crate) const GENL_HDRLEN: usize = 4;

/// The controller's fixed family id (`GENL_ID_CTRL` = `NLMSG_MIN_TYPE`).
pub(crate) const GENL_ID_CTRL: u16 = 0x10;
/// `CTRL_CMD_NEWFAMILY`: the controller's answer to `CTRL_CMD_GETFAMILY`.
pub(crate) const CTRL_CMD_NEWFAMILY: u8 = 1;
pub(crate) const CTRL_CMD_GETFAMILY: u8 = 3;
/// The controller's own version, as `genl ctrl` sends it (any version is accepted).
pub(crate) const CTRL_VERSION: u8 = 2;
/// `CTRL_ATTR_FAMILY_ID`: u16.
pub(crate) const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_FAMILY_NAME`: NUL-terminated string.
pub(crate) const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// `ETHTOOL_GENL_NAME`, `ETHTOOL_GENL_VERSION`.
pub(crate) const ETHTOOL_GENL_NAME: &str = "ethtool";
pub(crate) const ETHTOOL_GENL_VERSION: u8 = 1;

/// Every ethtool request carries its header nest as attribute 1 (`ETHTOOL_A_*_HEADER`: the
/// first attribute after `UNSPEC` in every message's attribute set).
pub(crate) const ETHTOOL_A_HEADER: u16 = 1;
/// `ETHTOOL_A_HEADER_*`, nested in the header.
pub(crate) const ETHTOOL_A_HEADER_DEV_INDEX: u16 = 1;
pub(crate) const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
pub(crate) const ETHTOOL_A_HEADER_FLAGS: u16 = 3;

/// `enum ethtool_header_flags`.
pub(crate) const ETHTOOL_FLAG_STATS: u32 = 4;

/// `ETHTOOL_MSG_FEC_GET` (user to kernel) and `ETHTOOL_MSG_FEC_GET_REPLY` (kernel to user).
pub(crate) const ETHTOOL_MSG_FEC_GET: u8 = 29;
pub(crate) const ETHTOOL_MSG_FEC_GET_REPLY: u8 = 30;
/// `ETHTOOL_MSG_MODULE_EEPROM_GET` and its reply (for module page reads).
pub(crate) const ETHTOOL_MSG_MODULE_EEPROM_GET: u8 = 31;
pub(crate) const ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY: u8 = 32;

/// `ETHTOOL_A_FEC_*`, the top level of a FEC_GET reply.
pub(crate) const ETHTOOL_A_FEC_HEADER: u16 = 1;
pub(crate) const ETHTOOL_A_FEC_MODES: u16 = 2;
pub(crate) const ETHTOOL_A_FEC_AUTO: u16 = 3;
/// u32: the index of the active FEC link mode bit (absent when none is set).
pub(crate) const ETHTOOL_A_FEC_ACTIVE: u16 = 4;
pub(crate) const ETHTOOL_A_FEC_STATS: u16 = 5;

/// `ETHTOOL_A_FEC_STAT_*`, nested in `ETHTOOL_A_FEC_STATS`. CORRECTED, UNCORR and CORR_BITS
/// are binary arrays of u64 (`nla_put_64bit`): the total, then one value per lane when the
/// driver gives lanes (`fec_stats_recalc`); empty when the driver does not report the counter.
pub(crate) const ETHTOOL_A_FEC_STAT_PAD: u16 = 1;
pub(crate) const ETHTOOL_A_FEC_STAT_CORRECTED: u16 = 2;
pub(crate) const ETHTOOL_A_FEC_STAT_UNCORR: u16 = 3;
pub(crate) const ETHTOOL_A_FEC_STAT_CORR_BITS: u16 = 4;
/// One nest per histogram bin, repeated (multi-attr), after the three arrays.
pub(crate) const ETHTOOL_A_FEC_STAT_HIST: u16 = 5;

/// `ETHTOOL_A_FEC_HIST_*`, nested in each `ETHTOOL_A_FEC_STAT_HIST`: the bin's inclusive
/// bounds of bit errors per codeword (u32 each), its count (`nla_put_uint`: 4 bytes, or 8 past
/// `u32::MAX`) and optionally per-lane counts (binary array of u64, 64-bit padded with PAD).
pub(crate) const ETHTOOL_A_FEC_HIST_PAD: u16 = 1;
pub(crate) const ETHTOOL_A_FEC_HIST_BIN_LOW: u16 = 2;
pub(crate) const ETHTOOL_A_FEC_HIST_BIN_HIGH: u16 = 3;
pub(crate) const ETHTOOL_A_FEC_HIST_BIN_VAL: u16 = 4;
pub(crate) const ETHTOOL_A_FEC_HIST_BIN_VAL_PER_LANE: u16 = 5;

/// `ETHTOOL_MAX_LANES` (`include/linux/ethtool.h`): the most lanes a FEC array carries.
pub(crate) const ETHTOOL_MAX_LANES: usize = 8;
/// `ETHTOOL_FEC_HIST_MAX`: 16 bins (IEEE 802.3ck/df) plus an end marker.
pub(crate) const ETHTOOL_FEC_HIST_MAX: usize = 17;

/// FEC link mode bits of `enum ethtool_link_mode_bit_indices`.
pub(crate) const ETHTOOL_LINK_MODE_FEC_NONE_BIT: u32 = 49;
pub const ETHTOOL_LINK_MODE_FEC_RS_BIT: u32 = 50;
pub(crate) const ETHTOOL_LINK_MODE_FEC_BASER_BIT: u32 = 51;
pub(crate) const ETHTOOL_LINK_MODE_FEC_LLRS_BIT: u32 = 74;
