/**
 * The service's node flags (src/config/node-flags.ts): every way the project starts the service gives them,
 * and `serve` can tell when they are missing.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { missingServiceNodeFlags, SERVICE_NODE_FLAGS } from '../../src/config/node-flags.js';
import { projectRoot } from '../../src/pool/worker-file.js';

const read = (file: string) => readFileSync(`${projectRoot()}/${file}`, 'utf8');

describe('service node flags', () => {
  it('are given by npm start and by the Dockerfile entrypoint, before the script', () => {
    const start: string = JSON.parse(read('package.json')).scripts.start;
    expect(start).toBe(`exec node ${SERVICE_NODE_FLAGS.join(' ')} dist/src/tools/cli/main.js serve`);
    const entrypoint = read('Dockerfile')
      .split('\n')
      .find((line) => line.startsWith('ENTRYPOINT'));
    expect(JSON.parse(entrypoint!.slice('ENTRYPOINT'.length))).toEqual([
      'node',
      ...SERVICE_NODE_FLAGS,
      'dist/src/tools/cli/main.js',
    ]);
  });

  it('are missing by name, whatever value or spelling (_ for -) was given', () => {
    const pretenuring = '--no-allocation-site-pretenuring';
    expect(missingServiceNodeFlags([], '')).toEqual([
      '--initial-old-space-size=128',
      '--v8-pool-size=0',
      pretenuring,
    ]);
    expect(
      missingServiceNodeFlags(['--inspect', '--max-old-space-size=512', '--v8-pool-size=2', pretenuring], ''),
    ).toEqual(['--initial-old-space-size=128']);
    expect(missingServiceNodeFlags(['--initial-old-space-size=256'], '')).toEqual([
      '--v8-pool-size=0',
      pretenuring,
    ]);
    expect(
      missingServiceNodeFlags(
        ['--initial_old_space_size=128', '--v8_pool_size=1', '--no_allocation_site_pretenuring'],
        '',
      ),
    ).toEqual([]);
  });

  it('count what NODE_OPTIONS gives (Node accepts --v8-pool-size there)', () => {
    const given = ['--initial-old-space-size=128', '--no-allocation-site-pretenuring'];
    expect(missingServiceNodeFlags(given, '--v8-pool-size=0')).toEqual([]);
    expect(
      missingServiceNodeFlags(
        ['--no-allocation-site-pretenuring'],
        ' --max-old-space-size=512  --v8-pool-size=2 ',
      ),
    ).toEqual(['--initial-old-space-size=128']);
    expect(missingServiceNodeFlags(given, '')).toEqual(['--v8-pool-size=0']);
  });
});
