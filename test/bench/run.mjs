// `make bench`: every benchmark in this directory, one after the other.
import { readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const benches = readdirSync(here).filter((f) => f.endsWith('.mjs') && !['run.mjs', 'lib.mjs'].includes(f)).sort();
let failed = 0;
for (const b of benches) {
  console.log(`\n== ${b}`);
  const r = spawnSync('node', [join(here, b)], { stdio: 'inherit' });
  if (r.status !== 0) failed++;
}
process.exit(failed ? 1 : 0);
