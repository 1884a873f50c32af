/**
 * Escaping of untrusted memory text (SPEC §9). After escaping, memory text contains no `<` or `>`, so it
 * can neither open nor close an `<ibex_memory>` block, whatever nonce it guesses.
 */

const BODY = /[&<>]/g;
const ATTR = /[&<>"']/g;
const ENTITIES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#x27;',
};
const replace = (ch: string): string => ENTITIES[ch]!;

/** Body escaping: `&`→`&amp;`, `<`→`&lt;`, `>`→`&gt;`. */
export function escapeBody(text: string): string {
  return text.replace(BODY, replace);
}

/** Attribute escaping: body escaping plus `"`→`&quot;` and `'`→`&#x27;`. */
export function escapeAttr(text: string): string {
  return text.replace(ATTR, replace);
}

/**
 * Code-point length of `escapeBody(text)` (or `escapeAttr(text)` when `attr`) without building it.
 * @param codePoints the code-point length of `text`, already known to the caller.
 */
export function escapedLength(text: string, codePoints: number, attr = false): number {
  let extra = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 38)
      extra += 4; // & → &amp;
    else if (c === 60 || c === 62)
      extra += 3; // < > → &lt; &gt;
    else if (attr && c === 34)
      extra += 5; // " → &quot;
    else if (attr && c === 39) extra += 5; // ' → &#x27;
  }
  return codePoints + extra;
}
