#!/usr/bin/env bash
# Fails when a package crosses a seam that ARCHITECTURE.md draws:
#   - only gpu/ imports go-nvml;
#   - ledger/ imports no Nomad or Terraform package;
#   - nothing imports the github.com/hashicorp/nomad module (only .../nomad/api is allowed);
#   - only nomad-device/ (and its acceptance tests) speak the plugin protocol;
#   - only policy/ (and test servers, the provider and acceptance tests) use Nomad Variables;
#     controller/ (gpufrac controller) is the one other Nomad API client: jobs, allocations and
#     the event stream, which are not Variables.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
fail=0

deps() { go list -deps -f '{{.ImportPath}}' "$@" 2>/dev/null; }
imports() { go list -f '{{.ImportPath}}: {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... ; }

violation() { echo "check-deps: $*" >&2; fail=1; }

while IFS= read -r line; do
	pkg=${line%%:*}
	rel=${pkg#"$mod"}
	rel=${rel#/}
	for imp in ${line#*:}; do
		case "$imp" in
		github.com/hashicorp/nomad | github.com/hashicorp/nomad/v2 | github.com/hashicorp/nomad/v2/* ) violation "$rel imports $imp (licence: never import the nomad module)";;
		github.com/hashicorp/nomad/api | github.com/hashicorp/nomad/api/*) ;;
		github.com/hashicorp/nomad/*) violation "$rel imports $imp (licence: only github.com/hashicorp/nomad/api is allowed)";;
		esac
		case "$imp" in
		github.com/NVIDIA/go-nvml*) [[ "$rel" == gpu || "$rel" == gpu/* ]] || violation "$rel imports $imp (only gpu/ may touch NVML)";;
		esac
		case "$imp" in
		github.com/hashicorp/nomad/api*)
			case "$rel" in policy | policy/* | controller | internal/varserver* | terraform-provider* | acctest* ) ;;
			*) violation "$rel imports $imp (only policy/ knows Nomad Variables)";; esac;;
		esac
		case "$imp" in
		github.com/hashicorp/nomad* | github.com/hashicorp/terraform*)
			[[ "$rel" == ledger || "$rel" == ledger/* ]] && violation "$rel imports $imp (ledger/ imports no Nomad or Terraform package)";;
		esac
		case "$imp" in
		"$mod"/nomad-device/proto*)
			case "$rel" in nomad-device* | acctest* ) ;;
			*) violation "$rel imports $imp (only nomad-device/ speaks the plugin protocol)";; esac;;
		esac
	done
done < <(imports)

# ledger/ (and the packages below it: policy's types, gpu/) pull in no Nomad, Terraform or plugin
# protocol package, not even through their dependencies: the Nomad Variables client lives in
# policy/nomadvars, which only the plugin, the provider and the CLI import.
for dep in $(deps ./ledger/... ./policy ./gpu/...); do
	case "$dep" in
	github.com/hashicorp/nomad* | github.com/hashicorp/terraform* | github.com/hashicorp/go-plugin* | "$mod"/nomad-device*) violation "ledger/, policy or gpu/ depends on $dep";;
	esac
done

if grep -qE '^\s*github.com/hashicorp/nomad(/v2)? v' go.mod; then
	violation "go.mod requires the github.com/hashicorp/nomad module"
fi

if [[ $fail -ne 0 ]]; then
	exit 1
fi
echo "check-deps: ok (seams hold)"
