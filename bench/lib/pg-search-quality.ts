/** `bench:replicas`'s search comparisons of the PostgreSQL store with the embedded one on the same data. */
import type { PgStore } from '../../src/retrieval/postgres/pg-store.js';
import type { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { LOCOMO_ORG_ID, type LocomoConversation } from '../../src/tools/locomo/dataset.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';

/** Top-10 overlap of PostgreSQL's cold search with the embedded store's on the same queries. */
export async function overlap(store: PgStore, embedded: EmbeddedStore, reqs: AssembleContextRequestInput[]) {
  let compared = 0;
  let bothEmpty = 0;
  let sum = 0;
  let identicalTop1 = 0;
  for (const r of reqs) {
    const a = await store.search(r.org_id!, r.agent_id!, r.query ?? '', { timeoutMs: 5000 });
    const b = embedded.search(r.org_id!, r.agent_id!, r.query ?? '');
    if (a.length === 0 && b.length === 0) {
      bothEmpty++;
      continue;
    }
    const ids = new Set(b.map((h) => h.memory.id));
    sum += a.filter((h) => ids.has(h.memory.id)).length / Math.max(a.length, b.length);
    if (a[0]?.memory.id === b[0]?.memory.id) identicalTop1++;
    compared++;
  }
  return {
    queries: reqs.length,
    both_empty: bothEmpty,
    mean_top10_overlap: compared > 0 ? Math.round((sum / compared) * 1000) / 1000 : null,
    same_top1_share: compared > 0 ? Math.round((identicalTop1 / compared) * 1000) / 1000 : null,
  };
}

/**
 * Recall@10 of LoCoMo's QA evidence (the turns that answer each question) for both stores' cold search,
 * with the question as the query: a ground truth, where the overlap above only compares the two.
 */
export async function evidenceRecall(
  store: PgStore,
  embedded: EmbeddedStore,
  conversations: LocomoConversation[],
) {
  let questions = 0;
  let pgSum = 0;
  let embeddedSum = 0;
  for (const conv of conversations) {
    const byDia = new Map(conv.sessions.flatMap((s) => s.turns.map((t) => [t.diaId, t.memoryId] as const)));
    for (const qa of conv.qa) {
      const evidence = qa.evidence.flatMap((e) => byDia.get(e) ?? []);
      if (evidence.length === 0) continue;
      const recall = (ids: string[]) => evidence.filter((e) => ids.includes(e)).length / evidence.length;
      const a = await store.search(LOCOMO_ORG_ID, conv.agentId, qa.question, { timeoutMs: 5000 });
      pgSum += recall(a.map((h) => h.memory.id));
      embeddedSum += recall(
        embedded.search(LOCOMO_ORG_ID, conv.agentId, qa.question).map((h) => h.memory.id),
      );
      questions++;
    }
  }
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    questions,
    postgres_recall_at_10: questions > 0 ? r3(pgSum / questions) : null,
    embedded_recall_at_10: questions > 0 ? r3(embeddedSum / questions) : null,
  };
}
