# hostlib.sh - sourced by the hosted tests that run `rpal host`, after RPAL is set: a runtime
# directory, a scratch directory $tmp removed on exit (with the jobs still running) holding
# exit0.c (a main that returns 0), ok and bad for their checks, and start_host NAME: `rpal host
# NAME` in the background, listening, its pid in $hpid and its stderr in $tmp/NAME.err.
export RPAL_RUNTIME_DIR=${RPAL_RUNTIME_DIR:-$(mktemp -d)}
mkdir -p "$RPAL_RUNTIME_DIR"
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
# The smallest program: for a test to build as it needs (a hosted one: -fPIE -pie -rdynamic).
echo 'int main(void) { return 0; }' >"$tmp/exit0.c"
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

start_host() {
	"$RPAL" host "$1" 2>"$tmp/$1.err" &
	hpid=$!
	for _ in $(seq 500); do grep -q listening "$tmp/$1.err" 2>/dev/null && break; sleep 0.01; done
	grep -q listening "$tmp/$1.err" || { bad "the host did not start: $(cat "$tmp/$1.err")"; exit 1; }
}
