//! The libibverbs binding, declared by hand and loaded at run time with `dlopen`.
//!
//! Why by hand: a generated binding (bindgen over rdma-core's headers) needs cmake and libclang
//! on every build machine, for about thirty calls. Why at run time: a host without rdma-core
//! must still start and run every other collector, so nothing links `-libverbs`.
//!
//! What is declared, and why each part:
//! - the exported functions the prober calls, looked up with `dlvsym` at the version rdma-core
//!   gives them (`IBVERBS_1.1` for the classic verbs, which also carry a 1.0 compatibility
//!   version with other structs; `IBVERBS_1.11` for `_ibv_query_gid_ex`);
//! - the calls that verbs.h makes inline, through function pointers in the objects themselves:
//!   `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send` and `ibv_post_recv` through
//!   `ibv_context.ops`;
//!   `ibv_query_port`, `ibv_query_device_ex`, `ibv_query_rt_values_ex` and `ibv_create_cq_ex`
//!   through `verbs_context`, which sits in memory right before the `ibv_context` (its
//!   `abi_compat` says whether it does); and the extended CQ's `start_poll`/`end_poll`/`read_*`;
//! - the structs those calls read or write, field for field as rdma-core 44's `verbs.h` lays
//!   them out (x86_64 and aarch64 alike: `pthread_*_t` come from libc for the target). Fields the
//!   prober never touches are kept, named as in C, because the offsets of the later ones depend on
//!   them. `layout_tests` compiles a C program against the real header and compares every size
//!   and offset declared here.
//!
//! Structs that libibverbs fills with a size we pass (`ibv_port_attr`, `ibv_device_attr_ex`,
//! `ibv_gid_entry`) may grow in newer rdma-core releases; the size argument keeps older
//! declarations valid. `verbs_context` grows at its front, so the offsets of its fields from the
//! `ibv_context` after it never change.
//!
//! Everything here is `unsafe` to call; `super` (the endpoint) holds the only callers.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

// ---- constants (enums of verbs.h) ----

pub(super) const IBV_LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_QPF_GRH_REQUIRED` in `ibv_port_attr.flags`: every address handle must carry a GRH.
pub(super) const IBV_QPF_GRH_REQUIRED: u8 = 1 << 0;
pub(super) const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub(super) const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub(super) const IBV_WC_SUCCESS: u32 = 0;
pub(super) const IBV_WC_GRH: c_uint = 1;
/// `IBV_WC_STANDARD_FLAGS`: byte_len, imm, qp_num, src_qp, slid, sl, dlid_path_bits.
pub(super) const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;
pub(super) const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
/// Completion stamps in ns of the NIC's wall clock (`ibv_wc_read_completion_wallclock_ns`).
pub(super) const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
pub(super) const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub(super) const IBV_QPT_UD: u32 = 4;
pub(super) const IBV_QPS_INIT: u32 = 1;
pub(super) const IBV_QPS_RTR: u32 = 2;
pub(super) const IBV_QPS_RTS: u32 = 3;
pub(super) const IBV_QPS_ERR: u32 = 6;
pub(super) const IBV_QP_STATE: c_int = 1 << 0;
pub(super) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(super) const IBV_QP_PORT: c_int = 1 << 5;
pub(super) const IBV_QP_QKEY: c_int = 1 << 6;
pub(super) const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub(super) const IBV_WR_SEND: u32 = 2;
pub(super) const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub(super) const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;
/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of a context inside a `verbs_context`.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

// ---- structs ----

/// Opaque: only pointers to these are handled.
#[repr(C)]
pub(super) struct ibv_pd {
    _private: [u8; 0],
}

#[repr(C)]
pub(super) struct ibv_ah {
    _private: [u8; 0],
}

#[repr(C)]
pub(super) struct ibv_comp_channel {
    pub context: *mut ibv_context,
    /// Readable when a completion event is waiting; made non-blocking by the endpoint.
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `union ibv_gid`: 16 raw bytes, aligned as its two `__be64` halves.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(super) struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_device`: the names and sysfs paths of one device of the list.
#[repr(C)]
pub(super) struct ibv_device {
    /// `struct _ibv_device_ops`: two obsolete function pointers.
    _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    /// The uverbs node's sysfs path: watched to see the device go.
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

type PollCq = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
type ReqNotifyCq = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
type PostSend = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the provider's data-path calls. 32 pointers; the prober uses four
/// (`ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv` are inline calls
/// through them).
#[repr(C)]
pub(super) struct ibv_context_ops {
    /// `_compat_query_device` .. `_compat_create_cq`.
    _before_poll_cq: [*mut c_void; 11],
    pub poll_cq: Option<PollCq>,
    pub req_notify_cq: Option<ReqNotifyCq>,
    /// `_compat_cq_event` .. `_compat_destroy_qp`.
    _before_post_send: [*mut c_void; 12],
    pub post_send: Option<PostSend>,
    pub post_recv: Option<PostRecv>,
    /// `_compat_create_ah` .. `_compat_async_event`.
    _after_post_recv: [*mut c_void; 5],
}

/// `struct ibv_context`: an open device.
#[repr(C)]
pub(super) struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    /// Made non-blocking, so that pending async events are read without waiting.
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// `VERBS_ABI_IS_EXTENDED` when a `verbs_context` surrounds this context.
    pub abi_compat: *mut c_void,
}

type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
type QueryRtValues = unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
type CreateCqEx =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
type QueryDeviceEx =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, *mut ibv_device_attr_ex, usize) -> c_int;

/// `struct verbs_context` of rdma-core 44: the extended calls, in front of the `ibv_context`.
/// It grows at its front, so only the distance of each field from `context` matters; the four
/// calls the prober makes are typed, the rest are placeholders.
#[repr(C)]
pub(super) struct verbs_context {
    pub query_port: Option<QueryPort>,
    /// `advise_mr` .. `create_wq`.
    _before_query_rt_values: [*mut c_void; 23],
    pub query_rt_values: Option<QueryRtValues>,
    pub create_cq_ex: Option<CreateCqEx>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceEx>,
    /// `ibv_destroy_flow` .. `close_xrcd`, `_ABI_placeholder3`.
    _after_query_device_ex: [*mut c_void; 11],
    /// The provider's size of its `verbs_context`, counted back from the end: a field exists
    /// when `sz` reaches it (`verbs_get_ctx_op`).
    pub sz: usize,
    pub context: ibv_context,
}

/// `struct ibv_device_attr`: only carried inside `ibv_device_attr_ex` (232 bytes).
#[repr(C)]
pub(super) struct ibv_device_attr {
    _fields: [u64; 29],
}

#[repr(C)]
pub(super) struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: [u32; 3],
}

/// `struct ibv_device_attr_ex`: the device clock's rate and whether completions carry its
/// stamps; the fields after them are kept as bytes of rdma-core 44's size (the call is told it).
#[repr(C)]
pub(super) struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    /// `device_cap_flags_ex` .. `phys_port_cnt_ex`.
    _rest: [u64; 15],
}

/// `struct ibv_port_attr`.
#[repr(C)]
pub(super) struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`).
#[repr(C)]
pub(super) struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_mr`: the local key a scatter entry names.
#[repr(C)]
pub(super) struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_cq`: `context` leads to the provider's `poll_cq`.
#[repr(C)]
pub(super) struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

pub(super) type CqExFn<R> = Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> R>;

/// `struct ibv_cq_ex`: begins with an `ibv_cq`, then the current completion's status and
/// `wr_id` and the provider's readers of its other fields.
#[repr(C)]
pub(super) struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: CqExFn<c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: CqExFn<u32>,
    pub read_vendor_err: CqExFn<u32>,
    pub read_byte_len: CqExFn<u32>,
    pub read_imm_data: CqExFn<u32>,
    pub read_qp_num: CqExFn<u32>,
    pub read_src_qp: CqExFn<u32>,
    pub read_wc_flags: CqExFn<c_uint>,
    pub read_slid: CqExFn<u32>,
    pub read_sl: CqExFn<u8>,
    pub read_dlid_path_bits: CqExFn<u8>,
    pub read_completion_ts: CqExFn<u64>,
    pub read_cvlan: CqExFn<u16>,
    pub read_flow_tag: CqExFn<u32>,
    pub read_tm_info: *mut c_void,
    pub read_completion_wallclock_ns: CqExFn<u64>,
}

#[repr(C)]
pub(super) struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub(super) struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_wc`: one completion of a plain CQ.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` / `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp`: its number is the address peers send to.
#[repr(C)]
pub(super) struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
pub(super) struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(super) struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`: the GRH of an address handle.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
pub(super) struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
pub(super) struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub(super) struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// The `ud` member of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`: `rdma`, `atomic` (the largest: 32 bytes) or `ud`; only `ud` is used.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) union ibv_send_wr_wr {
    pub ud: ibv_send_wr_ud,
    _atomic: [u64; 4],
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub(super) struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    /// `imm_data` / `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub qp_type: u32,
    /// `bind_mw` / `tso` (48 bytes).
    _bind_mw: [u64; 6],
}

/// `struct ibv_async_event`.
#[repr(C)]
pub(super) struct ibv_async_event {
    /// `element`: the CQ, QP, SRQ, WQ or port number the event is about.
    pub element: *mut c_void,
    /// The raw number, not a Rust enum: a newer kernel may send a value this list lacks.
    pub event_type: u32,
}

/// `struct ibv_values_ex`.
#[repr(C)]
pub(super) struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

// ---- the library ----

/// The exported calls (27), resolved once per process.
pub(super) struct Verbs {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    /// The legacy fallback of `ibv_query_device_ex` (fills `orig_attr` alone).
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    /// The legacy fallback of `ibv_query_port` (a context without `verbs_context.query_port`).
    pub query_port_compat: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    pub query_gid_ex:
        unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub query_qp:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    pub create_ah: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah,
    pub destroy_ah: unsafe extern "C" fn(*mut ibv_ah) -> c_int,
    pub get_async_event: unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int,
    pub ack_async_event: unsafe extern "C" fn(*mut ibv_async_event),
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
}

/// The soname rdma-core's libibverbs has carried since its first release.
const LIBRARY: &CStr = c"libibverbs.so.1";

/// libibverbs' calls, or why they cannot be had (no library, or one too old), said once.
pub(super) fn verbs() -> Result<&'static Verbs, &'static str> {
    static VERBS: OnceLock<Result<Verbs, String>> = OnceLock::new();
    VERBS.get_or_init(load).as_ref().map_err(String::as_str)
}

fn load() -> Result<Verbs, String> {
    // SAFETY: dlopen with a NUL-terminated name; the handle is never closed, so every symbol
    // resolved from it stays valid for the life of the process. RTLD_LOCAL keeps its symbols
    // out of the global namespace; the providers it loads find it by their own DT_NEEDED.
    let handle = unsafe { libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!(
            "libibverbs not found ({}; install rdma-core's libibverbs1 and ibverbs-providers)",
            dl_error()
        ));
    }
    const V1_0: &CStr = c"IBVERBS_1.0";
    const V1_1: &CStr = c"IBVERBS_1.1";
    const V1_11: &CStr = c"IBVERBS_1.11";
    /// Resolves one symbol at one version as the function pointer type the field declares.
    macro_rules! sym {
        ($name:literal, $version:expr) => {{
            // SAFETY: `handle` is open; the names are NUL-terminated.
            let address = unsafe { libc::dlvsym(handle, $name.as_ptr(), $version.as_ptr()) };
            if address.is_null() {
                return Err(format!(
                    "libibverbs has no {}@{} (rdma-core older than the prober needs: {})",
                    $name.to_string_lossy(),
                    $version.to_string_lossy(),
                    dl_error()
                ));
            }
            // SAFETY: the symbol at that version has the C signature the field declares
            // (verbs.h of rdma-core 44; the versioned ABI does not change), and a function
            // pointer has the size of a data pointer on every Linux target.
            unsafe { function_pointer(address) }
        }};
    }
    Ok(Verbs {
        get_device_list: sym!(c"ibv_get_device_list", V1_1),
        free_device_list: sym!(c"ibv_free_device_list", V1_1),
        get_device_name: sym!(c"ibv_get_device_name", V1_1),
        open_device: sym!(c"ibv_open_device", V1_1),
        close_device: sym!(c"ibv_close_device", V1_1),
        query_device: sym!(c"ibv_query_device", V1_1),
        query_port_compat: sym!(c"ibv_query_port", V1_1),
        query_gid: sym!(c"ibv_query_gid", V1_1),
        query_gid_ex: sym!(c"_ibv_query_gid_ex", V1_11),
        alloc_pd: sym!(c"ibv_alloc_pd", V1_1),
        dealloc_pd: sym!(c"ibv_dealloc_pd", V1_1),
        reg_mr: sym!(c"ibv_reg_mr", V1_1),
        dereg_mr: sym!(c"ibv_dereg_mr", V1_1),
        create_cq: sym!(c"ibv_create_cq", V1_1),
        destroy_cq: sym!(c"ibv_destroy_cq", V1_1),
        create_qp: sym!(c"ibv_create_qp", V1_1),
        modify_qp: sym!(c"ibv_modify_qp", V1_1),
        destroy_qp: sym!(c"ibv_destroy_qp", V1_1),
        query_qp: sym!(c"ibv_query_qp", V1_1),
        create_ah: sym!(c"ibv_create_ah", V1_1),
        destroy_ah: sym!(c"ibv_destroy_ah", V1_1),
        get_async_event: sym!(c"ibv_get_async_event", V1_1),
        ack_async_event: sym!(c"ibv_ack_async_event", V1_1),
        // The channel calls have one version (1.0); the CQ event calls a 1.1 beside 1.0's.
        create_comp_channel: sym!(c"ibv_create_comp_channel", V1_0),
        destroy_comp_channel: sym!(c"ibv_destroy_comp_channel", V1_0),
        get_cq_event: sym!(c"ibv_get_cq_event", V1_1),
        ack_cq_events: sym!(c"ibv_ack_cq_events", V1_1),
    })
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `F` is an `unsafe extern "C" fn` type matching the symbol's C signature.
unsafe fn function_pointer<F: Copy>(address: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked); a function's address is a valid value of its pointer type.
    unsafe { std::mem::transmute_copy(&address) }
}

/// The dynamic linker's last message.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call on
    // this thread; it is copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "no message".into();
    }
    // SAFETY: non-null and NUL-terminated (above).
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

// ---- the inline calls of verbs.h ----

/// `verbs_get_ctx_op`: the field at `field_offset` of the `verbs_context` around `ctx` (offsets
/// of our declaration), when the context is extended and its provider's `verbs_context` is large
/// enough to hold the field. The field may still be null (the provider lacks that call).
///
/// # Safety
/// `ctx` is an open context; `T` is the type of the field at `field_offset`.
unsafe fn extended_field<T: Copy>(ctx: *mut ibv_context, field_offset: usize) -> Option<T> {
    // SAFETY: `ctx` is open, so its fields are readable.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    // SAFETY: an extended context is the last field of its verbs_context, and `sz` is the word
    // right before it in every version (the layout test checks it for ours).
    let sz = unsafe { ctx.cast::<usize>().sub(1).read() };
    let from_field_to_end = std::mem::size_of::<verbs_context>() - field_offset;
    if sz < from_field_to_end {
        return None;
    }
    let back = std::mem::offset_of!(verbs_context, context) - field_offset;
    // SAFETY: the provider's verbs_context spans `sz` bytes up to the context's end, so the
    // field, `back` bytes before the context, lies inside it.
    Some(unsafe { ctx.cast::<u8>().sub(back).cast::<T>().read() })
}

/// `ibv_query_device_ex` (with no input): the provider's extended query, or the legacy one.
///
/// # Safety
/// `ctx` is an open context.
pub(super) unsafe fn query_device_ex(
    verbs: &Verbs,
    ctx: *mut ibv_context,
    attr: &mut ibv_device_attr_ex,
) -> c_int {
    let offset = std::mem::offset_of!(verbs_context, query_device_ex);
    // SAFETY: `ctx` is open (caller); the field at that offset is an Option<QueryDeviceEx>.
    if let Some(Some(query)) = unsafe { extended_field::<Option<QueryDeviceEx>>(ctx, offset) } {
        let size = std::mem::size_of::<ibv_device_attr_ex>();
        // SAFETY: `attr` is a valid out-buffer of `size` bytes; no input.
        let rc = unsafe { query(ctx, std::ptr::null(), attr, size) };
        if rc != libc::EOPNOTSUPP && rc != libc::ENOSYS {
            return rc;
        }
    }
    // SAFETY: a zeroed attr is valid (plain integers); the legacy call fills `orig_attr`.
    unsafe {
        *attr = std::mem::zeroed();
        (verbs.query_device)(ctx, &mut attr.orig_attr)
    }
}

/// `ibv_query_port`: the provider's sized query, or the compatibility export.
///
/// # Safety
/// `ctx` is an open context.
pub(super) unsafe fn query_port(
    verbs: &Verbs,
    ctx: *mut ibv_context,
    port: u8,
    attr: &mut ibv_port_attr,
) -> c_int {
    let offset = std::mem::offset_of!(verbs_context, query_port);
    // SAFETY: `ctx` is open (caller); the field at that offset is an Option<QueryPort>.
    if let Some(Some(query)) = unsafe { extended_field::<Option<QueryPort>>(ctx, offset) } {
        // SAFETY: `attr` is a valid out-buffer of the size passed.
        return unsafe { query(ctx, port, attr, std::mem::size_of::<ibv_port_attr>()) };
    }
    // SAFETY: a zeroed attr is valid; the compatibility call writes at most its older, smaller
    // struct, a prefix of this one.
    unsafe {
        *attr = std::mem::zeroed();
        (verbs.query_port_compat)(ctx, port, attr)
    }
}

/// `ibv_query_gid_ex` (flags 0).
///
/// # Safety
/// `ctx` is an open context.
pub(super) unsafe fn query_gid_ex(
    verbs: &Verbs,
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: &mut ibv_gid_entry,
) -> c_int {
    let size = std::mem::size_of::<ibv_gid_entry>();
    // SAFETY: `ctx` is open; `entry` is a valid out-buffer of `size` bytes.
    unsafe { (verbs.query_gid_ex)(ctx, port, index, entry, 0, size) }
}

/// `ibv_query_rt_values_ex`: `EOPNOTSUPP` when the provider has none.
///
/// # Safety
/// `ctx` is an open context.
pub(super) unsafe fn query_rt_values_ex(
    ctx: *mut ibv_context,
    values: &mut ibv_values_ex,
) -> c_int {
    let offset = std::mem::offset_of!(verbs_context, query_rt_values);
    // SAFETY: `ctx` is open (caller); the field at that offset is an Option<QueryRtValues>.
    match unsafe { extended_field::<Option<QueryRtValues>>(ctx, offset) }.flatten() {
        // SAFETY: `values` is a valid in/out struct.
        Some(query) => unsafe { query(ctx, values) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_cq_ex`: null (errno `EOPNOTSUPP`) when the provider has none.
///
/// # Safety
/// `ctx` is an open context.
pub(super) unsafe fn create_cq_ex(
    ctx: *mut ibv_context,
    init: &mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let offset = std::mem::offset_of!(verbs_context, create_cq_ex);
    // SAFETY: `ctx` is open (caller); the field at that offset is an Option<CreateCqEx>.
    match unsafe { extended_field::<Option<CreateCqEx>>(ctx, offset) }.flatten() {
        // SAFETY: `init` is a valid attr.
        Some(create) => unsafe { create(ctx, init) },
        None => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            std::ptr::null_mut()
        }
    }
}

/// `ibv_poll_cq`: through the context's `ops.poll_cq`; -1 when the provider has none.
///
/// # Safety
/// `cq` is a live CQ; `wc` holds `n` entries.
pub(super) unsafe fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: a live CQ's context is open.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: as the caller promises.
        Some(poll) => unsafe { poll(cq, n, wc) },
        None => -1,
    }
}

/// `ibv_req_notify_cq`: through the context's `ops.req_notify_cq`; `EOPNOTSUPP` when the
/// provider has none.
///
/// # Safety
/// `cq` is a live CQ.
pub(super) unsafe fn req_notify_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: a live CQ's context is open.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: as the caller promises; 0: every completion, not only solicited ones.
        Some(notify) => unsafe { notify(cq, 0) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_send`: through the QP's context's `ops.post_send`.
///
/// # Safety
/// `qp` is live; `wr` and what it points to stay valid for the call.
pub(super) unsafe fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: a live QP's context is open.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: as the caller promises.
        Some(post) => unsafe { post(qp, wr, bad) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv`: through the QP's context's `ops.post_recv`.
///
/// # Safety
/// `qp` is live; `wr` and what it points to stay valid for the call.
pub(super) unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: a live QP's context is open.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: as the caller promises.
        Some(post) => unsafe { post(qp, wr, bad) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_start_poll`: 0 with a current completion, `ENOENT` when the CQ is empty.
///
/// # Safety
/// `cq` is a live extended CQ with no poll started.
pub(super) unsafe fn start_poll(cq: *mut ibv_cq_ex) -> c_int {
    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    // SAFETY: a live CQ's reader table is the provider's.
    match unsafe { (*cq).start_poll } {
        // SAFETY: as the caller promises; `attr` is valid.
        Some(start) => unsafe { start(cq, &mut attr) },
        None => libc::ENOENT,
    }
}

/// `ibv_end_poll`.
///
/// # Safety
/// `cq` is a live extended CQ whose `start_poll` returned 0.
pub(super) unsafe fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: as the caller promises.
    if let Some(end) = unsafe { (*cq).end_poll } {
        // SAFETY: as the caller promises.
        unsafe { end(cq) };
    }
}

/// `ibv_wc_read_*`: one field of the current completion through the provider's reader that
/// `reader` picks (the default value when the provider has none).
///
/// # Safety
/// `cq` is a live extended CQ between a successful `start_poll` and `end_poll`, created with the
/// `wc_flags` that make the reader valid.
pub(super) unsafe fn read<R: Default>(
    cq: *mut ibv_cq_ex,
    reader: impl FnOnce(&ibv_cq_ex) -> CqExFn<R>,
) -> R {
    // SAFETY: a live CQ's reader table is the provider's.
    match reader(unsafe { &*cq }) {
        // SAFETY: as the caller promises.
        Some(read) => unsafe { read(cq) },
        None => R::default(),
    }
}

#[cfg(test)]
mod layout_tests;
