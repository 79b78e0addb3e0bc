# syntax=docker/dockerfile:1
#
# nvml-exporter container image.
#
# The build stage compiles the exporter, the simulated driver and its CLI with
# the Rust toolchain; the runtime stage is a minimal glibc base with no shell
# and no package manager. The real libnvidia-ml is not in the image: the NVIDIA
# container toolkit mounts the host driver's copy and the /dev/nvidia* nodes,
# asked for by NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES=utility
# (utility is the capability that carries NVML). The simulator is included so
# `--simulate` works in the image for demos and tests on machines with no GPU.
#
# Both bases are build arguments so that air-gapped builds can point them at a
# local mirror; scripts/build-image builds this file from bases it makes itself.

ARG BUILDER_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS build
# The commit, compiled into nvml_exporter_build_info (.git is not in the
# build context, so the build cannot ask git).
ARG REVISION=unknown
# The cargo profile: release ships; scripts/build-image --profile release-test
# (the image test) builds the same binaries without fat LTO (Cargo.toml).
ARG PROFILE=release
WORKDIR /src
COPY . .
# The cache mounts keep the crate downloads and the target directory between
# builds on one machine; the binaries are copied out of the cached target in
# the same step because a cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    NVML_EXPORTER_REVISION="${REVISION}" cargo build --profile "${PROFILE}" --workspace --locked \
    && install -D -m 0755 "target/${PROFILE}/nvml-exporter" /out/usr/bin/nvml-exporter \
    && install -D -m 0755 "target/${PROFILE}/nvml-sim" /out/usr/bin/nvml-sim \
    && install -D -m 0644 "target/${PROFILE}/libnvml_sim.so" /out/usr/lib/nvml-exporter/libnvml_sim.so

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="nvml-exporter" \
      org.opencontainers.image.description="Prometheus exporter for NVIDIA GPUs and MIG instances, built on NVML" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/nvml-exporter/nvml-exporter" \
      org.opencontainers.image.url="https://github.com/nvml-exporter/nvml-exporter" \
      org.opencontainers.image.documentation="https://github.com/nvml-exporter/nvml-exporter/blob/main/deploy/README.md"

# Read by the NVIDIA container toolkit (docker --gpus, CDI, the GPU operator):
# all GPUs, and only the NVML/nvidia-smi part of the driver.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility

# /usr/bin/nvml-exporter finds the simulator at
# /usr/lib/nvml-exporter/libnvml_sim.so (<exe dir>/../lib/nvml-exporter/).
COPY --from=build /out/ /

# Numeric, so that Kubernetes' runAsNonRoot can check it without /etc/passwd.
# 65532 is the distroless "nonroot" user; NVML needs only read access to
# /dev/nvidiactl and /dev/nvidia*, which the toolkit grants to the container.
USER 65532:65532
EXPOSE 9445
ENTRYPOINT ["/usr/bin/nvml-exporter"]
