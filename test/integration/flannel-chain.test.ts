// The kube-flannel pod chain (flannel -> bridge -> host-local) in one process
// (issue 18): when the delegates are this very build, however installed (hard
// links, copies under other names, symlinks to one file, the scripts), they
// run in the flannel plugin's process, and every result and error is the one
// the exec path (CNI_TS_DELEGATE_EXEC=1) gives. Files that carry this build's
// stamp but cannot run prove the in-process path is taken; a stamp of another
// build is exec'd.
// Subnets: flannel network 10.94.0.0/16.
import { chmodSync, copyFileSync, existsSync, linkSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GO_BIN, Lab, OUR_BIN } from './bridge-helpers';
import { STANDALONE_BIN } from './no-node';

const CHAIN = ['flannel', 'bridge', 'host-local'];
let lab: Lab;
let ctr: string;
let ourId: string;

beforeAll(() => {
  lab = new Lab('fch');
  ctr = lab.netns('ctr');
  const tail = readFileSync(join(STANDALONE_BIN, 'bridge')).subarray(-64).toString('latin1');
  const m = /\ncni-ts-build:([0-9a-f]{32})\n$/.exec(tail);
  if (!m) throw new Error(`${STANDALONE_BIN}/bridge carries no build stamp (run node build.mjs --standalone)`);
  ourId = m[1];
});
afterAll(() => lab?.close());

/** A directory of plugins made by `make` (name -> how it is put there). */
function installDir(name: string, make: (dir: string) => void): string {
  const dir = join(lab.dir, 'bin', name);
  mkdirSync(dir, { recursive: true });
  make(dir);
  return dir;
}

const INSTALLS: Record<string, () => string> = {
  'standalone, hard-linked': () => installDir('hl', (d) => CHAIN.forEach((p) => linkSync(join(STANDALONE_BIN, 'flannel'), join(d, p)))),
  // each a copy made from another name's file: a standalone executable runs the plugin it is named after
  'standalone, copies under other names': () =>
    installDir('cp', (d) => CHAIN.forEach((p, k) => copyFileSync(join(STANDALONE_BIN, ['host-local', 'vxlan-flannel', 'bridge'][k]), join(d, p)))),
  'standalone, symlinks to one file': () =>
    installDir('sym', (d) => {
      copyFileSync(join(STANDALONE_BIN, 'bridge'), join(d, 'cni-ts'));
      CHAIN.forEach((p) => symlinkSync(join(d, 'cni-ts'), join(d, p)));
    }),
  'scripts, copied': () => installDir('sc', (d) => CHAIN.forEach((p) => copyFileSync(join(OUR_BIN, p), join(d, p)))),
};

let run = 0;
/** kube-flannel's network, with its files in a directory of its own: every run allocates from scratch. */
function network(subnet: string, delegate: Record<string, unknown> = {}) {
  const dir = join(lab.dir, `run${run++}`);
  mkdirSync(dir);
  writeFileSync(join(dir, 'subnet.env'), `FLANNEL_NETWORK=10.94.0.0/16\nFLANNEL_SUBNET=${subnet}\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n`);
  return {
    cniVersion: '0.3.1',
    name: 'cbr0',
    type: 'flannel',
    subnetFile: join(dir, 'subnet.env'),
    dataDir: join(dir, 'flannel'),
    subnetWaitMs: 0,
    delegate: { hairpinMode: true, isDefaultGateway: true, bridge: 'fchbr0', ...delegate },
    ipam: { dataDir: join(dir, 'ipam') },
  };
}

/** What a runtime sees of a call: exit code and output, without what differs by design (random MACs and veth names). */
function seen(r: { code: number; json: any; stdout: string }): string {
  const out = r.json ?? r.stdout;
  if (out && typeof out === 'object' && Array.isArray(out.interfaces)) {
    out.interfaces = out.interfaces.map((i: { name: string; sandbox?: string }) => ({ name: i.sandbox ? i.name : i.name.startsWith('veth') ? 'veth' : i.name, sandbox: !!i.sandbox }));
  }
  return JSON.stringify({ code: r.code, out });
}

/** ADD, a second ADD that runs host-local out of addresses, CHECK, DEL twice, and a config the bridge refuses. */
async function chainCalls(dir: string, env: Record<string, string>): Promise<string[]> {
  const conf = network('10.94.1.1/30'); // one address for pods besides the gateway
  const call = (command: 'ADD' | 'DEL' | 'CHECK', id: string, c: unknown = conf) =>
    lab.cni({ command, conf: c, id, netns: lab.path(ctr), path: dir, plugin: join(dir, 'flannel'), env });
  const out: string[] = [];
  const add = await call('ADD', 'c1');
  expect(add.code, add.stdout + add.stderr).toBe(0);
  out.push(seen(add));
  out.push(seen(await call('ADD', 'c2'))); // host-local: no address left, through bridge and flannel
  out.push(seen(await call('CHECK', 'c1', { ...conf, prevResult: add.json })));
  out.push(seen(await call('DEL', 'c1')));
  out.push(seen(await call('DEL', 'c1')));
  out.push(seen(await call('ADD', 'c3', network('10.94.2.1/24', { bridge: 'bad/name' }))));
  return out;
}

describe('the pod chain: in-process gives what the exec path gives', () => {
  let reference: string[] | undefined;
  for (const [install, make] of Object.entries(INSTALLS)) {
    it(install, async () => {
      const dir = make();
      const inProcess = await chainCalls(dir, {});
      const exec = await chainCalls(dir, { CNI_TS_DELEGATE_EXEC: '1' });
      expect(inProcess).toEqual(exec);
      expect(JSON.parse(inProcess[0]).out.ips).toEqual([{ version: '4', interface: 2, address: '10.94.1.2/30', gateway: '10.94.1.1' }]);
      expect(JSON.parse(inProcess[1]).out.msg).toMatch(/^bridge: host-local: no IP addresses available/);
      expect(JSON.parse(inProcess[5]).out).toMatchObject({ code: 7, msg: expect.stringContaining('bridge') });
      // and every install answers alike
      reference ??= inProcess;
      expect(inProcess).toEqual(reference);
    }, 120_000);
  }
});

describe('which delegate runs in-process', () => {
  /** A chain whose bridge is `bridge` (a file that cannot run as a program); flannel and host-local of this build. */
  function withBridge(name: string, standalone: boolean, bridge: string): string {
    return installDir(name, (d) => {
      for (const p of ['flannel', 'host-local']) copyFileSync(join(standalone ? STANDALONE_BIN : OUR_BIN, p), join(d, p));
      writeFileSync(join(d, 'bridge'), bridge, 'latin1');
      chmodSync(join(d, 'bridge'), 0o755);
    });
  }
  /** ADD, then (unless it failed) DEL, of a container on a network of its own; the ADD's outcome. */
  async function addDel(dir: string, env: Record<string, string> = {}) {
    const conf = network('10.94.3.1/24', { bridge: 'fchbr1' });
    const call = (command: 'ADD' | 'DEL') => lab.cni({ command, conf, id: 'f1', netns: lab.path(ctr), path: dir, plugin: join(dir, 'flannel'), env });
    const r = await call('ADD');
    if (r.code === 0) expect((await call('DEL')).code).toBe(0);
    return r;
  }

  it("a standalone file with this build's stamp runs in-process; exec'd (forced) it fails", async () => {
    const dir = withBridge('fake-elf', true, `\x7fELF${'\0'.repeat(200)}\ncni-ts-build:${ourId}\n`);
    const r = await addDel(dir);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const forced = await addDel(dir, { CNI_TS_DELEGATE_EXEC: '1' });
    expect(forced.json).toMatchObject({ code: 999, msg: expect.stringMatching(/^(cannot run plugin|plugin "bridge" failed)/) });
  }, 60_000);

  it("a script with this build's stamp runs in-process; exec'd (forced) it fails", async () => {
    const dir = withBridge('fake-script', false, `#!/bin/sh\n//cni-ts-build:${ourId}:bridge\necho '{"cniVersion":"0.3.1","code":999,"msg":"exec-d"}'; exit 1\n`);
    const r = await addDel(dir);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect((await addDel(dir, { CNI_TS_DELEGATE_EXEC: '1' })).json).toMatchObject({ code: 999, msg: 'bridge: exec-d' });
  }, 60_000);

  it("a file that claims another build is exec'd", async () => {
    const other = ourId.replace(/^./, (c) => (c === '0' ? '1' : '0'));
    for (const [name, standalone, bridge] of [
      ['other-script', false, `#!/bin/sh\n//cni-ts-build:${other}:bridge\necho '{"cniVersion":"0.3.1","code":999,"msg":"exec-d"}'; exit 1\n`],
      ['other-elf', true, `\x7fELF${'\0'.repeat(200)}\ncni-ts-build:${other}\n`],
    ] as const) {
      const r = await addDel(withBridge(name, standalone, bridge));
      expect(r.json, name).toMatchObject({ code: 999, msg: expect.stringMatching(/^(bridge: exec-d|cannot run plugin|plugin "bridge" failed)/) });
    }
  }, 60_000);
});

describe("flannel's delegate rules, with Debian's Go bridge and host-local as the delegates", () => {
  /** flannel (ours) with the Go reference bridge and host-local in CNI_PATH. */
  const goChain = () =>
    installDir('go-delegates', (d) => {
      copyFileSync(join(OUR_BIN, 'flannel'), join(d, 'flannel'));
      for (const p of ['bridge', 'host-local']) symlinkSync(join(GO_BIN, p), join(d, p));
    });
  let dir: string;
  beforeAll(() => {
    dir = goChain();
  });
  const call = (command: 'ADD' | 'DEL', conf: unknown, id: string) => lab.cni({ command, conf, id, netns: lab.path(ctr), path: dir, plugin: join(dir, 'flannel') });

  it('IPAM settings go in the top-level "ipam", as with flannel: the Go delegates get subnet.env\'s range, its routes and the dataDir', async () => {
    const conf = network('10.94.5.1/24', { bridge: 'fchgo0' });
    const ipamDir = join(lab.dir, 'go-ipam');
    const c = { ...conf, ipam: { dataDir: ipamDir, routes: [{ dst: '192.0.2.0/24' }] } };
    const add = await call('ADD', c, 'g1');
    expect(add.code, add.stdout + add.stderr).toBe(0);
    expect(add.json.ips).toEqual([{ version: '4', interface: 2, address: '10.94.5.2/24', gateway: '10.94.5.1' }]);
    expect(lab.routes(ctr).map((r) => r.dst)).toEqual(expect.arrayContaining(['192.0.2.0/24', '10.94.0.0/16']));
    expect(readdirSync(join(ipamDir, 'cbr0'))).toContain('10.94.5.2'); // the Go host-local's file
    const del = await call('DEL', c, 'g1');
    expect(del.code, del.stdout + del.stderr).toBe(0);
    expect(readdirSync(join(ipamDir, 'cbr0'))).not.toContain('10.94.5.2');
    expect(readdirSync(conf.dataDir)).toEqual([]);
  }, 60_000);

  it('delegate "name" or "ipam": refused as flannel\'s plugin refuses them (code 7, the field named), nothing run or written; DEL still succeeds', async () => {
    for (const [field, extra] of [
      ['delegate.name', { name: 'other' }],
      ['delegate.ipam', { ipam: { type: 'host-local', ranges: [[{ subnet: '10.94.99.0/24' }]] } }],
    ] as const) {
      const conf = network('10.94.6.1/24', { bridge: 'fchgo1', ...extra });
      const add = await call('ADD', conf, 'g2');
      expect(add.code).toBe(1);
      expect(add.json).toMatchObject({ code: 7, msg: expect.stringContaining(`field "${field}" is not allowed (flannel's plugin refuses it too)`) });
      expect(existsSync(conf.dataDir), field).toBe(false); // no saved config
      expect(existsSync(conf.ipam.dataDir), field).toBe(false); // no delegate ran: no reservation
      expect(lab.link(lab.host, 'fchgo1'), field).toBeUndefined(); // no bridge
      expect(lab.links(ctr).map((l) => l.ifname), field).toEqual(['lo']);
      expect((await call('DEL', conf, 'g2')).code, field).toBe(0);
    }
  }, 60_000);
});
