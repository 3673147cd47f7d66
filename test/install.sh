#!/usr/bin/env bash
# install.sh BUILD_DIR SOURCE_DIR [hosted|connected-only] - the install carries what a hosted
# program needs: installs into a temporary prefix, builds examples/echo_server.c and echo_client.c
# against it twice (pkg-config with its hosted_* variables; CMake's find_package(rpal) with
# rpal_hosted_program()), and runs each pair under the installed `rpal run` (connected-only: as two
# processes, and the installed `rpal doctor`); then make install and make uninstall with DESTDIR
# and PREFIX.  Prints what it checks; exits 0 pass, 1 fail.
set -u
BUILD=$1 SRC=$2 KIND=${3:-hosted}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export RPAL_RUNTIME_DIR=$tmp/rt
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

cmake --install "$BUILD" --prefix "$tmp/usr" > "$tmp/install.log" 2>&1 && ok "cmake --install" ||
	{ cat "$tmp/install.log"; bad "cmake --install"; exit 1; }
for f in bin/rpal include/rpal.h lib/pkgconfig/rpal.pc lib/cmake/rpal/rpalConfig.cmake share/man/man3/rpal_send.3 share/man/man1/rpal-stat.1; do
	[ -e "$tmp/usr/$f" ] || f=${f/lib\//lib\/x86_64-linux-gnu\/}
	[ -e "$tmp/usr/$f" ] && ok "installed $f" || bad "missing $f"
done
export PKG_CONFIG_PATH=$(dirname "$(find "$tmp/usr" -name rpal.pc | head -1)")
libdir=$(pkg-config --variable=libdir rpal)
[ "$(pkg-config --variable=hosted_ldflags rpal)" = "-pie -rdynamic" ] && ok "pkg-config: hosted_ldflags" ||
	bad "pkg-config hosted_ldflags"

mkdir -p "$tmp/pc"
for p in echo_server echo_client; do
	# shellcheck disable=SC2046
	cc $(pkg-config --variable=hosted_cflags rpal) "$SRC/examples/$p.c" -o "$tmp/pc/$p" \
		$(pkg-config --cflags --libs rpal) $(pkg-config --variable=hosted_ldflags rpal) \
		-Wl,-rpath,"$libdir" || bad "pkg-config build of $p"
done

mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(hosted_example C)
find_package(rpal REQUIRED)
foreach(p echo_server echo_client)
  add_executable(\${p} $SRC/examples/\${p}.c)
  target_link_libraries(\${p} PRIVATE rpal::rpal)
  rpal_hosted_program(\${p})
  set_target_properties(\${p} PROPERTIES BUILD_RPATH "$libdir")
endforeach()
CM
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/usr" > "$tmp/cm.log" 2>&1 &&
	cmake --build "$tmp/cm/b" >> "$tmp/cm.log" 2>&1 && ok "CMake find_package(rpal) build" ||
	{ cat "$tmp/cm.log"; bad "CMake build"; }

# The server never exits: stop the process once the client has reported.
# A connected-only install has no rpal run: there the pair runs as two
# processes, and the hosted commands' pages are not installed.
for dir in "$tmp/pc" "$tmp/cm/b"; do
	log=$tmp/run.log
	how=$( [ "$dir" = "$tmp/pc" ] && echo pkg-config || echo CMake )
	if [ "$KIND" = connected-only ]; then
		"$dir/echo_server" "inst-$$" > "$log" 2>&1 &
		pid=$!
		for _ in $(seq 100); do grep -q "echo_server: serving" "$log" && break; sleep 0.1; done
		"$dir/echo_client" "inst-$$" >> "$log" 2>&1
		rc=$?
		kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
		[ $rc -eq 0 ] && grep -q "echo_client: 1000 messages echoed" "$log" &&
			ok "built with $how flags: the pair runs as two processes" ||
			{ sed 's/^/  | /' "$log"; bad "connected run of the $dir build"; }
		continue
	fi
	"$tmp/usr/bin/rpal" run "$dir/echo_server" "inst-$$" ::: "$dir/echo_client" "inst-$$" > "$log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do grep -q "echo_client exited" "$log" && break; sleep 0.1; done
	kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
	grep -q "echo_client: 1000 messages echoed" "$log" && grep -q "echo_client exited with status 0" "$log" &&
		ok "built with $how flags: runs under the installed rpal run" ||
		{ sed 's/^/  | /' "$log"; bad "hosted run of the $dir build"; }
done
if [ "$KIND" = connected-only ]; then
	[ ! -e "$tmp/usr/share/man/man1/rpal-run.1" ] && [ ! -e "$tmp/usr/share/man/man1/rpal-host.1" ] &&
		ok "no rpal-run(1) or rpal-host(1) without hosted mode" || bad "hosted commands' pages installed"
	"$tmp/usr/bin/rpal" doctor > "$log" 2>&1 && ok "the installed rpal doctor: connected mode works" ||
		{ sed 's/^/  | /' "$log"; bad "the installed rpal doctor"; }
fi

# make install-files / uninstall-files (what make install and uninstall run
# after the build), with DESTDIR and PREFIX, and their own manifest.
mk() { make -C "$SRC" --no-print-directory BUILD="$BUILD" INSTALL_MANIFEST="$tmp/manifest" "$@"; }
mk install-files DESTDIR="$tmp/dest" PREFIX=/opt/rpal > "$tmp/make.log" 2>&1 &&
	[ -x "$tmp/dest/opt/rpal/bin/rpal" ] && [ -e "$tmp/dest/opt/rpal/include/rpal.h" ] &&
	ok "make install DESTDIR=... PREFIX=/opt/rpal: bin/rpal, include/rpal.h under DESTDIR" ||
	{ cat "$tmp/make.log"; bad "make install with DESTDIR and PREFIX"; }
n=$(find "$tmp/dest" -type f -o -type l | wc -l)
mk uninstall-files > "$tmp/make.log" 2>&1 && left=$(find "$tmp/dest" -type f -o -type l | wc -l) &&
	[ "$left" -eq 0 ] && ok "make uninstall: removed the $n files installed" ||
	{ cat "$tmp/make.log"; bad "make uninstall left ${left:-?} of $n files"; }
mk uninstall-files > "$tmp/make.log" 2>&1 && bad "a second make uninstall succeeded" ||
	ok "a second make uninstall says nothing is installed"
exit $fail
