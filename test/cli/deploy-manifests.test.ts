/**
 * Deployment, with no cluster and no Docker engine here: every manifest in deploy/k8s is
 * validated against the Kubernetes OpenAPI schemas (kubernetes-models' `validate()`), and the facts the
 * issue found broken are pinned: numeric UID/GID agreeing with the Dockerfile, TLS files where the
 * settings point, no `replicas` beside an HPA, no CPU limit, probes that tolerate load, and a Docker
 * HEALTHCHECK that follows the service's own address and TLS settings (`healthcheck --local`).
 */
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { afterEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { dialable, localTarget } from '../../src/cli/commands/healthcheck.js';
import { createGrpcServer, type GrpcServer } from '../../src/server/grpc-server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { ROOT, runCli } from '../helpers/cli.js';

const K8S = path.join(ROOT, 'deploy/k8s');
// Kubernetes reads manifests as YAML 1.1 (sigs.k8s.io/yaml).
const load = (file: string) => parse(readFileSync(path.join(K8S, file), 'utf8'), { version: '1.1' });
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  Deployment: Deployment as never,
  HorizontalPodAutoscaler: HorizontalPodAutoscaler as never,
  PodDisruptionBudget: PodDisruptionBudget as never,
  Service: Service as never,
  Secret: Secret as never,
};

describe('deploy/k8s manifests', () => {
  it('every manifest is a known kind and passes its OpenAPI schema', () => {
    const files = readdirSync(K8S).filter((f) => f.endsWith('.yaml'));
    expect(files.sort()).toEqual([
      'deployment.yaml',
      'hpa.yaml',
      'pdb.yaml',
      'secret.example.yaml',
      'service.yaml',
    ]);
    for (const f of files) {
      const doc = load(f);
      const Model = MODELS[doc.kind];
      expect(Model, `${f}: kind ${doc.kind}`).toBeDefined();
      expect(() => new Model!(doc as never).validate(), f).not.toThrow();
    }
  });

  it('the schema checker does reject a broken manifest (a string where an integer belongs)', () => {
    const doc = load('deployment.yaml');
    doc.spec.template.spec.securityContext.runAsUser = 'ibex';
    expect(() => new Deployment(doc).validate()).toThrow(/runAsUser/);
  });

  it('runs as the numeric UID/GID the Dockerfile sets', () => {
    const pod = load('deployment.yaml').spec.template.spec;
    const docker = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const user = /^USER (\d+):(\d+)$/m.exec(docker);
    expect(user).not.toBeNull();
    expect(pod.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: Number(user![1]),
      runAsGroup: Number(user![2]),
    });
    expect(docker).toContain(`--uid ${user![1]} --gid ${user![2]}`);
  });

  it('mounts each file where its setting points (Secret items), from keys the example Secret has', () => {
    const pod = load('deployment.yaml').spec.template.spec;
    const container = pod.containers[0];
    const mount = container.volumeMounts.find((m: { name: string }) => m.name === 'auth');
    const secret = pod.volumes.find((v: { name: string }) => v.name === 'auth').secret;
    const files = new Map<string, string>(
      secret.items.map((i: { key: string; path: string }) => [
        path.posix.join(mount.mountPath, i.path),
        i.key,
      ]),
    );
    const env = new Map<string, string>(
      container.env.map((e: { name: string; value?: string }) => [e.name, e.value]),
    );
    const example = Object.keys(load('secret.example.yaml').stringData);
    for (const name of ['IBEX_CONTEXT_AUTH_TOKENS_FILE', 'IBEX_CONTEXT_TLS_CERT', 'IBEX_CONTEXT_TLS_KEY']) {
      const file = env.get(name)!;
      expect(files.has(file), `${name}=${file}`).toBe(true);
      expect(example).toContain(files.get(file));
    }
    expect(secret.defaultMode).toBe(0o440);
  });

  it('leaves the replica count to the HPA, sets no CPU limit and probes with slack', () => {
    const dep = load('deployment.yaml');
    const hpa = load('hpa.yaml');
    expect(hpa.spec.scaleTargetRef.name).toBe(dep.metadata.name);
    expect(dep.spec.replicas).toBeUndefined();
    const c = dep.spec.template.spec.containers[0];
    expect(c.resources.limits.cpu).toBeUndefined();
    expect(c.resources.requests.cpu).toBe('2');
    expect(c.readinessProbe.failureThreshold).toBeGreaterThanOrEqual(3);
    expect(c.readinessProbe.timeoutSeconds).toBeGreaterThanOrEqual(2);
  });

  it('targets a CPU share below the first step bench:load found past p99 20 ms or with errors', () => {
    const load_ = JSON.parse(readFileSync(path.join(ROOT, 'bench/results/load.json'), 'utf8')) as {
      steps: { rate: number; errors: number; p99_ms: number; server: { cpu_cores: { total: number } } }[];
    };
    const firstError = load_.steps
      .filter((s) => s.errors > 0 || s.p99_ms > 20)
      .sort((a, b) => a.rate - b.rate)[0]!;
    const requested = 2;
    const target = load('hpa.yaml').spec.metrics[0].resource.target.averageUtilization as number;
    expect(target / 100).toBeLessThan(firstError.server.cpu_cores.total / requested);
  });
});

describe('healthcheck --local (the Docker HEALTHCHECK)', () => {
  const servers: GrpcServer[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.drain(200)));
  });

  it('the Dockerfile runs it', () => {
    expect(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8')).toMatch(
      /HEALTHCHECK[^\n]*\\\n\s+CMD \["node", "dist\/src\/cli\/main\.js", "healthcheck", "--local"\]/,
    );
  });

  it('derives the target from the service settings: wildcard → loopback, TLS, admin under mutual TLS', () => {
    expect(dialable('0.0.0.0:9092')).toBe('127.0.0.1:9092');
    expect(dialable('[::]:7')).toBe('[::1]:7');
    expect(dialable('10.0.0.5:9092')).toBe('10.0.0.5:9092');
    expect(localTarget({})).toEqual({ kind: 'grpc', addr: '127.0.0.1:9092', tls: false });
    expect(localTarget({ IBEX_CONTEXT_GRPC_ADDR: '0.0.0.0:7000', IBEX_CONTEXT_TLS_CERT: '/t.crt' })).toEqual({
      kind: 'grpc',
      addr: '127.0.0.1:7000',
      tls: true,
    });
    expect(
      localTarget({
        IBEX_CONTEXT_TLS_CERT: '/t.crt',
        IBEX_CONTEXT_TLS_CLIENT_CA: '/ca',
        IBEX_CONTEXT_ADMIN_ADDR: '0.0.0.0:9500',
      }),
    ).toEqual({ kind: 'admin', url: 'http://127.0.0.1:9500/readyz' });
  });

  it('checks the gRPC port named by IBEX_CONTEXT_GRPC_ADDR, and /readyz under mutual TLS', async () => {
    const grpc = createGrpcServer({
      assemble: async () => {
        throw new Error('unused');
      },
      logger: createLogger({ logLevel: 'silent' }),
      settings: { timeoutMs: 1000, maxReceiveMessageBytes: 1024 * 1024, maxMetadataBytes: 16 * 1024 },
    });
    const port = await grpc.bind('127.0.0.1:0');
    servers.push(grpc);
    grpc.markServing();
    const ok = await runCli(['healthcheck', '--local'], '', {
      env: { IBEX_CONTEXT_GRPC_ADDR: `127.0.0.1:${port}` },
    });
    expect(ok.stdout.trim()).toBe(`127.0.0.1:${port}: SERVING`);
    expect(ok.code).toBe(0);

    let ready = 503;
    const admin = http.createServer((_req, res) => res.writeHead(ready).end('{"status":"draining"}'));
    await new Promise<void>((r) => admin.listen(0, '127.0.0.1', r));
    const adminAddr = `127.0.0.1:${(admin.address() as AddressInfo).port}`;
    try {
      const env = { IBEX_CONTEXT_TLS_CLIENT_CA: '/ca.pem', IBEX_CONTEXT_ADMIN_ADDR: adminAddr };
      const draining = await runCli(['healthcheck', '--local'], '', { env });
      expect(draining.code).toBe(1);
      expect(draining.stderr).toContain('HTTP 503');
      ready = 200;
      const up = await runCli(['healthcheck', '--local'], '', { env });
      expect(up.code).toBe(0);
      expect(up.stdout.trim()).toBe(`http://${adminAddr}/readyz: ready`);
    } finally {
      admin.close();
    }
  });
});
