# marekvs-operator: see README.md. Everything runs on loopback.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help build test unit e2e fuzz deny bench lint crd crd-check control-plane demo demo-down kubeconfig kind-up kind-e2e kind-down

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

build: ## Build every crate
	cargo build --workspace

unit: ## Unit and property tests (no cluster needed)
	cargo test --no-fail-fast --workspace --exclude marekvs-e2e

e2e: ## e2e tests on a fresh local control plane (started and torn down here)
	hack/test-e2e.sh

FUZZ_SECONDS ?= 30

fuzz: ## Fuzz the metrics parser for FUZZ_SECONDS (cargo-fuzz; installs nightly if missing)
	hack/fuzz.sh $(FUZZ_SECONDS)

deny: ## cargo-deny: licenses, bans, sources, and advisories where the database is reachable
	hack/deny.sh

test: unit fuzz e2e ## Unit, property, simulation, fuzz and e2e (incl. chaos) tests, from a fresh clone

bench: ## Benchmarks on a fresh local control plane (reported numbers; see docs/benchmarks.md)
	hack/bench.sh $(BENCH)

lint: crd-check ## rustfmt, clippy (warnings are errors), the CRD drift check, deploy/ and its overlays render (RBAC checked)
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	hack/check-deploy.sh

CRD := deploy/crd/marekvs.io_marekvsclusters.yaml

crd: ## Regenerate the CRD from the Rust types
	cargo run -q -p marekvs-operator -- crd > $(CRD)

crd-check: ## Fail if the committed CRD differs from the Rust types
	@cargo run -q -p marekvs-operator -- crd | diff -u $(CRD) - || { echo "$(CRD) is stale: run make crd" >&2; exit 1; }

control-plane: ## Build (or reuse) the pinned upstream control-plane binaries
	@hack/build-control-plane.sh

demo: ## Bring up the local cluster, the simulator and a demo MarekvsCluster
	@hack/demo.sh

demo-down: ## Stop everything `make demo` started and remove its state
	@hack/cluster-down.sh demo

kubeconfig: ## Print the kubeconfig path of the running demo cluster
	@. hack/lib.sh && cluster_env demo && if [ -f "$$KUBECONFIG_PATH" ]; then echo "$$KUBECONFIG_PATH"; else echo "no demo cluster: run make demo" >&2; exit 1; fi

kind-up: ## kind cluster with storage classes, the operator image and deploy/ (needs Docker, kind, kubectl)
	@hack/kind/up.sh

kind-e2e: kind-up ## The e2e suite on kind: real marekvs members (MAREKVS_IMAGE), the operator as deployed
	hack/kind/e2e.sh

kind-down: ## Delete the kind cluster
	hack/kind/down.sh
