#!/usr/bin/env bash
# demo.sh BUILD_DIR: a short `rpal bench` (about two minutes on a 2-vCPU VM)
# that prints the comparison table; JSON and SVG are left in BUILD_DIR for
# scripts/readme_table.py.  Numbers come from this run only.
set -euo pipefail
BUILD=${1:-build}
RPAL=$BUILD/rpal
if [ ! -x "$RPAL" ]; then
	echo "demo: $RPAL not found; build first (make build)" >&2
	exit 1
fi
placement=split
if [ "$(nproc)" -lt 2 ]; then
	placement=same-core	# split needs two CPUs
fi
# 3 rounds of 30k ping-pongs per transport, round after round, each shown
# by its median run: a slow spell of the VM during one run does not show
# (the RFC used 1M messages; --count 1000000 reproduces it).  Then 1 KiB
# requests and replies at 1,000/s and in a closed loop, 0.4 s each.
"$RPAL" bench --transport all --placement "$placement" --count 30000 --rounds 3 \
	--suite latency,throughput,cpu,rpc --rate 1000 --rates 1000,max --seconds 0.4 \
	--json="$BUILD/bench.json" --plot "$BUILD/bench.svg"
echo
echo "demo: results in $BUILD/bench.json, latency plot in $BUILD/bench.svg"
echo "demo: README table: scripts/readme_table.py $BUILD/bench.json"
