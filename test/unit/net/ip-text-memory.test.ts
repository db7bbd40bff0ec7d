// The texts of addresses and prefixes that thousands of peers keep are flat
// strings: a template literal's result of 13 characters or more is a rope
// (V8's cons string, ~25 bytes more per text). Measured in a child Node with
// the collector exposed: the heap a hundred thousand texts hold, per text.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { buildSync } from 'esbuild';
import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '../../..');

/** Bytes of heap per text that `make(i)` returns, 100,000 of them kept. */
function bytesPerText(make: string): number {
  const contents = `
    import { IP, Prefix } from ${JSON.stringify(join(ROOT, 'src/net/ip.ts'))};
    const make = ${make};
    const keep = new Array(100_000);
    const ips = Array.from({ length: 100_000 }, (_, i) => IP.fromBigInt(4, BigInt(0xac10_0000 + i))); // 172.16.x.y: 12-13 characters
    const prefixes = ips.map((ip) => Prefix.of(ip, 32));
    globalThis.gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < keep.length; i++) keep[i] = make(ips[i], prefixes[i]);
    globalThis.gc();
    console.log((process.memoryUsage().heapUsed - before) / keep.length);`;
  const program = buildSync({ stdin: { contents, resolveDir: ROOT, loader: 'ts' }, bundle: true, platform: 'node', format: 'cjs', write: false }).outputFiles[0].text;
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', program], { encoding: 'utf8', env: {}, timeout: 20_000 });
  expect(r.status, r.stderr).toBe(0);
  return Number(r.stdout);
}

describe('address texts are flat strings', () => {
  it('IP.toString() and Prefix.toString() hold no more than flat text would; a template literal\'s text (the control) holds more', () => {
    const ip = bytesPerText('(ip) => ip.toString()');
    const rope = bytesPerText('(ip) => { const v = Number(ip.value); return `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`; }');
    // Prefix.toString() keeps each text beside its prefix (a WeakMap): the control does the same with a template's text
    const prefix = bytesPerText('(ip, p) => p.toString()');
    const prefixRope = bytesPerText('(ip, p) => { const t = `${p.network}/${p.length}`; (globalThis.texts ??= new WeakMap()).set(p, t); return t; }');
    // flat: 16 bytes of header + the characters, rounded to 8; a rope adds its own 32-byte cell and splits the text in two
    expect(ip).toBeLessThan(40);
    expect(rope).toBeGreaterThan(ip + 15);
    expect(prefixRope).toBeGreaterThan(prefix + 15);
  });
});
