/** The part of hpack.js 2.x (no types of its own) that src/client/h2-codec.ts uses. */
declare module 'hpack.js' {
  /** One decoded header field. */
  export interface HeaderField {
    name: string;
    value: string;
    neverIndex: boolean;
  }
  /** An HPACK decoder with its dynamic table: write a header block, `execute()`, then `read()` fields. */
  export interface Decompressor {
    write(block: Buffer): boolean;
    /** Decodes what was written; throws (no callback) on a malformed block. */
    execute(): void;
    /** The next decoded field, null when none is left. */
    read(): HeaderField | null;
    on(event: 'error', listener: (err: Error) => void): this;
  }
  const hpack: {
    decompressor: { create(options: { table: { maxSize: number } }): Decompressor };
  };
  export default hpack;
}
