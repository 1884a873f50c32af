// Closed-loop scheduler of `ibex-context load`: `pipelining` calls in flight per connection.
import { performance } from 'node:perf_hooks';
import type { LoadRun } from './load-run.js';
import type { LoadPhases } from './load-types.js';

export interface ClosedLoopSettings extends LoadPhases {
  connections: number;
  pipelining: number;
}

/** Starts `pipelining` call chains per connection until `endAt` or `maxRequests`; returns a canceller. */
export function closedLoop(run: LoadRun, s: ClosedLoopSettings): () => void {
  const next = (conn: number) => {
    if (run.stopped) return;
    const now = performance.now();
    if (now >= s.endAt) {
      run.stop('duration');
      return;
    }
    const measured = now >= s.measureStart;
    if (measured && run.recorder.requests.sent >= s.maxRequests) {
      run.stop('max_requests');
      return;
    }
    run.send(conn, now, measured, chains[conn]);
  };
  // One continuation per connection, made once: not a closure per call.
  const chains = Array.from({ length: s.connections }, (_, c) => () => next(c));
  // Chains only move on answers; this ends the run on time even if every call hangs.
  const endTimer = setTimeout(() => run.stop('duration'), s.endAt - performance.now());
  for (let c = 0; c < s.connections; c++) for (let j = 0; j < s.pipelining; j++) next(c);
  return () => clearTimeout(endTimer);
}
