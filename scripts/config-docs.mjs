#!/usr/bin/env node
/**
 * Writes docs/configuration.md from the compiled settings descriptions (run `npm run build` first;
 * `npm run docs:config` does). test/docs/configuration-doc.test.ts fails when the committed file differs.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { configurationMarkdown } from '../dist/src/tools/cli/commands/configuration-doc.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
writeFileSync(path.join(ROOT, 'docs', 'configuration.md'), configurationMarkdown());
console.log('wrote docs/configuration.md');
