/** The assembled context as spliced UTF-8: written bytes plus unescaped history spans (docs/design/wire.md). */

export const FROM_OWN = 0;
export const FROM_SOURCE = 1;

/** Span j is `[spans[3j+1], spans[3j+2])` of `own` or `source` as `spans[3j]` says. */
export interface SplicedUtf8 {
  own: Uint8Array;
  /** The request's history bytes (possibly the whole request buffer). */
  source: Uint8Array;
  spans: Uint32Array;
  byteLength: number;
}

interface EscapedRun {
  readonly bytes: Uint8Array;
  readonly start: number;
  readonly end: number;
  readonly entities: boolean;
}

const AMP = 0x26;
const LT = 0x3c;
const GT = 0x3e;
const AMP_ENTITY = Buffer.from('&amp;');
const LT_ENTITY = Buffer.from('&lt;');
const GT_ENTITY = Buffer.from('&gt;');

function countByte(span: Buffer, b: number): number {
  let count = 0;
  for (let i = span.indexOf(b); i !== -1; i = span.indexOf(b, i + 1)) count++;
  return count;
}

function writeEscaped(out: Uint8Array, at: number, run: EscapedRun): number {
  const { bytes, start, end } = run;
  if (!run.entities) {
    out.set(bytes.subarray(start, end), at);
    return at + end - start;
  }
  for (let i = start; i < end; i++) {
    const b = bytes[i]!;
    const entity = b === AMP ? AMP_ENTITY : b === LT ? LT_ENTITY : b === GT ? GT_ENTITY : null;
    if (entity === null) out[at++] = b;
    else for (let k = 0; k < entity.length; k++) out[at++] = entity[k]!;
  }
  return at;
}

/** Builds a {@link SplicedUtf8}; bytes given to {@link SplicedBuilder.escaped} must stay unchanged until {@link finish}. */
export class SplicedBuilder {
  readonly #parts: (string | EscapedRun)[] = [];
  readonly #spans: number[] = [];
  #ownBytes = 0;
  #byteLength = 0;

  constructor(readonly source: Uint8Array) {}

  text(s: string): void {
    if (s === '') return;
    this.#own(s, Buffer.byteLength(s, 'utf8'));
  }

  /** Appends `bytes[start, end)` body-escaped without decoding; the caller checked it is well-formed UTF-8. */
  escaped(bytes: Uint8Array, start: number, end: number): void {
    if (end <= start) return;
    if (end > bytes.length)
      throw new RangeError(`escaped span [${start}, ${end}) past its ${bytes.length} bytes`);
    const span = Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start);
    const amp = countByte(span, AMP);
    const angle = countByte(span, LT) + countByte(span, GT);
    this.#own({ bytes, start, end, entities: amp + angle > 0 }, end - start + 4 * amp + 3 * angle);
  }

  #own(part: string | EscapedRun, bytes: number): void {
    this.#parts.push(part);
    this.#spans.push(FROM_OWN, this.#ownBytes, this.#ownBytes + bytes);
    this.#ownBytes += bytes;
    this.#byteLength += bytes;
  }

  bytes(start: number, end: number): void {
    if (end <= start) return;
    this.#spans.push(FROM_SOURCE, start, end);
    this.#byteLength += end - start;
  }

  /** `own` is a fresh buffer, never a slice of Node's pool, because it is transferred. */
  finish(): SplicedUtf8 {
    const own = new Uint8Array(this.#ownBytes);
    let at = 0;
    const view = Buffer.from(own.buffer, 0, own.length);
    for (const part of this.#parts) {
      at = typeof part === 'string' ? at + view.write(part, at, 'utf8') : writeEscaped(own, at, part);
    }
    return {
      own,
      source: this.source,
      spans: Uint32Array.from(this.#spans),
      byteLength: this.#byteLength,
    };
  }
}

/** @throws Error when a span lies past its byte array (a released request buffer). */
export function copySpliced(t: SplicedUtf8, target: Uint8Array, offset: number): number {
  let at = offset;
  const { spans } = t;
  for (let j = 0; j < spans.length; j += 3) {
    const from = spans[j] === FROM_OWN ? t.own : t.source;
    const start = spans[j + 1]!;
    const end = spans[j + 2]!;
    // A detached buffer reads as empty; a gap would send whatever the allocUnsafe frame held.
    if (end > from.length) throw new Error(`spliced span [${start}, ${end}) past its ${from.length} bytes`);
    target.set(from.subarray(start, end), at);
    at += end - start;
  }
  return at - offset;
}

export function splicedText(t: SplicedUtf8): string {
  const out = Buffer.allocUnsafe(t.byteLength);
  copySpliced(t, out, 0);
  return out.toString('utf8');
}

export function splicedBuffers(t: SplicedUtf8): ArrayBufferLike[] {
  return [t.own.buffer, t.source.buffer, t.spans.buffer];
}
