/**
 * `ibex_context_assembly_duration_seconds` and `ibex_context_assemblies_total` for every AssembleContext
 * call (contract.md §12): a server interceptor, so calls refused before the pipeline runs
 * (authentication, validation, authorization) are timed and counted too, not only successful ones.
 */

import { ServerInterceptingCall, type ServerInterceptor, status } from '@grpc/grpc-js';
import { LEVEL_HEADER } from '../wire/wire-headers.js';
import type { Metrics } from './metrics.js';

/** gRPC method path of AssembleContext (contract.md §2). */
const ASSEMBLE_PATH = '/ibex.context.v1.ContextAssemblyService/AssembleContext';

/**
 * Creates the interceptor. Labels: `level` = the answer's degradation level (`L0`/`L1`/`L2`, from the
 * `x-ibex-context-level` response metadata) or `none` when the call ended without an answer; `code` =
 * the gRPC status code name (`OK`, `INVALID_ARGUMENT`, `DEADLINE_EXCEEDED`, …; `CANCELLED` when the
 * caller went away). Duration in seconds from the call's arrival at the interceptor to its status.
 * Place it first in the server's interceptor list so it sees every refusal after it.
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
