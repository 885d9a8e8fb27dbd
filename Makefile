# The two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH):$(CURDIR)/.tools/go/bin:$(CURDIR)/.tools/bin

.PHONY: run test bootstrap build lint semver unit conformance-ucx conformance-ofi interop languages python wheel bench-compare bench-languages bench-hosts bench-flight bench-python bench-flight-tls fuzz

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	cargo build --release --locked

# Raw transport benchmark on loopback: every transport at 4 KiB, 128 KiB and 1 MiB.
run: build
	@bash scripts/run.sh

# Every cargo command below selects the whole workspace, so that all resolve features alike and
# share one build (a `-p` build resolves them afresh and builds the arrow stack once more).
TEST_BUILD := cargo build --locked --profile test --workspace --lib --bins --tests

# The library crates as others build on them: the feature sets that matter build alone (the
# core with no fabric, or one; Flight and fles with none of theirs), and the docs have no
# broken link (every lib of the workspace: resolved as clippy's build, it reuses what that checked).
LIBRARIES := -p wirespeed -p wirespeed-files -p wirespeed-fles -p wirespeed-flight -p wirespeed-serve

lint: bootstrap
	cargo fmt --all -- --check
	python3 scripts/check_layers.py
	bash scripts/flight_descriptor.sh --check
	cargo clippy --locked --all-targets -- -D warnings
	for features in "" ucx ofi gpu; do cargo check --locked -p wirespeed --lib --no-default-features --features "$$features" || exit 1; done
	cargo check --locked -p wirespeed-flight -p wirespeed-fles --lib --no-default-features
	RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --workspace --lib

# The library crates' public API against the last release, as cargo-semver-checks reads it.
# Not part of `make test`: installing the tool alone takes 9 minutes on a 2-core machine, and
# `make test` has 40. Run it before tagging a release.
SEMVER_BASELINE := v0.1.0
semver: bootstrap
	cargo install --locked cargo-semver-checks@0.51.0
	cargo semver-checks --baseline-rev $(SEMVER_BASELINE) $(LIBRARIES)

unit: bootstrap
	cargo test --locked --workspace

# The conformance suite over UCX once more per transport selection: TCP with UCX's own peer
# failure handling (as between hosts), and shared memory with cross-memory attach.
conformance-ucx: bootstrap
	UCX_TLS=tcp WIRESPEED_UCX_ERROR_MODE=peer cargo test --locked --workspace --test conformance ucx::
	UCX_TLS=posix,cma,self cargo test --locked --workspace --test conformance ucx::

# Arrow Flight interop with a real pyarrow (from the bootstrap's venv), both directions, and
# with arrow-go's integration client and Java's flight-core; then the README, run as written.
interop: bootstrap
	$(TEST_BUILD)
	.venv/bin/python -m pytest -q --timeout 300 tests/interop tests/docs

# The conformance suite over libfabric once more without one-sided access, as on a provider
# that lacks FI_RMA: bodies travel in pieces and one-sided access as frames.
conformance-ofi: bootstrap
	WIRESPEED_OFI_RMA=off cargo test --locked --workspace --test conformance ofi_

# The Python package as users install it: its wheel in a fresh venv (target/wheel-venv, see
# scripts/wheel_check.sh), tested there against the real binary and pyarrow.
python: bootstrap
	$(TEST_BUILD)
	bash scripts/wheel_check.sh
	target/wheel-venv/bin/python -m pytest -q --timeout 300 python/tests

# The C library's packages, each tested by its language's own tools against the library and
# binary that cargo built: Go's `go test` (cgo over arrow-go's cdata), and Maven's Surefire for
# Java (the FFM API, so a JDK of 22 or later: scripts/jdk.sh finds one). C and C++ are tested
# by cargo (crates/wirespeed-c/tests) and with pyarrow's Arrow C++ (python/tests/test_cpp.py).
LIB_DIR := $(CURDIR)/target/debug
languages: bootstrap
	$(TEST_BUILD)
	cd go && CGO_LDFLAGS="-L$(LIB_DIR) -Wl,-rpath,$(LIB_DIR)" WIRESPEED_BIN=$(LIB_DIR)/wirespeed go test -count=1 ./...
	JAVA_HOME=$$(bash scripts/jdk.sh 22) mvn -q -B -f java/pom.xml test \
	  -Dwirespeed.library=$(LIB_DIR)/libwirespeed_c.so -Dwirespeed.bin=$(LIB_DIR)/wirespeed

# The wheel users install (abi3, manylinux_2_34), in target/wheels.
wheel: bootstrap
	bash scripts/wheel_check.sh release

test: lint unit conformance-ucx conformance-ofi interop languages python

# Peers in the same run: iperf3, ucx_perftest, memcpy.
bench-compare: build
	@bash bench/compare.sh

# The C library's packages (C++, Go, Java, DuckDB) against each language's own Flight client.
bench-languages: build
	@bash bench/languages.sh

# The tools between two network-namespace hosts with links capped by tc, against iperf3.
bench-hosts: build
	@bash bench/hosts_compare.sh

# Flight planes against pyarrow.flight over grpc+tcp and grpc+unix.
bench-flight: build
	@bash bench/flight_compare.sh

# wirespeed.flight and raw streams from Python against pyarrow.flight, in turns.
bench-python: build
	bash scripts/python_dev.sh release
	.venv/bin/python bench/python_compare.py

# Flight over TLS: serve against pyarrow's TLS server, and a keyed client on the shm plane.
bench-flight-tls: build
	bash scripts/python_dev.sh release
	.venv/bin/python bench/flight_tls.py

# Every cargo-fuzz target for FUZZ_SECONDS each (default 60), on nightly; not part of `make test`.
fuzz: bootstrap
	@bash scripts/fuzz.sh
