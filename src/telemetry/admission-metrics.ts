// Admission-limit series (contract.md §10, §12), read from the limiter at scrape time.
import { Counter, Gauge, type Registry } from 'prom-client';

/** What the admission series read from the limiter at each scrape (the request path's adaptive limit). */
export interface AdmissionStateSource {
  state(): { limit: number; inFlight: number; sheds: number };
}

/** Series names (the admin endpoint's `/metrics`). */
export const ADMISSION_SERIES = {
  limit: 'ibex_context_admission_limit',
  inFlight: 'ibex_context_admission_in_flight',
  sheds: 'ibex_context_admission_shed_total',
} as const;

/** Registers the series on `registry` (a registry that already has them is left as is). */
export function registerAdmissionMetrics(registry: Registry, limiter: AdmissionStateSource): void {
  if (registry.getSingleMetric(ADMISSION_SERIES.limit)) return;
  new Gauge({
    name: ADMISSION_SERIES.limit,
    help: 'Adaptive concurrency limit of AssembleContext calls: past it a call is answered at once, L2 shed',
    registers: [registry],
    collect() {
      this.set(Math.floor(limiter.state().limit));
    },
  });
  new Gauge({
    name: ADMISSION_SERIES.inFlight,
    help: 'AssembleContext calls admitted by the adaptive limit and not yet answered',
    registers: [registry],
    collect() {
      this.set(limiter.state().inFlight);
    },
  });
  let reported = 0;
  new Counter({
    name: ADMISSION_SERIES.sheds,
    help: 'AssembleContext calls shed at arrival (answered at once with directive and history, L2 shed)',
    registers: [registry],
    collect() {
      const sheds = limiter.state().sheds;
      if (sheds > reported) this.inc(sheds - reported);
      reported = sheds;
    },
  });
}
