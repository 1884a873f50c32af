/**
 * HPACK decoding of answers for the `frames` transport (issue 10): hpack.js (RFC 7541: static and
 * dynamic tables, Huffman) does the decoding; this module adds a cache of decoded blocks, because a
 * server answering the same call again sends byte-identical header blocks (indexed fields), and hpack.js
 * decodes through a stream, ~5 µs a block — a tenth of the driver's CPU per call budget for two blocks.
 *
 * A cached result is right only while the dynamic table is what it was when the block was decoded, so a
 * block is cached only when it does not change the table (no incremental indexing, no size update), and
 * the whole cache is dropped whenever a block does change it.
 */
import hpack, { type Decompressor } from 'hpack.js';

/** HPACK dynamic table size before SETTINGS_HEADER_TABLE_SIZE changes it (we never do), bytes. */
const HEADER_TABLE_BYTES = 4096;
/** Distinct blocks kept between table changes (a bound, not a tuning knob: answers repeat a few). */
const CACHE_ENTRIES = 64;

/** Header fields of one block: `name → value`, a repeated name keeping its first value. Read only. */
export type HeaderFields = ReadonlyMap<string, string>;

/**
 * End of an HPACK integer with a `prefix`-bit prefix starting at `at` (RFC 7541 §5.1), or -1 when the
 * block ends inside it.
 */
function skipInt(block: Buffer, at: number, prefix: number): number {
  const max = (1 << prefix) - 1;
  if (at >= block.length) return -1;
  let i = at + 1;
  if ((block[at]! & max) === max) {
    while (i < block.length && block[i]! & 0x80) i++;
    i++;
  }
  return i <= block.length ? i : -1;
}

/** Value of the HPACK integer at `at` (only called on lengths, which fit a double exactly). */
function readInt(block: Buffer, at: number, prefix: number): number {
  const max = (1 << prefix) - 1;
  let v = block[at]! & max;
  if (v < max) return v;
  let shift = 0;
  for (let i = at + 1; i < block.length; i++) {
    v += (block[i]! & 0x7f) * 2 ** shift;
    shift += 7;
    if (!(block[i]! & 0x80)) break;
  }
  return v;
}

/** End of a string literal at `at` (RFC 7541 §5.2), or -1 when malformed. */
function skipString(block: Buffer, at: number): number {
  const end = skipInt(block, at, 7);
  if (end < 0) return -1;
  const next = end + readInt(block, at, 7);
  return next <= block.length ? next : -1;
}

/**
 * True when decoding `block` leaves the dynamic table as it was: every field is indexed (§6.1), a literal
 * without indexing (§6.2.2) or never indexed (§6.2.3); no incremental indexing (§6.2.1), no table size
 * update (§6.3). False for a malformed block too (it is then decoded, and fails there).
 */
export function keepsTable(block: Buffer): boolean {
  let at = 0;
  while (at < block.length) {
    const b = block[at]!;
    if (b & 0x80) {
      at = skipInt(block, at, 7);
    } else if (b & 0x40 || b & 0x20) {
      return false;
    } else {
      const nameIndexEnd = skipInt(block, at, 4);
      if (nameIndexEnd < 0) return false;
      at = (b & 0x0f) === 0 ? skipString(block, nameIndexEnd) : nameIndexEnd;
      if (at < 0) return false;
      at = skipString(block, at);
    }
    if (at < 0) return false;
  }
  return true;
}

/**
 * One connection's HPACK decoder: blocks must be decoded in the order they arrive, whichever stream they
 * belong to, to keep the dynamic table in step with the server's.
 */
export class HeaderDecoder {
  private readonly d: Decompressor;
  private failure: Error | null = null;
  private readonly cache = new Map<string, HeaderFields>();

  constructor() {
    this.d = hpack.decompressor.create({ table: { maxSize: HEADER_TABLE_BYTES } });
    this.d.on('error', (err) => {
      this.failure = err;
    });
  }

  /**
   * Decodes one complete header block. The result may be shared with earlier calls: do not change it.
   * @throws Error on a malformed block (a connection error: COMPRESSION_ERROR).
   */
  decode(block: Buffer): HeaderFields {
    const cacheable = keepsTable(block);
    const key = cacheable ? block.toString('latin1') : '';
    if (cacheable) {
      const hit = this.cache.get(key);
      if (hit !== undefined) return hit;
    } else this.cache.clear();
    this.d.write(block);
    this.d.execute();
    const failure = this.failure;
    if (failure !== null) throw new Error(`malformed header block: ${failure.message}`);
    const fields = new Map<string, string>();
    for (let f = this.d.read(); f !== null; f = this.d.read()) {
      if (!fields.has(f.name)) fields.set(f.name, f.value);
    }
    if (cacheable) {
      if (this.cache.size >= CACHE_ENTRIES) this.cache.clear();
      this.cache.set(key, fields);
    }
    return fields;
  }
}
