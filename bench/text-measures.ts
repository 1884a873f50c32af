/**
 * Text-measure figures for `npm run bench:pack`: code points and escaped length of large
 * texts in one allocation-free pass, target ≤ 1 ns per UTF-16 unit. Figures, not gates; on a shared machine
 * they are noisy, the lead re-runs them quiet.
 */
import { Bench } from 'tinybench';
import { escapedCodePointLength, escapedUtf8CodePoints } from '../src/text/escape.js';
import { codePointLength } from '../src/text/estimate.js';

/** One measured text: the heavy shapes (emoji history, CJK history, HTML memories, plain ASCII). */
interface TextShape {
  name: string;
  text: string;
}

function shapes(): TextShape[] {
  const html = '<div class="row"><a href="/x?a=1&b=2">link</a> &amp; <b>bold</b> text</div>\n';
  return [
    { name: 'emoji 32768 code points', text: '😀'.repeat(32_768) },
    { name: 'cjk 32768 code points', text: '用户喜欢喝绿茶'.repeat(4682).slice(0, 32_768) },
    { name: 'html 300 KB', text: html.repeat(Math.ceil(300_000 / html.length)).slice(0, 300_000) },
    { name: 'ascii 64 KB', text: 'plain words without markup '.repeat(2428).slice(0, 65_536) },
  ];
}

/**
 * A figure row: ns per UTF-16 unit at p50 and p99 of one call over the whole text. Measures: `code_points`
 * and `escaped_length` of the string; `escaped_length_utf8`, the same length from the text's UTF-8 bytes
 * (escapedUtf8CodePoints: what the CPU stage measures a memory's content with); `decode_escaped_length`,
 * decoding those bytes and measuring the string (what the CPU stage did before).
 */
export interface TextMeasureRow {
  measure: 'code_points' | 'escaped_length' | 'escaped_length_utf8' | 'decode_escaped_length';
  text: string;
  utf16_units: number;
  p50_ns_per_unit: number;
  p99_ns_per_unit: number;
  samples: number;
}

/**
 * Times {@link codePointLength}, {@link escapedCodePointLength} and {@link escapedUtf8CodePoints} (and the
 * decode-then-measure it replaced) on each shape.
 * @param timeMs tinybench time per task, ms.
 */
export async function textMeasureFigures(timeMs: number): Promise<TextMeasureRow[]> {
  const bench = new Bench({ time: timeMs, warmupTime: 200, retainSamples: false });
  const meta: { measure: TextMeasureRow['measure']; shape: TextShape }[] = [];
  let sink = 0;
  for (const shape of shapes()) {
    bench.add(`code_points ${shape.name}`, () => {
      sink += codePointLength(shape.text);
    });
    meta.push({ measure: 'code_points', shape });
    bench.add(`escaped_length ${shape.name}`, () => {
      sink += escapedCodePointLength(shape.text);
    });
    meta.push({ measure: 'escaped_length', shape });
    const bytes = Buffer.from(shape.text, 'utf8');
    bench.add(`escaped_length_utf8 ${shape.name}`, () => {
      sink += escapedUtf8CodePoints(bytes, 0, bytes.length);
    });
    meta.push({ measure: 'escaped_length_utf8', shape });
    bench.add(`decode_escaped_length ${shape.name}`, () => {
      sink += escapedCodePointLength(bytes.toString('utf8'));
    });
    meta.push({ measure: 'decode_escaped_length', shape });
  }
  await bench.run();
  if (sink === -1) console.log(sink); // keeps the measured calls observable
  return meta.map(({ measure, shape }, i) => {
    const r = bench.tasks[i]!.result as { latency?: { p50: number; p99: number; samplesCount: number } };
    const lat = r.latency!;
    const perUnit = (ms: number) => Math.round(((ms * 1e6) / shape.text.length) * 1000) / 1000;
    return {
      measure,
      text: shape.name,
      utf16_units: shape.text.length,
      p50_ns_per_unit: perUnit(lat.p50),
      p99_ns_per_unit: perUnit(lat.p99),
      samples: lat.samplesCount,
    };
  });
}
