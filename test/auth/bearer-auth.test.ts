/**
 * Bearer tokens and principal_context over a real gRPC socket: who may call (UNAUTHENTICATED)
 * and for which org (PERMISSION_DENIED), with the pipeline injected so only the boundary is exercised.
 */
import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import { Metadata, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearerAuthInterceptor, UNAUTHENTICATED_DETAILS } from '../../src/auth/bearer-interceptor.js';
import { attachCaller } from '../../src/auth/caller.js';
import { parseTokenFile } from '../../src/auth/token-file.js';
import { type AssembleResult, createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import { authorizeRequest } from '../../src/request/authorize-request.js';
import { type ValidatedRequest, validateAssembleRequest } from '../../src/request/validate.js';
import { createLogger } from '../../src/telemetry/logger.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { thrownMessage } from '../helpers/auth.js';
import { createTestClient, type TestClient } from '../helpers/grpc-client.js';
import { stubResponse } from '../helpers/stub-response.js';

const ORG_A = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const ORG_B = '7c9e6679-7425-40de-944b-e07fc1f90ae7';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const OTHER_AGENT = 'f47ac10b-58cc-4372-a567-0e02b2c3d479';
const TOKEN_A = 'proxyA-9f2c1e7b4d8a6053';
const TOKEN_ANY = 'opsAny-1a2b3c4d5e6f7081';
const WRONG = 'proxyA-9f2c1e7b4d8a6054';

const TOKENS_JSON = JSON.stringify({
  tokens: [
    {
      name: 'proxy-a',
      token_sha256: createHash('sha256').update(TOKEN_A).digest('hex'),
      orgs: [ORG_A.toUpperCase()],
    },
    { name: 'ops', token: TOKEN_ANY, orgs: ['*'] },
  ],
});

const SETTINGS = { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 };

function okResult(req: ValidatedRequest): AssembleResult {
  return { response: stubResponse(req, { assembled_context: `org=${req.orgId}` }), level: 'L0' };
}

interface Harness {
  client: TestClient;
  grpc: GrpcServer;
  /** Raw log text, as it would reach stdout. */
  logText(): string;
  /** Metadata keys each pipeline call saw. */
  seen: string[][];
  stop(): Promise<void>;
}

async function start(withTokens: boolean): Promise<Harness> {
  let text = '';
  const sink = new Writable({
    write(chunk, _enc, cb) {
      text += String(chunk);
      cb();
    },
  });
  const logger = createLogger({ logLevel: 'trace' }, sink);
  const seen: string[][] = [];
  const grpc = createGrpcServer({
    assemble: async (req, ctx) => {
      seen.push(Object.keys(ctx.metadata.getMap()).sort());
      // A careless pipeline log line: must not leak the token either.
      logger.info(
        { metadata: ctx.metadata.getMap(), headers: ctx.metadata.toHttp2Headers() },
        'pipeline saw',
      );
      return okResult(req);
    },
    logger,
    settings: SETTINGS,
    interceptors: withTokens ? [bearerAuthInterceptor(parseTokenFile(TOKENS_JSON), logger)] : [],
  });
  const port = await grpc.bind('127.0.0.1:0');
  grpc.markServing();
  const client = createTestClient(`127.0.0.1:${port}`);
  return {
    client,
    grpc,
    seen,
    logText: () => text,
    stop: async () => {
      client.close();
      await grpc.drain(1000);
    },
  };
}

const request = (
  org = ORG_A,
  extra: Partial<AssembleContextRequestInput> = {},
): AssembleContextRequestInput => ({
  org_id: org,
  agent_id: AGENT,
  model: 'gpt-4o',
  ...extra,
});
/** A harness started before the enclosing describe block's tests and stopped after them. */
function harnessFor(withTokens: boolean): () => Harness {
  let h: Harness | undefined;
  beforeAll(async () => {
    h = await start(withTokens);
  });
  afterAll(async () => {
    await h?.stop();
  });
  return () => h!;
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('bearer tokens over gRPC', () => {
  const h = harnessFor(true);
  beforeEach(() => {
    h().seen.length = 0;
  });

  it.each([
    ['without a token', undefined, UNAUTHENTICATED_DETAILS.missing],
    ['for a wrong token', bearer(WRONG), UNAUTHENTICATED_DETAILS.invalid],
    ['for a Basic scheme', { authorization: `Basic ${TOKEN_A}` }, UNAUTHENTICATED_DETAILS.malformed],
    ['for a Bearer without token', { authorization: 'Bearer' }, UNAUTHENTICATED_DETAILS.malformed],
    ['for a token and more', { authorization: `Bearer ${TOKEN_A} extra` }, UNAUTHENTICATED_DETAILS.malformed],
    ['for a token without scheme', { authorization: TOKEN_A }, UNAUTHENTICATED_DETAILS.malformed],
  ])('answers UNAUTHENTICATED %s, before the pipeline runs', async (_, metadata, details) => {
    const out = await h().client.assemble(request(), metadata ? { metadata } : {});
    expect(out.status.code).toBe(status.UNAUTHENTICATED);
    expect(out.status.details).toBe(details);
    expect(h().seen).toEqual([]);
  });

  it('answers OK for a token acting for its own org (any case, any scheme case) and hides the token from the pipeline', async () => {
    const out = await h().client.assemble(request(), { metadata: bearer(TOKEN_A) });
    expect(out.status.code).toBe(status.OK);
    expect(out.response?.assembled_context).toBe(`org=${ORG_A}`);
    const upper = await h().client.assemble(request(ORG_A.toUpperCase()), {
      metadata: { authorization: `bearer   ${TOKEN_A}` },
    });
    expect(upper.status.code).toBe(status.OK);
    expect(upper.response?.assembled_context).toBe(`org=${ORG_A}`);
    expect(h().seen.length).toBe(2);
    for (const keys of h().seen) expect(keys).not.toContain('authorization');
  });

  it('answers PERMISSION_DENIED for a valid token acting for another org', async () => {
    const out = await h().client.assemble(request(ORG_B), { metadata: bearer(TOKEN_A) });
    expect(out.status.code).toBe(status.PERMISSION_DENIED);
    expect(out.status.details).toBe(`caller 'proxy-a' may not act for org_id ${ORG_B}`);
    expect(h().seen).toEqual([]);
  });

  it('lets a "*" token act for every org', async () => {
    for (const org of [ORG_A, ORG_B]) {
      const out = await h().client.assemble(request(org), { metadata: bearer(TOKEN_ANY) });
      expect(out.status.code).toBe(status.OK);
      expect(out.response?.assembled_context).toBe(`org=${org}`);
    }
  });

  it('validates before authorizing: a bad org_id with a valid token is INVALID_ARGUMENT', async () => {
    const out = await h().client.assemble(request('not-a-uuid'), { metadata: bearer(TOKEN_A) });
    expect(out.status.code).toBe(status.INVALID_ARGUMENT);
    expect(out.status.details).toBe('org_id must be a UUID');
  });

  it('checks principal_context against the request when a token is used', async () => {
    const out = await h().client.assemble(
      request(ORG_A, { principal_context: { org_id: ORG_B, agent_id: AGENT } }),
      {
        metadata: bearer(TOKEN_ANY),
      },
    );
    expect(out.status.code).toBe(status.PERMISSION_DENIED);
    expect(out.status.details).toBe('principal_context.org_id does not match org_id');
  });

  it('protects every ContextAssemblyService method and reflection, but not health', async () => {
    expect((await h().client.searchMemories({ org_id: ORG_A })).status.code).toBe(status.UNAUTHENTICATED);
    expect(
      (await h().client.searchMemories({ org_id: ORG_A }, { metadata: bearer(TOKEN_A) })).status.code,
    ).toBe(status.UNIMPLEMENTED);
    expect((await h().client.recordMemoryFeedback({})).status.code).toBe(status.UNAUTHENTICATED);
    await expect(h().client.listServices()).rejects.toMatchObject({ code: status.UNAUTHENTICATED });
    const health = await h().client.healthCheck('');
    expect(health.status.code).toBe(status.OK);
    expect(health.response?.status).toBe('SERVING');
  });

  it('never writes a token to the log, even when the pipeline logs the metadata', async () => {
    await h().client.assemble(request(), { metadata: bearer(TOKEN_A) });
    await h().client.assemble(request(ORG_B), { metadata: bearer(TOKEN_A) });
    await h().client.assemble(request(), { metadata: bearer(WRONG) });
    await h().client.assemble(request(), { metadata: { authorization: `Basic ${TOKEN_ANY}` } });
    const text = h().logText();
    expect(text).toContain('"msg":"pipeline saw"');
    expect(text).toContain('"msg":"caller not authenticated"');
    expect(text).toContain('"reason":"invalid"');
    for (const secret of [TOKEN_A, TOKEN_ANY, WRONG, 'Bearer']) expect(text).not.toContain(secret);
  });
});

describe('principal_context without authentication configured', () => {
  const h = harnessFor(false);

  it('answers PERMISSION_DENIED when its org_id or agent_id differs from the request', async () => {
    const orgMismatch = await h().client.assemble(
      request(ORG_A, { principal_context: { org_id: ORG_B, agent_id: AGENT } }),
    );
    expect(orgMismatch.status.code).toBe(status.PERMISSION_DENIED);
    expect(orgMismatch.status.details).toBe('principal_context.org_id does not match org_id');
    const agentMismatch = await h().client.assemble(
      request(ORG_A, { principal_context: { org_id: ORG_A, agent_id: OTHER_AGENT } }),
    );
    expect(agentMismatch.status.code).toBe(status.PERMISSION_DENIED);
    expect(agentMismatch.status.details).toBe('principal_context.agent_id does not match agent_id');
    const empty = await h().client.assemble(request(ORG_A, { principal_context: {} }));
    expect(empty.status.code).toBe(status.PERMISSION_DENIED);
    expect(empty.status.details).toBe('principal_context.org_id does not match org_id');
  });

  it('answers OK when it matches (case and surrounding space ignored), or is absent', async () => {
    const matching = await h().client.assemble(
      request(ORG_A, {
        principal_context: { org_id: ` ${ORG_A.toUpperCase()} `, agent_id: AGENT.toUpperCase() },
      }),
    );
    expect(matching.status.code).toBe(status.OK);
    expect((await h().client.assemble(request(ORG_B))).status.code).toBe(status.OK);
  });
});

describe('authorizeRequest', () => {
  const validated = (req: AssembleContextRequestInput) => validateAssembleRequest(req);
  const denied = (fn: () => void) => thrownMessage('IBEX_ERR_PERMISSION_DENIED', fn);

  it('passes calls with no attached caller and no principal_context', () => {
    expect(() => authorizeRequest(validated(request(ORG_B)), { metadata: new Metadata() })).not.toThrow();
  });

  it("checks the attached caller's orgs before principal_context", () => {
    const metadata = new Metadata();
    attachCaller(metadata, { name: 'proxy-a', orgs: new Set([ORG_A]) });
    expect(() => authorizeRequest(validated(request(ORG_A)), { metadata })).not.toThrow();
    expect(
      denied(() =>
        authorizeRequest(
          validated(request(ORG_B, { principal_context: { org_id: ORG_A, agent_id: AGENT } })),
          {
            metadata,
          },
        ),
      ),
    ).toBe(`caller 'proxy-a' may not act for org_id ${ORG_B}`);
  });

  it('keys the caller on the metadata object, so another call with the same headers is not authenticated', () => {
    const metadata = new Metadata();
    metadata.set('x-caller', 'proxy-a');
    attachCaller(metadata, { name: 'proxy-a', orgs: new Set([ORG_A]) });
    const copy = metadata.clone();
    expect(() => authorizeRequest(validated(request(ORG_B)), { metadata: copy })).not.toThrow();
    expect(denied(() => authorizeRequest(validated(request(ORG_B)), { metadata }))).toBe(
      `caller 'proxy-a' may not act for org_id ${ORG_B}`,
    );
  });
});
