// host-local as a runtime runs it: the built bundle, env + config on stdin.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { GO_BIN, OUR_BIN, PluginEnv, runPlugin, sh, tempDir } from './helpers';
import { waitFor } from '../support/wait';

const OURS = join(OUR_BIN, 'host-local');
const GO = join(GO_BIN, 'host-local');
const VERSIONS = ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

let tmp: ReturnType<typeof tempDir>;
let dataDir: string;
beforeEach(() => {
  tmp = tempDir('hl');
  dataDir = join(tmp.path, 'data');
});
afterEach(() => tmp.remove());

function conf(ipam: object = {}, extra: object = {}) {
  return {
    cniVersion: '1.1.0',
    name: 'hlnet',
    type: 'host-local',
    ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.70.0.0/24' }], [{ subnet: 'fd70::/64' }]], ...ipam },
    ...extra,
  };
}
const env = (command: string, id = 'ctr1', ifname = 'eth0', more: Partial<PluginEnv> = {}): PluginEnv => ({
  CNI_COMMAND: command,
  CNI_CONTAINERID: id,
  CNI_NETNS: '/var/run/netns/unused',
  CNI_IFNAME: ifname,
  CNI_PATH: OUR_BIN,
  ...more,
});
const netDir = () => join(dataDir, 'hlnet');
/** A file of our own state that every call reads holding the lock. */
const OUR_STAMP = () => join(dataDir, '.cni-ts', 'hlnet', 'stamp');
const files = () => (fs.existsSync(netDir()) ? fs.readdirSync(netDir()).sort() : []);
/** The reservation files alone (not lock, not last_reserved_ip.*). */
const reserved = () => files().filter((f) => f !== 'lock' && !f.startsWith('last_reserved_ip.'));
const addresses = (json: any) => (json.ips ?? []).map((i: any) => i.address);

/**
 * Every file under `root` with its content: to prove a failed call changed
 * nothing. The index stamp (a cache of the directory's mtime) is left out.
 */
function snapshot(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (!fs.existsSync(root)) return out;
  for (const name of fs.readdirSync(root, { recursive: true }) as string[]) {
    if (name.endsWith('/stamp')) continue;
    const p = join(root, name);
    const st = fs.lstatSync(p);
    out[name] = st.isDirectory() ? '<dir>' : st.isFIFO() ? '<fifo>' : fs.readFileSync(p, 'utf8');
  }
  return out;
}

/** Another process holding the flock on `file`: flock(1) becomes `cat` (no fork), which echoes once it runs. */
async function holdLock(file: string) {
  const child = spawn('flock', ['--exclusive', '--no-fork', file, 'cat'], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.write('held\n');
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('error', reject);
  });
  const closed = new Promise((r) => child.once('close', r));
  return { release: async () => void (child.kill('SIGKILL'), await closed) };
}

/**
 * Starts `plugin` ADD and returns once it blocks inside the network's lock,
 * reading a FIFO put where it reads while holding the lock: last_reserved_ip.0
 * (both plugins read it), or for ours alone a file of our own state, which the
 * Go plugin never reads. A FIFO can be opened for writing without blocking
 * only once a reader has it open. `kill` SIGKILLs the call and restores the file.
 */
async function blockInsideLock(plugin: string, e: PluginEnv, c: object, fifo = join(netDir(), 'last_reserved_ip.0')) {
  const saved = fs.existsSync(fifo) ? fs.readFileSync(fifo, 'utf8') : undefined;
  fs.rmSync(fifo, { force: true });
  sh(['mkfifo', fifo]);
  const child = spawn(plugin, [], { env: { ...e, PATH: process.env.PATH } as any, stdio: ['pipe', 'ignore', 'ignore'] });
  const closed = new Promise((r) => child.on('close', r));
  child.stdin.end(JSON.stringify(c));
  // a FIFO opens for writing (non-blocking) only once a reader has it open: the plugin is inside its lock
  const { value: writer } = await waitFor(`${plugin} to reach ${fifo}`, () => {
    try {
      return fs.openSync(fifo, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
    } catch {
      return undefined;
    }
  }, 30_000, 25);
  return {
    kill: async () => {
      child.kill('SIGKILL');
      await closed;
      fs.closeSync(writer!);
      fs.unlinkSync(fifo);
      if (saved !== undefined) fs.writeFileSync(fifo, saved);
    },
  };
}

/** How many processes the kernel shows blocked in flock(2) on `file` (waiters are the "->" lines of /proc/locks). */
function flockWaiters(file: string): number {
  const ino = `:${fs.statSync(file).ino}`;
  return fs.readFileSync('/proc/locks', 'utf8').split('\n').filter((l) => /->\s+FLOCK\b/.test(l) && l.split(/\s+/).some((f) => f.endsWith(ino))).length;
}

describe('spec matrix', () => {
  it.each(VERSIONS)('cniVersion %s: ADD prints its result form, DEL releases', async (v) => {
    const c = conf({}, { cniVersion: v });
    const add = await runPlugin(OURS, env('ADD'), c);
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.cniVersion).toBe(v);
    if (v === '0.1.0' || v === '0.2.0') {
      expect(add.json.ip4).toEqual({ ip: '10.70.0.2/24', gateway: '10.70.0.1' });
      expect(add.json.ip6).toEqual({ ip: 'fd70::2/64', gateway: 'fd70::1' });
    } else {
      expect(addresses(add.json)).toEqual(['10.70.0.2/24', 'fd70::2/64']);
      const versions = add.json.ips.map((i: any) => i.version);
      expect(versions).toEqual(v.startsWith('1.') ? [undefined, undefined] : ['4', '6']);
    }
    const check = await runPlugin(OURS, env('CHECK'), c);
    expect(check.code === 0, check.stdout).toBe(v >= '0.4.0');
    if (v < '0.4.0') expect(check.json.code).toBe(1);
    const del = await runPlugin(OURS, env('DEL'), c);
    expect(del.code, del.stdout).toBe(0);
    expect(del.stdout).toBe('');
    expect(reserved()).toEqual([]);
    for (const cmd of ['GC', 'STATUS']) {
      const r = await runPlugin(OURS, { CNI_COMMAND: cmd }, { ...c, 'cni.dev/valid-attachments': [] });
      expect(r.code === 0, `${cmd} ${r.stdout}`).toBe(v === '1.1.0');
      if (v !== '1.1.0') expect(r.json.code).toBe(1);
    }
  });

  it('VERSION needs no other variable and lists all versions', async () => {
    const r = await runPlugin(OURS, { CNI_COMMAND: 'VERSION' }, { cniVersion: '0.4.0' });
    expect(r.json).toEqual({ cniVersion: '0.4.0', supportedVersions: VERSIONS });
  });

  it('the bundle runs alone, copied into an empty directory', async () => {
    const lone = join(tmp.path, 'alone');
    fs.mkdirSync(lone);
    fs.copyFileSync(OURS, join(lone, 'host-local'));
    fs.chmodSync(join(lone, 'host-local'), 0o755);
    const r = await runPlugin(join(lone, 'host-local'), env('ADD'), conf());
    expect(r.code, r.stderr).toBe(0);
    expect(sh([join(lone, 'host-local'), '--version']).trim()).toMatch(/^\d+\.\d+\.\d+$/);
    expect(sh([join(lone, 'host-local'), '--help'])).toMatch(/ls \[options\] \[network\]/);
  });
});

describe('ADD', () => {
  it('is idempotent for an attachment that already holds addresses', async () => {
    const first = await runPlugin(OURS, env('ADD'), conf());
    const again = await runPlugin(OURS, env('ADD'), conf());
    expect(again.code).toBe(0);
    expect(addresses(again.json)).toEqual(addresses(first.json));
    expect(reserved()).toHaveLength(2);
  });

  it('works for container IDs longer than a file name may be', async () => {
    const id = 'x'.repeat(300);
    expect(addresses((await runPlugin(OURS, env('ADD', id), conf())).json)).toEqual(['10.70.0.2/24', 'fd70::2/64']);
    expect(fs.readFileSync(join(netDir(), '10.70.0.2'), 'utf8')).toBe(`${id}\r\neth0`);
    expect((await runPlugin(OURS, env('CHECK', id), conf())).code).toBe(0);
    expect((await runPlugin(OURS, env('DEL', id), conf())).code).toBe(0);
    expect(files()).toEqual(['last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('writes the Go format byte for byte, and routes and dns as configured', async () => {
    const resolv = join(tmp.path, 'resolv.conf');
    fs.writeFileSync(resolv, '# comment\nnameserver 10.70.0.53\nsearch a.example b.example\noptions ndots:2\ndomain example\n');
    const r = await runPlugin(OURS, env('ADD', 'ctr-x', 'net1'), conf({ routes: [{ dst: '0.0.0.0/0' }], resolvConf: resolv }));
    expect(r.json.routes).toEqual([{ dst: '0.0.0.0/0' }]);
    expect(r.json.dns).toEqual({ nameservers: ['10.70.0.53'], domain: 'example', search: ['a.example', 'b.example'], options: ['ndots:2'] });
    expect(fs.readFileSync(join(netDir(), '10.70.0.2'), 'utf8')).toBe('ctr-x\r\nnet1');
    expect(fs.readFileSync(join(netDir(), 'last_reserved_ip.0'), 'utf8')).toBe('10.70.0.2');
    expect(fs.readFileSync(join(netDir(), 'last_reserved_ip.1'), 'utf8')).toBe('fd70::2');
    expect(fs.statSync(join(netDir(), '10.70.0.2')).mode & 0o777).toBe(0o600);
  });

  it('honours requested addresses from CNI_ARGS, args and runtimeConfig', async () => {
    const r1 = await runPlugin(OURS, env('ADD', 'a', 'eth0', { CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.70.0.77' }), conf());
    expect(addresses(r1.json)).toEqual(['10.70.0.77/24', 'fd70::2/64']);
    const r2 = await runPlugin(OURS, env('ADD', 'b'), conf({}, { args: { cni: { ips: ['10.70.0.78'] } } }));
    expect(addresses(r2.json)[0]).toBe('10.70.0.78/24');
    const r3 = await runPlugin(OURS, env('ADD', 'c'), conf({}, { runtimeConfig: { ips: ['fd70::99/64'] } }));
    expect(addresses(r3.json)[1]).toBe('fd70::99/64');
  });

  it('a requested address already taken names the owner, and changes nothing', async () => {
    await runPlugin(OURS, env('ADD', 'owner-ctr'), conf({}, { args: { cni: { ips: ['10.70.0.9'] } } }));
    const before = snapshot(dataDir);
    const r = await runPlugin(OURS, env('ADD', 'other'), conf({}, { args: { cni: { ips: ['10.70.0.9'] } } }));
    expect(r.code).not.toBe(0);
    expect(r.json.msg).toMatch(/10.70.0.9 is already reserved by container owner-ctr \(eth0\)/);
    expect(snapshot(dataDir)).toEqual(before);
  });

  it('exhaustion names the range set and rolls back the other sets', async () => {
    const tiny = conf({ ranges: [[{ subnet: '10.70.0.0/24' }], [{ subnet: '10.71.0.0/30' }]] });
    expect((await runPlugin(OURS, env('ADD', 'a'), tiny)).code).toBe(0);
    const before = snapshot(dataDir);
    const r = await runPlugin(OURS, env('ADD', 'b'), tiny);
    expect(r.json.msg).toMatch(/no IP addresses available in range set 10.71.0.1-10.71.0.2/);
    expect(snapshot(dataDir)).toEqual(before);
  });

  it('hands out addresses round-robin, skipping the gateway, wrapping at the end', async () => {
    const small = conf({ ranges: [[{ subnet: '10.70.0.0/29', gateway: '10.70.0.3' }]] });
    const got: string[] = [];
    for (let i = 0; i < 5; i++) got.push(addresses((await runPlugin(OURS, env('ADD', `c${i}`), small)).json)[0]);
    expect(got).toEqual(['10.70.0.1/29', '10.70.0.2/29', '10.70.0.4/29', '10.70.0.5/29', '10.70.0.6/29']);
    await runPlugin(OURS, env('DEL', 'c1'), small);
    expect(addresses((await runPlugin(OURS, env('ADD', 'c9'), small)).json)).toEqual(['10.70.0.2/29']);
  });
});

describe('DEL', () => {
  it('succeeds when nothing is held, when the directory is missing, and without ranges', async () => {
    expect((await runPlugin(OURS, env('DEL'), conf())).code).toBe(0);
    expect(fs.existsSync(dataDir)).toBe(false); // and created nothing
    await runPlugin(OURS, env('ADD'), conf());
    const noRanges = { cniVersion: '1.0.0', name: 'hlnet', ipam: { type: 'host-local', dataDir } };
    const r = await runPlugin(OURS, env('DEL', 'ctr1', 'eth0', { CNI_NETNS: undefined }), noRanges);
    expect(r.code, r.stdout).toBe(0);
    expect(files()).toEqual(['last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('a damaged index is rebuilt from the reservation files, and DEL still releases', async () => {
    await runPlugin(OURS, env('ADD', 'dmg'), conf());
    const buckets = join(dataDir, '.cni-ts', 'hlnet', 'index');
    for (const b of fs.readdirSync(buckets)) fs.writeFileSync(join(buckets, b), '10.70.0.2 torn'); // the stamp still says "fresh"
    const r = await runPlugin(OURS, env('DEL', 'dmg'), conf());
    expect(r.code, r.stdout).toBe(0);
    expect(r.stderr).toMatch(/rebuilding the index/);
    expect(files()).toEqual(['last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('releases legacy files that hold only the container ID', async () => {
    fs.mkdirSync(netDir(), { recursive: true });
    fs.writeFileSync(join(netDir(), '10.70.0.33'), 'legacy-ctr');
    await runPlugin(OURS, env('ADD', 'someone-else'), conf()); // the index is built with the legacy file in it
    const r = await runPlugin(OURS, env('DEL', 'legacy-ctr'), conf());
    expect(r.code).toBe(0);
    expect(files()).not.toContain('10.70.0.33');
  });
});

describe('CHECK', () => {
  it('passes for held addresses and names the drift otherwise', async () => {
    const add = await runPlugin(OURS, env('ADD'), conf());
    expect((await runPlugin(OURS, env('CHECK'), conf({}, { prevResult: add.json }))).code).toBe(0);
    const wrong = { ...add.json, ips: [{ address: '10.70.0.200/24' }] };
    const r = await runPlugin(OURS, env('CHECK'), conf({}, { prevResult: wrong }));
    expect(r.code).not.toBe(0);
    expect(r.json.msg).toMatch(/10.70.0.200 from prevResult is not reserved for ctr1 \(eth0\)/);
    const none = await runPlugin(OURS, env('CHECK', 'nobody'), conf());
    expect(none.json.msg).toMatch(/no address is reserved for nobody \(eth0\)/);
  });
});

describe('GC', () => {
  it('releases attachments that are not valid, and torn files, and nothing else', async () => {
    for (const id of ['keep', 'drop']) await runPlugin(OURS, env('ADD', id), conf());
    fs.writeFileSync(join(netDir(), '10.70.0.50'), ''); // torn: an empty reservation, long ago
    fs.utimesSync(join(netDir(), '10.70.0.50'), new Date(0), new Date(0));
    fs.writeFileSync(join(netDir(), '10.70.0.51'), 'legacy-keep');
    fs.writeFileSync(join(netDir(), 'lock'), '');
    const r = await runPlugin(OURS, { CNI_COMMAND: 'GC' }, conf({}, {
      'cni.dev/valid-attachments': [{ containerID: 'keep', ifname: 'eth0' }, { containerID: 'legacy-keep', ifname: 'eth0' }],
    }));
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(files()).toEqual(['10.70.0.2', '10.70.0.51', 'fd70::2', 'last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
    // the index was rebuilt: DEL of the kept one still finds its addresses
    await runPlugin(OURS, env('DEL', 'keep'), conf());
    expect(files()).toEqual(['10.70.0.51', 'last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('reads the older cni.dev/attachments key and refuses a config with neither', async () => {
    await runPlugin(OURS, env('ADD', 'x'), conf());
    expect((await runPlugin(OURS, { CNI_COMMAND: 'GC' }, conf({}, { 'cni.dev/attachments': [{ containerID: 'x', ifname: 'eth0' }] }))).code).toBe(0);
    expect(files()).toContain('10.70.0.2');
    const r = await runPlugin(OURS, { CNI_COMMAND: 'GC' }, conf());
    expect(r.json.code).toBe(7);
    expect(r.json.msg).toMatch(/cni.dev\/valid-attachments/);
    expect(files()).toContain('10.70.0.2');
  });
});

describe('STATUS', () => {
  it('is available, then code 50 when a range set is full or state cannot be written', async () => {
    const tiny = conf({ ranges: [[{ subnet: '10.72.0.0/30' }]] });
    expect((await runPlugin(OURS, { CNI_COMMAND: 'STATUS' }, tiny)).code).toBe(0);
    await runPlugin(OURS, env('ADD'), tiny);
    const full = await runPlugin(OURS, { CNI_COMMAND: 'STATUS' }, tiny);
    expect(full.json.code).toBe(50);
    expect(full.json.msg).toMatch(/no free addresses in range set 10.72.0.1-10.72.0.2/);
    const file = join(tmp.path, 'a-file');
    fs.writeFileSync(file, '');
    const broken = await runPlugin(OURS, { CNI_COMMAND: 'STATUS' }, conf({ dataDir: join(file, 'sub') }));
    expect(broken.json.code).toBe(50);
    expect(broken.json.msg).toMatch(/cannot write state/);
  });
});

describe('interop with the Go host-local on one dataDir', () => {
  it('Go ADDs, we CHECK, list and DEL; then we ADD and Go CHECKs and DELs', async () => {
    const goAdd = await runPlugin(GO, env('ADD', 'go-ctr'), conf({}, { cniVersion: '1.0.0' }));
    expect(goAdd.code, goAdd.stdout).toBe(0);
    expect(addresses(goAdd.json)).toEqual(['10.70.0.2/24', 'fd70::2/64']);
    expect((await runPlugin(OURS, env('CHECK', 'go-ctr'), conf({}, { prevResult: goAdd.json }))).code).toBe(0);
    const ls = JSON.parse(sh([OURS, 'ls', '--data-dir', dataDir, '--json']));
    expect(ls.map((r: any) => [r.ip, r.containerID, r.ifname])).toEqual([
      ['10.70.0.2', 'go-ctr', 'eth0'],
      ['fd70::2', 'go-ctr', 'eth0'],
    ]);
    // ours continues Go's round-robin, then releases Go's reservation
    const ourAdd = await runPlugin(OURS, env('ADD', 'ts-ctr'), conf());
    expect(addresses(ourAdd.json)).toEqual(['10.70.0.3/24', 'fd70::3/64']);
    expect((await runPlugin(OURS, env('DEL', 'go-ctr'), conf())).code).toBe(0);
    expect(files()).not.toContain('10.70.0.2');
    // Go reads ours: CHECK (it looks for any file of the container) and DEL
    expect((await runPlugin(GO, env('CHECK', 'ts-ctr'), conf({}, { cniVersion: '1.0.0' }))).code).toBe(0);
    expect((await runPlugin(GO, env('DEL', 'ts-ctr'), conf({}, { cniVersion: '1.0.0' }))).code).toBe(0);
    expect(reserved()).toEqual([]);
    // and we notice Go's changes: an ADD by Go after ours is found by our DEL
    await runPlugin(GO, env('ADD', 'go-2'), conf({}, { cniVersion: '1.0.0' }));
    expect((await runPlugin(OURS, env('DEL', 'go-2'), conf())).code).toBe(0);
    expect(reserved()).toEqual([]);
  });
});

describe('stickyTTL (the Go plugin on the same directory)', () => {
  const sticky = () => conf({ stickyTTL: '1h', ranges: [[{ subnet: '10.76.0.0/29' }]] }); // .2 to .6 (.1 is the gateway)
  const podArgs = (name: string) => `IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=${name};K8S_POD_UID=u-${name}`;

  it('a parked address is a reservation the Go plugin reads as taken; the recreated pod gets it back; ls shows it', async () => {
    const first = await runPlugin(OURS, env('ADD', 'ctr-1', 'eth0', { CNI_ARGS: podArgs('db-0') }), sticky());
    expect(addresses(first.json)).toEqual(['10.76.0.2/29']);
    expect((await runPlugin(OURS, env('DEL', 'ctr-1', 'eth0', { CNI_ARGS: podArgs('db-0') }), sticky())).code).toBe(0);
    expect(fs.readFileSync(join(netDir(), '10.76.0.2'), 'utf8')).toBe('ctr-1\r\neth0');

    const ls = JSON.parse(sh([OURS, 'ls', '--data-dir', dataDir, '--json']));
    expect(ls).toEqual([expect.objectContaining({ ip: '10.76.0.2', containerID: 'ctr-1', parkedFor: 'prod/db-0', parkedUntil: expect.stringMatching(/^\d{4}-.*Z$/) })]);
    const noConf = join(dataDir, 'no-such-conf-dir');
    const table = sh([OURS, 'ls', '--data-dir', dataDir, '--conf-dir', noConf]);
    expect(table).toMatch(/10\.76\.0\.2\s+ctr-1\s+eth0\s+\?\s+parked for prod\/db-0 until \d{4}-/);
    // the "?" says why under the table
    expect(table).toMatch(new RegExp(`\nRANGESET \\? \\(\\S+\\): cannot read --conf-dir ${noConf}: ENOENT \\(no such file or directory\\)\n$`));

    // The Go plugin fills the rest of the range and never hands out the parked address.
    const goConf = { ...sticky(), cniVersion: '1.0.0' };
    const goGot: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await runPlugin(GO, env('ADD', `go-${i}`), goConf);
      expect(r.code, r.stdout).toBe(0);
      goGot.push(addresses(r.json)[0]);
    }
    expect(goGot.sort()).toEqual(['10.76.0.3/29', '10.76.0.4/29', '10.76.0.5/29', '10.76.0.6/29']);
    const goFull = await runPlugin(GO, env('ADD', 'go-4'), goConf);
    expect(goFull.code).not.toBe(0);
    expect(goFull.stdout).toMatch(/no IP addresses available/);

    // The pod is recreated (a new sandbox, a new container ID): its address comes back.
    const again = await runPlugin(OURS, env('ADD', 'ctr-2', 'eth0', { CNI_ARGS: podArgs('db-0') }), sticky());
    expect(addresses(again.json)).toEqual(['10.76.0.2/29']);
    expect(fs.readFileSync(join(netDir(), '10.76.0.2'), 'utf8')).toBe('ctr-2\r\neth0');
    // and the Go plugin can DEL it like any of its own
    expect((await runPlugin(GO, env('DEL', 'ctr-2'), goConf)).code).toBe(0);
    expect(reserved()).not.toContain('10.76.0.2');
  });

  it('a full network hands another pod the address parked longest; a requested parked address names its pod', async () => {
    for (const name of ['a', 'b', 'c', 'd', 'e']) {
      expect((await runPlugin(OURS, env('ADD', `ctr-${name}`, 'eth0', { CNI_ARGS: podArgs(name) }), sticky())).code).toBe(0);
    }
    await runPlugin(OURS, env('DEL', 'ctr-c', 'eth0', { CNI_ARGS: podArgs('c') }), sticky());
    const asked = await runPlugin(OURS, env('ADD', 'ctr-x', 'eth0', { CNI_ARGS: `${podArgs('x')};IP=10.76.0.4` }), sticky());
    expect(asked.json).toMatchObject({ code: 11, msg: expect.stringMatching(/^requested IP 10\.76\.0\.4 is parked for pod prod\/c until \d{4}-/) });
    const full = await runPlugin(OURS, env('ADD', 'ctr-f', 'eth0', { CNI_ARGS: podArgs('f') }), sticky());
    expect(addresses(full.json)).toEqual(['10.76.0.4/29']);
  });
});

describe('concurrency and crashes', () => {
  it('32 concurrent ADDs get 32 distinct addresses; 32 DELs leave only lock and last_reserved_ip.*', async () => {
    const c = conf({ ranges: [[{ subnet: '10.73.0.0/24' }]] });
    const adds = await Promise.all(Array.from({ length: 32 }, (_, i) => runPlugin(OURS, env('ADD', `par${i}`), c)));
    for (const a of adds) expect(a.code, a.stdout + a.stderr).toBe(0);
    const ips = adds.map((a) => addresses(a.json)[0]);
    expect(new Set(ips).size).toBe(32);
    const dels = await Promise.all(Array.from({ length: 32 }, (_, i) => runPlugin(OURS, env('DEL', `par${i}`), c)));
    for (const d of dels) expect(d.code, d.stdout).toBe(0);
    expect(reserved()).toEqual([]);
  });

  it('waits a bounded time for a held lock, then answers code 11 and changes nothing', async () => {
    await runPlugin(OURS, env('ADD', 'first'), conf());
    const holder = await holdLock(join(netDir(), 'lock'));
    try {
      const before = snapshot(dataDir);
      const started = Date.now();
      const r = await runPlugin(OURS, env('ADD', 'second'), conf({ lockTimeoutMs: 700 }));
      expect(r.json.code).toBe(11);
      expect(r.json.msg).toMatch(/timed out after 700 ms waiting for the lock .*hlnet\/lock/);
      expect(Date.now() - started).toBeLessThan(5000);
      expect(snapshot(dataDir)).toEqual(before);
    } finally {
      await holder.release();
    }
  });

  it('a call SIGKILLed holding the lock costs the next call nothing, and leaves no torn file', async () => {
    await runPlugin(OURS, env('ADD', 'first'), conf());
    const victim = await blockInsideLock(OURS, env('ADD', 'victim'), conf());
    await victim.kill();
    const started = Date.now();
    const r = await runPlugin(OURS, env('ADD', 'after'), conf());
    expect(r.code, r.stdout).toBe(0);
    expect(Date.now() - started).toBeLessThan(1000); // the kernel freed the lock when the holder died
    for (const f of files().filter((n) => /^[0-9a-f.:]+$/.test(n) && !n.startsWith('last'))) {
      expect(fs.readFileSync(join(netDir(), f), 'utf8')).toMatch(/^[a-z]+\r\neth0$/);
    }
  });

  it('the Go plugin and ours exclude each other on one directory (flock on <network>/lock)', async () => {
    const goConf = conf({}, { cniVersion: '1.0.0' });
    await runPlugin(OURS, env('ADD', 'first'), conf());
    // ours holds the lock: Go's ADD waits for it
    const ours = await blockInsideLock(OURS, env('ADD', 'ours-blocked'), conf(), OUR_STAMP());
    const goAdd = runPlugin(GO, env('ADD', 'go-waits'), goConf);
    let goDone = false;
    void goAdd.then(() => (goDone = true));
    await waitFor('Go\'s ADD to wait for the lock', () => flockWaiters(join(netDir(), 'lock')) > 0, 30_000);
    expect(goDone).toBe(false);
    await ours.kill();
    expect((await goAdd).code).toBe(0);
    // Go holds the lock: our ADD waits, and gives up at lockTimeoutMs
    const go = await blockInsideLock(GO, env('ADD', 'go-blocked'), goConf);
    const r = await runPlugin(OURS, env('ADD', 'ours-waits'), conf({ lockTimeoutMs: 700 }));
    expect(r.json?.code, r.stdout).toBe(11);
    await go.kill();
    expect((await runPlugin(OURS, env('ADD', 'ours-waits'), conf())).code).toBe(0);
  });

  it('SIGKILL at moments spread over a whole ADD never leaves a torn reservation', async () => {
    const c = conf({ ranges: [[{ subnet: '10.74.0.0/24' }]] });
    const spawnAdd = (id: string) => {
      const child = spawn(OURS, [], { env: { ...env('ADD', id), PATH: process.env.PATH } as any, stdio: ['pipe', 'ignore', 'ignore'] });
      const closed = new Promise<void>((r) => child.on('close', () => r()));
      child.stdin.end(JSON.stringify(c));
      return { child, closed };
    };
    // How long one ADD takes on this machine right now; kills are spread over that span.
    const t0 = Date.now();
    await spawnAdd('timing').closed;
    const span = Date.now() - t0;
    let killed = 0;
    for (let i = 0; i < 30; i++) {
      const { child, closed } = spawnAdd(`k${i}`);
      await new Promise((r) => setTimeout(r, (span * i) / 30));
      if (child.exitCode === null && child.kill('SIGKILL')) killed++;
      await closed;
    }
    expect(killed).toBeGreaterThan(10);
    const ls = JSON.parse(sh([OURS, 'ls', '--data-dir', dataDir, '--json']));
    expect(ls.filter((row: any) => row.torn)).toEqual([]);
    for (const row of ls) expect(row.ifname).toBe('eth0');
    // and the store keeps working after all that (a lock left by a kill is reclaimed)
    const after = await runPlugin(OURS, env('ADD', 'survivor'), c);
    expect(after.code, after.stdout).toBe(0);
  }, 60_000);
});

describe('bad input: the right code, a message naming the field, nothing written', () => {
  const good = () => conf();
  const cases: [string, Partial<PluginEnv>, unknown, number, RegExp][] = [
    ['missing CNI_COMMAND', { CNI_COMMAND: '' }, good(), 4, /CNI_COMMAND/],
    ['unknown CNI_COMMAND', { CNI_COMMAND: 'FROB' }, good(), 4, /FROB/],
    ['missing CNI_NETNS on ADD', { CNI_NETNS: '' }, good(), 4, /CNI_NETNS/],
    ['bad container ID', { CNI_CONTAINERID: '../etc' }, good(), 4, /CNI_CONTAINERID/],
    ['ifname too long', { CNI_IFNAME: 'abcdefghijklmnop' }, good(), 4, /CNI_IFNAME/],
    ['ifname with a slash', { CNI_IFNAME: 'a/b' }, good(), 4, /CNI_IFNAME/],
    ['unknown CNI_ARGS key', { CNI_ARGS: 'FOO=bar' }, good(), 4, /FOO/],
    ['malformed CNI_ARGS', { CNI_ARGS: 'garbage' }, good(), 4, /CNI_ARGS/],
    ['not JSON', {}, '{"cniVersion":', 6, /decoding/],
    ['JSON but not an object', {}, '[1,2]', 6, /object/],
    ['unsupported version', {}, { ...good(), cniVersion: '2.0.0' }, 1, /2.0.0/],
    ['missing name', {}, { ...good(), name: undefined }, 7, /name/],
    ['bad network name', {}, { ...good(), name: '../../etc' }, 7, /network name/],
    ['network name longer than a file name', {}, { ...good(), name: 'n'.repeat(256) }, 7, /network name \(field "name"\) is 256 bytes/],
    ['missing ipam', {}, { cniVersion: '1.0.0', name: 'hlnet' }, 7, /ipam/],
    ['relative dataDir', {}, conf({ dataDir: 'rel' }), 7, /ipam.dataDir/],
    ['subnet too small', {}, conf({ ranges: [[{ subnet: '10.75.0.0/31' }]] }), 7, /subnet/],
    ['start after end', {}, conf({ ranges: [[{ subnet: '10.75.0.0/24', rangeStart: '10.75.0.9', rangeEnd: '10.75.0.5' }]] }), 7, /rangeStart/],
    ['requested IP outside ranges', { CNI_ARGS: 'IP=192.0.2.1' }, good(), 7, /192.0.2.1/],
    ['unreadable resolvConf', {}, conf({ resolvConf: '/nonexistent/resolv.conf' }), 7, /resolvConf/],
    ['lockTimeoutMs not a number', {}, conf({ lockTimeoutMs: 'soon' }), 7, /lockTimeoutMs/],
  ];
  it.each(cases)('%s', async (_name, envOverride, body, code, message) => {
    const r = await runPlugin(OURS, { ...env('ADD'), ...envOverride } as PluginEnv, body);
    expect(r.code).not.toBe(0);
    expect(r.json, r.stdout).toBeDefined();
    expect(r.json.code).toBe(code);
    expect(r.json.msg).toMatch(message);
    expect(fs.existsSync(dataDir)).toBe(false);
  });
});

describe('full and read-only filesystems', () => {
  /** A small tmpfs as the dataDir's filesystem, for this test only. */
  function smallFs(size: string) {
    const mnt = join(tmp.path, 'small');
    fs.mkdirSync(mnt);
    sh(['mount', '-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'tmpfs', mnt]);
    dataDir = join(mnt, 'data');
    return {
      /** Writes a file until the filesystem is full. */
      fill: () => {
        const fd = fs.openSync(join(mnt, 'filler'), 'w');
        try {
          for (;;) fs.writeSync(fd, Buffer.alloc(4096));
        } catch (err) {
          expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
        } finally {
          fs.closeSync(fd);
        }
      },
      unfill: () => fs.unlinkSync(join(mnt, 'filler')),
      readOnly: () => sh(['mount', '-o', 'remount,ro', mnt]),
      unmount: () => sh(['umount', mnt]),
    };
  }

  it('full: DEL still releases and exits 0; an ADD that fails leaves no reservation; both name the cause', async () => {
    const small = smallFs('512k');
    try {
      for (const id of ['a', 'b']) expect((await runPlugin(OURS, env('ADD', id), conf())).code).toBe(0);
      small.fill();
      // A second network on the full filesystem (an ADD on the first may just fit: it frees its stamp).
      const add = await runPlugin(OURS, env('ADD', 'c'), { ...conf(), name: 'other' });
      expect(add.json?.code, add.stdout).toBe(5);
      expect(add.json.msg).toBe(`cannot write ${dataDir}/.cni-ts/other/reservation.tmp: ENOSPC (no space left on device)`);
      expect(fs.readdirSync(join(dataDir, 'other'))).toEqual(['lock']); // no reservation, no last_reserved_ip
      expect(fs.readdirSync(join(dataDir, '.cni-ts', 'other'))).toEqual([]);
      const del = await runPlugin(OURS, env('DEL', 'a'), conf());
      expect(del.code, del.stdout + del.stderr).toBe(0);
      expect(reserved()).toEqual(['10.70.0.3', 'fd70::3']);
      // with room again, everything carries on: the index was rebuilt where it could not be saved
      small.unfill();
      expect(addresses((await runPlugin(OURS, env('ADD', 'c'), conf())).json)).toEqual(['10.70.0.4/24', 'fd70::4/64']);
      expect((await runPlugin(OURS, env('DEL', 'b'), conf())).code).toBe(0);
      expect((await runPlugin(OURS, env('CHECK', 'b'), conf())).code).not.toBe(0);
      expect(reserved()).toEqual(['10.70.0.4', 'fd70::4']);
    } finally {
      small.unmount();
    }
  });

  it('read-only: ADD fails with code 5 naming the path and EROFS (not ENOENT), and a new dataDir is not half made', async () => {
    const small = smallFs('512k');
    try {
      small.readOnly();
      const add = await runPlugin(OURS, env('ADD'), conf());
      expect(add.json?.code, add.stdout).toBe(5);
      expect(add.json.msg).toBe(`cannot create ${netDir()}: EROFS (read-only file system)`);
    } finally {
      small.unmount();
    }
  });
});

describe('ls', () => {
  it('a missing or non-directory --data-dir is an error, not an empty list', () => {
    for (const [dir, cause] of [[join(tmp.path, 'typo'), 'ENOENT'], ['/etc/hostname', 'ENOTDIR']]) {
      const r = spawnSync(OURS, ['ls', '--data-dir', dir], { encoding: 'utf8' });
      expect(r.status).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(`host-local: cannot list --data-dir ${dir}: ${cause} (${cause === 'ENOENT' ? 'no such file or directory' : 'not a directory'})\n`);
    }
  });

  it('lists reservations with their range set from the config directory and flags torn files', async () => {
    const confDir = join(tmp.path, 'net.d');
    fs.mkdirSync(confDir);
    fs.writeFileSync(join(confDir, '10-hl.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'hlnet', plugins: [{ type: 'bridge', ipam: conf().ipam }] }));
    await runPlugin(OURS, env('ADD', 'lister'), conf());
    fs.writeFileSync(join(netDir(), '10.70.0.99'), '');
    const rows = JSON.parse(sh([OURS, 'ls', 'hlnet', '--data-dir', dataDir, '--conf-dir', confDir, '--json']));
    expect(rows).toEqual([
      { network: 'hlnet', ip: '10.70.0.2', containerID: 'lister', ifname: 'eth0', rangeSet: 0, torn: false, parkedFor: null, parkedUntil: null },
      { network: 'hlnet', ip: '10.70.0.99', containerID: null, ifname: null, rangeSet: 0, torn: true, parkedFor: null, parkedUntil: null },
      { network: 'hlnet', ip: 'fd70::2', containerID: 'lister', ifname: 'eth0', rangeSet: 1, torn: false, parkedFor: null, parkedUntil: null },
    ]);
    expect(sh([OURS, 'ls', '--data-dir', dataDir, '--conf-dir', confDir])).toMatch(/10.70.0.99\s+-\s+-\s+0\s+TORN/);
  });
});
