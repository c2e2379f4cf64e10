# marekvs-operator: see README.md. Everything runs on loopback.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help build test unit e2e fuzz deny bench lint release-check crd crd-check control-plane demo demo-down kubeconfig image image-push helm kind-up kind-e2e kind-down

help: ## List the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# The release version: the operator crate's (its --version), the chart's version and appVersion,
# and the image tag deploy/ names (hack/check-deploy.sh checks they agree).
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' crates/controller/Cargo.toml | head -n 1)
# Where a release publishes (RELEASE_IMAGE, the chart's OCI repository, the plugin's targets).
include hack/release.env
IMAGE ?= $(RELEASE_IMAGE)
TAG ?= $(VERSION)

# Every make target and script builds this one selection (hack/lib.sh build_all): another
# unifies other features and rebuilds the kube and tokio stack.
BUILD_ALL := cargo build -q --workspace --all-targets
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

build: ## Build every crate, with its tests
	$(BUILD_ALL)

unit: ## Unit and property tests (no cluster needed)
	cargo test --no-fail-fast --workspace --exclude marekvs-e2e

e2e: ## e2e tests on a fresh local control plane (started and torn down here)
	hack/test-e2e.sh

FUZZ_SECONDS ?= 30

fuzz: ## Fuzz the metrics parser for FUZZ_SECONDS (cargo-fuzz; installs nightly if missing)
	hack/fuzz.sh $(FUZZ_SECONDS)

deny: ## cargo-deny: licenses, bans, sources, and advisories where the database is reachable
	hack/deny.sh

test: ## Unit, property, simulation, fuzz and e2e (incl. chaos) tests, and the e2e lane on real members where MAREKVS_REAL_BIN names one; every stage runs, then a table of each one's time and verdict
	hack/test.sh

bench: ## Benchmarks on a fresh local control plane (reported numbers; see docs/benchmarks.md)
	hack/bench.sh $(BENCH)

lint: crd-check ## rustfmt, clippy (warnings are errors), no import circle between a crate's files, every doc link leads somewhere (and docs/architecture.md links every source path), the CRD drift check, deploy/, its overlays and the Helm chart render (RBAC checked), actionlint on the workflows
	cargo fmt --all --check
	python3 hack/check-import-circles.py --self-test
	python3 hack/check-import-circles.py .
	python3 hack/check-doc-links.py --self-test
	python3 hack/check-doc-links.py .
	cargo clippy --workspace --all-targets -- -D warnings
	hack/check-deploy.sh
	$$(hack/tools.sh actionlint) .github/workflows/*.yaml

release-check: ## Dry run of a release (RELEASE_TAG=vX.Y.Z as the workflow does): one version everywhere, only images the release builds, the krew manifest made from the plugin archives; self-test first
	hack/release-check.sh

# The generated CRD, in the kustomize tree and in the Helm chart (files/, rendered by its
# templates/crd.yaml so that helm upgrade upgrades it): both written, both checked.
CRDS := deploy/crd/marekvs.io_marekvsclusters.yaml deploy/helm/marekvs-operator/files/marekvs.io_marekvsclusters.yaml

crd: ## Regenerate the CRD from the Rust types (deploy/crd and the Helm chart's files/)
	@$(BUILD_ALL) && $(TARGET_DIR)/debug/marekvs-operator crd > $(firstword $(CRDS)).tmp
	@for f in $(CRDS); do cp $(firstword $(CRDS)).tmp $$f; done; rm -f $(firstword $(CRDS)).tmp

crd-check: ## Fail if a committed CRD (deploy/crd or the chart's files/) differs from the Rust types
	@$(BUILD_ALL) && $(TARGET_DIR)/debug/marekvs-operator crd > $(firstword $(CRDS)).want
	@rc=0; for f in $(CRDS); do diff -u $$f $(firstword $(CRDS)).want || { echo "$$f is stale: run make crd" >&2; rc=1; }; done; rm -f $(firstword $(CRDS)).want; exit $$rc

image: ## Build the operator image IMAGE:TAG (docker, podman, nerdctl or buildah; see docs/install.md)
	@hack/image.sh build $(IMAGE) $(TAG)

image-push: ## Push IMAGE:TAG to its registry (after make image)
	@hack/image.sh push $(IMAGE) $(TAG)

helm: ## Build (or reuse) the pinned helm, print its path
	@hack/tools.sh helm

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
