/**
 * Deployment with no cluster here: every manifest under deploy/k8s (recursively) and every overlay, rendered
 * as kustomize does (and by `kubectl kustomize` too when it is installed), is validated against the
 * Kubernetes OpenAPI schemas (kubernetes-models' `validate()`), and the same rules hold for every Deployment: numeric UID/GID agreeing with the Dockerfile, TLS files where the
 * settings point, no `replicas` beside an HPA, no CPU limit, probes that tolerate load, and a Docker
 * HEALTHCHECK that follows the service's own address and TLS settings (`healthcheck --local`).
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { afterEach, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { createGrpcServer, type GrpcServer } from '../../../src/grpc/grpc-server.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { dialable, localTarget } from '../../../src/tools/cli/commands/healthcheck.js';
import { ROOT, runCli } from '../../helpers/cli.js';

const K8S = path.join(ROOT, 'deploy/k8s');
const OVERLAYS = ['embedded', 'memory-redis', 'postgres', 'postgres-pgbouncer'];
// Kubernetes reads manifests as YAML 1.1 (sigs.k8s.io/yaml).
const parseAll = (text: string) =>
  parseAllDocuments(text, { version: '1.1' })
    .map((d) => d.toJS() as Manifest)
    .filter((d) => d !== null);
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  Deployment: Deployment as never,
  HorizontalPodAutoscaler: HorizontalPodAutoscaler as never,
  PodDisruptionBudget: PodDisruptionBudget as never,
  Service: Service as never,
  Secret: Secret as never,
  Namespace: Namespace as never,
};
// biome-ignore lint/suspicious/noExplicitAny: manifests are free-form YAML
type Manifest = Record<string, any>;

/** Every file under deploy/k8s, recursively, relative. */
function walk(dir: string, rel = ''): string[] {
  return readdirSync(path.join(dir, rel), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(dir, path.join(rel, e.name)) : [path.join(rel, e.name)],
  );
}

/** Strategic merge as kustomize applies these patches: maps deep, lists of named items merged by name. */
function merge(base: Manifest, patch: Manifest): Manifest {
  const out: Manifest = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const b = out[k];
    if (Array.isArray(v) && Array.isArray(b) && v.every((x) => x && typeof x === 'object' && 'name' in x)) {
      // The patch's items go first, in its order (merged with a same-named one), as kustomize places them.
      const named = (item: Manifest) => b.find((x) => x.name === item.name);
      out[k] = [
        ...v.map((item) => (named(item) ? merge(named(item), item) : item)),
        ...b.filter((x) => !v.some((item) => item.name === x.name)),
      ];
    } else if (v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object') {
      out[k] = merge(b, v);
    } else {
      out[k] = v;
    }
  }
  return out;
}

/**
 * Renders a kustomization the way `kubectl kustomize` does for the fields these use: resources (files and
 * directories), patches (strategic merge by kind and name), namespace, images.
 */
function render(dir: string): Manifest[] {
  const k = parse(readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8')) as Manifest;
  let docs: Manifest[] = [];
  for (const r of k.resources ?? []) {
    const p = path.join(dir, r);
    docs.push(...(statSync(p).isDirectory() ? render(p) : parseAll(readFileSync(p, 'utf8'))));
  }
  for (const { path: file } of k.patches ?? []) {
    for (const patch of parseAll(readFileSync(path.join(dir, file), 'utf8'))) {
      const i = docs.findIndex((d) => d.kind === patch.kind && d.metadata.name === patch.metadata.name);
      expect(i, `${dir}/${file} patches nothing`).toBeGreaterThanOrEqual(0);
      docs[i] = merge(docs[i]!, patch);
    }
  }
  if (k.namespace) {
    docs = docs.map((d) =>
      d.kind === 'Namespace' ? d : { ...d, metadata: { ...d.metadata, namespace: k.namespace } },
    );
  }
  for (const img of k.images ?? []) {
    for (const d of docs.filter((x) => x.kind === 'Deployment')) {
      for (const c of d.spec.template.spec.containers) {
        if (c.image === img.name) c.image = `${img.newName ?? img.name}:${img.newTag}`;
      }
    }
  }
  return docs;
}

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;
const docker = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
const example = parse(readFileSync(path.join(K8S, 'examples/secret.example.yaml'), 'utf8'), {
  version: '1.1',
});

describe('deploy/k8s', () => {
  it('every YAML file under deploy/k8s (recursively) is a kustomization or a known kind passing its schema', () => {
    const files = walk(K8S).filter((f) => f.endsWith('.yaml'));
    expect(files.length).toBeGreaterThanOrEqual(15);
    for (const f of files) {
      for (const doc of parseAll(readFileSync(path.join(K8S, f), 'utf8'))) {
        if (doc.kind === 'Kustomization') continue;
        const Model = MODELS[doc.kind];
        expect(Model, `${f}: kind ${doc.kind}`).toBeDefined();
        // Patches are partial by design; the rendered overlays below are validated whole.
        if (f.startsWith('overlays/') && /stores|pool/.test(f)) continue;
        expect(() => new Model!(doc as never).validate(), f).not.toThrow();
      }
    }
    // `kubectl apply -f deploy/k8s/` has nothing to apply at the top: the example Secret is out of reach.
    expect(readdirSync(K8S).filter((f) => f.endsWith('.yaml'))).toEqual([]);
  });

  it('the schema checker does reject a broken manifest (a string where an integer belongs)', () => {
    const dep = render(path.join(K8S, 'overlays/embedded')).find((d) => d.kind === 'Deployment')!;
    dep.spec.template.spec.securityContext.runAsUser = 'ibex';
    expect(() => new Deployment(dep as never).validate()).toThrow(/runAsUser/);
  });

  describe.each(OVERLAYS)('overlay %s, rendered', (overlay) => {
    const docs = render(path.join(K8S, 'overlays', overlay));
    const hpas = docs.filter((d) => d.kind === 'HorizontalPodAutoscaler');

    it('validates, sits in namespace ibex, holds no Secret and takes the image from `images:`', () => {
      for (const d of docs) {
        expect(
          () => new MODELS[d.kind]!(d as never).validate(),
          `${d.kind}/${d.metadata.name}`,
        ).not.toThrow();
        if (d.kind !== 'Namespace') expect(d.metadata.namespace, d.metadata.name).toBe('ibex');
      }
      expect(docs.map((d) => d.kind)).not.toContain('Secret');
      const base = parse(readFileSync(path.join(K8S, 'base/kustomization.yaml'), 'utf8'));
      const app = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === 'ibex-context')!;
      expect(app.spec.template.spec.containers[0].image).toBe(
        `${base.images[0].newName}:${base.images[0].newTag}`,
      );
    });

    it('every Deployment: numeric non-root user, Secret items, no CPU limit, no replicas beside an HPA, probes with slack', () => {
      for (const dep of docs.filter((d) => d.kind === 'Deployment')) {
        const name = dep.metadata.name;
        const pod = dep.spec.template.spec;
        expect(pod.securityContext.runAsNonRoot, name).toBe(true);
        expect(Number.isInteger(pod.securityContext.runAsUser), name).toBe(true);
        if (hpas.some((h) => h.spec.scaleTargetRef.name === name))
          expect(dep.spec.replicas, name).toBeUndefined();
        for (const v of pod.volumes ?? []) {
          if (!v.secret) continue;
          expect(v.secret.items?.length, `${name} volume ${v.name}: Secret without items`).toBeGreaterThan(0);
          for (const i of v.secret.items)
            expect(Object.keys(example.stringData), `${name}: key ${i.key}`).toContain(i.key);
        }
        for (const c of pod.containers) {
          expect(c.resources?.limits?.cpu, `${name}: CPU limit`).toBeUndefined();
          expect(c.resources?.requests?.cpu, `${name}: CPU request`).toBeDefined();
          expect(c.readinessProbe.failureThreshold, name).toBeGreaterThanOrEqual(3);
          expect(c.readinessProbe.timeoutSeconds, name).toBeGreaterThanOrEqual(2);
          for (const e of c.env ?? []) {
            const ref = e.valueFrom?.secretKeyRef;
            if (ref) expect(Object.keys(example.stringData), `${name}: ${e.name}`).toContain(ref.key);
          }
        }
      }
    });

    it('mounts each file where its setting points (TLS, tokens, the database CA)', () => {
      const dep = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === 'ibex-context')!;
      const pod = dep.spec.template.spec;
      const c = pod.containers[0];
      const files = new Map<string, string>();
      for (const m of c.volumeMounts) {
        const v = pod.volumes.find((x: Manifest) => x.name === m.name);
        for (const i of v.secret?.items ?? []) files.set(path.posix.join(m.mountPath, i.path), i.key);
      }
      const env = new Map<string, string>(c.env.map((e: Manifest) => [e.name, e.value]));
      for (const name of ['IBEX_CONTEXT_AUTH_TOKENS_FILE', 'IBEX_CONTEXT_TLS_CERT', 'IBEX_CONTEXT_TLS_KEY']) {
        expect(files.has(env.get(name)!), `${name}=${env.get(name)}`).toBe(true);
      }
      if (overlay.startsWith('postgres')) {
        const url = new URL(
          example.stringData['postgres-url'].replace('<password>', 'pw').replace('<db host>', 'db'),
        );
        expect(url.searchParams.get('sslmode')).toBe('verify-full');
        expect(files.get(url.searchParams.get('sslrootcert')!)).toBe('postgres-ca.crt');
      } else {
        expect(env.has('IBEX_CONTEXT_POSTGRES_URL')).toBe(false);
      }
      expect(env.has('IBEX_CONTEXT_MEMORY_BASE_URL')).toBe(overlay === 'memory-redis');
    });

    it('through PgBouncer: transaction-pooler mode on, LISTEN on a direct URL; never elsewhere', () => {
      const dep = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === 'ibex-context')!;
      const env: Manifest[] = dep.spec.template.spec.containers[0].env;
      const pooler = env.find((e) => e.name === 'IBEX_CONTEXT_POSTGRES_TRANSACTION_POOLER');
      const listen = env.find((e) => e.name === 'IBEX_CONTEXT_POSTGRES_LISTEN_URL');
      if (overlay === 'postgres-pgbouncer') {
        expect(pooler?.value).toBe('true');
        expect(listen?.valueFrom?.secretKeyRef?.key).toBe('postgres-listen-url');
      } else {
        expect(pooler).toBeUndefined();
        expect(listen).toBeUndefined();
      }
    });

    it.skipIf(!kubectl)('`kubectl kustomize` renders the same objects', () => {
      const r = spawnSync('kubectl', ['kustomize', path.join(K8S, 'overlays', overlay)], {
        encoding: 'utf8',
      });
      expect(r.status, r.stderr).toBe(0);
      const theirs = parseAll(r.stdout);
      const key = (d: Manifest) => `${d.kind}/${d.metadata.name}`;
      expect(theirs.map(key).sort()).toEqual(docs.map(key).sort());
      for (const d of theirs) expect(d, key(d)).toEqual(docs.find((x) => key(x) === key(d)));
    });
  });

  it('runs as the numeric UID/GID the Dockerfile sets', () => {
    const dep = render(path.join(K8S, 'overlays/embedded')).find((d) => d.kind === 'Deployment')!;
    const user = /^USER (\d+):(\d+)$/m.exec(docker);
    expect(user).not.toBeNull();
    expect(dep.spec.template.spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: Number(user![1]),
      runAsGroup: Number(user![2]),
    });
    expect(docker).toContain(`--uid ${user![1]} --gid ${user![2]}`);
  });

  it('targets a CPU share below the first step bench:load found past p99 20 ms or with errors', () => {
    const load_ = JSON.parse(readFileSync(path.join(ROOT, 'bench/results/load.json'), 'utf8')) as {
      steps: { rate: number; errors: number; p99_ms: number; server: { cpu_cores: { total: number } } }[];
    };
    const firstError = load_.steps
      .filter((s) => s.errors > 0 || s.p99_ms > 20)
      .sort((a, b) => a.rate - b.rate)[0]!;
    const requested = 2;
    const hpa = parse(readFileSync(path.join(K8S, 'base/hpa.yaml'), 'utf8'));
    const target = hpa.spec.metrics[0].resource.target.averageUtilization as number;
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
      /HEALTHCHECK[^\n]*\\\n\s+CMD \["node", "dist\/src\/tools\/cli\/main\.js", "healthcheck", "--local"\]/,
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
