#!/usr/bin/env bash
# The teaching demo, on the shipped rail-optimized lab: deploy it, probe every NIC pair,
# show per-link packet counts, then run the same elephant-heavy workload under ECMP,
# flowlet and packet spraying and print the comparison and the plots it wrote. The lab
# is destroyed at the end, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
RAILAB=.venv/bin/railab
LAB_FILE="${1:-labs/rail-optimized/rail-optimized.clab.yml}"
EXPERIMENT="${2:-experiments/ecmp-vs-spray.yml}"
LAB="$($RAILAB topo check "$LAB_FILE" --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["name"])')"
trap '$RAILAB destroy "$LAB" >/dev/null 2>&1 || true' EXIT INT TERM
$RAILAB deploy "$LAB_FILE"
$RAILAB probe "$LAB"
$RAILAB counters "$LAB" --links
echo
echo "== the same elephant-heavy workload under ecmp, flowlet and spray-rr =="
$RAILAB run "$EXPERIMENT"
$RAILAB destroy "$LAB"
trap - EXIT INT TERM
