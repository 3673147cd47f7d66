# calls_here.sh - sourced by the hosted tests that make RPAL calls, after RPAL is set: ok and bad
# for their checks, and a skip (exit 77) where this machine cannot make calls between programs.
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
if ! grep -qw fsgsbase /proc/cpuinfo; then echo "SKIP: no FSGSBASE"; exit 77; fi
doc=$("$RPAL" doctor 2>/dev/null)
for need in "Syscall User Dispatch" pidfd_getfd; do
	echo "$doc" | grep -q "^ok   $need" || { echo "SKIP: no $need here: hosted programs make no RPAL calls"; exit 77; }
done
