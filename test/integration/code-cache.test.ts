// The executables' V8 code cache (src/boot/code-cache.ts): used when present,
// rebuilt when broken, never trusted from a directory others can write.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { OUR_BIN, runPlugin, tempDir, type PluginEnv } from './helpers';

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
});
