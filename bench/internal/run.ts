/**
 * `npm run bench:internal -- <name> [flags]`: runs one of the investigation benches in this folder (how a
 * figure in docs/design/ was found: A/B of builds, driver cost, GC and scheduler traces, floors). They are
 * not product benches: their flags and output change with the question asked. `--help` after the name
 * prints the bench's own usage.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** Investigation name → its entry in this folder (compiled), or a shell script beside its source. */
export const INVESTIGATIONS: Readonly<Record<string, string>> = {
  ab: 'ab.js',
  driver: 'driver.js',
  'early-decision': 'early-decision.js',
  floor: 'floor.js',
  'gc-trace': 'gc-trace.js',
  'heavy-gc': 'heavy-gc.js',
  idle: 'idle-wakeups.sh',
  'memory-log': 'memory-log.js',
  'pool-sweep': 'pool-sweep.js',
  'replot-load': 'replot-load.js',
  'sched-trace': 'sched-trace.js',
  wall: 'wall.js',
};

const USAGE = `usage: npm run bench:internal -- <name> [flags]
  names: ${Object.keys(INVESTIGATIONS).join(', ')}
  idle takes a port base (default 19510): the service listens on it and the next port`;

async function main(): Promise<void> {
  const [name, ...rest] = process.argv.slice(2);
  const entry = name === undefined ? undefined : INVESTIGATIONS[name];
  if (entry === undefined) {
    if (name === '--help') console.log(USAGE);
    else console.error(name === undefined ? USAGE : `unknown investigation '${name}'\n${USAGE}`);
    process.exitCode = name === '--help' ? 0 : 2;
    return;
  }
  if (entry.endsWith('.sh')) {
    // The script sits beside the sources (bench/internal/), not in dist/.
    const script = path.join(HERE, '../../../bench/internal', entry);
    execFileSync('bash', [script, rest[0] ?? '19510'], { stdio: 'inherit' });
    return;
  }
  const file = path.join(HERE, entry);
  // Each bench reads process.argv.slice(2) as its own flags, as when run directly.
  process.argv = [process.argv[0]!, file, ...rest];
  await import(pathToFileURL(file).href);
}

await main();
