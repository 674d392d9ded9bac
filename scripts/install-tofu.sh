#!/usr/bin/env bash
# Builds the OpenTofu CLI that the provider's acceptance tests drive, from the Go module proxy
# at a pinned release tag, and caches it. Nothing is downloaded from anywhere else.
# Prints the absolute path of the binary on stdout; progress goes to stderr.
set -euo pipefail

TOFU_VERSION="${TOFU_VERSION:-v1.10.6}"
# OpenTofu's go.mod carries one replace directive; `go install pkg@version` refuses modules with
# replaces, so we build through a tiny wrapper module that repeats it.
HCL_REPLACE="github.com/opentofu/hcl/v2 v2.20.2-0.20250121132637-504036cd70e7"

cache="${GPUFRAC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufrac}"
bin="$cache/tofu-$TOFU_VERSION/tofu"
if [[ -x "$bin" ]] && "$bin" version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi

work="$cache/tofu-$TOFU_VERSION/src"
mkdir -p "$work"
cat >"$work/go.mod" <<MOD
module gpufrac.local/tofubuild

go 1.24

require github.com/opentofu/opentofu $TOFU_VERSION

replace github.com/hashicorp/hcl/v2 v2.20.1 => $HCL_REPLACE
MOD
cat >"$work/tools.go" <<'GO'
//go:build tools

package tofubuild

import _ "github.com/opentofu/opentofu/cmd/tofu"
GO
echo "==> building OpenTofu $TOFU_VERSION from the Go module proxy (first time: several minutes)" >&2
(
	cd "$work"
	GOFLAGS=-mod=mod go mod tidy -e >&2 2>&1 || true
	GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
		-o "$bin.tmp" github.com/opentofu/opentofu/cmd/tofu >&2
)
mv "$bin.tmp" "$bin"
"$bin" version >&2
echo "$bin"
