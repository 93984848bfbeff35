//! The numbers and struct layouts of DCB netlink, as used here. Checked against
//! `include/uapi/linux/dcbnl.h` (torvalds/linux @ 5944e723), `net/dcb/dcbnl.c` (`dcb_doit`,
//! `dcbnl_ieee_fill`, `dcbnl_app_attr_type_get`; Mellanox/nic-kernel @ ba8f7199),
//! `include/uapi/linux/rtnetlink.h` (`RTM_GETDCB`), and against how iproute2's `dcb` tool asks
//! (`dcb/dcb.c` `dcb_prepare`: `RTM_GETDCB`, `NLM_F_REQUEST`, `struct dcbmsg { .cmd }`,
//! `DCB_ATTR_IFNAME` as a NUL-terminated string) and how `mlnx_qos` reads the same answer
//! (Mellanox/mlnx-tools `python/dcbnetlink.py`).

/// `RTM_GETDCB` of `enum rtm_type`: the request, and the type of the answer's message.
pub const RTM_GETDCB: u16 = 78;

/// `sizeof(struct dcbmsg)`: `dcb_family` u8, `cmd` u8, `dcb_pad` u16.
pub(crate) const DCBMSG_LEN: usize = 4;
/// `enum dcbnl_commands`: `DCB_CMD_IEEE_GET` (the answer carries the same `cmd`).
pub const DCB_CMD_IEEE_GET: u8 = 21;

/// `enum dcbnl_attrs`, top level of the answer.
pub(crate) const DCB_ATTR_IFNAME: u16 = 1;
pub(crate) const DCB_ATTR_IEEE: u16 = 13;
pub(crate) const DCB_ATTR_DCBX: u16 = 14;

/// `enum ieee_attrs`, nested in `DCB_ATTR_IEEE`. 7 to 10 and 12 (maxrate, QCN, QCN stats,
/// buffer, rewrite table) and the peer attributes are not read. Older MLNX_OFED kernels put a
/// vendor trust attribute at 10, where upstream has `DCB_ATTR_DCB_BUFFER`: 10 is never read.
pub(crate) const DCB_ATTR_IEEE_ETS: u16 = 1;
pub(crate) const DCB_ATTR_IEEE_PFC: u16 = 2;
pub(crate) const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
pub(crate) const DCB_ATTR_DCB_APP_TRUST_TABLE: u16 = 11;

/// `enum ieee_attrs_app`: the entries of the APP and trust tables. The kernel files a PCP
/// (selector 255) entry under `DCB_ATTR_DCB_APP`, every IEEE selector under
/// `DCB_ATTR_IEEE_APP` (`dcbnl_app_attr_type_get`).
pub(crate) const DCB_ATTR_IEEE_APP: u16 = 1;
pub(crate) const DCB_ATTR_DCB_APP: u16 = 2;

/// `struct dcb_app` selectors: `IEEE_8021QAZ_APP_SEL_DSCP`, and the non-standard
/// `DCB_APP_SEL_PCP`.
pub const APP_SEL_DSCP: u8 = 5;

/// `sizeof(struct dcb_app)`: `selector` u8, `priority` u8, `protocol` u16.
pub(crate) const DCB_APP_LEN: usize = 4;

/// `sizeof(struct ieee_pfc)`: `pfc_cap`, `pfc_en`, `mbc` (u8 each), a pad byte, `delay` (u16
/// at 4), two pad bytes, then `requests[8]` and `indications[8]` (u64 each, from 8).
pub(crate) const IEEE_PFC_LEN: usize = 136;
pub(crate) const IEEE_PFC_EN: usize = 1;
pub(crate) const IEEE_PFC_DELAY: usize = 4;
pub(crate) const IEEE_PFC_REQUESTS: usize = 8;
pub(crate) const IEEE_PFC_INDICATIONS: usize = 72;

/// `sizeof(struct ieee_ets)`: `willing`, `ets_cap`, `cbs`, then seven arrays of 8 u8
/// (`tc_tx_bw`, `tc_rx_bw`, `tc_tsa`, `prio_tc`, `tc_reco_bw`, `tc_reco_tsa`, `reco_prio_tc`).
pub(crate) const IEEE_ETS_LEN: usize = 59;
pub(crate) const IEEE_ETS_PRIO_TC: usize = 27;

/// `IEEE_8021QAZ_MAX_TCS`.
pub const PRIORITIES: usize = 8;
