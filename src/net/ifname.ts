// Interface names: what the kernel accepts, and what `ip -batch` can carry.

/** ASCII control characters: `ip -batch` ends a line at NUL, and none belongs in a name or a log line. */
export const CONTROL_CHARACTER = /[\x00-\x1f\x7f]/;

/**
 * Why the kernel would refuse `name` as a link name (IFNAMSIZ - 1 bytes; no
 * '/', ':' or whitespace; not '.' or '..'), or undefined when it is fine.
 * Control characters are refused too (the kernel would take most of them).
 */
export function ifnameProblem(name: string): string | undefined {
  if (name === '') return 'it is empty';
  if (CONTROL_CHARACTER.test(name)) return 'it contains a control character';
  if (Buffer.byteLength(name) > 15) return 'it is longer than 15 bytes';
  if (name === '.' || name === '..') return "it is '.' or '..'";
  if (/[/:\s]/.test(name)) return "it contains '/', ':' or whitespace";
  return undefined;
}

/**
 * ifnameProblem, and the names we must not create: '%' (the kernel takes
 * "name%d" as a template and makes name0, name1... instead; any other '%' it
 * refuses) and the characters `ip -batch` cannot carry.
 */
export function linkNameProblem(name: string): string | undefined {
  const problem = ifnameProblem(name);
  if (problem) return problem;
  if (name.includes('%')) return "it contains '%', which the kernel takes as a name template (name%d makes name0, name1...)";
  if (/["'\\#]/.test(name)) return 'it contains a quote, backslash or #, which ip -batch cannot carry';
  return undefined;
}
