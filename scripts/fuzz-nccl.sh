#!/usr/bin/env bash
# Fuzzes the NCCL log parser for a bounded time (default 60 s). Manual, not run by CI: needs a
# nightly toolchain and cargo-fuzz (`rustup toolchain install nightly && cargo install cargo-fuzz`).
# Usage: scripts/fuzz-nccl.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
corpus=corpus/nccl_log
mkdir -p "$corpus"
# Seed with the test fixtures: real format strings make the fuzzer reach deep branches fast.
find ../tests/fixtures/nccl -type f -exec cp {} "$corpus"/ \;
exec cargo +nightly fuzz run nccl_log "$corpus" -- -max_total_time="$seconds" -max_len=65536
