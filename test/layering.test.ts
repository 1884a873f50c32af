import { describe, expect, it } from 'vitest';
import { importGraph, LAYERS, layerOf, layerViolations } from './helpers/layering.js';

describe('layering of src/ and workers/', () => {
  it('has no import cycle and no import up the layer order', async () => {
    const { graph, cycles } = await importGraph(['src', 'workers'], process.cwd());
    expect(Object.keys(graph).length).toBeGreaterThan(100);
    expect(cycles).toEqual([]);
    expect(layerViolations(graph)).toEqual([]);
  });
});

describe('layerViolations', () => {
  it('reports an import from a lower layer to a higher one, not the other way', () => {
    expect(layerOf('src/util/clock.ts')).toBe(0);
    expect(layerOf('src/tools/cli/main.ts')).toBe(LAYERS.length - 1);
    expect(layerViolations({ 'src/request/assemble.ts': ['src/util/clock.ts'] })).toEqual([]);
    expect(layerViolations({ 'src/util/clock.ts': ['src/request/assemble.ts'] })).toEqual([
      'src/util/clock.ts -> src/request/assemble.ts (up: src/util < src/request)',
    ]);
  });

  it('reports imports between sibling retrieval backends and files outside every layer', () => {
    expect(
      layerViolations({
        'src/retrieval/postgres/pg-store.ts': [
          'src/retrieval/sqlite/embedded-store.ts',
          'src/retrieval/ports.ts',
        ],
        'src/somewhere.ts': [],
        'src/app/service.ts': ['src/nowhere/x.ts'],
      }),
    ).toEqual([
      'src/app/service.ts -> src/nowhere/x.ts (outside the declared layers)',
      'src/retrieval/postgres/pg-store.ts -> src/retrieval/sqlite/embedded-store.ts (sibling folders)',
      'src/somewhere.ts (outside the declared layers)',
    ]);
  });

  it('lets folders of one layer import each other', () => {
    expect(layerViolations({ 'src/text/escape.ts': ['src/wire/errors.ts'] })).toEqual([]);
    expect(layerViolations({ 'src/wire/errors.ts': ['src/text/escape.ts'] })).toEqual([]);
  });
});
