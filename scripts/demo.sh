#!/usr/bin/env bash
# The teaching demo, on the shipped rail-optimized lab: deploy it, probe every NIC pair,
# show per-link packet counts, then run two workloads under ECMP, flowlet, packet spraying
# and path navigation: collective traffic in chunks with gaps between them (what an NCCL
# pipeline sends), and gapless elephants (what flowlets cannot move). Each comparison
# ends with its lesson, worded from its own numbers. The lab is destroyed at the end,
# whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
RAILAB=.venv/bin/railab
LAB_FILE="${1:-labs/rail-optimized/rail-optimized.clab.yml}"
GAPPED="${2:-experiments/ecmp-vs-spray.yml}"
GAPLESS="${3:-experiments/ecmp-vs-spray-gapless.yml}"
LAB="$($RAILAB topo check "$LAB_FILE" --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["name"])')"
trap '$RAILAB destroy "$LAB" >/dev/null 2>&1 || true' EXIT INT TERM
$RAILAB deploy "$LAB_FILE"
$RAILAB probe "$LAB"
$RAILAB counters "$LAB" --links
echo
echo "== collective chunks with gaps between them: ecmp, flowlet, spray-rr, nav-host =="
$RAILAB run "$GAPPED"
echo
echo "== gapless elephants: the same four modes =="
$RAILAB run "$GAPLESS"
$RAILAB destroy "$LAB"
trap - EXIT INT TERM
