#!/usr/bin/env node
// `ibex-context <command>`. Commands load on demand, so `estimate` does not load gRPC.
import { JSON_COMMANDS, type JsonCommand } from './json-commands.js';

const COMMANDS: Record<
  string,
  { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number> }> }
> = {
  serve: {
    summary: 'run the gRPC service (embedded store unless URLs are set)',
    load: () => import('./commands/serve.js'),
  },
  ingest: {
    summary: 'load LoCoMo conversations into the store (embedded, or PostgreSQL when its URL is set)',
    load: () => import('./commands/ingest-cli.js'),
  },
  replay: {
    summary: 'replay LoCoMo turns against a running service',
    load: () => import('./commands/replay.js'),
  },
  assemble: { summary: 'one AssembleContext call, printed', load: () => import('./commands/assemble.js') },
  load: { summary: 'autocannon-style gRPC load driver', load: () => import('./commands/load.js') },
  'memory-server': {
    summary: 'serve the embedded store over the memory HTTP wire (fault injection)',
    load: () => import('./commands/memory-server.js'),
  },
  healthcheck: {
    summary: 'exit 0 when the service answers SERVING',
    load: () => import('./commands/healthcheck.js'),
  },
};

function usage(): string {
  const lines = ['usage: ibex-context <command> [options]', '', 'commands:'];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(14)} ${c.summary}`);
  lines.push(
    `  ${JSON_COMMANDS.join(' | ')}  [--jsonl]  JSON on stdin → result JSON on stdout (contract.md §13)`,
  );
  return lines.join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    console.log(usage());
    return command === undefined ? 2 : 0;
  }
  if ((JSON_COMMANDS as readonly string[]).includes(command)) {
    const { runJsonCli } = await import('./json-cli.js');
    return runJsonCli(command as JsonCommand, rest);
  }
  const entry = COMMANDS[command];
  if (!entry) {
    console.error(`unknown command '${command}'\n${usage()}`);
    return 2;
  }
  const mod = await entry.load();
  return mod.run(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exitCode = 1;
  },
);
