#!/usr/bin/env bash
# Fuzzes the parsers with cargo-fuzz (libFuzzer), one target after the other for a bounded time,
# each corpus seeded from the repository's own fixtures. Needs only the stable toolchain: without
# a sanitizer, libFuzzer's coverage instrumentation uses no unstable flag. FUZZ_SANITIZER=address
# adds AddressSanitizer and needs a nightly toolchain (`cargo +nightly`); FUZZ_MAX_LEN caps the
# input size (default 16384 bytes).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default: 60 s, every target)
#
# Exits 1 when a target crashed or broke one of its assertions, after printing the input's path.
# Reproduce it with `cd fuzz && cargo fuzz run -s none TARGET PATH`; once fixed, copy it into
# fuzz/regressions/TARGET/, where tests/it/fuzz_regressions.rs replays it on every `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

usage="usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]"
seconds=${1:-60}
[ $# -gt 0 ] && shift
case $seconds in
'' | *[!0-9]*)
    echo "$usage" >&2
    exit 2
    ;;
esac

if ! command -v cargo-fuzz >/dev/null; then
    echo "scripts/fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

sanitizer=${FUZZ_SANITIZER:-none}
cargo=(cargo)
[ "$sanitizer" = none ] || cargo=(cargo +nightly)

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

# Inputs that show each parser real data, so that the fuzzer starts deep in the format.
seed_sources() {
    case $1 in
    sysfs_value) echo ../tests/fixtures/cx7-roce/sys ../tests/fixtures/quirks ;;
    config) echo ../examples seeds/config ;;
    nccl_log) echo ../tests/fixtures/nccl ../../shared/corpus/nccl ;;
    ib_diags_text) echo ../../shared/corpus/infiniband-diags ;;
    probe_packet) echo regressions/probe_packet ;;
    ethtool_strings) echo seeds/ethtool_strings ;;
    ethtool_text) echo ../tests/fixtures/cx7-roce/ethtool ;;
    snmp_values) echo ../tests/fixtures/snmprec ;;
    gnmi_values) echo seeds/gnmi_values ;;
    gnmi_json) echo seeds/gnmi_json ;;
    rdma_netlink) echo ../tests/fixtures/netlink ;;
    transceiver_pages) echo regressions/transceiver_pages ;;
    *)
        echo "scripts/fuzz.sh: unknown target $1; the targets are: $(cargo fuzz list | xargs)" >&2
        exit 2
        ;;
    esac
}

# Copies seeds and saved regressions into the corpus, named by content as libFuzzer names its
# own, so the many identical sysfs files become one. Fixture trees hold symlink loops: `find`
# does not follow links.
seed() {
    local target=$1 dir=corpus/$1 file
    mkdir -p "$dir"
    # shellcheck disable=SC2046 # the sources are words without spaces
    find $(seed_sources "$target") "regressions/$target" -type f -print0 |
        while IFS= read -r -d '' file; do
            cp "$file" "$dir/seed-$(sha1sum <"$file" | cut -c1-40)"
        done
}

logs=target/fuzz-logs
mkdir -p "$logs"
for target in "${targets[@]}"; do
    seed_sources "$target" >/dev/null
done
# One build of every target first, so the time limits below are spent fuzzing.
echo "scripts/fuzz.sh: building ${targets[*]} (sanitizer: $sanitizer)" >&2
for target in "${targets[@]}"; do
    "${cargo[@]}" fuzz build -s "$sanitizer" "$target"
done

summary=()
crashed=()
for target in "${targets[@]}"; do
    seed "$target"
    log=$logs/$target.log
    echo "scripts/fuzz.sh: $target for ${seconds}s (log: fuzz/$log)" >&2
    status=0
    # -timeout: an input that takes 10 s is a finding (a hang), not something to wait out.
    # -max_len: bugs rarely need more than 16 KiB, and bigger inputs cut the executions per
    # second (large saved regressions are still replayed whole by cargo test).
    "${cargo[@]}" fuzz run -s "$sanitizer" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -max_len="${FUZZ_MAX_LEN:-16384}" \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    # The last status line: "#RUNS ... cov: N ft: N corp: N/SIZE ... exec/s: N ...".
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log")
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log")
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
    corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")
    inputs=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log")
    crashes=0
    if [ "$status" -ne 0 ]; then
        if [ -z "$inputs" ]; then
            echo "scripts/fuzz.sh: $target failed without a crashing input:" >&2
            tail -n 30 "$log" >&2
            exit 2
        fi
        crashes=$(wc -l <<<"$inputs")
        grep -E 'panicked at|^thread .* panicked|ERROR: libFuzzer' "$log" | head -n 5 >&2 || true
        while IFS= read -r input; do
            case $input in
            /*) ;;
            *) input=fuzz/${input#./} ;;
            esac
            echo "scripts/fuzz.sh: $target: crashing input $input" >&2
            crashed+=("$target $input")
        done <<<"$inputs"
    fi
    summary+=("$(printf '%-16s %6ss %12s %9s %6s %7s %6s %7s' "$target" "$seconds" \
        "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes")")
done

printf '%-16s %7s %12s %9s %6s %7s %6s %7s\n' target time runs exec/s cov ft corpus crashes
printf '%s\n' "${summary[@]}"
if [ ${#crashed[@]} -gt 0 ]; then
    printf 'crash: %s\n' "${crashed[@]}"
    exit 1
fi
