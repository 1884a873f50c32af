/** The README's headline figures block (see readme-figures.mjs). */
export const FIGURES_START: string;
export const FIGURES_END: string;
export function renderReadmeFigures(result: (name: string) => unknown): string;
export function withReadmeFigures(readme: string, result: (name: string) => unknown): string;
