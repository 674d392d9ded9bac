#!/usr/bin/env bash
# Runs every fuzz target briefly: the parsers of what users and other programs hand gpufrac
# (sizes, queue files, the plugin's config, policies and templates as Nomad Variables, the
# ledger's files, instance IDs) must not panic on any input. A failure leaves the input under the
# package's testdata/fuzz/, where plain `go test` replays it from then on.
#
# Budgets are execution counts, not durations: a duration's deadline races the fuzz workers on a
# loaded machine and fails with "context deadline exceeded" and no input (go.dev/issue/75804).
# Each count is a few seconds on the 2-core CI machine; FUZZTIME (e.g. 1m) overrides them all.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(
	"./size FuzzParseSize 50000x"
	"./policy FuzzDecodePolicy 50000x"
	"./policy FuzzDecodeTemplate 50000x"
	"./ledger FuzzParseInstanceID 50000x"
	"./ledger FuzzLoad 1000x"
	"./queue FuzzParseQueue 20000x"
	"./nomad-device/deviceplugin FuzzParseConfig 20000x"
)
for t in "${targets[@]}"; do
	read -r pkg name budget <<<"$t"
	budget="${FUZZTIME:-$budget}"
	echo "==> fuzz $pkg $name ($budget)"
	# -run of nothing: the unit tests ran already; only this target's corpus and new inputs run.
	${GO:-go} test -run '^$' -fuzz "^${name}\$" -fuzztime "$budget" "$pkg"
done
