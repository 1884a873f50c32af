import { LIMITS } from '../wire/limits.js';
import { MAX_REQUEST_FIELDS } from './wire-request.js';

const TAG = 0;
const VARINT = 1;
const LENGTH = 2;
const SKIP = 3;
const GIVEN_UP = 4;

/** Tells when the request bytes so far already decide `decodeAssembleRequest`'s outcome; O(1) per field. */
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
   * Feeds `data[start, end)`.
   * @returns the deciding prefix's length in bytes, or -1 while undecided (or after giving up).
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

  /** Adds one byte of a varint (≤ 32 bits) to `#value`; true once complete. Past five bytes: gives up. */
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
