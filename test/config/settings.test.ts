import { describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import { parseTimeoutMs } from '../../src/config/timeout.js';

describe('parseTimeoutMs (contract.md §3)', () => {
  it.each([
    ['45', 45],
    [' 45 MS ', 45],
    ['0.05s', 50],
    ['1S', 1000],
    ['12.5', 12.5],
  ] as const)('%j → %d ms', (text, ms) => {
    expect(parseTimeoutMs(text)).toBe(ms);
  });

  it('takes numbers as milliseconds', () => {
    expect(parseTimeoutMs(40)).toBe(40);
  });

  it.each(['45m', '45us', '', '0', '-5', 'nan', 'inf', '1e999', 's', '5 5'])('rejects %j', (text) => {
    expect(() => parseTimeoutMs(text)).toThrow(/invalid timeout/);
  });
});

describe('loadSettings', () => {
  it('has the contract.md §3 defaults', () => {
    const s = loadSettings({});
    expect(s).toMatchObject({
      timeoutMs: 45,
      deadlineMs: 40,
      wallMs: 40,
      directiveTimeoutMs: 5,
      hotTimeoutMs: 15,
      coldTimeoutMs: 45,
      memoryBaseUrl: '',
      redisUrl: '',
      grpcAddr: '127.0.0.1:9092',
      adminAddr: '127.0.0.1:9464',
      dpCellCeiling: 437_570,
      maxConsecutiveSkips: 5,
      nonceBytes: 16,
    });
  });

  it('lets the first alias win and computes the effective wall', () => {
    const s = loadSettings({
      IBEX_CONTEXT_TIMEOUT: '0.03s',
      IBEX_CONTEXT_TIMEOUT_MS: '999',
      IBEX_CONTEXT_MEMORY_BASE_URL: 'http://127.0.0.1:1/',
      IBEX_CONTEXT_MEMORY_API_TOKEN: 't',
    });
    expect(s.timeoutMs).toBe(30);
    expect(s.wallMs).toBe(30);
    expect(s.memoryBaseUrl).toBe('http://127.0.0.1:1');
  });

  it('reads no bare alias: REDIS_URL / MEMORY_* exported for other tools leave the stores embedded', () => {
    const s = loadSettings({
      REDIS_URL: 'redis://127.0.0.1:6379',
      MEMORY_BASE_URL: 'http://127.0.0.1:1/',
      MEMORY_API_TOKEN: 't',
    });
    expect(s.redisUrl).toBe('');
    expect(s.memoryBaseUrl).toBe('');
    expect(s.memoryApiToken).toBe('');
  });

  it.each([
    ['IBEX_CONTEXT_DEADLINE_MS', '45m'],
    ['IBEX_CONTEXT_HOT_TIMEOUT_MS', '0'],
    ['IBEX_CONTEXT_PACKER_DP_CELL_CEILING', '0'],
    ['IBEX_CONTEXT_PACKER_MAX_CONSECUTIVE_SKIPS', '-1'],
    ['IBEX_CONTEXT_FORMATTER_NONCE_BYTES', '65'],
    ['IBEX_CONTEXT_GRPC_ADDR', 'nowhere'],
    ['IBEX_CONTEXT_POOL_MAX_THREADS', 'two'],
  ])('stops start-up naming %s for %j', (name, value) => {
    expect(() => loadSettings({ [name]: value })).toThrow(new RegExp(`^${name}: `));
  });

  it('requires the memory token when the memory URL is set', () => {
    expect(() => loadSettings({ IBEX_CONTEXT_MEMORY_BASE_URL: 'http://127.0.0.1:8088' })).toThrow(
      /^IBEX_CONTEXT_MEMORY_API_TOKEN: required/,
    );
  });
});

describe('IBEX_CONTEXT_MAX_MEMORY_CHARS', () => {
  it('defaults to 65,536 code points, takes an integer ≥ 1, and names itself when invalid', () => {
    expect(loadSettings({}).maxMemoryChars).toBe(65_536);
    expect(loadSettings({ IBEX_CONTEXT_MAX_MEMORY_CHARS: '1000' }).maxMemoryChars).toBe(1000);
    for (const bad of ['0', '-1', '1.5', 'lots', '16777217'])
      expect(() => loadSettings({ IBEX_CONTEXT_MAX_MEMORY_CHARS: bad })).toThrow(
        /IBEX_CONTEXT_MAX_MEMORY_CHARS/,
      );
  });
});
