#!/usr/bin/env bash
# Runs the RFC sample port end to end with a small count.
set -eu
dir=$1
n=${2:-20000}
"$dir/rfc_server" "$n" > "${TMPDIR:-/tmp}/rfc_server.$$" &
srv=$!
for _ in $(seq 200); do
	grep -q ready "${TMPDIR:-/tmp}/rfc_server.$$" && break
	sleep 0.05
done
"$dir/rfc_client" "$n"
wait $srv
cat "${TMPDIR:-/tmp}/rfc_server.$$"
grep -q "Average latency" "${TMPDIR:-/tmp}/rfc_server.$$"
rm -f "${TMPDIR:-/tmp}/rfc_server.$$"
