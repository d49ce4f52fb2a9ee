#!/bin/bash
# Plan error (server-side and client-side actions) on 9 mixed workloads (prompts and outputs
# >= 32 tokens, one with 512-token prompts), quiet machine. Args: OUT folder.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# prompt output start_seqs clients
bench/plan_workloads.sh "$1" '^plan:|^decode tokens/s' \
  "32 32 2 16" "64 64 2 16" "128 32 2 12" "32 128 2 16" "96 96 4 24" "512 64 2 8" \
  "64 64 1 1" "128 64 32 2" "32 128 32 1" -- --before_s=4 --after_s=6
