# syntax=docker/dockerfile:1
# Multi-stage: build with dev dependencies, run with production dependencies only, as a non-root user.

FROM node:20-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 builds its native addon from source when no prebuilt binary matches.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts && npm rebuild better-sqlite3
COPY tsconfig.json ./
COPY proto ./proto
COPY src ./src
COPY workers ./workers
COPY bench ./bench
COPY test ./test
RUN npx tsc -p tsconfig.json
# Production dependencies only, with the native addon built for this image.
RUN npm ci --omit=dev --ignore-scripts && npm rebuild better-sqlite3

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    IBEX_CONTEXT_GRPC_ADDR=0.0.0.0:9092 \
    IBEX_CONTEXT_ADMIN_ADDR=0.0.0.0:9464 \
    IBEX_CONTEXT_EMBEDDED_DB=/var/lib/ibex-context/ibex-context.db
WORKDIR /app
# Numeric UID/GID (10001): Kubernetes' runAsNonRoot can only be verified against a numeric USER.
RUN groupadd --system --gid 10001 ibex && useradd --system --uid 10001 --gid 10001 --home /app ibex \
    && mkdir -p /var/lib/ibex-context && chown 10001:10001 /var/lib/ibex-context
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/dist/workers ./dist/workers
COPY --from=build /app/proto ./proto
USER 10001:10001
EXPOSE 9092 9464
# The service's own CLI asks grpc.health.v1.Health at the address and with the TLS the service was given
# (IBEX_CONTEXT_GRPC_ADDR, IBEX_CONTEXT_TLS_CERT); under mutual TLS it asks the admin /readyz instead.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "dist/src/cli/main.js", "healthcheck", "--local"]
# Off loopback the service refuses to start without authentication: mount a token file or TLS material
# (IBEX_CONTEXT_AUTH_TOKENS_FILE, IBEX_CONTEXT_TLS_*), or set IBEX_CONTEXT_ALLOW_INSECURE=true knowingly.
ENTRYPOINT ["node", "--initial-old-space-size=128", "--v8-pool-size=0", "dist/src/cli/main.js"]
CMD ["serve"]
