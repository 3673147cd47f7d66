#!/usr/bin/env bash
# Installs what the build needs on a fresh Debian machine; quiet and quick when all is present.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v gcc   >/dev/null || need+=(gcc)
command -v make  >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
# The tests: perl tells a child's death by a signal from its exit status; pgrep and ps find processes.
command -v perl  >/dev/null || need+=(perl-base)
command -v pgrep >/dev/null || need+=(procps)
if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}"
	sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
# rpal-bench-go's modules (gRPC, Kitex), so the build, which stays offline,
# finds them; without Go or a network, rpal bench lists the Go transports
# as not available and says why.
go=$(command -v go || echo /usr/local/go/bin/go)
if [ -x "$go" ]; then
	(cd go/cmd/rpal-bench-go && GOFLAGS=-mod=readonly "$go" mod download 2>/dev/null) ||
		echo "deps: go mod download failed in go/cmd/rpal-bench-go (offline?); rpal bench's Go transports will be missing" >&2
fi
