# syntax=docker/dockerfile:1
#
# stripe-reconciler container image.
#
#   docker build -t stripe-reconciler:0.1.0 \
#     --build-arg VERSION=0.1.0 \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://git.example.com/payments/stripe-reconciler .
#
# Base images are pinned by digest (a tag can be moved to other bytes; a
# digest cannot). The digests below are the multi-arch index digests of the
# tags they name, as published in other public Dockerfiles; they were not
# re-resolved from the registries when pinned (no registry access there).
# To update, resolve the tag and replace the digest in the ARG:
#
#   docker buildx imagetools inspect rust:1-slim-bookworm --format '{{json .Manifest.Digest}}'
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot --format '{{json .Manifest.Digest}}'
#   (or: crane digest IMAGE:TAG)
#
# or let Renovate/Dependabot do it (both understand `IMAGE:TAG@sha256:...`).
# A --build-arg overrides a pin for a one-off build. scripts/image.sh builds
# this file unchanged on a host with no image registry, with both bases made
# from Debian packages and given as these build arguments
# (docs/deployment.md#building-the-image-without-a-registry).
ARG RUST_IMAGE=rust:1-slim-bookworm@sha256:94e9efa4033213dbb70d4f665527e7ece3944ddb7ba1dd2e43f6fd6e2490af58
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

# Builder: the official Rust image on Debian bookworm. TLS is rustls (no
# OpenSSL), queries are runtime-checked (no sqlx offline data, no database at
# build time); the migrations are embedded by `sqlx::migrate!()`, so they must
# be in the build context.
FROM ${RUST_IMAGE} AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds (BuildKit).
# The binary is copied out of the cached target dir within the same RUN,
# because cache mounts are not part of the image layer. Symbols are stripped
# by Cargo (CARGO_PROFILE_RELEASE_STRIP, so Cargo.toml stays as it is) and
# the result is checked: `file` is not in the slim image, so `strip` itself
# runs again (a no-op on a stripped binary) and the symbol table must be empty.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked --bin stripe-reconciler \
 && install -D -m 0755 target/release/stripe-reconciler /out/stripe-reconciler \
 && strip --strip-all /out/stripe-reconciler \
 && test -z "$(nm /out/stripe-reconciler 2>/dev/null)"

# Runtime: glibc + libgcc + CA certificates, no shell, no package manager,
# runs as nonroot (UID/GID 65532), matching the chart's securityContext.
FROM ${RUNTIME_IMAGE}
# The base actually used (the pinned default, or what a --build-arg named).
ARG RUNTIME_IMAGE
# OCI image annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="stripe-reconciler" \
      org.opencontainers.image.description="Reconciles a PostgreSQL payments table against Stripe PaymentIntents" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${RUNTIME_IMAGE}"
COPY --from=builder /out/stripe-reconciler /stripe-reconciler
USER 65532:65532
ENTRYPOINT ["/stripe-reconciler"]
