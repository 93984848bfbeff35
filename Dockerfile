# Container image: a static-enough glibc binary on a distroless runtime, running as nobody.
#   docker build -t rdma-fabric-exporter .
#   docker run --rm -p 9866:9866 rdma-fabric-exporter demo
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin rdma-fabric-exporter

# distroless/cc: glibc and libgcc only, no shell, no package manager; the nonroot tag runs as 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/rdma-fabric-exporter /usr/local/bin/rdma-fabric-exporter
USER 65534:65534
EXPOSE 9866
ENTRYPOINT ["/usr/local/bin/rdma-fabric-exporter"]
CMD ["serve"]
