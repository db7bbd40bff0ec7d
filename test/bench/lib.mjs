// Shared bench helpers: timing a child process, medians, and the report table.
import { spawnSync } from 'node:child_process';

/** Runs argv with env and stdin; returns wall milliseconds. Throws on a non-zero exit. */
export function timed(argv, { env = {}, input = '' } = {}) {
  const start = process.hrtime.bigint();
  const r = spawnSync(argv[0], argv.slice(1), { env: { PATH: process.env.PATH, ...env }, input, encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return ms;
}

/** Peak resident memory (KiB) of one run, via GNU time; undefined when /usr/bin/time is missing. */
export function peakRssKiB(argv, { env = {}, input = '' } = {}) {
  const r = spawnSync('/usr/bin/time', ['-f', '%M', ...argv], { env: { PATH: process.env.PATH, ...env }, input, encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  const last = r.stderr.trim().split('\n').pop();
  return Number(last);
}

export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export const fmt = (ms) => `${ms.toFixed(1)} ms`;
export const ratio = (a, b) => `${(a / b).toFixed(2)}x`;

/** Prints rows of cells as an aligned table. */
export function table(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
  for (const r of rows) console.log(r.map((c, i) => String(c).padEnd(widths[i])).join('  ').trimEnd());
}
