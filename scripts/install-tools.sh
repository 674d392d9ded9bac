#!/usr/bin/env bash
# Installs everything the build and the tests need, from Debian's packages and the Go module
# proxy only, into the project's own bin/tools (and the OpenTofu cache); Debian's protoc and
# chromium go where apt puts them. Safe to re-run: each tool is installed only when missing or
# at another version.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tools="$root/bin/tools"
mkdir -p "$tools"
export GOBIN="$tools"

PROTOC_GEN_GO_VERSION=v1.36.11
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
STATICCHECK_VERSION=v0.8.2

say() { echo "==> $*" >&2; }

# Debian's protoc, and headless Chromium, which loads the run report in the report's and the
# runner's tests (TestReportInChromium); fonts-dejavu-core gives the screenshots legible text.
# One `apt-get update` and one install for both, without recommended packages: a headless
# Chromium needs none of them, and on an empty Debian 12 they are 160 of 399 packages
# (python3, perl, cups, samba libraries...), each unpacked and configured.
apt_pkgs=()
command -v protoc >/dev/null 2>&1 || apt_pkgs+=(protobuf-compiler)
# protoc's well-known types (google/protobuf/wrappers.proto, which the plugin protocol's stats
# import) are in libprotobuf-dev, only a recommendation of protobuf-compiler: without it a fresh
# machine's `make generate` fails with "wrappers.proto: File not found".
[[ -f /usr/include/google/protobuf/wrappers.proto ]] || apt_pkgs+=(libprotobuf-dev)
# musl-gcc builds the musl programs the fence's tests run under the preload (TestMuslProcess...):
# the fence must never stop a non-glibc process from starting.
command -v musl-gcc >/dev/null 2>&1 || apt_pkgs+=(musl-tools)
if ! command -v chromium >/dev/null 2>&1 && [[ "${GPUFRAC_SKIP_CHROMIUM:-}" != 1 ]]; then
	apt_pkgs+=(chromium fonts-dejavu-core)
fi
if ((${#apt_pkgs[@]})); then
	say "installing Debian's ${apt_pkgs[*]}"
	sudo=""
	[[ $(id -u) -eq 0 ]] || sudo=sudo
	$sudo apt-get update -qq >&2
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >&2
fi

# go_install PKG VERSION BINARY: installs unless bin/tools/BINARY.version already says VERSION.
go_install() {
	local pkg=$1 version=$2 bin=$3
	if [[ -x "$tools/$bin" && "$(cat "$tools/$bin.version" 2>/dev/null)" == "$version" ]]; then
		return
	fi
	say "installing $bin $version"
	go install "$pkg@$version"
	echo "$version" >"$tools/$bin.version"
}
go_install google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION" protoc-gen-go
go_install google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" protoc-gen-go-grpc
go_install honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION" staticcheck

if [[ "${GPUFRAC_SKIP_TOFU:-}" != 1 ]]; then
	tofu=$(bash scripts/install-tofu.sh)
	ln -sf "$tofu" "$tools/tofu"
fi
say "tools ready in $tools"
