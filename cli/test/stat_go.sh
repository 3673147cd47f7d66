#!/usr/bin/env bash
# stat_go.sh PATH/TO/rpal - `rpal stat` sees Go processes: while `rpal bench
# -t rpal-go -w spin` runs, both of its Go processes are listed with their
# connection, whose message counts grow between two snapshots and whose two
# ends are paired (their queues shown), the server's listener with the one
# client it accepted, and the
# server, which spins for every request, counts time spinning.  Once they
# have exited, their pages read as stale.  Skipped where rpal-bench-go was
# not built (no Go).
set -u
RPAL=$1
GO_BENCH=$(dirname "$RPAL")/rpal-bench-go
[ -x "$GO_BENCH" ] || { echo "SKIP: no rpal-bench-go next to $RPAL (it is built where Go is)"; exit 77; }
"$RPAL" bench -t rpal-go -w spin -S cpu --rate 2000 -T 6 --no-progress >/dev/null 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null; wait $bench 2>/dev/null' EXIT
# The Go processes' sent-message counters: "pid count" lines.
sent() {
	"$RPAL" stat --prometheus 2>/dev/null |
		sed -n 's/^rpal_messages_sent_total{pid="\([0-9]*\)",.*name="rpal-bench-go".*} \([0-9]*\)$/\1 \2/p' | sort
}
first=
for _ in $(seq 50); do
	first=$(sent)
	[ "$(echo "$first" | grep -c .)" -eq 2 ] && break
	sleep 0.1
done
fail=0
echo "first snapshot (pid messages sent):"
echo "$first"
[ "$(echo "$first" | grep -c .)" -eq 2 ] || { echo "FAIL: not two rpal-bench-go connections in rpal stat"; fail=1; }
sleep 1
second=$(sent)
echo "a second later:"
echo "$second"
while read -r pid n; do
	m=$(echo "$second" | awk -v p="$pid" '$1 == p { print $2 }')
	[ -n "$m" ] && [ "$m" -gt "$n" ] || { echo "FAIL: pid $pid sent $n, then ${m:-nothing}"; fail=1; }
done <<< "$([ -n "$first" ] && echo "$first")"
# Each end finds the other's entry: both show their queues.
paired=$("$RPAL" stat --prometheus 2>/dev/null | grep -c '^rpal_in_queue_messages{.*name="rpal-bench-go"')
echo "connections whose other end rpal stat found: $paired"
[ "$paired" -eq 2 ] || { echo "FAIL: the two Go ends of the connection were not paired"; fail=1; }
spin=$("$RPAL" stat --prometheus 2>/dev/null |
	sed -n 's/^rpal_rx_spin_ns_total{.*name="rpal-bench-go".*role="accepted"} \([0-9]*\)$/\1/p')
echo "the server's time spinning for requests: ${spin:-none} ns"
[ -n "$spin" ] && [ "$spin" -gt 0 ] || { echo "FAIL: the spinning Go server counts no spin time"; fail=1; }
# The Go server's listener is listed, with the one client it accepted.
accepted=$("$RPAL" stat --prometheus 2>/dev/null |
	sed -n 's/^rpal_listener_accepted_total{.*name="rpal-bench-go".*} \([0-9]*\)$/\1/p')
echo "connections the Go server's listener accepted: ${accepted:-no listener listed}"
[ "$accepted" = 1 ] || { echo "FAIL: the Go server's listener is not listed with 1 connection accepted"; fail=1; }
# A Go program leaves its page behind when it exits (it has no
# rpal_fini()); unlocked, it reads as stale: not listed, and removed.
wait $bench
trap - EXIT
after=$("$RPAL" stat --json 2>/dev/null)
echo "after the bench: $after" | cut -c1-200
echo "$after" | grep -q '"name": "rpal-bench-go"' && { echo "FAIL: exited Go processes still listed"; fail=1; }
stale=$(echo "$after" | sed -n 's/.*"stale_pages": \([0-9]*\).*/\1/p')
[ -n "$stale" ] && [ "$stale" -ge 2 ] || { echo "FAIL: ${stale:-no} stale pages counted for the two exited Go processes"; fail=1; }
left=$(ls "${RPAL_RUNTIME_DIR:-/nonexistent}" 2>/dev/null | grep -c '^stat\.')
echo "pages left in the runtime directory: $left"
[ $fail -eq 0 ] && echo "PASS: rpal stat lists Go processes and their listeners, their counts grow, spins are counted; their pages go stale when they exit"
exit $fail
