#!/usr/bin/env bash
# The demo: deploy the shipped rail-optimized lab, probe every NIC pair, show per-link
# packet counts, and destroy the lab whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
RAILAB=.venv/bin/railab
LAB_FILE="${1:-labs/rail-optimized/rail-optimized.clab.yml}"
LAB="$($RAILAB topo check "$LAB_FILE" --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["name"])')"
trap '$RAILAB destroy "$LAB" >/dev/null 2>&1 || true' EXIT INT TERM
$RAILAB deploy "$LAB_FILE"
$RAILAB probe "$LAB"
$RAILAB counters "$LAB" --links
$RAILAB destroy "$LAB"
trap - EXIT INT TERM
