// `make bench`: every benchmark in this directory, one after the other. Each may leave its results
// in BENCH_RESULTS (a directory of this run's own) for a later one: footprint.mjs quotes
// cluster-scale.mjs's 5,000-peer figures beside its own.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const benches = readdirSync(here).filter((f) => f.endsWith('.mjs') && !['run.mjs', 'lib.mjs'].includes(f)).sort();
const results = mkdtempSync(join(tmpdir(), 'cni-ts-bench-'));
let failed = 0;
try {
  for (const b of benches) {
    console.log(`\n== ${b}`);
    const r = spawnSync('node', [join(here, b)], { stdio: 'inherit', env: { ...process.env, BENCH_RESULTS: results } });
    if (r.status !== 0) failed++;
  }
} finally {
  rmSync(results, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
