/**
 * Counters the gRPC transport keeps (its grpc-js patches) and metrics reads at scrape time. The transport
 * registers its readers here, so telemetry depends on this interface, not on the transport.
 */

/** Readers of the transport's process-wide counters. */
export interface TransportCounters {
  /** Times a large upload was paused to wait for its connection's turn. */
  uploadTurnWaits(): number;
  /** Requests decided from a prefix of their bytes. */
  requestsDecidedEarly(): number;
}

const counters: TransportCounters = { uploadTurnWaits: () => 0, requestsDecidedEarly: () => 0 };

/** Registers the transport's counter readers (each patch module registers its own at load). */
export function provideTransportCounters(readers: Partial<TransportCounters>): void {
  Object.assign(counters, readers);
}

/** The registered readers (zero until a patch module registers). */
export function transportCounters(): Readonly<TransportCounters> {
  return counters;
}

/**
 * A process-wide count the transport keeps, registered at once as the reader of counter `name`.
 *
 * @returns `add()` counts one; `read()` is the count so far (from 0, never reset).
 */
export function transportCount(name: keyof TransportCounters): { add(): void; read(): number } {
  let n = 0;
  const read = () => n;
  provideTransportCounters({ [name]: read });
  return {
    add: () => {
      n++;
    },
    read,
  };
}
