// The executables' V8 code cache (src/boot/code-cache.ts): used when present,
// rebuilt when broken, never trusted from a directory others can write or
// reached through a symlink, never taken from another source.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { OUR_BIN, runPlugin, tempDir, type PluginEnv } from './helpers';
import { STANDALONE_BIN } from './no-node';

const OURS = join(OUR_BIN, 'host-local');
let tmp: ReturnType<typeof tempDir>;
let cacheDir: string;
beforeEach(() => {
  tmp = tempDir('cc');
  cacheDir = join(tmp.path, 'cache');
});
afterEach(() => tmp.remove());

const conf = () => ({
  cniVersion: '1.0.0',
  name: 'ccnet',
  type: 'host-local',
  ipam: { type: 'host-local', dataDir: join(tmp.path, 'data'), ranges: [[{ subnet: '10.76.0.0/24' }]] },
});
const env = (command: string, id: string): PluginEnv => ({
  CNI_COMMAND: command,
  CNI_CONTAINERID: id,
  CNI_NETNS: '/var/run/netns/unused',
  CNI_IFNAME: 'eth0',
  CNI_TS_CODE_CACHE_DIR: cacheDir,
});
/** A cache file as our writer makes it: the same source digest as `like`'s, then V8's data, then the data byte-swapped. */
const intact = (b: Buffer, like: Buffer) => {
  const size = (b.length - 64) / 2;
  return size % 4 === 0 && b.subarray(0, 64).equals(like.subarray(0, 64)) && b.subarray(64, 64 + size).equals(Buffer.from(b.subarray(64 + size)).swap32());
};
const cacheFiles = () => (fs.existsSync(cacheDir) ? fs.readdirSync(cacheDir).sort() : []);

describe('V8 code cache', () => {
  it('is written once per command, root-only, and used by later calls', async () => {
    expect((await runPlugin(OURS, env('ADD', 'a'), conf())).code).toBe(0);
    const [file] = cacheFiles();
    expect(file).toMatch(/^host-local-[0-9a-f]{16}-v\d+\.\d+\.\d+-\w+-ADD\.v8$/);
    expect(fs.statSync(cacheDir).mode & 0o777).toBe(0o700);
    expect(fs.statSync(join(cacheDir, file)).mode & 0o777).toBe(0o600);
    const written = fs.statSync(join(cacheDir, file)).mtimeMs;
    const again = await runPlugin(OURS, env('ADD', 'b'), conf());
    expect(again.json.ips[0].address).toBe('10.76.0.3/24');
    expect(fs.statSync(join(cacheDir, file)).mtimeMs).toBe(written); // used, not rewritten
    await runPlugin(OURS, env('DEL', 'a'), conf());
    expect(cacheFiles()).toEqual([file, file.replace('-ADD.v8', '-DEL.v8')]);
  });

  it('a call that failed writes none (its cache would lack the normal path); the next call that succeeds does', async () => {
    const bad = await runPlugin(OURS, env('ADD', 'a'), { ...conf(), ipam: { type: 'host-local', ranges: [[{ subnet: '10.76.0.0/33' }]] } });
    expect(bad.json.code).toBe(7);
    expect(cacheFiles()).toEqual([]);
    expect((await runPlugin(OURS, env('ADD', 'a'), conf())).code).toBe(0);
    expect(cacheFiles()).toHaveLength(1);
  });

  it('a corrupt cache is rejected by V8, the call still works, and the cache is rebuilt', async () => {
    await runPlugin(OURS, env('ADD', 'a'), conf());
    const file = join(cacheDir, cacheFiles()[0]);
    fs.writeFileSync(file, Buffer.alloc(4096, 7));
    const r = await runPlugin(OURS, env('ADD', 'b'), conf());
    expect(r.code, r.stderr).toBe(0);
    expect(fs.readFileSync(file).equals(Buffer.alloc(4096, 7))).toBe(false);
  });

  for (const [form, exe] of [['script', OURS], ['standalone', join(STANDALONE_BIN, 'host-local')]]) {
    it(`${form}: bytes flipped anywhere in a cache file change nothing but speed: every call works, and the file is rewritten whole`, async () => {
      expect((await runPlugin(exe, env('ADD', 'a'), conf())).code).toBe(0);
      const file = join(cacheDir, cacheFiles()[0]);
      const good = fs.readFileSync(file);
      // V8's own header (its version, flags and length checks) sits right after our 64-byte digest: flip past it,
      // in the first copy, the second, both at the same place, and in the digest; then truncate and zero
      const size = (good.length - 64) / 2;
      const flips = [[64 + 200], [64 + size + 200], [64 + 200, 64 + size + 200], [5], [64 + Math.floor(size / 2)]];
      const damaged = [
        ...flips.map((at) => {
          const b = Buffer.from(good);
          for (const i of at) for (let k = 0; k < 64; k++) b[i + k * 37] ^= 0x5a;
          return b;
        }),
        good.subarray(0, good.length - 1000),
        Buffer.concat([good.subarray(0, 64 + size), Buffer.alloc(size)]),
      ];
      for (const [i, bytes] of damaged.entries()) {
        fs.writeFileSync(file, bytes);
        const r = await runPlugin(exe, env('ADD', `d${i}`), conf());
        expect([r.code, r.stderr], `damage ${i}`).toEqual([0, '']);
        expect(intact(fs.readFileSync(file), good), `damage ${i}: rewritten whole`).toBe(true);
      }
    });
  }

  it('a directory others can write is neither read nor written', async () => {
    fs.mkdirSync(cacheDir, { mode: 0o777 });
    fs.chmodSync(cacheDir, 0o777);
    expect((await runPlugin(OURS, env('ADD', 'a'), conf())).code).toBe(0);
    expect(cacheFiles()).toEqual([]);
  });

  it('only the CNI commands get a cache file (the name never comes from the environment as is)', async () => {
    const r = await runPlugin(OURS, { ...env('ADD', 'a'), CNI_COMMAND: '../../escape' }, conf());
    expect(r.json.code).toBe(4);
    expect(cacheFiles()).toEqual([]);
    expect(fs.existsSync(join(tmp.path, 'escape.v8'))).toBe(false);
  });

  it('"off" disables it', async () => {
    const r = await runPlugin(OURS, { ...env('ADD', 'a'), CNI_TS_CODE_CACHE_DIR: 'off' }, conf());
    expect(r.code).toBe(0);
    expect(fs.existsSync(join(process.cwd(), 'off'))).toBe(false);
  });

  describe('a directory someone else could steer', () => {
    /** A file named as an older build's cache of the same bundle: ours to remove only in a directory we trust. */
    const plantOld = (dir: string) => {
      const old = join(dir, 'host-local-0000000000000000-v20.0.0-x64-ADD.v8');
      fs.writeFileSync(old, 'not ours', { mode: 0o600 });
      return old;
    };

    it('a symlink as the cache directory: not followed (nothing read, written or removed behind it)', async () => {
      const real = join(tmp.path, 'real');
      fs.mkdirSync(real, { mode: 0o700 });
      const old = plantOld(real);
      fs.symlinkSync(real, cacheDir);
      expect((await runPlugin(OURS, env('ADD', 'a'), conf())).code).toBe(0);
      expect(fs.readdirSync(real)).toEqual([old.split('/').pop()]);
    });

    it('a symlink among the parents: not followed', async () => {
      const parent = join(tmp.path, 'parent');
      fs.mkdirSync(join(parent, 'cache'), { recursive: true, mode: 0o700 });
      fs.symlinkSync(parent, join(tmp.path, 'via'));
      const r = await runPlugin(OURS, { ...env('ADD', 'a'), CNI_TS_CODE_CACHE_DIR: join(tmp.path, 'via', 'cache') }, conf());
      expect(r.code).toBe(0);
      expect(fs.readdirSync(join(parent, 'cache'))).toEqual([]);
    });

    it.each([
      ['owned by another user', (d: string) => fs.chownSync(d, 65534, 65534)],
      ['group-writable (not sticky)', (d: string) => fs.chmodSync(d, 0o775)],
    ])('a parent %s: not used', async (_what, spoil) => {
      const parent = join(tmp.path, 'parent');
      fs.mkdirSync(join(parent, 'cache'), { recursive: true, mode: 0o700 });
      const old = plantOld(join(parent, 'cache'));
      spoil(parent);
      const r = await runPlugin(OURS, { ...env('ADD', 'a'), CNI_TS_CODE_CACHE_DIR: join(parent, 'cache') }, conf());
      expect(r.code).toBe(0);
      expect(fs.readdirSync(join(parent, 'cache'))).toEqual([old.split('/').pop()]);
    });

    it('a cache made from another source of the same length is not used (V8 alone would run it)', async () => {
      // The length of the source the plugin compiles, seen by a --require'd hook on vm.Script.
      const hook = join(tmp.path, 'hook.js');
      const lengthFile = join(tmp.path, 'length');
      fs.writeFileSync(
        hook,
        `const vm = require('vm'); const S = vm.Script; vm.Script = class extends S { constructor(src, o) { require('fs').writeFileSync(${JSON.stringify(lengthFile)}, String(src.length)); super(src, o); } };`,
      );
      execFileSync('node', ['--require', hook, OURS], { env: { PATH: process.env.PATH!, ...env('VERSION', 'a'), CNI_TS_CODE_CACHE_DIR: 'off' }, input: '{"cniVersion":"1.0.0"}' });
      const length = Number(fs.readFileSync(lengthFile, 'utf8'));
      expect(length).toBeGreaterThan(10_000);

      // A first call names the cache file; then a cache of another source of that length, made by the same node, replaces it.
      expect((await runPlugin(OURS, env('ADD', 'a'), conf())).code).toBe(0);
      const [name] = cacheFiles();
      const marker = join(tmp.path, 'other-source-ran');
      const head = `(function (exports, require, module, __filename, __dirname) {require('fs').writeFileSync(${JSON.stringify(marker)}, 'ran');/*`;
      const other = head + 'x'.repeat(length - head.length - 5) + '*/\n})';
      expect(other.length).toBe(length);
      const made = join(tmp.path, 'other.v8');
      const maker = `const vm = require('vm'), fs = require('fs'); const s = new vm.Script(fs.readFileSync(0, 'utf8')); s.runInThisContext(); fs.writeFileSync(${JSON.stringify(made)}, s.createCachedData());`;
      execFileSync('node', ['-e', maker], { env: { PATH: process.env.PATH! }, input: other });
      // as our writer stores a cache: the digest of the source it was made from, then V8's data, then the data byte-swapped
      const digest = createHash('sha256').update(other).digest('hex');
      const v8data = fs.readFileSync(made);
      // (and as earlier releases stored one: the digest and V8's data once; V8's data alone)
      for (const planted of [Buffer.concat([Buffer.from(digest), v8data, Buffer.from(v8data).swap32()]), Buffer.concat([Buffer.from(digest), v8data]), v8data]) {
        fs.writeFileSync(join(cacheDir, name), planted, { mode: 0o600 });
        const r = await runPlugin(OURS, env('ADD', `b${planted.length}`), conf());
        expect(fs.existsSync(marker), 'the other source ran').toBe(false);
        expect(r.code, r.stdout + r.stderr).toBe(0);
        expect(r.json.ips[0].address).toMatch(/^10\.76\.0\.\d+\/24$/);
      }
    });
  });
});
