#!/bin/bash
# Diagnostics tests while two busy processes occupy the cores.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
yes > /dev/null & Y1=$!; yes > /dev/null & Y2=$!
trap 'kill $Y1 $Y2' EXIT
uptime
ctest --test-dir build -L diag -j2 --timeout 600 2>&1 | tail -8
ctest --test-dir build -R "Diagnostics|MetricsEndpoint" -j2 --timeout 600 2>&1 | tail -8
uptime
