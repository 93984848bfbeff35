# Container image: the exporter, the shared libraries it loads and nothing else, running as
# nobody. For a machine with a registry and a Docker/BuildKit daemon:
#   docker build -t rdma-fabric-exporter .
#   docker run --rm -p 9866:9866 rdma-fabric-exporter demo
# Without either, scripts/build-image builds the same layout with buildah from `scratch`
# (the tests do; see tests/it/image.rs). Both lay the root filesystem out with
# scripts/image-rootfs.
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The build needs the Rust toolchain and a C linker only (the probe's verbs binding dlopens
# libibverbs at run time); libibverbs1 and ibverbs-providers are what the probe loads, copied
# into the image for probing.
RUN apt-get update && apt-get install -y --no-install-recommends infiniband-diags \
    libibverbs1 ibverbs-providers \
 && cargo build --release --locked --bin rdma-fabric-exporter \
 && scripts/image-rootfs target/release/rdma-fabric-exporter /rootfs

# The binary, ibnetdiscover and perfquery (the ib_fabric collector's tools), libibverbs with its
# providers and /etc/libibverbs.d (the probe collector loads them), ld.so and the libraries
# `ldd` lists for all these, passwd/group and the CA bundle: no shell, no package manager.
FROM scratch
COPY --from=build /rootfs/ /
USER 65534:65534
ENV PATH=/usr/local/bin:/usr/sbin
EXPOSE 9866/tcp
ENTRYPOINT ["/usr/local/bin/rdma-fabric-exporter"]
CMD ["serve"]
