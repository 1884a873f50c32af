import { runLoad } from '../../src/tools/client/load-driver.js';
import type { LoadOptions, LoadReport } from '../../src/tools/client/load-types.js';

/**
 * The load driver, open loop: `rate` calls a second to `addr` over `connections` connections for
 * `durationS` seconds.
 *
 * @param more every other {@link runLoad} option (source, timeouts, transport, …).
 * @returns the driver's report; rejects as {@link runLoad} does.
 */
export function openLoop(
  addr: string,
  connections: number,
  rate: number,
  durationS: number,
  more: Omit<LoadOptions, 'addr' | 'connections' | 'rate' | 'durationS'> = {},
): Promise<LoadReport> {
  return runLoad({ addr, connections, rate, durationS, ...more });
}
