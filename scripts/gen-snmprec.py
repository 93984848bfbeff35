#!/usr/bin/env python3
"""Writes tests/fixtures/snmprec/<profile>.snmprec: a recorded-walk file for snmpsim with rows for
every column of each vendor profile (two ports, priorities 0 and 3, queues 0 and 3), so that the
real-agent test can check that the exporter decodes exactly what the agent serves.
Run from the repository root after changing a profile; the output is committed."""
import re
from pathlib import Path

PROFILES = ["generic", "sonic", "cisco_nxos", "arista_eos", "nvidia_cumulus", "juniper_junos"]
TEXT = {"if_name", "if_alias", "lldp_remote_port_id", "lldp_remote_port_description", "lldp_remote_system_name"}
COUNTER32 = {"1.3.6.1.2.1.2.2.1.13", "1.3.6.1.2.1.2.2.1.14", "1.3.6.1.2.1.2.2.1.19", "1.3.6.1.2.1.2.2.1.20",
             "1.3.111.2.802.1.1.21.1.1.1.2", "1.3.111.2.802.1.1.21.1.1.1.3"}
COLUMN = re.compile(r"\{name: (\S+), oid: (\S+), metric: (\S+), index: \[([^\]]*)\](.*)\}")


def columns(name):
    text = Path(f"profiles/{name}.yml").read_text()
    cols = []
    parent = re.search(r"^extends: (\S+)", text, re.M)
    if parent:
        cols += columns(parent.group(1))
    for match in COLUMN.finditer(text):
        col_name, oid, metric, index, rest = match.groups()
        # Fallback columns are walked only when the vendor table is absent: not recorded here.
        if "fallback_for" in rest:
            continue
        base = re.search(r"queue_base: (\d+)", rest)
        cols.append((col_name, oid, metric, [p.strip() for p in index.split(",")], int(base.group(1)) if base else 0))
    return cols


def rows(name):
    out = {}
    for n, (col_name, oid, metric, index, queue_base) in enumerate(columns(name)):
        for port in (1, 2):
            for prio, queue in ((0, 0), (3, 3)):
                suffix = []
                for part in index:
                    suffix.append({"ifindex": port, "local_port": port, "priority": prio,
                                   "queue": queue + queue_base, "any": 0}.get(part, part))
                key = oid + "." + ".".join(str(s) for s in suffix)
                if metric in TEXT:
                    value = f"4|{col_name}-{port}"
                elif metric == "oper_status":
                    value = f"2|{port}"
                elif metric == "pfc_enabled":
                    # TruthValue: PFC on priority 3 of port 1 only (2 = false).
                    value = f"2|{1 if (port, prio) == (1, 3) else 2}"
                elif metric == "priority_queue":
                    # Unsigned32 traffic class; priority 3 of port 2 on queue 5.
                    value = f"66|{5 if (port, prio) == (2, 3) else prio}"
                elif oid in COUNTER32:
                    value = f"65|{4294967000 + n + port}"
                else:
                    value = f"70|{(n + 1) * 1000003 + port * 101 + prio}"
                out[key] = value
    return out


for name in PROFILES:
    table = rows(name)
    ordered = sorted(table, key=lambda oid: [int(a) for a in oid.split(".")])
    lines = [f"{oid}|{table[oid]}" for oid in ordered]
    Path(f"tests/fixtures/snmprec/{name}.snmprec").write_text("\n".join(lines) + "\n")
    print(f"{name}: {len(lines)} rows")
