#!/usr/bin/env bash
# Runs the echo example end to end: server up, client checks 1,000 replies.
set -eu
dir=$1
# A cross build's binaries run through its emulator (CMakeLists.txt).
run=${RPAL_TEST_EMULATOR:-}
$run "$dir/echo_server" example-echo > /dev/null &
srv=$!
trap 'kill $srv 2>/dev/null' EXIT
for _ in $(seq 100); do
	$run "$dir/echo_client" example-echo hello rpal > /dev/null 2>&1 && break
	sleep 0.05
done
$run "$dir/echo_client" example-echo
$run "$dir/echo_client" example-echo "one message" "and another"
