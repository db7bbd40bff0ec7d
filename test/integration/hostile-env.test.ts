// A runtime passes a plugin its whole environment. NODE_* variables that would
// change what a root plugin runs must change nothing, in both forms: every
// plugin answers as it does in a clean environment, runs no --require'd file,
// opens no debugger, and writes nothing where NODE_V8_COVERAGE,
// NODE_COMPILE_CACHE or NODE_REDIRECT_WARNINGS point.
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OUR_BIN, runProcess, tempDir, type PluginRun } from './helpers';
import { STANDALONE_BIN } from './no-node';

const PLUGINS = ['host-local', 'bridge', 'vxlan-flannel', 'flannel'];
const FORMS = { script: OUR_BIN, standalone: STANDALONE_BIN };
const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';

let tmp: ReturnType<typeof tempDir>;
let marker: string;
const dirs = { coverage: '', compileCache: '', warnings: '' };
let hostile: Record<string, Record<string, string>>;

beforeAll(() => {
  tmp = tempDir('cni-hostile-env');
  marker = join(tmp.path, 'required-ran');
  const required = join(tmp.path, 'x.js');
  writeFileSync(required, `require('fs').writeFileSync(${JSON.stringify(marker)}, 'ran'); console.log('{"hijacked":true}');`);
  const garbageCa = join(tmp.path, 'ca.pem');
  writeFileSync(garbageCa, 'not a certificate\n');
  for (const k of Object.keys(dirs) as (keyof typeof dirs)[]) mkdirSync((dirs[k] = join(tmp.path, k)));
  hostile = {
    require: { NODE_OPTIONS: `--require ${required}` },
    import: { NODE_OPTIONS: `--import ${required}` },
    'inspect-brk': { NODE_OPTIONS: '--inspect-brk=127.0.0.1:0' },
    'unknown flag': { NODE_OPTIONS: '--no-such-flag-anywhere' },
    'extra CA certs': { NODE_EXTRA_CA_CERTS: garbageCa },
    'coverage dir': { NODE_V8_COVERAGE: dirs.coverage },
    'compile cache': { NODE_COMPILE_CACHE: dirs.compileCache },
    'redirected warnings': { NODE_REDIRECT_WARNINGS: join(dirs.warnings, 'w.txt'), NODE_PENDING_DEPRECATION: '1' },
    'ipc channel': { NODE_CHANNEL_FD: '0' },
    'cluster worker id': { NODE_UNIQUE_ID: '1' },
    'no TLS verification': { NODE_TLS_REJECT_UNAUTHORIZED: '0', NODE_USE_ENV_PROXY: '1', HTTPS_PROXY: 'http://127.0.0.1:9' },
  };
});
afterAll(() => tmp?.remove());

/** One call, bounded: a plugin stopped at a debugger breakpoint is killed and fails the test. */
function call(file: string, env: Record<string, string>, stdin: string, args: string[] = []): Promise<PluginRun> {
  return runProcess(['timeout', '--signal=KILL', '30', file, ...args], { PATH, ...env }, stdin);
}

/**
 * No file where the variables point. (The standalone's Node, which reads
 * NODE_COMPILE_CACHE before any script runs, makes an empty directory there;
 * it reads and writes no cache: its main script comes with its own.)
 */
function nothingWritten(): void {
  expect(existsSync(marker), 'the --require/--import file ran').toBe(false);
  for (const [k, d] of Object.entries(dirs)) {
    const files = readdirSync(d, { recursive: true, withFileTypes: true }).filter((e) => !e.isDirectory());
    expect(files.map((e) => join(e.parentPath, e.name)), `${k}: ${d}`).toEqual([]);
  }
}

describe.each(Object.entries(FORMS))('the %s form ignores hostile NODE_* variables', (_form, dir) => {
  it.each(PLUGINS)('%s: VERSION answers as in a clean environment', async (plugin) => {
    const file = join(dir, plugin);
    const clean = await call(file, { CNI_COMMAND: 'VERSION' }, '{"cniVersion":"1.0.0"}');
    expect(clean.code, clean.stderr).toBe(0);
    expect(clean.json.supportedVersions).toContain('1.0.0');
    for (const [what, env] of Object.entries(hostile)) {
      const r = await call(file, { CNI_COMMAND: 'VERSION', ...env }, '{"cniVersion":"1.0.0"}');
      expect({ what, code: r.code, stdout: r.stdout }).toEqual({ what, code: 0, stdout: clean.stdout });
    }
    nothingWritten();
  });

  it('NODE_CHANNEL_FD with NODE_UNIQUE_ID together: the script form ignores them; the standalone fails before any code runs', async () => {
    // Node sets up a cluster worker's IPC channel before the main script of a
    // single executable application runs: nothing we embed can unset them, and
    // nothing of the environment's runs either (a write to the channel fails).
    const env = { CNI_COMMAND: 'VERSION', NODE_CHANNEL_FD: '0', NODE_UNIQUE_ID: '1' };
    const r = await call(join(dir, 'host-local'), env, '{"cniVersion":"1.0.0"}');
    if (_form === 'script') expect({ code: r.code, versions: r.json?.supportedVersions?.length }).toEqual({ code: 0, versions: 7 });
    else expect({ code: r.code, stdout: r.stdout, stderr: r.stderr.match(/EPIPE/)?.[0] }).toEqual({ code: 1, stdout: '', stderr: 'EPIPE' });
  });

  it('host-local: ADD and DEL with hostile NODE_OPTIONS give the normal result', async () => {
    const file = join(dir, 'host-local');
    const dataDir = join(tmp.path, `store-${_form}`);
    const conf = JSON.stringify({
      cniVersion: '1.0.0',
      name: `hostile-${_form}`,
      ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.251.7.0/24' }]] },
    });
    const env = { CNI_CONTAINERID: 'c1', CNI_NETNS: '/proc/self/ns/net', CNI_IFNAME: 'eth0', CNI_PATH: dir, ...hostile.require };
    const add = await call(file, { CNI_COMMAND: 'ADD', ...env }, conf);
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.ips).toEqual([{ address: '10.251.7.2/24', gateway: '10.251.7.1' }]);
    const del = await call(file, { CNI_COMMAND: 'DEL', ...env, ...hostile['inspect-brk'] }, conf);
    expect({ code: del.code, stdout: del.stdout }).toEqual({ code: 0, stdout: '' });
    rmSync(dataDir, { recursive: true, force: true });
    nothingWritten();
  });
});
