#!/usr/bin/env bash
# Runs the timing-sensitive packages beside two CPU-bound loops, as a loaded CI machine
# would run them, so a test that leans on wall-clock timing fails here before it lands and
# flakes for everyone. Extra arguments go to `go test` (e.g. -run TestProbe). The loops are
# ended however this script ends.
set -euo pipefail
cd "$(dirname "$0")/.."

# The GNUmakefile's LOADED_PKGS, which test-rest leaves out.
read -r -a packages <<<"${LOADED_PKGS:-./enforcer/... ./runner/... ./probe/... ./acctest/... ./nomad-device/...}"

loops=()
stop_loops() {
	for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${loops[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_loops EXIT
for _ in 1 2; do
	(while :; do :; done) &
	loops+=("$!")
done

echo "==> loaded pass: ${packages[*]} beside ${#loops[@]} CPU-bound loops"
# -count=1: a cached pass from the unloaded run proves nothing about the loaded one.
${GO:-go} test ${TEST_FLAGS:--race -timeout 20m} -count=1 "$@" "${packages[@]}"
