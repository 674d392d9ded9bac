#!/usr/bin/env bash
# Regenerates the Go code for nomad-device/proto/**.proto with protoc and pinned plugins.
# The plugins are installed from the Go module proxy into a project-local bin dir, so the
# output does not depend on whatever happens to be on PATH.
#   OUT_DIR=<dir>  write the generated files there instead of next to the .proto files
#                  (the staleness test uses this).
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.11
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
tools="${GPUFRAC_TOOLS_BIN:-$root/bin/tools}"
src="$here/proto"
out="${OUT_DIR:-$src}"

if ! command -v protoc >/dev/null 2>&1; then
	echo "generate.sh: protoc not found; run scripts/install-tools.sh (apt-get install protobuf-compiler)" >&2
	exit 1
fi
# protoc looks for the well-known types beside its own include directory; Debian ships them in
# libprotobuf-dev, a package apart from protoc.
wkt=$(dirname "$(dirname "$(command -v protoc)")")/include/google/protobuf/wrappers.proto
if [[ ! -f "$wkt" ]]; then
	echo "generate.sh: $wkt not found (protoc's well-known types); run scripts/install-tools.sh (apt-get install libprotobuf-dev)" >&2
	exit 1
fi

# install_plugin <binary> <package> <version>: reinstall unless the binary is already that version.
install_plugin() {
	local bin="$tools/$1"
	# Same stamp file as scripts/install-tools.sh, so the two never fight over a version.
	if [[ -x "$bin" && "$(cat "$bin.version" 2>/dev/null)" == "$3" ]]; then
		return
	fi
	echo "generate.sh: installing $2@$3 into $tools" >&2
	mkdir -p "$tools"
	GOBIN="$tools" go install "$2@$3"
	echo "$3" >"$bin.version"
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

mkdir -p "$out"
cd "$src"
protoc \
	--plugin=protoc-gen-go="$tools/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$tools/protoc-gen-go-grpc" \
	-I . \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	hclspec/hcl_spec.proto structs/attribute.proto structs/stats.proto \
	base/base.proto device/device.proto
