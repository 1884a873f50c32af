/**
 * The grpc-js patches (src/grpc/patches/) read private fields and methods of one grpc-js version. package.json
 * pins that version exactly, and the installed one must be it: an upgrade has to re-read every patch.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../../bench/lib/paths.js';
import { GRPC_JS_PATCHED_VERSION } from '../../../src/grpc/patches/grpc-js-private.js';

const requireCjs = createRequire(import.meta.url);

describe('grpc-js version the patches were written against', () => {
  it('is the exact version package.json asks for', () => {
    const pkg = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    expect(pkg.dependencies['@grpc/grpc-js']).toBe(GRPC_JS_PATCHED_VERSION);
  });

  it('is the installed version', () => {
    const installed = (requireCjs('@grpc/grpc-js/package.json') as { version: string }).version;
    expect(installed).toBe(GRPC_JS_PATCHED_VERSION);
  });
});
