#!/bin/bash
# Plan error after following the top action (server-side and client-side), 9 mixed workloads:
# mean prompt and output lengths >= 64 with +-50 % jitter, so every request has >= 32 of each.
# Probe steps after calibration (default budget), ramp-up until as many requests finished as
# clients run, 10 s after window. Records the machine's load before and after each run.
# Args: OUT folder. RETURN_S=S (optional): go back to the first options and clients after the
# after window and measure that load again for S seconds (an A-B-A run, saturn-bench-plan --return_s).
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# prompt output start_seqs clients
bench/plan_workloads.sh --loadavg "$1" '^probe:|^plan:|^plan, A-B-A|^machine drift:' \
  "64 64 2 16" "128 64 2 12" "64 128 2 16" "96 96 4 24" "512 64 2 8" "128 128 2 16" \
  "64 64 1 1" "128 64 32 2" "64 128 32 1" -- --before_s=4 --after_s=10 --return_s=${RETURN_S:-0}
uptime
