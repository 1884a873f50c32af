// Assembly duration and count (contract.md §12) as a server interceptor, so calls refused before the
// pipeline runs (authentication, validation, authorization) are counted too.

import { ServerInterceptingCall, type ServerInterceptor, status } from '@grpc/grpc-js';
import { LEVEL_HEADER } from '../wire/wire-headers.js';
import type { Metrics } from './metrics.js';

const ASSEMBLE_PATH = '/ibex.context.v1.ContextAssemblyService/AssembleContext';

/**
 * Labels: `level` (`L0`-`L2` from the response metadata, `none` without an answer) and `code` (gRPC status
 * name); duration in seconds from arrival. Place it first so it sees every refusal after it.
 */
export function assemblyMetricsInterceptor(
  metrics: Pick<Metrics, 'assemblyDuration' | 'assemblies'>,
): ServerInterceptor {
  return (method, call) => {
    if (method.path !== ASSEMBLE_PATH) return new ServerInterceptingCall(call);
    const arrival = performance.now();
    let level = 'none';
    let recorded = false;
    const record = (code: status) => {
      if (recorded) return;
      recorded = true;
      const labels = { level, code: status[code] ?? String(code) };
      metrics.assemblyDuration.observe(labels, (performance.now() - arrival) / 1000);
      metrics.assemblies.inc(labels);
    };
    return new ServerInterceptingCall(call, {
      start: (next) => {
        next({ onCancel: () => record(status.CANCELLED) });
      },
      sendMetadata: (md, next) => {
        const value = md.get(LEVEL_HEADER)[0];
        if (typeof value === 'string') level = value;
        next(md);
      },
      sendStatus: (st, next) => {
        record(st.code);
        next(st);
      },
    });
  };
}
