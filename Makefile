# rpal: thin driver over CMake + Ninja.  `make demo` and `make test` do all set-up.
BUILD      ?= build
BUILD_SAN  ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_CONN ?= build-connected
BUILD_A64  ?= build-aarch64
CMAKE_GEN  := -G Ninja
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
# What the last `make install` put where, DESTDIR included (CMake's own
# install_manifest.txt leaves DESTDIR out, and every cmake --install
# rewrites it, the install test's included).
INSTALL_MANIFEST ?= $(BUILD)/rpal-installed.txt

.PHONY: all deps build install uninstall install-files uninstall-files demo test test-release test-asan test-tsan test-connected-only test-aarch64-build test-aarch64 test-fuzz test-docs test-go fuzz soak clean

all: build

# Install the toolchain on a fresh Debian machine (no-op when present).
deps:
	@./scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Install the library, header, rpal command, man pages, pkg-config file
# and CMake package under $(DESTDIR)$(PREFIX); uninstall removes what the
# last install put there.
install: build
	@$(MAKE) --no-print-directory install-files

install-files:
	@DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)
	@sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt > $(INSTALL_MANIFEST)

uninstall: uninstall-files

uninstall-files:
	@test -f $(INSTALL_MANIFEST) || { echo "make uninstall: $(INSTALL_MANIFEST): nothing installed"; exit 1; }
	@xargs -d '\n' rm -f -- < $(INSTALL_MANIFEST)
	@echo "make uninstall: removed the $$(wc -l < $(INSTALL_MANIFEST)) files of $(INSTALL_MANIFEST)"
	@rm -f $(INSTALL_MANIFEST)

demo: build
	@./scripts/demo.sh $(BUILD)

test-release: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 -LE flaky

test-asan: deps
	@cmake -S . -B $(BUILD_SAN) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DRPAL_SANITIZE=address,undefined >/dev/null
	@cmake --build $(BUILD_SAN) -j $(JOBS)
	@cd $(BUILD_SAN) && RPAL_TEST_SCALE=10 ctest --output-on-failure -j $(JOBS) --timeout 300 -LE no-asan

test-tsan: deps
	@cmake -S . -B $(BUILD_TSAN) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DRPAL_SANITIZE=thread >/dev/null
	@cmake --build $(BUILD_TSAN) -j $(JOBS)
	@cd $(BUILD_TSAN) && RPAL_TEST_SCALE=10 ctest --output-on-failure -j $(JOBS) --timeout 300 -L tsan

# The connected core alone (cmake -DRPAL_HOSTED=OFF): builds, passes its
# tests, and its librpal holds no user-mode switch.
test-connected-only: deps
	@cmake -S . -B $(BUILD_CONN) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRPAL_HOSTED=OFF >/dev/null
	@cmake --build $(BUILD_CONN) -j $(JOBS)
	@! nm $(BUILD_CONN)/src/librpal.so | grep -E 'hosted_switch|call_park_own|host_prog' || \
		{ echo "test-connected-only: hosted symbols in a connected-only librpal"; exit 1; }
	@cd $(BUILD_CONN) && ctest --output-on-failure -j $(JOBS) --timeout 300 -LE flaky

# The connected core cross built for AArch64, and the Go package vetted
# for arm64 (scripts/aarch64.sh).
test-aarch64-build:
	@./scripts/aarch64.sh build $(BUILD_A64)

# Not part of `make test`: that build's tests, and the Go package's, under
# qemu-user (1 min here).
# qemu 10.0 now and then hangs in a child forked by a process with
# threads, which most tests are: a test that fails is run once more.
test-aarch64:
	@./scripts/aarch64.sh test $(BUILD_A64)

# A short libFuzzer pass over the handshake and ring parsers (clang).
test-fuzz:
	@./scripts/fuzz.sh 10

# Longer fuzzing, not part of `make test`.
fuzz:
	@./scripts/fuzz.sh $${FUZZ_SECONDS:-300}

# Every public function has a man page, and every page renders cleanly.
test-docs:
	@./scripts/check-man.sh

# The Go package: vet, race, CGO_ENABLED=0, interop with the C library.
test-go: build
	@./scripts/go-test.sh $(BUILD)

# Every test: release build, then ASan+UBSan, the TSan subset, the
# connected-only build, the AArch64 cross build, fuzzing, docs, Go.
test: test-release test-asan test-tsan test-connected-only test-aarch64-build test-fuzz test-docs test-go
	@echo "make test: all suites passed"

# The soak run, not part of `make test`: SOAK_MESSAGES messages (default
# 100,000,000) over 4 connections in both directions, every one checked,
# resident memory sampled every ~10 s and required to stay flat; then
# RPAL_KILL_ROUNDS (default 3,000) randomized kill -9 rounds, then
# RPAL_HOSTED_KILL_ROUNDS (default 1,000) kills of a hosted process mid-call.
soak: build
	@$(BUILD)/test/soak $(SOAK_MESSAGES)
	@cd $(BUILD) && RPAL_KILL_ROUNDS=$${RPAL_KILL_ROUNDS:-3000} RPAL_RUNTIME_DIR=$$PWD/rt-soak-kill ./test/peer_death
	@cd $(BUILD) && RPAL_RUNTIME_DIR=$$PWD/rt-soak-hkill ./hosted/hosted_test_kill $${RPAL_HOSTED_KILL_ROUNDS:-1000}

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_TSAN) $(BUILD_CONN) $(BUILD_A64) build-fuzz
