/**
 * The assembled context as spliced UTF-8 (contract.md §1 isolation rule, §9): the bytes the
 * formatter wrote itself (directive, role prefixes, memory blocks, tools, separators) and spans of the
 * request's history bytes, which are not escaped (contract.md §9) and so are copied as they are — once, by the
 * response serializer into grpc-js's frame — instead of being decoded, re-encoded and concatenated.
 */

/** Which byte array a span of {@link SplicedUtf8} reads. */
export const FROM_OWN = 0;
export const FROM_SOURCE = 1;

/**
 * UTF-8 text as spans over two byte arrays: span j is `[spans[3j+1], spans[3j+2])` of `own` when
 * `spans[3j]` is {@link FROM_OWN}, of `source` when it is {@link FROM_SOURCE}.
 */
export interface SplicedUtf8 {
  /** Bytes the producer wrote. */
  own: Uint8Array;
  /** The request's history bytes (possibly the whole request buffer). */
  source: Uint8Array;
  spans: Uint32Array;
  /** Total UTF-8 bytes of the text. */
  byteLength: number;
}

/** Bytes that {@link SplicedBuilder.escaped} writes body-escaped into `own`. */
interface EscapedRun {
  readonly bytes: Uint8Array;
  readonly start: number;
  readonly end: number;
  /** Whether the run holds `&`, `<` or `>` (else it is copied as it is). */
  readonly entities: boolean;
}

const AMP = 0x26;
const LT = 0x3c;
const GT = 0x3e;
const AMP_ENTITY = Buffer.from('&amp;');
const LT_ENTITY = Buffer.from('&lt;');
const GT_ENTITY = Buffer.from('&gt;');

/** Occurrences of byte `b` in `span` (native memchr steps). */
function countByte(span: Buffer, b: number): number {
  let count = 0;
  for (let i = span.indexOf(b); i !== -1; i = span.indexOf(b, i + 1)) count++;
  return count;
}

/** Writes `run` body-escaped into `out` at `at`. @returns the end. */
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

/**
 * Builds a {@link SplicedUtf8}: strings are encoded once at the end, source spans are only recorded, and
 * {@link SplicedBuilder.escaped} keeps a reference to its bytes and copies them at {@link finish}, so
 * those must stay as they are (not changed, not transferred) until then.
 */
export class SplicedBuilder {
  readonly #parts: (string | EscapedRun)[] = [];
  readonly #spans: number[] = [];
  #ownBytes = 0;
  #byteLength = 0;

  constructor(readonly source: Uint8Array) {}

  /** Appends text the producer wrote. */
  text(s: string): void {
    if (s === '') return;
    this.#own(s, Buffer.byteLength(s, 'utf8'));
  }

  /**
   * Appends `bytes[start, end)` body-escaped as `escapeBody` escapes text (`&` `<` `>` as entities, contract.md §9),
   * without decoding it: memory contents go from the batch's bytes to the answer's.
   * @param bytes must be well-formed UTF-8 in the span (the caller checks): it is copied as it is.
   */
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

  /** Appends `source[start, end)` as it is (the caller vouches that it is valid UTF-8). */
  bytes(start: number, end: number): void {
    if (end <= start) return;
    this.#spans.push(FROM_SOURCE, start, end);
    this.#byteLength += end - start;
  }

  /** The text; `own` is a fresh buffer of its own (it is transferred, never a slice of Node's pool). */
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

/**
 * Copies the text into `target` at `offset` (one memcpy per span). @returns bytes written.
 * @throws Error when a span lies past its byte array (e.g. a request buffer already released).
 */
export function copySpliced(t: SplicedUtf8, target: Uint8Array, offset: number): number {
  let at = offset;
  const { spans } = t;
  for (let j = 0; j < spans.length; j += 3) {
    const from = spans[j] === FROM_OWN ? t.own : t.source;
    const start = spans[j + 1]!;
    const end = spans[j + 2]!;
    // A released (detached) request buffer reads as empty: writing nothing would leave whatever the
    // target held (grpc-js frames are allocUnsafe), so a span past its bytes is an error, never a gap.
    if (end > from.length) throw new Error(`spliced span [${start}, ${end}) past its ${from.length} bytes`);
    target.set(from.subarray(start, end), at);
    at += end - start;
  }
  return at - offset;
}

/** The text as a string (tests and tools; the service never decodes it). */
export function splicedText(t: SplicedUtf8): string {
  const out = Buffer.allocUnsafe(t.byteLength);
  copySpliced(t, out, 0);
  return out.toString('utf8');
}

/** The buffers of `t` to transfer to another thread (each once). */
export function splicedBuffers(t: SplicedUtf8): ArrayBufferLike[] {
  return [t.own.buffer, t.source.buffer, t.spans.buffer];
}
