#!/bin/sh
# The probe collector on a real kernel, run in the guest by scripts/vm/boot (tests/it/
# real_kernel_probe.rs boots it): four soft-RoCE devices on one host, the exporter probing
# between them as an unprivileged user, and real faults on the wire: netem loss on one
# device's veth (scraped every 5 s, as Prometheus would), netem delay on another's, `rdma link
# delete` of a third while it probes, and `rmmod rdma_rxe`; and a peer exporter on a fifth
# device (host "peer", rxe4) restarted while the exporter probes it. What the exporter served
# at each moment goes to $RFE_OUT for the tests.
#
#   probe.sh EXPORTER
#
# The fabric: device rxeN sits on vN (10.77.N.1/24), whose peer pN is in a namespace "sw"
# that routes between the four /24s (10.77.N.254 on pN): a router standing in for the switch,
# as the guest kernel loads no bridge module. The devices stay in the initial namespace
# (rdma_rxe in 6.1 opens its UDP socket there only). Policy routing sends what a device sends
# (source 10.77.N.1) out of vN to the router instead of the local route, so every probe and
# every answer leaves by its sender's veth and arrives on its receiver's veth: netem on vN
# acts on exactly the round trips that touch rxeN (its probes, and its answers).
set -u
exporter=$1
O=$RFE_OUT
log() { echo "guest: $*"; }
err() { echo "$*" >>"$O/errors.txt"; }
scrape() {
    timeout 30 busybox wget -q -O "$O/$1.prom" http://127.0.0.1:9866/metrics || err "scrape $1 failed"
}
ms() { date +%s%3N; }
# Sleeps until $1 (milliseconds since the epoch), at once if that is past.
sleep_until() {
    left=$(($1 - $(ms)))
    [ $left -gt 0 ] && sleep "$((left / 1000)).$(printf %03d $((left % 1000)))"
    return 0
}
# Whether process $1 runs (a zombie the shell has not reaped yet does not).
running() { [ -r /proc/$1/status ] && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; }

log "booted $(uname -r)"
# A task blocked this long is reported on the console ("blocked for more than"): a removal
# that hangs in the kernel shows within the run instead of after the default 120 s.
sysctl -qw kernel.hung_task_timeout_secs=10 2>/dev/null || err "no hung task detector"

ip netns add sw || err "ip netns add sw failed"
ip netns exec sw sysctl -qw net.ipv4.ip_forward=1
ip -n sw link set lo up
sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    net.ipv4.conf.all.accept_local=1 net.ipv4.conf.default.accept_local=1
for n in 0 1 2 3 4; do
    ip link add v$n type veth peer name p$n
    ip link set p$n netns sw
    ip addr add 10.77.$n.1/24 dev v$n
    ip -n sw addr add 10.77.$n.254/24 dev p$n
    ip link set v$n up
    ip -n sw link set p$n up
    sysctl -qw net.ipv4.conf.v$n.rp_filter=0 net.ipv4.conf.v$n.accept_local=1
    ip neigh replace 10.77.$n.254 lladdr "$(ip netns exec sw cat /sys/class/net/p$n/address)" dev v$n nud permanent
    ip -n sw neigh replace 10.77.$n.1 lladdr "$(cat /sys/class/net/v$n/address)" dev p$n nud permanent
    ip rule add pref 100 from 10.77.$n.1 iif lo lookup $((100 + n))
    ip route add 10.77.0.0/16 via 10.77.$n.254 dev v$n src 10.77.$n.1 table $((100 + n))
done
ip rule add pref 1000 lookup local
ip rule del pref 0
for n in 0 1 2 3 4; do
    rdma link add rxe$n type rxe netdev v$n || err "rdma link add rxe$n failed"
done
{ rdma link; ip rule; ip -n sw route; ls -l /dev/infiniband/; } >"$O/fabric.txt" 2>&1

# rxe0..rxe3 are this host's ("vm"); rxe4 is another agent's ("peer", on :9867), which only
# rxe0 (the same rail, 0) probes here: no other phase touches that path.
config=/tmp/probe.yml
cat >$config <<'EOF'
probe:
  enabled: true
  per_target: true
  min_round: 200ms
  timeout: 500ms
  host: vm
  device_include: "rxe[0-3]"
  cross_rail_sample: 0
  peers: ["127.0.0.1:9867"]
EOF
# The peer runs the defaults but for its name, its device and its peer.
peer_config=/tmp/peer.yml
cat >$peer_config <<'EOF'
probe:
  enabled: true
  host: peer
  device_include: rxe4
  peers: ["127.0.0.1:9866"]
EOF
chmod 644 $config $peer_config
# Starts the peer exporter, its log appended to peer.log; waits until it serves (at most 30 s).
start_peer() {
    RUST_BACKTRACE=1 setpriv --reuid=65534 --regid=65534 --clear-groups "$exporter" serve \
        --config.file=$peer_config --web.listen-address=127.0.0.1:9867 --collector.probe \
        --no-collector.ethtool --no-collector.pfc_storm >>"$O/peer.log" 2>&1 &
    peer_pid=$!
    for _ in $(seq 150); do
        busybox wget -q -O /dev/null http://127.0.0.1:9867/healthz 2>/dev/null && return 0
        sleep 0.2
    done
    err "the peer exporter did not serve within 30 s"
}
# Asked to stop, an agent serves rdma_probe_leaving 1 until a scrape carries it (at most
# probe.leave_wait): scrapes `port` until one does (at most 5 s), appending it to `file`.
scrape_leaving() {
    for _ in $(seq 25); do
        busybox wget -q -O - "http://127.0.0.1:$1/metrics" 2>/dev/null |
            grep '^rdma_probe_leaving{' >"$O/leaving.tmp"
        if grep -q ' 1$' "$O/leaving.tmp"; then cat "$O/leaving.tmp" >>"$O/$2"; return 0; fi
        sleep 0.2
    done
    err "no scrape of :$1 carried rdma_probe_leaving 1 within 5 s of SIGTERM"
}
stop_peer() {
    kill -TERM $peer_pid
    scrape_leaving 9867 peer-leaving.txt
    for _ in $(seq 50); do kill -0 $peer_pid 2>/dev/null || break; sleep 0.2; done
    kill -0 $peer_pid 2>/dev/null && { err "the peer exporter did not exit on SIGTERM"; kill -KILL $peer_pid; }
    wait $peer_pid
}
# The answers rxe0 got from the peer's rxe4 so far, as the exporter serves them now.
peer_answered() {
    busybox wget -q -O - http://127.0.0.1:9866/metrics 2>/dev/null |
        grep '^rdma_probe_target_answered_total{' | grep 'device="rxe0"' |
        grep 'target_host="peer"' | head -n 1 | { read -r _ value; echo "$value"; }
}

log "exporter (uid 65534)"
# Each port registers its probe buffers: the locked-memory limit a runtime would raise.
ulimit -l 65536
# The peer first, so that the exporter's first look at its peers finds it.
start_peer
# RUST_BACKTRACE: a panic's backtrace in the log, should one happen.
RUST_BACKTRACE=1 setpriv --reuid=65534 --regid=65534 --clear-groups "$exporter" serve \
    --config.file=$config --web.listen-address=127.0.0.1:9866 --collector.probe \
    --no-collector.ethtool --no-collector.pfc_storm >"$O/serve.log" 2>&1 &
exporter_pid=$!
for _ in $(seq 150); do
    busybox wget -q -O /dev/null http://127.0.0.1:9866/healthz 2>/dev/null && break
    sleep 0.2
done
# The probe thread's cost: the time and milliseconds since the epoch, its CPU nanoseconds
# (schedstat) and its wake-ups (voluntary context switches), read 2 s and 10 s in.
probe_thread() {
    for t in /proc/$exporter_pid/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = rfe-probe ] || continue
        echo "$(ms) $(cut -d' ' -f1 "$t/schedstat") $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")"
    done >>"$O/probe-thread.txt"
}
# Rounds of 200 ms: 10 s is 50 rounds, every ordered pair probed about 50 times.
sleep 2
probe_thread
scrape thread-start
sleep 8
probe_thread
log "baseline"
scrape baseline

# A series of scrapes every 5 s, as Prometheus would take them, from just before the loss to
# its end (loss-series-00 .. -06, when each was taken in loss-series.ms): the tests replay it
# through the localization rules. 30 s of 30% loss: about 150 probes on each of the 6 paths
# touching rxe2, so every one of them fails (the rules name nothing under 3 failing paths).
# It comes first: the rules look 2 minutes back, where no other fault may be (removing the
# delay's qdisc below drops the odd probe it holds).
log "loss: netem loss 30% on v2 (rxe2) for 30 s, scraped every 5 s"
start=$(ms)
series=0
scrape_series() {
    sleep_until $((start + series * 5000))
    echo "$series $(($(ms) - start))" >>"$O/loss-series.ms"
    scrape "loss-series-0$series"
    series=$((series + 1))
}
scrape_series
tc qdisc add dev v2 root netem loss 30% || err "netem loss failed"
for _ in 1 2 3 4 5 6; do scrape_series; done
tc qdisc del dev v2 root
# Probes still in flight settle within the 500 ms timeout.
sleep 1.5
scrape loss-after

log "delay: netem delay 20ms on v3 (rxe3)"
tc qdisc add dev v3 root netem delay 20ms || err "netem delay failed"
sleep 8
scrape delay-end
tc qdisc del dev v3 root
# Probes still in flight (or dropped with the qdisc) settle within the 500 ms timeout.
sleep 1

# What a hostile host on the fabric sends (tests/real_kernel/hostile.c, built by the test): UD
# messages longer than the exporter's old 256-byte receive slots, a QP error after the MTU grew
# under the exporter, and probes from an on-link address that answers no ARP. rxe2's responder
# is the target; every other path must not notice, and rxe2 must answer again within seconds.
if [ -x "$O/hostile.bin" ]; then
    log "hostile: oversize sends, a QP error after the MTU grew, an unanswered on-link source"
    hostile() { "$O/hostile.bin" "$@" >>"$O/hostile.txt" 2>&1 || err "hostile $* failed"; }
    addresses() { busybox wget -q -O "$O/address-$1.json" http://127.0.0.1:9866/probe-address || err "probe-address $1 failed"; }
    addresses before
    scrape hostile-before
    # Past the old slots, within the port's 1024-byte MTU.
    hostile rxe0 10.77.0.1 "$O/address-before.json" rxe2 300 20
    hostile rxe0 10.77.0.1 "$O/address-before.json" rxe2 1000 20
    # The MTU grows under the exporter: rxe2's slots, sized for 1024 when it started, are too
    # short for what its port now carries, and a 2000-byte send puts its responder in error.
    for n in 0 2; do ip link set v$n mtu 9000; ip -n sw link set p$n mtu 9000; done
    sleep 0.5
    hostile rxe0 10.77.0.1 "$O/address-before.json" rxe2 2000 3
    sleep 1.5
    addresses mid
    # 10.77.9.9 on v0 (rxe0 gains its GID), routed through the router to rxe2, whose answers to
    # 10.77.9.0/24 go on-link out of v2, where nobody answers ARP: creating the address handle
    # waits in the kernel. 10.77.9.9 is no peer, so it is answered at the small shared rate.
    ip addr add 10.77.9.9/32 dev v0
    ip rule add pref 99 from 10.77.9.9 iif lo lookup 100
    ip route add 10.77.9.0/24 dev v2 table 102
    sleep 0.5
    hostile rxe0 10.77.9.9 "$O/address-mid.json" rxe2 32 50
    sleep 3
    addresses after
    scrape hostile-after
    sleep 5
    scrape hostile-later
    ip route del 10.77.9.0/24 dev v2 table 102
    ip rule del pref 99
    ip addr del 10.77.9.9/32 dev v0
    for n in 0 2; do ip link set v$n mtu 1500; ip -n sw link set p$n mtu 1500; done
    sleep 1
fi

# A peer restarted with the default settings: stopped, down for 2 s (four probe timeouts),
# started again on new queue pairs. The exporter's peer set still names the old ones (its
# refresh is a minute away); the peer's first probes say where it answers now.
log "restart: the peer exporter stopped and started again"
scrape restart-before
stop_peer
down=$(ms)
sleep 2
before=$(peer_answered)
scrape restart-down
start_peer
serving=$(ms)
answered_ms=never
for _ in $(seq 100); do
    now=$(peer_answered)
    if [ -n "$now" ] && [ -n "$before" ] && [ "${now%.*}" -gt "${before%.*}" ]; then
        answered_ms=$(($(ms) - serving))
        break
    fi
    sleep 0.2
done
echo "down_ms $((serving - down)) answered_after_serving_ms $answered_ms" >"$O/restart.txt"
sleep 5
scrape restart-after
stop_peer

log "rdma link delete rxe1 while probing"
# The kernel finishes removing a device once its users closed it: a user that keeps it open
# holds `rdma link delete` in the kernel (uninterruptible: `timeout` cannot end it). Waited
# for 5 s; if still blocked, where it waits and who holds the device are written down, and the
# script goes on (the exporter's exit at the end lets it finish).
start=$(ms)
rdma link delete rxe1 >"$O/link-delete.txt" 2>&1 &
delete_pid=$!
for _ in $(seq 50); do running $delete_pid || break; sleep 0.1; done
if running $delete_pid; then
    echo blocked >"$O/link-delete.rc"
    err "rdma link delete rxe1 still blocked after 5 s"
    cat /proc/$delete_pid/stack >"$O/link-delete.stack" 2>&1
    # The exporter's descriptors on /dev/infiniband (uverbs1 was rxe1's).
    ls -l /proc/$exporter_pid/fd 2>&1 | grep infiniband >"$O/link-delete.held"
else
    wait $delete_pid
    echo $? >"$O/link-delete.rc"
fi
echo $(($(ms) - start)) >"$O/link-delete.ms"
sleep 3
scrape after-delete
kill -0 $exporter_pid 2>/dev/null || err "the exporter exited after rdma link delete"
sleep 5
scrape after-delete-later
ls /sys/class/infiniband/ >"$O/after-delete.ls" 2>&1

log "rmmod rdma_rxe while probing"
start=$(ms)
timeout 30 busybox rmmod rdma_rxe >"$O/rmmod.txt" 2>&1
echo $? >"$O/rmmod.rc"
echo $(($(ms) - start)) >"$O/rmmod.ms"
sleep 3
ls /sys/class/infiniband/ >"$O/after-rmmod.ls" 2>&1
kill -0 $exporter_pid 2>/dev/null || err "the exporter exited after rmmod"
scrape after-rmmod

kill -TERM $exporter_pid
scrape_leaving 9866 serve-leaving.txt
for _ in $(seq 50); do kill -0 $exporter_pid 2>/dev/null || break; sleep 0.2; done
if kill -0 $exporter_pid 2>/dev/null; then
    err "the exporter did not exit within 10 s of SIGTERM"
    kill -KILL $exporter_pid
fi
wait $exporter_pid
echo $? >"$O/serve.rc"
if [ "$(cat "$O/link-delete.rc")" = blocked ]; then
    for _ in $(seq 100); do running $delete_pid || break; sleep 0.1; done
    running $delete_pid && err "rdma link delete rxe1 still blocked after the exporter exited"
    echo $(($(ms) - start)) >"$O/link-delete-finally.ms"
fi
dmesg >"$O/dmesg.txt" 2>&1
ip netns del sw
log "done"
