/**
 * bench:quality — are the right memories in the context? Evidence recall on LoCoMo (evaluation data, read
 * from its directory, never copied into the repository), asked of the running service over real gRPC.
 *
 * 1. Ingests LoCoMo into a fresh embedded store (as `ingest --locomo` does), and with `--pg-url` into a
 *    fresh schema of that PostgreSQL database too.
 * 2. Starts the service on that store (on PostgreSQL with `--pg-url`; the baselines stay the embedded
 *    store's) (a child process, loopback) for each score configuration.
 * 3. For every QA item of categories 1–4 with evidence (every k-th with `--every k`), calls AssembleContext
 *    with query = the question and available_tokens = the memory budget (0 = unlimited), one call at a time
 *    so answers are L0; a non-L0 answer is retried and, if still degraded, counted apart, never scored.
 * 4. Evidence recall = share of evidence turns whose memory is `included`; all-evidence rate = share of
 *    items with every evidence turn included; overall and per category.
 * 5. Beside it, two baselines from the same store at the service's per-memory cost (a `\n` plus the
 *    wrapped block, estimated with the model's estimate kind): the most recent memories trimmed to the
 *    budget, and FTS5 bm25 hits in rank order, first-fit concatenated.
 *
 * Usage: node dist/bench/quality.js [--dataset DIR] [--every K] [--budgets 500,1000,2000,4000,0]
 *   [--configs interim,composite,relevance,grid] [--ports 20010,20011] [--env NAME=VALUE] [--pg-url URL] [--out quality]
 * Retrieval timeouts are raised for the run (quality, not latency, is measured here; bench:load is the
 * latency bench), so that a shared machine's hiccups do not turn answers into L1/L2.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { CapabilityCatalog } from '../src/budget/catalog.js';
import { memoryBlock } from '../src/format/formatter.js';
import { PgStore } from '../src/retrieval/postgres/pg-store.js';
import { EmbeddedStore } from '../src/retrieval/sqlite/embedded-store.js';
import { estimateTokens } from '../src/text/estimate.js';
import { createContextClient } from '../src/tools/client/context-client.js';
import { LOCOMO_ORG_ID, type LocomoConversation, readLocomo } from '../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../src/tools/locomo/ingest.js';
import { machineInfo } from './lib/bench-run.js';
import {
  addItem,
  emptyTally,
  firstFit,
  type RecallTally,
  recallFigures,
  trimToBudget,
} from './lib/evidence-recall.js';
import { writeResult } from './lib/paths.js';
import { startServiceProcess } from './lib/service-process.js';

const CATEGORY_NAMES: Record<number, string> = {
  1: 'multi-hop',
  2: 'temporal',
  3: 'open-domain',
  4: 'single-hop',
};
const MODEL = 'claude-sonnet-4-5';
/** Nonce letters of the default 16-byte nonce (contract.md §6: floor((4n+2)/3)). */
const NONCE_LETTERS = 22;

/** One score configuration of the service. */
interface QualityConfig {
  name: string;
  env: Record<string, string>;
  weights?: { recency: number; relevance: number; usefulness: number; confidence: number };
}

const CONFIGS: Record<string, QualityConfig> = {
  interim: { name: 'interim_v1', env: { IBEX_CONTEXT_SCORE_SCHEMA: 'interim_v1' } },
  composite: { name: 'composite_v1 (default weights)', env: { IBEX_CONTEXT_SCORE_SCHEMA: 'composite_v1' } },
  relevance: {
    name: 'composite_v1 (relevance only)',
    env: { IBEX_CONTEXT_SCORE_SCHEMA: 'composite_v1' },
    weights: { recency: 0, relevance: 1, usefulness: 0, confidence: 0 },
  },
};

/** The per-request weight grid tried with `--grid` (recency, relevance, usefulness, confidence). */
const GRID: [number, number, number, number][] = [
  [0, 1, 0, 0],
  [0.05, 0.9, 0, 0.05],
  [0.1, 0.8, 0, 0.1],
  [0.1, 0.7, 0.1, 0.1],
  [0.2, 0.7, 0, 0.1],
  [0.25, 0.4, 0.2, 0.1],
  [0.3, 0.6, 0, 0.1],
];

interface Args {
  dataset: string;
  every: number;
  budgets: number[];
  configs: QualityConfig[];
  ports: [number, number] | undefined;
  out: string;
  /** Extra service settings (`--env NAME=VALUE`, repeatable). */
  env: Record<string, string>;
  /** `--pg-url`: the service reads a PostgreSQL store (a fresh schema, dropped afterwards). */
  pgUrl: string | undefined;
}

const PG_SCHEMA = 'ibex_bench_quality';

function parseArgs(argv: string[]): Args {
  const args: Args = {
    dataset: '/work/shared/datasets/locomo10',
    every: 1,
    budgets: [500, 1000, 2000, 4000, 0],
    configs: [CONFIGS.interim!, CONFIGS.composite!, CONFIGS.relevance!],
    ports: undefined,
    out: 'quality',
    env: {},
    pgUrl: undefined,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--dataset') args.dataset = value;
    else if (flag === '--every') args.every = Math.max(1, Number.parseInt(value, 10));
    else if (flag === '--budgets') args.budgets = value.split(',').map(Number);
    else if (flag === '--out') args.out = value;
    else if (flag === '--pg-url') args.pgUrl = value;
    else if (flag === '--env') {
      const at = value.indexOf('=');
      if (at < 1) throw new Error('--env needs NAME=VALUE');
      args.env[value.slice(0, at)] = value.slice(at + 1);
    } else if (flag === '--ports') args.ports = value.split(',').map(Number) as [number, number];
    else if (flag === '--configs') {
      args.configs = value
        .split(',')
        .map((name) => {
          const c = CONFIGS[name];
          if (c) return c;
          if (name === 'grid') return null;
          throw new Error(`unknown config ${name}`);
        })
        .filter((c): c is QualityConfig => c !== null);
      if (value.split(',').includes('grid')) {
        for (const [rec, rel, use, conf] of GRID) {
          args.configs.push({
            name: `composite_v1 weights rec ${rec} rel ${rel} use ${use} conf ${conf}`,
            env: { IBEX_CONTEXT_SCORE_SCHEMA: 'composite_v1' },
            weights: { recency: rec, relevance: rel, usefulness: use, confidence: conf },
          });
        }
      }
    } else throw new Error(`unknown flag ${flag}`);
  }
  return args;
}

interface Question {
  conv: LocomoConversation;
  question: string;
  category: number;
  evidence: string[];
}

/** QA items of categories 1–4 whose evidence names turns of the store, as memory ids. */
function questions(convs: readonly LocomoConversation[], every: number): Question[] {
  const out: Question[] = [];
  for (const conv of convs) {
    const byDia = new Map<string, string>();
    for (const s of conv.sessions) for (const t of s.turns) byDia.set(t.diaId, t.memoryId);
    for (const qa of conv.qa) {
      const category = qa.category ?? 0;
      if (category < 1 || category > 4) continue;
      const ids = new Set<string>();
      for (const e of qa.evidence) {
        for (const part of e.split(/[;,\s]+/)) {
          const id = byDia.get(part.trim());
          if (id !== undefined) ids.add(id);
        }
      }
      if (ids.size === 0) continue;
      out.push({ conv, question: qa.question, category, evidence: [...ids] });
    }
  }
  return out.filter((_, i) => i % every === 0);
}

type Cells = Map<string, RecallTally>;

function tallyOf(cells: Cells, budget: number, category: number): RecallTally[] {
  const get = (key: string) => {
    let t = cells.get(key);
    if (!t) {
      t = emptyTally();
      cells.set(key, t);
    }
    return t;
  };
  return [get(`${budget}|all`), get(`${budget}|${category}`)];
}

function figures(cells: Cells, budgets: readonly number[]) {
  return budgets.map((budget) => ({
    budget: budget === 0 ? 'unlimited' : budget,
    overall: recallFigures(cells.get(`${budget}|all`) ?? emptyTally()),
    by_category: Object.fromEntries(
      Object.entries(CATEGORY_NAMES).map(([c, name]) => [
        name,
        recallFigures(cells.get(`${budget}|${c}`) ?? emptyTally()),
      ]),
    ),
  }));
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const machine = machineInfo();
  const convs = await readLocomo(args.dataset);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-quality-'));
  const db = path.join(dir, 'quality.db');
  const store = EmbeddedStore.open(db);
  const storeEnv: Record<string, string> = {};
  try {
    await ingestLocomo(store, convs, LOCOMO_ORG_ID, { db });
    if (args.pgUrl !== undefined) {
      await dropPgSchema(args.pgUrl);
      const pgStore = await PgStore.open({ url: args.pgUrl, schema: PG_SCHEMA, poolMax: 2 });
      try {
        await ingestLocomo(pgStore, convs, LOCOMO_ORG_ID, { db: `postgres:${PG_SCHEMA}` });
        await pgStore.finishImport();
      } finally {
        await pgStore.close();
      }
      storeEnv.IBEX_CONTEXT_POSTGRES_URL = args.pgUrl;
      storeEnv.IBEX_CONTEXT_POSTGRES_SCHEMA = PG_SCHEMA;
    }
    const items = questions(convs, args.every);
    const kind = CapabilityCatalog.create().resolve(MODEL).policy.estimate_kind;
    const nonce = 'x'.repeat(NONCE_LETTERS);

    // Baselines, from the store itself.
    const costs = new Map<string, number>();
    const recent = new Map<string, string[]>();
    for (const conv of convs) {
      const rows = store.hot(LOCOMO_ORG_ID, conv.agentId, { limit: 100_000 });
      for (const r of rows) {
        const m = r.memory;
        costs.set(
          m.id,
          estimateTokens(
            `\n${memoryBlock({ memory_id: m.id, category: m.category, content: m.content ?? '' }, nonce)}`,
            kind,
          ),
        );
      }
      recent.set(
        conv.agentId,
        rows.map((r) => r.memory.id),
      );
    }
    const cost = (id: string) => costs.get(id) ?? 0;
    const budgetOf = (b: number) => (b === 0 ? Number.POSITIVE_INFINITY : b);
    const recentCells: Cells = new Map();
    const bm25Cells: Cells = new Map();
    for (const q of items) {
      const hits = store
        .search(LOCOMO_ORG_ID, q.conv.agentId, q.question, { limit: 100_000 })
        .map((h) => h.memory.id);
      for (const b of args.budgets) {
        const r = trimToBudget(recent.get(q.conv.agentId)!, cost, budgetOf(b));
        const f = firstFit(hits, cost, budgetOf(b));
        for (const t of tallyOf(recentCells, b, q.category)) addItem(t, q.evidence, r);
        for (const t of tallyOf(bm25Cells, b, q.category)) addItem(t, q.evidence, f);
      }
    }

    const services: unknown[] = [];
    for (const config of args.configs) {
      const started = Date.now();
      const service = await startServiceProcess({
        db,
        ports: args.ports,
        env: {
          ...config.env,
          IBEX_CONTEXT_TIMEOUT: '500',
          IBEX_CONTEXT_DEADLINE_MS: '500',
          IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '200',
          IBEX_CONTEXT_HOT_TIMEOUT_MS: '400',
          IBEX_CONTEXT_COLD_TIMEOUT_MS: '500',
          ...storeEnv,
          ...args.env,
        },
      });
      const client = createContextClient({ addr: service.grpcAddr });
      const cells: Cells = new Map();
      let degraded = 0;
      let failed = 0;
      let schema = '';
      const included = { memories: 0, calls: 0 };
      try {
        await client.waitForReady(10_000);
        for (const q of items) {
          for (const b of args.budgets) {
            const request = {
              org_id: LOCOMO_ORG_ID,
              agent_id: q.conv.agentId,
              query: q.question,
              model: MODEL,
              available_tokens: b,
              ...(config.weights
                ? {
                    options: {
                      recency_weight: config.weights.recency,
                      relevance_weight: config.weights.relevance,
                      usefulness_weight: config.weights.usefulness,
                      confidence_weight: config.weights.confidence,
                    },
                  }
                : {}),
            };
            let level = '';
            let ids: Set<string> | null = null;
            for (let attempt = 0; attempt < 3 && level !== 'L0'; attempt++) {
              const out = await client.assemble(request, { deadlineMs: 5000 });
              if (out.response === null) {
                level = `status ${out.status.code}`;
                continue;
              }
              level = out.response.degradation?.level ?? '';
              schema = out.response.score_schema;
              ids = new Set(
                out.response.memories_used.filter((m) => m.exclusion === 'included').map((m) => m.memory_id),
              );
            }
            if (level !== 'L0' || ids === null) {
              if (level.startsWith('status')) failed++;
              else degraded++;
              continue;
            }
            included.memories += ids.size;
            included.calls++;
            for (const t of tallyOf(cells, b, q.category)) addItem(t, q.evidence, ids);
          }
        }
      } finally {
        client.close();
        await service.stop();
      }
      const result = {
        config: config.name,
        score_schema: schema,
        weights: config.weights ?? null,
        degraded_not_counted: degraded,
        failed_not_counted: failed,
        mean_included_memories:
          included.calls === 0 ? 0 : Math.round((10 * included.memories) / included.calls) / 10,
        seconds: Math.round((Date.now() - started) / 1000),
        budgets: figures(cells, args.budgets),
      };
      services.push(result);
      printTable(
        config.name,
        result.budgets,
        figures(recentCells, args.budgets),
        figures(bm25Cells, args.budgets),
      );
      if (degraded + failed > 0) console.log(`  not counted: ${degraded} degraded, ${failed} failed`);
    }
    const file = writeResult(args.out, {
      note:
        `Evidence recall on LoCoMo (QA categories 1–4 with evidence), service over gRPC on the ${args.pgUrl === undefined ? 'embedded' : 'PostgreSQL'} store, ` +
        'one call at a time, L0 answers only. Taken on a shared 2-core machine (recall does not depend on speed).',
      store: args.pgUrl === undefined ? 'embedded' : 'postgres',
      generated_at: new Date().toISOString(),
      node: process.version,
      machine,
      dataset: args.dataset,
      every: args.every,
      service_env: args.env,
      items: items.length,
      model: MODEL,
      baselines: {
        recent_only: figures(recentCells, args.budgets),
        bm25_first_fit: figures(bm25Cells, args.budgets),
      },
      service: services,
    });
    console.log(`wrote ${file}`);
  } finally {
    store.close();
    rmSync(dir, { recursive: true, force: true });
    if (args.pgUrl !== undefined) await dropPgSchema(args.pgUrl);
  }
}

async function dropPgSchema(url: string): Promise<void> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`DROP SCHEMA IF EXISTS ${PG_SCHEMA} CASCADE`);
  } finally {
    await admin.end();
  }
}

type Figures = ReturnType<typeof figures>;

function printTable(name: string, service: Figures, recent: Figures, bm25: Figures): void {
  console.log(`\n${name}: evidence recall % (all-evidence %)`);
  console.log('budget      service        recent-only    bm25 first-fit');
  const cell = (f: Figures[number]['overall']) =>
    `${f.evidence_recall_pct ?? '-'} (${f.all_evidence_pct ?? '-'})`.padEnd(15);
  for (let i = 0; i < service.length; i++) {
    console.log(
      `${String(service[i]!.budget).padEnd(12)}${cell(service[i]!.overall)}${cell(recent[i]!.overall)}${cell(bm25[i]!.overall)}`,
    );
  }
  const at2000 = service.findIndex((s) => s.budget === 2000);
  if (at2000 >= 0) {
    for (const c of Object.values(CATEGORY_NAMES)) {
      console.log(
        `  2000 ${c.padEnd(12)}${cell(service[at2000]!.by_category[c]!)}${cell(recent[at2000]!.by_category[c]!)}${cell(bm25[at2000]!.by_category[c]!)}`,
      );
    }
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
