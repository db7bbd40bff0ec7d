// Aligned text tables for the operator commands.

/** `header` and `rows` as left-aligned columns two spaces apart, one line each. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all.map((r) => r.map((c, i) => (c ?? '').padEnd(widths[i])).join('  ').trimEnd()).join('\n') + '\n';
}
