#!/bin/sh
# check-man.sh - every rpal_* function declared in include/rpal.h has a
# page in man/, and every page in man/ renders without warnings.
# Usage: scripts/check-man.sh   (from anywhere; needs groff, man-db optional)
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
hdr="$root/include/rpal.h"
mandir="$root/man"
pass=0
fail=0

ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'FAIL: %s\n' "$*"; }

if ! command -v groff >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "installing groff and man-db" >&2
		apt-get update -qq >/dev/null 2>&1
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq groff man-db >/dev/null 2>&1
	fi
	if ! command -v groff >/dev/null 2>&1; then
		echo "check-man.sh: groff is required (apt-get install groff man-db)" >&2
		exit 2
	fi
fi

# Function names declared in the header: strip comments, then take every
# identifier rpal_* directly followed by '(' (macros are not functions).
funcs=$(sed -e 's://.*$::' "$hdr" |
	awk 'BEGIN { c = 0 }
	{
		line = $0; out = ""
		while (length(line)) {
			if (c) {
				i = index(line, "*/")
				if (!i) { line = ""; break }
				line = substr(line, i + 2); c = 0
			} else {
				i = index(line, "/*")
				if (!i) { out = out line; line = ""; break }
				out = out substr(line, 1, i - 1); line = substr(line, i + 2); c = 1
			}
		}
		print out
	}' |
	grep -v '^[[:space:]]*#' |
	grep -oE '\brpal_[A-Za-z0-9_]+[[:space:]]*\(' |
	sed -E 's/[[:space:]]*\($//' | sort -u)

if [ -z "$funcs" ]; then
	echo "check-man.sh: no rpal_* functions found in $hdr" >&2
	exit 2
fi

# 1. A page per function, naming the function in NAME and SYNOPSIS.
for f in $funcs; do
	page="$mandir/$f.3"
	if [ ! -f "$page" ]; then
		bad "$f: no page man/$f.3"
		continue
	fi
	if head -n 1 "$page" | grep -q '^\.so '; then
		target=$(head -n 1 "$page" | sed -E 's/^\.so[[:space:]]+man[0-9]\///')
		page="$mandir/$target"
		if [ ! -f "$page" ]; then
			bad "$f: .so target man/$target is missing"
			continue
		fi
	fi
	if ! grep -q "rpal\.h" "$page"; then
		bad "$f: man/$(basename "$page") has no #include <rpal.h>"
	elif ! grep -qE "(^|[ \"])\*?$f\(" "$page"; then
		bad "$f: man/$(basename "$page") has no prototype of $f"
	else
		ok
	fi
done

# 2. Every page renders cleanly.  Pages are copied into a man3/man7 tree
#    so that ".so man3/x.3" aliases resolve as they will once installed.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
for page in "$mandir"/*.[1-8]; do
	[ -f "$page" ] || continue
	sec=${page##*.}
	mkdir -p "$tmp/man$sec"
	cp "$page" "$tmp/man$sec/"
done
for page in "$tmp"/man*/*; do
	[ -f "$page" ] || continue
	rel=${page#"$tmp"/}
	if command -v man >/dev/null 2>&1; then
		out=$(cd "$tmp" && LC_ALL=C.UTF-8 MANWIDTH=80 MAN_KEEP_FORMATTING= \
			man --warnings -E UTF-8 -l "$rel" 2>&1 >/dev/null)
	else
		out=$(cd "$tmp" && { soelim "$rel" | groff -t -man -ww -z; } 2>&1)
	fi
	# groff's own strict pass as well (tbl for pages that use tables).
	out2=$(cd "$tmp" && { soelim "$rel" | groff -t -man -ww -z; } 2>&1)
	if [ -n "$out$out2" ]; then
		bad "man/$(basename "$page") renders with warnings:"
		printf '%s\n%s\n' "$out" "$out2" | sed '/^$/d; s/^/    /'
	else
		ok
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
