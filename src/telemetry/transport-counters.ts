// Counters the grpc-js patches keep, registered here so telemetry does not depend on the transport.

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

/** A process-wide count registered as the reader of `name`: `add()` counts one, `read()` the count so far. */
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
