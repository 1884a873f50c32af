// The LoCoMo dataset model (contract.md §4.3), every id, confidence and timestamp derived deterministically
// so an import or replay gives the same agents and memories every run. Malformed turns/QA items are skipped.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { uuidV5 } from '../../util/uuid.js';

export const LOCOMO_ORG_ID = '1b0c0e70-10c0-4c00-8a00-00000000000a';
/** UUIDv5 namespace for agent ids (name `locomo:<file stem or sample_id>`). */
export const LOCOMO_AGENT_NS = '5d2f6a1e-8c4b-4f0e-9a7d-2b1c3e4f5a60';
/** UUIDv5 namespace for memory and directive-version ids (name `<agent_id>:<dia_id>` …). */
export const LOCOMO_MEMORY_NS = '9e3b7c2d-4a1f-4e8b-b6c5-0d1e2f3a4b5c';

export interface LocomoTurn {
  speaker: string;
  /** e.g. `D1:3` (session 1, turn 3). */
  diaId: string;
  text: string;
  imageCaption?: string;
  memoryId: string;
  /** Epoch ms: session start + turn index seconds, so recency follows dialogue order. */
  createdAt: number;
}

export interface LocomoSession {
  index: number;
  /** As written, e.g. `1:56 pm on 8 May, 2023`; "" when absent. */
  dateTime: string;
  /** Epoch ms (UTC) parsed from `dateTime`, or the fallback of {@link readLocomo}. */
  startedAt: number;
  turns: LocomoTurn[];
  summary: string | null;
  summaryMemoryId: string | null;
}

export interface LocomoQa {
  question: string;
  answer: unknown;
  evidence: string[];
  category: number | null;
}

/** One conversation = one agent. */
export interface LocomoConversation {
  file: string;
  /** `sample_id`, else the file stem (`26` for `26.json`). */
  sampleId: string;
  agentId: string;
  speakerA: string;
  speakerB: string;
  sessions: LocomoSession[];
  qa: LocomoQa[];
}

/** Agent id of a conversation: UUIDv5(`locomo:<key>`), key = file stem (`26`) or `sample_id` (`conv-26`). */
export function locomoAgentId(file: string): string {
  const key = path.basename(file).replace(/\.json$/i, '');
  return uuidV5(`locomo:${key}`, LOCOMO_AGENT_NS);
}

/** Deterministic confidence in [0.5, 1] from a memory id (4 decimals). */
export function locomoConfidence(memoryId: string): number {
  const u32 = createHash('sha256').update(memoryId).digest().readUInt32BE(0);
  return Math.round((0.5 + (0.5 * u32) / 0xffffffff) * 10_000) / 10_000;
}

const MONTHS = [
  'january',
  'february',
  'march',
  'april',
  'may',
  'june',
  'july',
  'august',
  'september',
  'october',
  'november',
  'december',
];

/** Parses LoCoMo's `h:mm am|pm on D Month, YYYY` as UTC epoch ms; null when not in that form. */
export function parseLocomoDate(text: string): number | null {
  const m = /^\s*(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([a-z]+),?\s+(\d{4})\s*$/i.exec(text);
  if (m === null) {
    const t = Date.parse(text);
    return Number.isFinite(t) ? t : null;
  }
  const month = MONTHS.findIndex((name) => name.startsWith(m[5]!.toLowerCase()) && m[5]!.length >= 3);
  const hour12 = Number(m[1]);
  const minute = Number(m[2]);
  if (month < 0 || hour12 < 1 || hour12 > 12 || minute > 59) return null;
  const hour = (hour12 % 12) + (m[3]!.toLowerCase() === 'pm' ? 12 : 0);
  return Date.UTC(Number(m[6]), month, Number(m[4]), hour, minute);
}

const DAY_MS = 86_400_000;

const JsonObject = z.record(z.string(), z.unknown());
const Speakers = z.object({ speaker_a: z.string(), speaker_b: z.string() });
const NonBlank = z.string().refine((s) => s.trim() !== '');
const Turn = z.object({
  speaker: z.string(),
  text: NonBlank,
  dia_id: z.string().optional().catch(undefined),
  blip_caption: z.string().optional().catch(undefined),
});
const Qa = z.object({
  question: z.string(),
  answer: z.unknown().optional(),
  adversarial_answer: z.unknown().optional(),
  evidence: z.array(z.unknown()).catch([]),
  category: z.number().nullable().catch(null),
});

/**
 * One LoCoMo sample → conversation, flat (`datasets/locomo10/*.json`) or upstream
 * (`{sample_id, conversation}`) layout. @throws Error naming the file when speakers or sessions are missing.
 */
export function parseLocomoSample(sample: unknown, file: string, fallbackKey: string): LocomoConversation {
  const top = JsonObject.safeParse(sample);
  if (!top.success) throw new Error(`${file}: not a LoCoMo sample object`);
  const conv = JsonObject.safeParse(top.data.conversation).data ?? top.data;
  const summaries = JsonObject.safeParse(top.data.session_summary).data ?? {};
  const speakers = Speakers.safeParse(conv);
  if (!speakers.success) throw new Error(`${file}: speaker_a and speaker_b must be strings`);
  const { speaker_a: speakerA, speaker_b: speakerB } = speakers.data;
  const sampleId = z.string().min(1).safeParse(top.data.sample_id).data ?? fallbackKey;
  const agentId = locomoAgentId(sampleId);
  const indexes = Object.keys(conv)
    .map((k) => /^session_(\d+)$/.exec(k))
    .filter((m): m is RegExpExecArray => m !== null && Array.isArray(conv[m[0]]))
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
  if (indexes.length === 0) throw new Error(`${file}: no session_N turn lists`);

  const sessions: LocomoSession[] = [];
  const seenDia = new Map<string, number>();
  let previousStart: number | null = null;
  for (const index of indexes) {
    const dateTime = z.string().safeParse(conv[`session_${index}_date_time`]).data ?? '';
    // Undated sessions sit a day after the previous one (or at the epoch), keeping recency order sane.
    const startedAt: number =
      parseLocomoDate(dateTime) ?? (previousStart === null ? 0 : previousStart + DAY_MS);
    previousStart = startedAt;
    const turns: LocomoTurn[] = [];
    for (const raw of conv[`session_${index}`] as unknown[]) {
      const parsed = Turn.safeParse(raw);
      if (!parsed.success) continue;
      const { speaker, text, dia_id, blip_caption } = parsed.data;
      let diaId = dia_id !== undefined && dia_id !== '' ? dia_id : `S${index}:${turns.length + 1}`;
      // A repeated dia_id would silently overwrite an earlier memory; suffix it instead.
      const seen = seenDia.get(diaId) ?? 0;
      seenDia.set(diaId, seen + 1);
      if (seen > 0) diaId = `${diaId}#${seen}`;
      const turn: LocomoTurn = {
        speaker,
        diaId,
        text,
        memoryId: uuidV5(`${agentId}:${diaId}`, LOCOMO_MEMORY_NS),
        createdAt: startedAt + turns.length * 1000,
      };
      if (blip_caption !== undefined && blip_caption !== '') turn.imageCaption = blip_caption;
      turns.push(turn);
    }
    const summary =
      NonBlank.safeParse(conv[`session_${index}_summary`] ?? summaries[`session_${index}_summary`]).data ??
      null;
    sessions.push({
      index,
      dateTime,
      startedAt,
      turns,
      summary,
      summaryMemoryId: summary === null ? null : uuidV5(`${agentId}:summary:${index}`, LOCOMO_MEMORY_NS),
    });
  }
  const qaRaw = z.array(z.unknown()).safeParse(top.data.qa).data ?? [];
  const qa: LocomoQa[] = qaRaw.flatMap((item) => {
    const q = Qa.safeParse(item);
    if (!q.success) return [];
    return [
      {
        question: q.data.question,
        answer: q.data.answer ?? q.data.adversarial_answer ?? null,
        evidence: q.data.evidence.filter((e): e is string => typeof e === 'string'),
        category: q.data.category,
      },
    ];
  });
  return { file, sampleId, agentId, speakerA, speakerB, sessions, qa };
}

/**
 * Reads every `*.json` of `dir` (or the one file it names) in name order; a file holds a sample or an array.
 * @throws Error naming the path when it does not exist, or the file for unreadable files, invalid JSON, or
 *   samples without speakers/sessions.
 */
export async function readLocomo(dir: string): Promise<LocomoConversation[]> {
  const stat = await fs.stat(dir).catch((err: NodeJS.ErrnoException) => {
    const why = err.code === 'ENOENT' ? 'no such file or directory' : (err.code ?? err.message);
    throw new Error(`cannot read the LoCoMo dataset at ${dir}: ${why} (pass the folder of its .json files)`);
  });
  const files = stat.isDirectory()
    ? (await fs.readdir(dir))
        .filter((f) => f.toLowerCase().endsWith('.json'))
        .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }))
        .map((f) => path.join(dir, f))
    : [dir];
  const out: LocomoConversation[] = [];
  for (const file of files) {
    let data: unknown;
    try {
      data = JSON.parse(await fs.readFile(file, 'utf8'));
    } catch (err) {
      throw new Error(`${file}: ${(err as Error).message}`);
    }
    const stem = path.basename(file).replace(/\.json$/i, '');
    if (Array.isArray(data)) {
      for (const [i, sample] of data.entries()) out.push(parseLocomoSample(sample, file, `${stem}#${i}`));
    } else {
      out.push(parseLocomoSample(data, file, stem));
    }
  }
  return out;
}
