# The operator image (for kind or a real cluster; not used by the local harness).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p marekvs-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/marekvs-operator /marekvs-operator
USER 65532:65532
ENTRYPOINT ["/marekvs-operator"]
CMD ["run"]
