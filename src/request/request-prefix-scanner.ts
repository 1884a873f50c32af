/**
 * The AssembleContext request's prefix scanner (contract.md §11): on the wire, before the whole request has
 * arrived, it finds the prefix that already decides `decodeAssembleRequest`'s outcome
 * (wire-request.ts).
 */
import { LIMITS } from '../wire/limits.js';
import { MAX_REQUEST_FIELDS } from './wire-request.js';

const TAG = 0;
const VARINT = 1;
const LENGTH = 2;
const SKIP = 3;
const GIVEN_UP = 4;

/**
 * Follows an AssembleContextRequest's top-level fields while its bytes are still arriving, and tells when
 * the bytes so far already decide `decodeAssembleRequest`'s outcome (contract.md §11: counts are checked on
 * the wire, at a cost independent of the count): when the 101st history message is complete — the decoder
 * stops there — or when a 1,025th top-level field begins — it refuses there (`TOO_MANY_FIELDS`).
 * Decoding just that prefix gives the same result as decoding the whole request, so a two-million-message
 * request can be answered after its first few hundred bytes. Cost: O(1) per field and per chunk
 * (payloads are skipped, not read). A request it cannot follow (group or invalid wire types, over-long
 * varints) is simply left to the full decode.
 */
export class RequestPrefixScanner {
  #consumed = 0;
  #state = TAG;
  #value = 0;
  #shift = 0;
  #skip = 0;
  #field = 0;
  #fields = 0;
  #messages = 0;

  /**
   * Feeds the next bytes of the message, `data[start, end)`.
   * @returns the length in bytes of the message prefix that decides the outcome, or -1 while undecided
   *   (or after giving up).
   */
  feed(data: Uint8Array, start: number, end: number): number {
    let i = start;
    while (i < end) {
      switch (this.#state) {
        case TAG: {
          if (this.#shift === 0) {
            if (this.#fields === MAX_REQUEST_FIELDS) return this.#consumed + (i - start) + 1;
            this.#fields++;
            this.#value = 0;
          }
          if (!this.#varintByte(data[i++]!)) break;
          const wireType = this.#value % 8;
          this.#field = Math.floor(this.#value / 8);
          if (wireType === 0) this.#state = VARINT;
          else if (wireType === 1 || wireType === 5) {
            this.#skip = wireType === 1 ? 8 : 4;
            this.#state = SKIP;
          } else if (wireType === 2) {
            this.#state = LENGTH;
            this.#value = 0;
            if (this.#field === 8) this.#messages++;
          } else this.#state = GIVEN_UP;
          break;
        }
        case VARINT: {
          const b = data[i++]!;
          if (!(b & 0x80)) {
            this.#shift = 0;
            this.#state = TAG;
          } else {
            this.#shift += 7;
            if (this.#shift > 63) this.#state = GIVEN_UP;
          }
          break;
        }
        case LENGTH: {
          if (!this.#varintByte(data[i++]!)) break;
          this.#skip = this.#value;
          this.#state = SKIP;
          if (this.#skip === 0 && this.#fieldDone()) return this.#consumed + (i - start);
          break;
        }
        case SKIP: {
          const n = Math.min(this.#skip, end - i);
          i += n;
          this.#skip -= n;
          if (this.#skip === 0 && this.#fieldDone()) return this.#consumed + (i - start);
          break;
        }
        default:
          this.#consumed += end - start;
          return -1;
      }
    }
    this.#consumed += end - start;
    return -1;
  }

  /**
   * Adds one byte of a tag or length varint (≤ 32 bits, as protobufjs reads them) to `#value`.
   * @returns true once the varint is complete (`#shift` back at 0); past five bytes the scanner gives up.
   */
  #varintByte(b: number): boolean {
    this.#value += (b & 0x7f) * 2 ** this.#shift;
    if (!(b & 0x80)) {
      this.#shift = 0;
      return true;
    }
    this.#shift += 7;
    if (this.#shift > 28) this.#state = GIVEN_UP;
    return false;
  }

  /** A field's bytes are complete: true when it was the 101st history message. */
  #fieldDone(): boolean {
    this.#state = TAG;
    return this.#field === 8 && this.#messages === LIMITS.recentMessages + 1;
  }
}
