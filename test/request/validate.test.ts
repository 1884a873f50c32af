import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { exceedsCodePoints, validateAssembleRequest } from '../../src/request/validate.js';
import { IbexError } from '../../src/wire/errors.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const base = (): AssembleContextRequestInput => ({ org_id: ORG, agent_id: AGENT, model: 'gpt-4o' });

function rejection(req: AssembleContextRequestInput): { message: string; field: string | undefined } {
  try {
    validateAssembleRequest(req);
  } catch (err) {
    expect(err).toBeInstanceOf(IbexError);
    const e = err as IbexError;
    expect(e.code).toBe('IBEX_ERR_INVALID_ARGUMENT');
    return { message: e.message, field: e.field };
  }
  throw new Error('expected a rejection');
}

describe('exceedsCodePoints', () => {
  it('agrees with counting code points via for…of', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), fc.nat(60), (s, limit) => {
        expect(exceedsCodePoints(s, limit)).toBe([...s].length > limit);
      }),
    );
  });

  it('counts a lone surrogate as one code point', () => {
    expect(exceedsCodePoints('\ud83d', 1)).toBe(false);
    expect(exceedsCodePoints('\ud83d\ud83d', 1)).toBe(true);
    expect(exceedsCodePoints('\ude00\ud83d', 2)).toBe(false);
  });
});

describe('validateAssembleRequest: contract.md §11 order', () => {
  it('checks org_id, then agent_id, then model, then lengths, then max_memories', () => {
    const everythingWrong: AssembleContextRequestInput = {
      org_id: '',
      agent_id: 'nope',
      model: '',
      query: 'q'.repeat(8193),
      recent_messages: Array.from({ length: 101 }, () => ({
        role: 'r'.repeat(65),
        content: 'c'.repeat(32769),
      })),
      options: { max_memories: 101 },
    };
    const steps: [Partial<AssembleContextRequestInput>, string][] = [
      [{}, 'org_id is required'],
      [{ org_id: 'x' }, 'org_id must be a UUID'],
      [{ org_id: ORG, agent_id: ' ' }, 'agent_id is required'],
      [{ agent_id: 'nope' }, 'agent_id must be a UUID'],
      [{ agent_id: AGENT }, 'model is required'],
      [{ model: 'm'.repeat(257) }, 'model exceeds 256 characters'],
      [{ model: 'gpt-4o' }, 'query exceeds 8192 characters'],
      [{ query: '' }, 'recent_messages exceeds 100 items'],
      [
        {
          recent_messages: [
            { role: 'user', content: 'c'.repeat(32769) },
            { role: 'r'.repeat(65), content: '' },
          ],
        },
        'message.role exceeds 64 characters',
      ],
      [
        { recent_messages: [{ role: 'user', content: 'c'.repeat(32769) }] },
        'message.content exceeds 32768 characters',
      ],
      [{ recent_messages: [] }, 'max_memories must be in 0..100, got 101'],
    ];
    let req = everythingWrong;
    for (const [patch, message] of steps) {
      req = { ...req, ...patch };
      expect(rejection(req).message).toBe(message);
    }
    req = { ...req, options: { max_memories: 100 } };
    expect(validateAssembleRequest(req).maxMemories).toBe(100);
  });

  it('names the field', () => {
    expect(rejection({ ...base(), options: { max_memories: -1 } })).toEqual({
      message: 'max_memories must be in 0..100, got -1',
      field: 'max_memories',
    });
  });
});

describe('validateAssembleRequest: normalization', () => {
  it('canonicalizes UUIDs to lower case and trims ids and model', () => {
    const v = validateAssembleRequest({
      org_id: ` ${ORG.toUpperCase()} `,
      agent_id: AGENT.toUpperCase(),
      model: '  claude-opus-4-5\t',
    });
    expect(v.orgId).toBe(ORG);
    expect(v.agentId).toBe(AGENT);
    expect(v.model).toBe('claude-opus-4-5');
  });

  it('rejects UUID look-alikes', () => {
    for (const bad of [`{${ORG}}`, ORG.replaceAll('-', ''), `${ORG}0`, ORG.replace('0', 'g')]) {
      expect(rejection({ ...base(), org_id: bad }).message).toBe('org_id must be a UUID');
    }
  });

  it('counts code points, not UTF-16 units (emoji at the limit pass, one more fails)', () => {
    const e = '😀';
    expect(validateAssembleRequest({ ...base(), model: e.repeat(256) }).model).toBe(e.repeat(256));
    expect(rejection({ ...base(), model: e.repeat(257) }).message).toBe('model exceeds 256 characters');
    expect(() => validateAssembleRequest({ ...base(), query: e.repeat(8192) })).not.toThrow();
    expect(rejection({ ...base(), query: e.repeat(8193) }).message).toBe('query exceeds 8192 characters');
    expect(() =>
      validateAssembleRequest({ ...base(), recent_messages: [{ role: e.repeat(64) }] }),
    ).not.toThrow();
    expect(rejection({ ...base(), recent_messages: [{ role: e.repeat(65) }] }).message).toBe(
      'message.role exceeds 64 characters',
    );
    expect(() =>
      validateAssembleRequest({ ...base(), recent_messages: [{ content: e.repeat(32768) }] }),
    ).not.toThrow();
    expect(rejection({ ...base(), recent_messages: [{ content: e.repeat(32769) }] }).message).toBe(
      'message.content exceeds 32768 characters',
    );
  });

  it('maps options, history and the principal', () => {
    const v = validateAssembleRequest({
      ...base(),
      session_id: 's',
      query: '  raw query ',
      directive_version_id: 'dv',
      available_tokens: 900,
      recent_messages: [{ role: ' user ', content: ' hi ' }],
      options: { skip_hot_memories: true, skip_cold_memories: false, max_memories: 7 },
      request_id: 'r',
      trace_id: 't',
      span_id: 'sp',
      principal_context: {
        org_id: ORG,
        principal_id: 'p',
        issued_at: { seconds: '1700000000', nanos: 5_000_000 },
        permissions: '9223372036854775807',
      },
    });
    expect(v).toMatchObject({
      sessionId: 's',
      query: '  raw query ',
      directiveVersionId: 'dv',
      availableTokens: 900,
      recentMessages: [{ role: ' user ', content: ' hi ' }],
      skipHot: true,
      skipCold: false,
      maxMemories: 7,
      requestId: 'r',
      traceId: 't',
      spanId: 'sp',
    });
    expect(v.principal).toMatchObject({
      orgId: ORG,
      principalId: 'p',
      issuedAtMs: 1_700_000_000_005,
      expiresAtMs: null,
      permissions: '9223372036854775807',
    });
    expect(validateAssembleRequest(base()).principal).toBeUndefined();
  });
});
