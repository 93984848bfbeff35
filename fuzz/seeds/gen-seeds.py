#!/usr/bin/env python3
"""Writes the binary seeds and hand-picked hostile inputs of the fuzz targets whose input is not
text: gNMI SubscribeResponses (protobuf) and ethtool GSTRINGS/GSTATS payloads. The text targets'
files are written by hand. Run from anywhere: python3 fuzz/seeds/gen-seeds.py"""

import json
import os
import struct

FUZZ = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def varint(n):
    out = b""
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        return key + varint(len(payload)) + payload
    if wire == 1:
        return key + payload
    if wire == 5:
        return key + payload
    raise ValueError(wire)

def s(x):
    return x.encode() if isinstance(x, str) else x

def path_elem(name, keys=None):
    out = field(1, 2, s(name))
    for k, v in (keys or {}).items():
        out += field(2, 2, field(1, 2, s(k)) + field(2, 2, s(v)))
    return out

def path(elems, target=""):
    out = b""
    for e in elems:
        if isinstance(e, tuple):
            out += field(3, 2, path_elem(*e))
        else:
            out += field(3, 2, path_elem(e))
    if target:
        out += field(4, 2, s(target))
    return out

def typed(kind, value):
    import struct
    if kind == "string": return field(1, 2, s(value))
    if kind == "int": return field(2, 0, value)
    if kind == "uint": return field(3, 0, value)
    if kind == "bool": return field(4, 0, int(value))
    if kind == "bytes": return field(5, 2, value)
    if kind == "float": return field(6, 5, struct.pack("<f", value))
    if kind == "json": return field(10, 2, s(value))
    if kind == "json_ietf": return field(11, 2, s(value))
    if kind == "ascii": return field(12, 2, s(value))
    if kind == "double": return field(14, 1, struct.pack("<d", value))
    raise ValueError(kind)

def update(p, kind, value):
    return field(1, 2, p) + field(3, 2, typed(kind, value))

def notification(updates, prefix=None, deletes=(), timestamp=1):
    out = field(1, 0, timestamp)
    if prefix is not None:
        out += field(2, 2, prefix)
    for u in updates:
        out += field(4, 2, u)
    for d in deletes:
        out += field(5, 2, d)
    return out

def subscribe_response(n):
    return field(1, 2, n)

def sync_response():
    return field(3, 0, 1)


def write(kind, target, name, data):
    directory = os.path.join(FUZZ, kind, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def sonic_counters():
    ports = {
        f"Ethernet{i}": {
            "SAI_PORT_STAT_IF_IN_OCTETS": str(1000 * i),
            "SAI_PORT_STAT_PFC_3_RX_PKTS": str(7 + i),
            "SAI_PORT_STAT_PFC_3_TX_PKTS": "2",
            "SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US": "2500000",
        }
        for i in (0, 4, 8)
    }
    return json.dumps(ports)


def gnmi():
    counters = path(["COUNTERS", "Ethernet*"], target="COUNTERS_DB")
    write("seeds", "gnmi_values", "sonic-json-ietf.pb", subscribe_response(notification(
        [update(counters, "json_ietf", sonic_counters())])))
    queues = path(["COUNTERS", "Ethernet*", "Queues"], target="COUNTERS_DB")
    write("seeds", "gnmi_values", "sonic-queues.pb", subscribe_response(notification([update(
        queues, "json_ietf",
        json.dumps({"Ethernet8:3": {"SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS": "77",
                                    "SAI_QUEUE_STAT_DROPPED_PACKETS": "1"}}))])))
    prefix = path(["interfaces", ("interface", {"name": "Ethernet1/1"}), "state"])
    write("seeds", "gnmi_values", "openconfig-typed.pb", subscribe_response(notification([
        update(path(["oper-status"]), "string", "UP"),
        update(path(["counters", "in-octets"]), "uint", 5),
        update(path(["counters", "out-errors"]), "int", 3),
        update(path(["description"]), "ascii", " uplink "),
    ], prefix=prefix, deletes=[path(["counters", "in-discards"])])))
    write("seeds", "gnmi_values", "openconfig-json.pb", subscribe_response(notification([update(
        path(["openconfig-interfaces:interfaces"]), "json_ietf", json.dumps({
            "openconfig-interfaces:interface": [
                {"name": "Ethernet0", "state": {"oper-status": "LOWER_LAYER_DOWN",
                                                "counters": {"in-octets": "7"}}}]}))])))
    write("seeds", "gnmi_values", "sync.pb", sync_response())

    # Hostile: JSON nested past serde_json's recursion limit; numbers out of every range;
    # a float where a counter belongs; a priority the profile rejects.
    write("regressions", "gnmi_values", "deep-json.pb", subscribe_response(notification(
        [update(counters, "json_ietf", "[" * 5000 + "]" * 5000)])))
    write("regressions", "gnmi_values", "huge-numbers.pb", subscribe_response(notification([update(
        counters, "json_ietf",
        '{"Ethernet0": {"SAI_PORT_STAT_IF_IN_OCTETS": 1e400, '
        '"SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US": "18446744073709551615"}}')])))
    write("regressions", "gnmi_values", "odd-values.pb", subscribe_response(notification([
        update(path(["counters", "in-octets"]), "double", float("nan")),
        update(path(["counters", "out-octets"]), "int", -1),
        update(path(["oper-status"]), "uint", 2**64 - 1),
        update(path(["description"]), "bytes", b"\xff\x00"),
    ], prefix=prefix)))
    write("regressions", "gnmi_values", "bad-priority.pb", subscribe_response(notification([update(
        counters, "json_ietf",
        json.dumps({"Ethernet0": {"SAI_PORT_STAT_PFC_9_RX_PKTS": "1"},
                    "Ethernet0:99999999999": {"SAI_PORT_STAT_PFC_3_RX_PKTS": "x"}}))])))
    write("regressions", "gnmi_values", "truncated.pb",
          subscribe_response(notification([update(counters, "json_ietf", sonic_counters())]))[:40])
    write("regressions", "gnmi_values", "empty.pb", b"")


def gstrings(names):
    return b"".join(n.encode()[:32].ljust(32, b"\0") for n in names)


def ethtool():
    names = ["rx_packets", "tx_packets", "rx_prio3_pause", "tx_prio3_pause",
             "rx_prio3_pause_duration", "rx_vport_rdma_unicast_bytes"]
    write("seeds", "ethtool_strings", "names.bin", bytes([len(names)]) + gstrings(names))
    values = [12, 0, 7, 2**64 - 1, 2500000, 1 << 40]
    write("seeds", "ethtool_strings", "values.bin",
          bytes([len(values)]) + b"".join(struct.pack("=Q", v) for v in values))
    # Hostile: full-width names without NUL, invalid UTF-8, a count the payload does not fill.
    write("regressions", "ethtool_strings", "full-width.bin", b"\x01" + b"a" * 32)
    write("regressions", "ethtool_strings", "not-utf8.bin", b"\x02" + b"\xff\xfe" * 32)
    write("regressions", "ethtool_strings", "count-too-big.bin", b"\xff" + gstrings(["rx"]))
    write("regressions", "ethtool_strings", "empty.bin", b"")
    write("regressions", "ethtool_strings", "count-only.bin", b"\x00")


gnmi()
ethtool()
