#!/bin/sh
# The real-kernel scenario, run in the guest by scripts/vm/boot (tests/it/real_kernel.rs boots
# it once): two soft-RoCE "hosts" on a veth pair, real RDMA traffic, real faults, and what the
# exporter, `cat`, `rdma` and the tools saw at each moment, written to $RFE_OUT for the tests.
#
#   guest.sh EXPORTER [--wait-alert]
#
# With --wait-alert, the lossy phase keeps going until the host writes $RFE_OUT/host-alert-done
# (a Prometheus on the host scrapes this exporter through QEMU's port forward), at most 150 s.
#
# The two hosts share the guest's one network namespace: rdma_rxe in 6.1 opens its UDP socket
# in the initial namespace only, so a soft-RoCE device on a veth moved into another namespace
# never receives (perftest fails with a completion error). Policy routing sends the traffic
# between the two addresses over the veth instead of the local route, where netem acts on it.
set -u
exporter=$1
wait_alert=${2:-}
O=$RFE_OUT
log() { echo "guest: $*"; }

# Every counter file of every RDMA device, as `cat` reads it: `<path below class/infiniband> <value>`.
counters() {
    for f in /sys/class/infiniband/*/ports/*/hw_counters/* /sys/class/infiniband/*/ports/*/counters/* \
        /sys/class/infiniband/*/hw_counters/*; do
        [ -f "$f" ] && echo "${f#/sys/class/infiniband/} $(cat "$f" 2>/dev/null)"
    done >"$O/$1.sysfs"
}
# Waits (up to 30 s) until `rdma resource show qp` lists a queue pair of this type.
wait_qp() {
    for _ in $(seq 150); do
        rdma resource show qp | grep -q " type $1 " && return 0
        sleep 0.2
    done
    echo "no $1 queue pair appeared" >>"$O/errors.txt"
}
scrape() { timeout 30 busybox wget -q -O "$O/$1.prom" "http://127.0.0.1:${2:-9866}/metrics" || echo "scrape $1 failed" >>"$O/errors.txt"; }
qps() { rdma -j resource show qp >"$O/$1.qp.json" 2>&1; }

log "booted $(uname -r)"
uname -r >"$O/kernel.txt"
# The fabric.
ip link add vA type veth peer name vB
ip addr add 192.168.77.1/24 dev vA
ip addr add 192.168.77.2/24 dev vB
ip link set vA up
ip link set vB up
for d in all default vA vB; do
    sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1
done
ip rule add pref 100 to 192.168.77.2 iif lo lookup 100
ip rule add pref 100 to 192.168.77.1 iif lo lookup 101
ip route add 192.168.77.2 dev vA src 192.168.77.1 table 100
ip route add 192.168.77.1 dev vB src 192.168.77.2 table 101
ip rule add pref 1000 lookup local
ip rule del pref 0
ip neigh replace 192.168.77.2 lladdr "$(cat /sys/class/net/vB/address)" dev vA nud permanent
ip neigh replace 192.168.77.1 lladdr "$(cat /sys/class/net/vA/address)" dev vB nud permanent
rdma link add rxeA type rxe netdev vA || echo "rdma link add rxeA failed" >>"$O/errors.txt"
rdma link add rxeB type rxe netdev vB || echo "rdma link add rxeB failed" >>"$O/errors.txt"
rdma -j dev >"$O/rdma-dev.json"
rdma -j link >"$O/rdma-link.json"
find /sys/class/infiniband/rxeA/ -mindepth 1 -path '*/power' -prune -o -print |
    sed 's|^/sys/class/infiniband/rxeA/||' | sort >"$O/layout.txt"
for f in /sys/class/infiniband/rxeA/* /sys/class/infiniband/rxeA/ports/1/*; do
    [ -f "$f" ] && printf '%s=%s\n' "${f#/sys/class/infiniband/}" "$(cat "$f" 2>/dev/null)"
done >"$O/attributes.txt"
for i in 0 1 2 3; do
    g=/sys/class/infiniband/rxeA/ports/1
    echo "$i $(cat $g/gids/$i) $(cat $g/gid_attrs/types/$i 2>/dev/null | tr ' ' _) $(cat $g/gid_attrs/ndevs/$i 2>/dev/null)"
done >"$O/gids.txt"
ip link show vA >"$O/vA.link"

# The netlink and pods collectors ask the kernel every second (10 s and 30 s by default), so
# that what they serve is at most a second older than what `rdma` and `cat` show; QPs by pid.
config=/tmp/exporter.yml
printf 'node:\n  netlink:\n    interval: 1s\n    qps_per_pid: true\n  pcie:\n    detail: true\npods:\n  interval: 1s\n' >$config
chmod 644 $config

log "exporter"
"$exporter" serve --config.file=$config --web.listen-address=0.0.0.0:9866 >"$O/serve.log" 2>&1 &
exporter_pid=$!
for _ in $(seq 100); do busybox wget -q -O /dev/null http://127.0.0.1:9866/healthz 2>/dev/null && break; sleep 0.2; done

log "idle snapshot"
counters idle-before
scrape idle
counters idle-after

log "doctor"
"$exporter" doctor >"$O/doctor.txt" 2>&1
echo $? >"$O/doctor.rc"
"$exporter" doctor --output json >"$O/doctor.json" 2>"$O/doctor-json.log"

log "unprivileged exporter"
# Its hw_counters through RDMA netlink (files are the default, the root exporter's): STAT_GET
# needs no capability, and nobody's values equal root's files.
setpriv --reuid=65534 --regid=65534 --clear-groups "$exporter" serve --config.file=$config \
    --collector.sysfs.hw-counters-source=netlink \
    --web.listen-address=127.0.0.1:9867 >"$O/unpriv.log" 2>&1 &
unpriv_pid=$!
for _ in $(seq 100); do busybox wget -q -O /dev/null http://127.0.0.1:9867/healthz 2>/dev/null && break; sleep 0.2; done
scrape unpriv 9867
scrape unpriv-root
setpriv --reuid=65534 --regid=65534 --clear-groups "$exporter" doctor >"$O/doctor-unpriv.txt" 2>&1
kill "$unpriv_pid"
wait "$unpriv_pid"
echo $? >"$O/unpriv.rc"

log "RC traffic: ib_write_bw"
scrape rc-before
# Iterations, not a duration: in duration mode perftest drops its report when its own
# throughput samples scatter (r^2 < 0.9), as they do under TCG. `-F`: perftest calibrates its
# cycle counter against gettimeofday for the report and exits with "Can't produce a report"
# when that calibration scatters too (r^2 0.59 and 0.88 on a loaded host); with -F it reports
# anyway: the sizes and iterations the tests read do not depend on it, only the rates do.
timeout 60 ib_write_bw -F -d rxeB -n 3000 >"$O/rc-server.txt" 2>&1 &
server=$!
sleep 1
timeout 60 ib_write_bw -F -d rxeA -n 3000 192.168.77.2 >"$O/rc-client.txt" 2>&1 &
client=$!
wait_qp RC
sleep 1.5
qps rc-during
scrape rc-during
qps rc-during2
wait "$client" "$server"
# The netlink collector's next reading (every second here) no longer has perftest's QPs.
sleep 2.5
qps rc-after
scrape rc-after

log "hw counters: netlink against sysfs"
# The counters moved (RC traffic): the exporter's netlink reader, the files, the netlink reader
# again, so that a counter moving in between lies between its two netlink readings. Then two
# exporters, one per source, scraped netlink, files, netlink; then both readers timed.
"$exporter" hw-counters --source netlink >"$O/hw-netlink-1.txt" 2>>"$O/errors.txt"
"$exporter" hw-counters --source sysfs >"$O/hw-files.txt" 2>>"$O/errors.txt"
"$exporter" hw-counters --source netlink >"$O/hw-netlink-2.txt" 2>>"$O/errors.txt"
hw_pids=
for source in netlink:9869 sysfs:9870; do
    "$exporter" serve --collector.sysfs.hw-counters-source="${source%:*}" \
        --web.listen-address=127.0.0.1:"${source#*:}" --no-collector.ethtool \
        --no-collector.pfc_storm --no-collector.netlink >"$O/hw-${source%:*}.log" 2>&1 &
    hw_pids="$hw_pids $!"
done
for port in 9869 9870; do
    for _ in $(seq 100); do busybox wget -q -O /dev/null http://127.0.0.1:$port/healthz 2>/dev/null && break; sleep 0.2; done
done
scrape hw-netlink-a 9869
scrape hw-sysfs 9870
scrape hw-netlink-b 9869
# shellcheck disable=SC2086 # two pids
kill $hw_pids
# shellcheck disable=SC2086
wait $hw_pids
"$exporter" hw-counters --bench 100 >"$O/hw-bench.txt" 2>&1

log "UD traffic: ib_send_bw -c UD"
timeout 60 ib_send_bw -F -c UD -d rxeB -D 3 >"$O/ud-server.txt" 2>&1 &
server=$!
sleep 1
timeout 60 ib_send_bw -F -c UD -d rxeA -D 3 192.168.77.2 >"$O/ud-client.txt" 2>&1 &
client=$!
wait_qp UD
sleep 1.2
qps ud-during
scrape ud-during
qps ud-during2
wait "$client" "$server"

log "RDMA cgroup: ibv_rc_pingpong in a pod's cgroup with a limit"
uid=3b9e7c1a-5d2f-4e8b-9a6c-0d1e2f3a4b5c
cg=/sys/fs/cgroup/kubepods/burstable/pod$uid
echo +rdma >/sys/fs/cgroup/cgroup.subtree_control
mkdir -p $cg
echo +rdma >/sys/fs/cgroup/kubepods/cgroup.subtree_control
echo +rdma >/sys/fs/cgroup/kubepods/burstable/cgroup.subtree_control
# The process goes in a container's leaf below the pod, as a runtime puts it (cgroupfs
# driver: the bare 64-hex container ID); the limit is the pod's, as the kubelet would set it.
container=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
echo +rdma >$cg/cgroup.subtree_control
mkdir -p $cg/$container
echo "rxeA hca_handle=2 hca_object=40" >$cg/rdma.max
"$exporter" serve --config.file=$config --web.listen-address=127.0.0.1:9868 --collector.pods \
    --no-collector.sysfs --no-collector.ethtool --no-collector.pfc_storm >"$O/pods.log" 2>&1 &
pods_pid=$!
counters pp-before
timeout 60 ibv_rc_pingpong -d rxeB -g 1 -n 15000 >"$O/pp-server.txt" 2>&1 &
server=$!
sleep 1
sh -c "echo \$\$ >$cg/$container/cgroup.procs && exec ibv_rc_pingpong -d rxeA -g 1 -n 15000 192.168.77.2" \
    >"$O/pp-client.txt" 2>&1 &
client=$!
echo "$client" >"$O/pp-client.pid"
echo "$uid" >"$O/pod-uid.txt"
echo "$container" >"$O/container-id.txt"
wait_qp RC
sleep 1.5
cat /proc/$client/cgroup >"$O/pp-client.cgroup"
cat $cg/rdma.current >"$O/cg-current.txt"
cat $cg/rdma.max >"$O/cg-max.txt"
qps pp-during
scrape pp-during 9868
qps pp-during2
# The server gives up after 60 s; a client left without it would wait for ever (on a loaded
# machine 15 000 round trips under TCG can outlast the server): it gets 90 s, then is killed
# and the run goes on (its figures are then short, which the tests say).
(sleep 90; kill -9 "$client" 2>/dev/null) &
watchdog=$!
wait "$client" "$server"
kill "$watchdog" 2>/dev/null
counters pp-after
kill "$pods_pid"
wait "$pods_pid"

log "lossy link: netem on vA"
counters netem-before
scrape netem-before
tc qdisc add dev vA root netem delay 1ms loss 2% reorder 5% 50%
echo started >"$O/netem-started"
start=$(date +%s)
while :; do
    timeout 60 ib_write_bw -F -d rxeB -D 4 >>"$O/netem-server.txt" 2>&1 &
    server=$!
    sleep 1
    timeout 60 ib_write_bw -F -d rxeA -D 4 192.168.77.2 >>"$O/netem-client.txt" 2>&1
    wait "$server"
    now=$(date +%s)
    [ "$wait_alert" = --wait-alert ] || break
    [ -e "$O/host-alert-done" ] && break
    [ $((now - start)) -lt 150 ] || break
done
tc qdisc del dev vA root
counters netem-after
scrape netem-after

log "link down and up"
ip link set vA down
sleep 1
cat /sys/class/infiniband/rxeA/ports/1/state /sys/class/infiniband/rxeA/ports/1/phys_state >"$O/link-down.state"
scrape link-down
ip link set vA up
sleep 1.5
cat /sys/class/infiniband/rxeA/ports/1/state /sys/class/infiniband/rxeA/ports/1/phys_state >"$O/link-up.state"
scrape link-up
counters link-up

log "PCIe: an rxe device on the virtio-net function behind the root port"
# The netdev whose PCI function (the parent of its virtioN device) has a PCIe link: the one
# scripts/vm/boot --pcie put behind its root port. What `cat` reads of the function's and its
# upstream port's files, as `<end>/<file> <text>` (multi-line files joined with `;`).
pcie_net='' pcie_fn=''
for n in /sys/class/net/*; do
    [ -e "$n/device" ] || continue
    f=$(readlink -f "$n/device/..")
    if [ -e "$f/current_link_speed" ]; then
        pcie_net=${n##*/} pcie_fn=$f
        break
    fi
done
if [ -n "$pcie_net" ]; then
    pcie_start=$(date +%s.%N)
    ip link set "$pcie_net" up
    rdma link add rxeP type rxe netdev "$pcie_net" || echo "rdma link add rxeP failed" >>"$O/errors.txt"
    up=$(dirname "$pcie_fn")
    {
        echo "function/address ${pcie_fn##*/}"
        echo "upstream/address ${up##*/}"
        for f in current_link_speed current_link_width max_link_speed max_link_width numa_node \
            aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do
            [ -e "$pcie_fn/$f" ] && echo "function/$f $(tr '\n' ';' <"$pcie_fn/$f")"
        done
        for f in current_link_speed current_link_width max_link_speed max_link_width; do
            [ -e "$up/$f" ] && echo "upstream/$f $(tr '\n' ';' <"$up/$f")"
        done
    } >"$O/pcie.txt"
    scrape pcie
    rdma link delete rxeP
    echo $? >"$O/pcie-delete.rc"
    for _ in $(seq 25); do [ -e /sys/class/infiniband/rxeP ] || break; sleep 0.2; done
    ls /sys/class/infiniband/ >"$O/pcie-after.ls"
    # What the exporter counts for rxeP from here on is the removal phase's doing.
    scrape pcie-after
    echo "$pcie_start $(date +%s.%N)" | awk '{ printf "%.1f\n", $2 - $1 }' >"$O/pcie-seconds.txt"
else
    echo "no netdev on a PCIe function (scripts/vm/boot --pcie)" >"$O/pcie.txt"
fi

log "device removal and module unload under scrapes"
(
    i=0
    while [ ! -e /tmp/stop-scraping ]; do
        i=$((i + 1))
        if timeout 30 busybox wget -q -O /tmp/loop.prom http://127.0.0.1:9866/metrics; then
            echo "ok $(grep -c '^rdma_' /tmp/loop.prom)"
        else
            echo failed
        fi
    done >"$O/removal-loop.txt"
) &
loop=$!
sleep 1
rdma link delete rxeB
echo $? >"$O/link-delete.rc"
sleep 3
scrape after-delete
busybox wget -q -O "$O/healthz-after-delete.txt" http://127.0.0.1:9866/healthz
echo $? >"$O/healthz-after-delete.rc"
busybox rmmod rdma_rxe
echo $? >"$O/rmmod.rc"
sleep 3
touch /tmp/stop-scraping
wait "$loop"
scrape after-rmmod
busybox wget -q -O "$O/healthz-after-rmmod.txt" http://127.0.0.1:9866/healthz
echo $? >"$O/healthz-after-rmmod.rc"
ls /sys/class/infiniband/ >"$O/after-rmmod.ls" 2>&1

kill "$exporter_pid"
wait "$exporter_pid"
echo $? >"$O/serve.rc"
log "done"
