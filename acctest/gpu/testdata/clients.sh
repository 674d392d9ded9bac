#!/usr/bin/env bash
# The fence's real-client matrix on a GPU machine (acctest/gpu/clients_test.go, TestClientMatrix):
# PyTorch (caching, cudaMallocAsync, expandable segments), raw cudaMalloc, JAX (with and without
# preallocation), CuPy, a token-dropping child, two processes of one task and a musl helper, each
# in an 8 GiB task asking for 12 GiB, with borrowing off and on, beside a neighbour; then the
# allocation cost with and without the fence. One JSON line a row in $GPUFRAC_GPU_OUT/results.jsonl.
#
#   bash acctest/gpu/testdata/clients.sh --build      # on the development machine (Go, musl-gcc)
#   bash acctest/gpu/testdata/clients.sh --dry-run    # anywhere: checks what needs no GPU
#   GPUFRAC_GPU_OUT=/tmp/m bash acctest/gpu/testdata/clients.sh   # on the GPU machine
#
# --build makes bin/libgpufrac-fence.so (make fence), bin/gpuacc.test (the GPU acceptance tests)
# and bin/musl/ (the musl helper and musl's loader: the GPU machine has no musl of its own); carry
# bin/ to the GPU machine. The run needs those, python3 with torch, jax and cupy, and an NVIDIA GPU
# with nothing else on it; it stays under 6 minutes on an H200 (each process is bounded: a row
# that hangs fails at 150 s).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
bin=$root/bin

build() {
	export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
	make fence
	go test -c -o "$bin/gpuacc.test" ./acctest/gpu
	command -v musl-gcc >/dev/null || { echo "clients.sh: musl-gcc not found (Debian's musl-tools)" >&2; exit 1; }
	mkdir -p "$bin/musl"
	musl-gcc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$bin/musl/musl-helper" acctest/gpu/testdata/clients/musl_helper.c
	# musl's loader is its libc; musl-gcc -print-file-name answers with glibc's linker script.
	local ldso
	ldso=$(readlink -f /lib/ld-musl-x86_64.so.1 2>/dev/null || true)
	[[ -n $ldso ]] && head -c 4 "$ldso" | grep -q ELF || { echo "clients.sh: musl's loader /lib/ld-musl-x86_64.so.1 not found" >&2; exit 1; }
	install -m 0755 "$ldso" "$bin/musl/ld-musl-x86_64.so.1"
	"${CC:-cc}" -std=gnu11 -O2 -Wall -Wextra -Werror -o "$bin/driver-facts" acctest/gpu/testdata/clients/driver_facts.c -ldl -lpthread
	echo "clients.sh: built $bin/libgpufrac-fence.so, $bin/gpuacc.test, $bin/driver-facts and $bin/musl/; carry $bin"
}

need() {
	local missing=0
	for f in "$bin/libgpufrac-fence.so" "$bin/gpuacc.test" "$bin/driver-facts" "$bin/musl/musl-helper" "$bin/musl/ld-musl-x86_64.so.1"; do
		[[ -e $f ]] || { echo "clients.sh: $f is missing: run clients.sh --build on the development machine" >&2; missing=1; }
	done
	return $missing
}

env_for_tests() {
	export GPUFRAC_GPU_TESTDIR=$root/acctest/gpu/testdata
	export GPUFRAC_FENCE_LIBRARY=$bin/libgpufrac-fence.so
	export GPUFRAC_MUSL_DIR=$bin/musl
	export GPUFRAC_DRIVER_FACTS=$bin/driver-facts
}

case "${1:-}" in
--build)
	build
	;;
--dry-run)
	# What needs no GPU: this script's syntax, the rows' client modes and the musl helper
	# (TestClientMatrixRows), and the built files when they are there.
	bash -n "$0"
	env_for_tests
	if [[ -x $bin/gpuacc.test ]]; then
		(cd acctest/gpu && "$bin/gpuacc.test" -test.run 'TestClientMatrixRows$' -test.v)
	else
		(cd acctest/gpu && go test -count=1 -run 'TestClientMatrixRows$' -v .)
	fi
	need || echo "clients.sh: (dry run) the GPU run would stop here until --build has run"
	"$bin/musl/ld-musl-x86_64.so.1" "$bin/musl/musl-helper" true 2>/dev/null || true
	echo "clients.sh: dry run done"
	;;
"")
	need
	: "${GPUFRAC_GPU_OUT:?set GPUFRAC_GPU_OUT to a directory for results.jsonl}"
	mkdir -p "$GPUFRAC_GPU_OUT"
	env_for_tests
	export GPUFRAC_GPU_TESTS=1
	start=$(date +%s)
	set +e
	(cd acctest/gpu && timeout 420 "$bin/gpuacc.test" -test.v -test.timeout 7m -test.run 'TestClientMatrix$') \
		2>&1 | tee "$GPUFRAC_GPU_OUT/clients.log"
	rc=${PIPESTATUS[0]}
	set -e
	echo "clients.sh: exit $rc after $(($(date +%s) - start)) s; rows in $GPUFRAC_GPU_OUT/results.jsonl"
	exit "$rc"
	;;
*)
	echo "usage: clients.sh [--build | --dry-run]   (no argument: run the matrix; needs GPUFRAC_GPU_OUT)" >&2
	exit 2
	;;
esac
