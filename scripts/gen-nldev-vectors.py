#!/usr/bin/env python3
"""Writes tests/fixtures/netlink/*.bin: RDMA netlink (nldev) answers laid out as the kernel
sends them, for the decoder tests in src/node/rdma_netlink/. Rerun by hand only; the bytes are
committed.

The numbers below are copied from include/uapi/rdma/rdma_netlink.h as carried by rdma-core
(kernel-headers/rdma/rdma_netlink.h, linux-rdma/rdma-core commit
691953d8d502f54088f776c5ba2aeed0a5ac945d), independently of the Rust constants, so that a wrong
number on either side shows up as a failing test. The message shapes follow the kernel's
drivers/infiniband/core/nldev.c: fill_res_info (RES_GET), res_get_common_dumpit +
fill_res_qp_entry + fill_res_name_pid (RES_QP_GET), stat_get_doit_default_counter (STAT_GET).
Byte order is little-endian (the host order of x86-64 and arm64, which the kernel uses).
"""

import os
import struct

# include/uapi/linux/netlink.h
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x2, 0x4, 0x300
NLA_F_NESTED = 0x8000

# include/uapi/rdma/rdma_netlink.h
RDMA_NL_NLDEV = 5
CMD = {"GET": 1, "PORT_GET": 5, "RES_GET": 9, "RES_QP_GET": 10, "STAT_GET": 17}
ATTR = {
    "PAD": 0,
    "DEV_INDEX": 1,
    "DEV_NAME": 2,
    "PORT_INDEX": 3,
    "CAP_FLAGS": 4,
    "FW_VERSION": 5,
    "NODE_GUID": 6,
    "RES_SUMMARY": 15,
    "RES_SUMMARY_ENTRY": 16,
    "RES_SUMMARY_ENTRY_NAME": 17,
    "RES_SUMMARY_ENTRY_CURR": 18,
    "RES_QP": 19,
    "RES_QP_ENTRY": 20,
    "RES_LQPN": 21,
    "RES_RQPN": 22,
    "RES_RQ_PSN": 23,
    "RES_SQ_PSN": 24,
    "RES_PATH_MIG_STATE": 25,
    "RES_TYPE": 26,
    "RES_STATE": 27,
    "RES_PID": 28,
    "RES_KERN_NAME": 29,
    "DRIVER": 52,
    "DRIVER_ENTRY": 53,
    "DRIVER_STRING": 54,
    "DRIVER_U32": 57,
    "RES_PDN": 60,
    "DEV_PROTOCOL": 67,
    "STAT_HWCOUNTERS": 80,
    "STAT_HWCOUNTER_ENTRY": 81,
    "STAT_HWCOUNTER_ENTRY_NAME": 82,
    "STAT_HWCOUNTER_ENTRY_VALUE": 83,
    "DEV_DIM": 84,
}
# enum ib_qp_type / ib_qp_state (include/rdma/ib_verbs.h)
QPT = {"GSI": 1, "RC": 2, "UD": 4, "XRC_TGT": 10}
QPS = {"RESET": 0, "INIT": 1, "RTR": 2, "RTS": 3, "ERR": 6}

SEQ = 0x5EED0001
PORTID = 0x00003039  # the requesting socket's port id, echoed in every answer
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "netlink")


def pad4(b):
    return b + b"\0" * (-len(b) % 4)


def attr(kind, value, nested=False):
    t = kind | (NLA_F_NESTED if nested else 0)
    return pad4(struct.pack("<HH", 4 + len(value), t) + value)


def u8(kind, v):
    return attr(ATTR[kind], struct.pack("<B", v))


def u32(kind, v):
    return attr(ATTR[kind], struct.pack("<I", v))


def u64(kind, v, pad=False):
    # nla_put_u64_64bit: on architectures without efficient unaligned access a PAD attribute
    # (type 0, empty) precedes the value to align it; decoders must skip it.
    return (attr(ATTR["PAD"], b"") if pad else b"") + attr(ATTR[kind], struct.pack("<Q", v))


def string(kind, s):
    return attr(ATTR[kind], s.encode() + b"\0")


def nest(kind, *children, flag=False):
    # nldev uses nla_nest_start_noflag for its tables (no NLA_F_NESTED), nla_nest_start
    # elsewhere: both appear on the wire.
    return attr(ATTR[kind] if isinstance(kind, str) else kind, b"".join(children), nested=flag)


def msg(kind, flags, payload, seq=SEQ):
    return pad4(struct.pack("<IHHII", 16 + len(payload), kind, flags, seq, PORTID) + payload)


def nldev(cmd):
    return (RDMA_NL_NLDEV << 10) + CMD[cmd]


def done(errno=0):
    return msg(NLMSG_DONE, NLM_F_MULTI, struct.pack("<i", errno))


def error(errno, request_kind, request_flags):
    original = struct.pack("<IHHII", 16, request_kind, request_flags, SEQ, PORTID)
    return msg(NLMSG_ERROR, 0, struct.pack("<i", errno) + original)


def handle(index, name):
    return u32("DEV_INDEX", index) + string("DEV_NAME", name)


def summary(entries, pad=False):
    return nest(
        "RES_SUMMARY",
        *(
            nest("RES_SUMMARY_ENTRY", string("RES_SUMMARY_ENTRY_NAME", n), u64("RES_SUMMARY_ENTRY_CURR", c, pad))
            for n, c in entries
        ),
    )


def res_get_dump():
    dev0 = [("pd", 3), ("cq", 5), ("qp", 6), ("cm_id", 0), ("mr", 2), ("ctx", 1), ("srq", 0), ("frmr_pool", 9)]
    dev1 = [("pd", 1), ("cq", 2), ("qp", 2), ("cm_id", 1), ("mr", 1), ("ctx", 1), ("srq", 0)]
    m0 = msg(nldev("RES_GET"), NLM_F_MULTI, handle(0, "mlx5_0") + summary(dev0))
    m1 = msg(nldev("RES_GET"), NLM_F_MULTI, handle(1, "mlx5_1") + summary(dev1, pad=True))
    return m0 + m1 + done()


def qp(port=None, lqpn=0, qpt="RC", state="RTS", pid=None, kern=None, extra=b"", pdn=None):
    a = b""
    if port is not None:
        a += u32("PORT_INDEX", port)
    a += u32("RES_LQPN", lqpn)
    if pdn is not None:
        a += u32("RES_PDN", pdn)
    if kern is not None:
        a += string("RES_KERN_NAME", kern)
    if pid is not None:
        a += u32("RES_PID", pid)
    if qpt in ("RC",):
        a += u32("RES_RQPN", lqpn + 0x100) + u32("RES_RQ_PSN", 0xABCDE)
    a += u32("RES_SQ_PSN", 0x12345)
    if qpt in ("RC", "XRC_TGT"):
        a += u8("RES_PATH_MIG_STATE", 0)
    a += attr(ATTR["RES_TYPE"], struct.pack("<B", QPT[qpt] if isinstance(qpt, str) else qpt))
    a += attr(ATTR["RES_STATE"], struct.pack("<B", QPS[state] if isinstance(state, str) else state))
    return nest("RES_QP_ENTRY", a + extra)


def res_qp_dump():
    newer = attr(200, struct.pack("<I", 77)) + nest(
        201, attr(1, b"future"), attr(2, struct.pack("<Q", 1)), flag=True
    )
    driver = nest("DRIVER", nest("DRIVER_ENTRY", string("DRIVER_STRING", "sq_wqe_cnt"), u32("DRIVER_U32", 256)), flag=True)
    first = nest(
        "RES_QP",
        qp(port=1, lqpn=1, qpt="GSI", state="RTS", kern="ib_core"),
        qp(port=1, lqpn=0x1A4, qpt="RC", state="RTS", pid=4242, pdn=3, extra=driver),
        qp(port=1, lqpn=0x1A5, qpt="UD", state="RTR", pid=4243, pdn=3, extra=newer),
    )
    second = nest(
        "RES_QP",
        qp(port=2, lqpn=0x200, qpt="XRC_TGT", state="ERR", pid=4242, pdn=4),
        qp(port=None, lqpn=0x201, qpt="RC", state="RESET", pid=4244, pdn=4),
        # A newer kernel's type and state; a user QP whose process is outside our pid
        # namespace: neither PID nor KERN_NAME.
        qp(port=1, lqpn=0x202, qpt=12, state=9, pdn=5),
    )
    m0 = msg(nldev("RES_QP_GET"), NLM_F_MULTI, handle(0, "mlx5_0") + first)
    m1 = msg(nldev("RES_QP_GET"), NLM_F_MULTI, handle(0, "mlx5_0") + second)
    return m0 + m1 + done()


STAT_COUNTERS = [
    ("duplicate_request", 1),
    ("implied_nak_seq_err", 0),
    ("local_ack_timeout_err", 7),
    ("np_cnp_sent", 1000),
    ("np_ecn_marked_roce_packets", 1200),
    ("out_of_sequence", 5),
    ("packet_seq_err", 2),
    ("rnr_nak_retry_err", 0),
    ("rp_cnp_handled", 900),
    ("rx_read_requests", 34),
    ("rx_write_requests", 12),
    ("rx_icrc_encapsulated", (1 << 40) + 5),
    # Optional counters (IB_STAT_FLAG_OPTIONAL), present once enabled with
    # `rdma statistic set link mlx5_0/1 optional-counters ...`.
    ("cc_rx_ce_pkts", 55),
    ("cc_rx_cnp_pkts", 66),
    ("cc_tx_cnp_pkts", 77),
]


def stat_get(counters, port=1):
    table = nest(
        "STAT_HWCOUNTERS",
        *(
            nest(
                "STAT_HWCOUNTER_ENTRY",
                string("STAT_HWCOUNTER_ENTRY_NAME", n),
                u64("STAT_HWCOUNTER_ENTRY_VALUE", v),
                flag=True,
            )
            for n, v in counters
        ),
        flag=True,
    )
    answer = msg(nldev("STAT_GET"), 0, handle(0, "mlx5_0") + u32("PORT_INDEX", port) + table)
    return answer + error(0, nldev("STAT_GET"), NLM_F_REQUEST | NLM_F_ACK)


def dev_get_dump():
    def dev(index, name, ports):
        return msg(
            nldev("GET"),
            NLM_F_MULTI,
            handle(index, name)
            + u32("PORT_INDEX", ports)
            + u64("CAP_FLAGS", 0x1C3ABC)
            + string("FW_VERSION", "28.39.1002")
            + u64("NODE_GUID", 0x0C42A10300A1B2C3)
            + attr(ATTR["DEV_DIM"], b"\1")
            + string("DEV_PROTOCOL", "roce"),
        )

    return dev(0, "mlx5_0", 1) + dev(1, "mlx5_1", 2) + done()


def main():
    os.makedirs(OUT, exist_ok=True)
    qp_dump = res_qp_dump()
    first_len = struct.unpack_from("<I", qp_dump)[0]
    stat = stat_get(STAT_COUNTERS)
    hundred = [(f"hw_counter_{i:03}", i * 1000 + 7) for i in range(100)]
    # An attribute overrunning its nest: the summary entry nest says 12 bytes, its NAME says 20.
    bad_entry = struct.pack("<HH", 12, ATTR["RES_SUMMARY_ENTRY"]) + struct.pack("<HH", 20, ATTR["RES_SUMMARY_ENTRY_NAME"]) + b"pd\0\0"
    overrun = msg(nldev("RES_GET"), NLM_F_MULTI, handle(0, "mlx5_0") + attr(ATTR["RES_SUMMARY"], bad_entry + b"\0" * 12)) + done()
    # Cut 6 bytes into an attribute of the first QP message, nlmsg_len patched to the cut.
    cut = first_len - 30
    truncated = bytearray(qp_dump[:cut])
    struct.pack_into("<I", truncated, 0, cut)
    # nlmsg_len 4096 in a 64-byte buffer.
    beyond = bytearray(stat[:64])
    struct.pack_into("<I", beyond, 0, 4096)
    files = {
        "dev_get_dump.bin": dev_get_dump(),
        "res_get_dump.bin": res_get_dump(),
        "res_qp_dump.bin": qp_dump,
        "stat_get.bin": stat,
        "stat_get_100.bin": stat_get(hundred),
        "error_eperm.bin": error(-1, nldev("RES_QP_GET"), NLM_F_REQUEST | NLM_F_DUMP),
        "error_eopnotsupp.bin": error(-95, nldev("STAT_GET"), NLM_F_REQUEST | NLM_F_ACK),
        # An error met inside a dump comes back in NLMSG_DONE (netlink_dump_done).
        "done_einval.bin": done(-22),
        "truncated.bin": bytes(truncated),
        "len_beyond_buffer.bin": bytes(beyond),
        "nest_overrun.bin": overrun,
    }
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
