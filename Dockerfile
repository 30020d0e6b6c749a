# syntax=docker/dockerfile:1
#
# stripe-reconciler container image.
#
#   docker build -t stripe-reconciler:0.1.0 .
#
# Builder: the official Rust image on Debian bookworm. TLS is rustls (no
# OpenSSL), queries are runtime-checked (no sqlx offline data, no database at
# build time); the migrations are embedded by `sqlx::migrate!()`, so they must
# be in the build context.
FROM rust:1-slim-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target dir between builds (BuildKit).
# The binary is copied out of the cached target dir within the same RUN,
# because cache mounts are not part of the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin stripe-reconciler \
 && install -D -m 0755 target/release/stripe-reconciler /out/stripe-reconciler

# Runtime: glibc + libgcc + CA certificates, no shell, no package manager,
# runs as nonroot (UID/GID 65532), matching the chart's securityContext.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="stripe-reconciler" \
      org.opencontainers.image.description="Reconciles a PostgreSQL payments table against Stripe PaymentIntents" \
      org.opencontainers.image.licenses="MIT"
COPY --from=builder /out/stripe-reconciler /stripe-reconciler
USER 65532:65532
ENTRYPOINT ["/stripe-reconciler"]
