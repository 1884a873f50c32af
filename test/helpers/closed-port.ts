/** A local port nothing listens on, for tests of refused connections. */
import net from 'node:net';

/**
 * A port on 127.0.0.1 that nothing listens on: one below the kernel's ephemeral range (32768–60999 on
 * Linux), found free by binding it, then released. A port-0 server of a test running in parallel is never
 * handed it while the caller dials it, as it could be an ephemeral port just released.
 */
export async function closedPort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const srv = net.createServer();
    const bound = await new Promise<boolean>((resolve) => {
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (!bound) continue;
    await new Promise<void>((resolve) => srv.close(() => resolve()));
    return port;
  }
}
