# syntax=docker/dockerfile:1
# Builds from a clean checkout with any OCI builder (docker, buildah, kaniko). Three stages:
#   build  – dev dependencies, the wire types generated from proto/ (src/generated/ is not committed),
#            then the service and its workers compiled (not bench/ or test/: tsconfig.build.json);
#   prune  – dev dependencies removed, keeping the native addon built in `build`;
#   runtime – dist/, proto/ and production dependencies only, as the numeric user.
# test/tools/cli/image-build.test.ts replays the build stage's steps in a clean copy of the git tree.

FROM node:20-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 builds its native addon from source when no prebuilt binary matches.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts && npm rebuild better-sqlite3
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY proto ./proto
COPY src ./src
COPY workers ./workers
RUN node scripts/gen-proto-types.mjs
RUN npx tsc -p tsconfig.build.json

FROM build AS prune
RUN npm prune --omit=dev --ignore-scripts

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    IBEX_CONTEXT_GRPC_ADDR=0.0.0.0:9092 \
    IBEX_CONTEXT_ADMIN_ADDR=0.0.0.0:9464 \
    IBEX_CONTEXT_EMBEDDED_DB=/var/lib/ibex-context/ibex-context.db
WORKDIR /app
# Numeric UID/GID (10001): Kubernetes' runAsNonRoot can only be verified against a numeric USER.
RUN groupadd --system --gid 10001 ibex && useradd --system --uid 10001 --gid 10001 --home /app ibex \
    && mkdir -p /var/lib/ibex-context && chown 10001:10001 /var/lib/ibex-context
COPY --from=prune /app/package.json ./package.json
COPY --from=prune /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/dist/workers ./dist/workers
COPY --from=build /app/proto ./proto
# The embedded store (IBEX_CONTEXT_EMBEDDED_DB): a volume, so its memories outlive the container.
VOLUME ["/var/lib/ibex-context"]
USER 10001:10001
EXPOSE 9092 9464
# The service's own CLI asks grpc.health.v1.Health at the address and with the TLS the service was given
# (IBEX_CONTEXT_GRPC_ADDR, IBEX_CONTEXT_TLS_CERT); under mutual TLS it asks the admin /readyz instead.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "dist/src/tools/cli/main.js", "healthcheck", "--local"]
# Off loopback the service refuses to start without authentication: mount a token file or TLS material
# (IBEX_CONTEXT_AUTH_TOKENS_FILE, IBEX_CONTEXT_TLS_*), or set IBEX_CONTEXT_ALLOW_INSECURE=true knowingly.
ENTRYPOINT ["node", "--initial-old-space-size=128", "--v8-pool-size=0", "--no-allocation-site-pretenuring", "dist/src/tools/cli/main.js"]
CMD ["serve"]
