#!/usr/bin/env bash
# Runs the Terraform provider's acceptance tests through OpenTofu, offline: builds (or reuses)
# tofu with scripts/install-tofu.sh, then runs `go test` with the variables that keep
# terraform-plugin-testing from downloading Terraform. The provider talks to an in-process fake
# of Nomad's Variables API, so no Nomad is needed. Extra arguments go to `go test`
# (e.g. -run TestAccPolicy).
set -euo pipefail
cd "$(dirname "$0")/.."

tofu="$(scripts/install-tofu.sh)"
case "$tofu" in /*) ;; *) tofu="$PWD/$tofu" ;; esac

# An empty CLI configuration: no network mirrors, no credentials, no warning about a missing file.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/tofurc"

export TF_ACC=1
export TF_ACC_TERRAFORM_PATH="$tofu"
export TF_ACC_PROVIDER_NAMESPACE=hashicorp
export TF_ACC_PROVIDER_HOST=registry.opentofu.org
export CHECKPOINT_DISABLE=1
export TF_CLI_CONFIG_FILE="$tmp/tofurc"
export TF_ACC_TEMP_DIR="$tmp"
# Nomad settings from the environment must not leak into the tests' provider blocks.
unset NOMAD_ADDR NOMAD_TOKEN NOMAD_NAMESPACE NOMAD_REGION NOMAD_CACERT

packages=(./terraform-provider/...)
if [[ -d acctest/e2e ]] && compgen -G 'acctest/e2e/*_test.go' >/dev/null; then
	packages+=(./acctest/e2e/...)
fi
# -p 1: the tests drive a CLI per step; running packages in parallel only thrashes 2 cores.
exec go test -p 1 -count=1 -timeout 20m "${packages[@]}" "$@"
