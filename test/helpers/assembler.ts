import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { type AssemblerDeps, createAssembler } from '../../src/request/assemble.js';
import type { AssembleFn } from '../../src/request/assemble-fn.js';
import { createLogger } from '../../src/telemetry/logger.js';

/**
 * The AssembleContext pipeline over the settings' own capability catalog, as the service builds it, with
 * test doubles for what it is given.
 *
 * @param deps everything {@link createAssembler} takes but the catalog; `logger` defaults to a silent one.
 * @returns the pipeline (see {@link createAssembler}).
 */
export function catalogAssembler(
  deps: Omit<AssemblerDeps, 'catalog' | 'logger'> & { logger?: AssemblerDeps['logger'] },
): AssembleFn {
  return createAssembler({
    ...deps,
    catalog: CapabilityCatalog.load(deps.settings.catalogFile),
    logger: deps.logger ?? createLogger({ logLevel: 'silent' }),
  });
}
