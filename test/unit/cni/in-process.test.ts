// Delegates of our own build run in this process, with the output their executable would print.
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { holdsPlugin, ownPlugin, runInProcess } from '../../../src/cni/in-process';
import { runPlugin } from '../../../src/cni/delegate';
import { CniError } from '../../../src/cni/errors';
import type { PluginHandlers, Request } from '../../../src/cni/skel';
// @ts-expect-error build-stamp.mjs is plain JavaScript, run by build.mjs
import { scriptStamp, stampStandalone } from '../../../build-stamp.mjs';

const ID = 'a'.repeat(32);
const OTHER = 'b'.repeat(32);
const dir = fs.mkdtempSync(join(tmpdir(), 'in-process-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.unstubAllEnvs());

/** A script that claims a build and bundle; exec'd, it prints "exec'd" as its error. */
function script(name: string, id: string, bundle: string): string {
  const file = join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${scriptStamp(id, bundle)}echo '{"cniVersion":"1.0.0","code":999,"msg":"exec-d"}'; exit 1\n`);
  fs.chmodSync(file, 0o755);
  return file;
}

const seen: Request[] = [];
const fake: PluginHandlers = {
  name: 'fake',
  knownArgs: [],
  add: async (req) => (seen.push(req), { cniVersion: '1.0.0', ips: [{ address: '10.1.2.3/24' }] }) as never,
  del: async (req) => void seen.push(req),
  check: async () => {
    throw new CniError(3, 'no such container', 'details');
  },
  gc: async () => {},
  status: async () => {},
};
holdsPlugin('fake', async () => fake);
const env = { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'c1', CNI_NETNS: '/run/netns/x', CNI_IFNAME: 'eth0', CNI_PATH: dir, CNI_ARGS: '' };
const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'fake' });

describe('ownPlugin', () => {
  it('takes a file of this build, installed under any name, and the plugin its stamp names', () => {
    expect(ownPlugin(script('renamed', ID, 'fake'), () => ({ id: ID }))).toBeDefined();
  });

  it('execs a file of another build, a bundle this executable does not hold, or no stamp', () => {
    expect(ownPlugin(script('older', OTHER, 'fake'), () => ({ id: ID }))).toBeUndefined();
    expect(ownPlugin(script('unheld', ID, 'portmap'), () => ({ id: ID }))).toBeUndefined();
    expect(ownPlugin(script('unstamped', ID, 'fake'), () => undefined)).toBeUndefined();
    const plain = join(dir, 'plain');
    fs.writeFileSync(plain, '#!/bin/sh\nexit 0\n');
    expect(ownPlugin(plain, () => ({ id: ID }))).toBeUndefined();
  });

  it('takes a standalone executable by the name it is installed under', () => {
    const fakeElf = join(dir, 'fake');
    fs.writeFileSync(fakeElf, Buffer.concat([Buffer.from('\x7fELF', 'latin1'), Buffer.alloc(200)]));
    stampStandalone(fakeElf, ID);
    expect(ownPlugin(fakeElf, () => ({ id: ID }))).toBeDefined();
    const otherName = join(dir, 'other-name');
    fs.copyFileSync(fakeElf, otherName);
    expect(ownPlugin(otherName, () => ({ id: ID }))).toBeUndefined();
  });

  it('CNI_TS_DELEGATE_EXEC=1 forces the exec path', () => {
    vi.stubEnv('CNI_TS_DELEGATE_EXEC', '1');
    expect(ownPlugin(script('forced', ID, 'fake'), () => ({ id: ID }))).toBeUndefined();
  });
});

describe('runInProcess', () => {
  it('gives the plugin the environment and stdin given, and returns what its executable would print', async () => {
    const out = await runInProcess(async () => fake, env, conf);
    expect(out.exitCode).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ cniVersion: '1.0.0', ips: [{ address: '10.1.2.3/24' }], dns: {} });
    expect(seen.at(-1)).toMatchObject({ inv: { command: 'ADD', containerId: 'c1', netns: '/run/netns/x', ifname: 'eth0', path: [dir] }, stdin: conf });
  });

  it("prints the plugin's error object and exits 1, as the executable does", async () => {
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    const out = await runInProcess(async () => fake, { ...env, CNI_COMMAND: 'CHECK' }, conf);
    stderr.mockRestore();
    expect(out.exitCode).toBe(1);
    expect(JSON.parse(out.stdout)).toEqual({ cniVersion: '1.0.0', code: 3, msg: 'no such container', details: 'details' });
  });

  it("runPlugin execs a file that is not this build's", async () => {
    const out = await runPlugin(script('notours', OTHER, 'fake'), env, conf);
    expect([out.exitCode, JSON.parse(out.stdout).msg]).toEqual([1, 'exec-d']);
  });
});
