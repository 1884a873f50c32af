import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'bench/internal/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Pool and gRPC tests start real servers and worker threads; forks keep them isolated.
    pool: 'forks',
  },
});
