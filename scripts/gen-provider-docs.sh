#!/usr/bin/env bash
# Generates the Terraform provider's reference docs (terraform-provider/docs/) with tfplugindocs,
# offline. tfplugindocs would otherwise download Terraform to read the provider's schema, so the
# schema comes from OpenTofu instead: the freshly built provider is put in a plugin directory
# under the address registry.terraform.io/hashicorp/gpufrac (the only key tfplugindocs looks
# up), and `tofu providers schema -json` prints it.
#
#   scripts/gen-provider-docs.sh          regenerate terraform-provider/docs/
#   scripts/gen-provider-docs.sh --check  fail if terraform-provider/docs/ is stale
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

mode=generate
[[ "${1:-}" == "--check" ]] && mode=check

tofu="$(scripts/install-tofu.sh)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 1. The provider's schema as JSON.
platform="$(go env GOOS)_$(go env GOARCH)"
plugdir="$tmp/schema/plugins/registry.terraform.io/hashicorp/gpufrac/0.0.1/$platform"
mkdir -p "$plugdir"
go build -o "$plugdir/terraform-provider-gpufrac_v0.0.1" ./terraform-provider
cat >"$tmp/schema/main.tf" <<'HCL'
terraform {
  required_providers {
    gpufrac = { source = "registry.terraform.io/hashicorp/gpufrac" }
  }
}
HCL
: >"$tmp/tofurc"
export TF_CLI_CONFIG_FILE="$tmp/tofurc" CHECKPOINT_DISABLE=1
(cd "$tmp/schema" && "$tofu" init -input=false -no-color -plugin-dir=plugins >/dev/null &&
	"$tofu" providers schema -json >"$tmp/schema.json")

# 2. Format the examples the docs embed (in --check mode: fail if they are not formatted).
fmtflags=(-no-color -recursive)
[[ "$mode" == check ]] && fmtflags+=(-check -diff)
for d in terraform-provider/examples examples/terraform; do
	if [[ -d "$d" ]] && ! "$tofu" fmt "${fmtflags[@]}" "$d" >&2; then
		echo "$d is not formatted: run scripts/gen-provider-docs.sh (make generate)" >&2
		exit 1
	fi
done

# 3. Render into a scratch copy of the provider directory, so --check never touches the tree.
work="$tmp/provider"
mkdir -p "$work"
cp -r terraform-provider/examples "$work/examples"
[[ -d terraform-provider/templates ]] && cp -r terraform-provider/templates "$work/templates"
tfplugindocs="$tmp/tfplugindocs"
(cd tools && go build -o "$tfplugindocs" github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs)
(cd "$work" && "$tfplugindocs" generate --provider-name gpufrac --provider-dir . \
	--providers-schema "$tmp/schema.json" --rendered-provider-name gpufrac >&2)
# The scratch provider has a docs/ directory only if tfplugindocs wrote one.
if [[ ! -d "$work/docs" ]]; then
	echo "tfplugindocs produced no docs" >&2
	exit 1
fi

if [[ "$mode" == check ]]; then
	if ! diff -ru terraform-provider/docs "$work/docs"; then
		echo "terraform-provider/docs is stale: run scripts/gen-provider-docs.sh (make generate)" >&2
		exit 1
	fi
	echo "terraform-provider/docs is up to date" >&2
	exit 0
fi
rm -rf terraform-provider/docs
cp -r "$work/docs" terraform-provider/docs
echo "wrote $root/terraform-provider/docs" >&2
