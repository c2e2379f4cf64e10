# The operator image: `make image` (see docs/install.md). Build context: the repository root;
# .dockerignore keeps target/, .state/, .git and fuzz output out of it.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# --locked: exactly the dependencies of Cargo.lock, or fail.
RUN cargo build --locked --release -p marekvs-operator

# No shell, no package manager; runs as the distroless nonroot user (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/marekvs-operator /marekvs-operator
USER 65532:65532
ENTRYPOINT ["/marekvs-operator"]
CMD ["run"]
