// host-local repair's logic without root or a real runtime: the plan (pure),
// the inventory read from temporary state directories, and the whole run
// against a stand-in CRI runtime and fake plugins that record every call and
// collect reservation files by the GC config they get. The real thing
// (containerd, our plugins, the kernel) is test/integration/repair-containerd.test.ts.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Server } from '@grpc/grpc-js';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { planRepair } from '../../../src/repair/plan';
import { readInventory, type NetworkInventory } from '../../../src/repair/inventory';
import { repair, type RepairOptions } from '../../../src/repair/repair';
import { formatReleased, formatSummary } from '../../../src/repair/format';
import { CriError } from '../../../src/runtime/cri';
import { handle } from '../../../src/cni/skel';
import { hostLocal } from '../../../src/ipam/host-local';
import type { NetworkConfigList } from '../../../src/libcni/conf-dir';
import { serveCri } from '../../support/cri-standin';

const MIN = 60_000;
const NOW = Date.UTC(2025, 0, 1);

describe('planRepair', () => {
  const held = (containerID: string, ifname: string, ageMs: number, addresses: string[] = []) => ({ containerID, ifname, addresses, newestMs: NOW - ageMs });
  const inv = (network: string, attachments: ReturnType<typeof held>[], torn: { address: string; mtimeMs: number }[] = []): NetworkInventory => ({ network, attachments, torn, parked: new Set() });

  it('releases what no listed sandbox holds and is older than the cutoff; keeps live sandboxes (any state, any ifname) and young state', () => {
    const plans = planRepair(
      [
        inv('net-a', [held('live', 'eth0', 60 * MIN, ['10.0.0.2']), held('dead', 'eth0', 60 * MIN, ['10.0.0.3']), held('fresh', 'eth0', 1_000, ['10.0.0.4']), held('legacy', '', 60 * MIN, ['10.0.0.5'])]),
        // the live pod's second network (containerd names it eth1)
        inv('net-b', [held('live', 'eth1', 60 * MIN, ['10.1.0.2']), held('dead', 'eth1', 60 * MIN, ['10.1.0.3'])]),
      ],
      new Set(['live', 'listed-without-state']),
      NOW - 5 * MIN,
      NOW,
    );
    expect(plans.map((p) => [p.network, p.stale.map((a) => `${a.containerID}/${a.ifname}`), p.keptLive, p.keptYoung])).toEqual([
      ['net-a', ['dead/eth0', 'legacy/'], 1, 1],
      ['net-b', ['dead/eth1'], 1, 0],
    ]);
    const live = [
      { containerID: 'live', ifname: 'eth0' },
      { containerID: 'live', ifname: 'eth1' },
      { containerID: 'listed-without-state', ifname: 'eth0' },
    ];
    // every ifname held for a live sandbox on any network is valid on every network, and so is young state
    expect(plans[0].valid).toEqual([...live, { containerID: 'fresh', ifname: 'eth0' }]);
    expect(plans[1].valid).toEqual(live);
  });

  it("takes torn reservation files that host-local's GC takes (older than a minute)", () => {
    const [plan] = planRepair([inv('n', [], [{ address: '10.0.0.9', mtimeMs: NOW - 2 * MIN }, { address: '10.0.0.8', mtimeMs: NOW - 1_000 }])], new Set(), NOW, NOW);
    expect(plan.torn.map((t) => t.address)).toEqual(['10.0.0.9']);
  });
});

let dir: string;
let cacheDir: string;
let confDir: string;
let binDir: string;
let ipamDir: string;
let flannelDir: string;
const log = () => join(dir, 'calls.jsonl');

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'repair-'));
  cacheDir = join(dir, 'cache');
  confDir = join(dir, 'net.d');
  binDir = join(dir, 'bin');
  ipamDir = join(dir, 'ipam');
  flannelDir = join(dir, 'flannel');
  for (const d of [join(cacheDir, 'results'), confDir, binDir, ipamDir, flannelDir]) mkdirSync(d, { recursive: true });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const old = (file: string) => utimesSync(file, new Date(NOW), new Date(NOW));

/** A reservation as host-local writes it; `when` sets its mtime (default: long ago). */
function reserve(network: string, ip: string, containerID: string, ifname?: string, fresh = false): string {
  mkdirSync(join(ipamDir, network), { recursive: true });
  const file = join(ipamDir, network, ip);
  writeFileSync(file, ifname === undefined ? containerID : `${containerID}\r\n${ifname}`);
  if (!fresh) old(file);
  return file;
}

function cacheEntry(network: string, containerId: string, ifname: string, fresh = false): string {
  const file = join(cacheDir, 'results', `${network}-${containerId}-${ifname}`);
  writeFileSync(file, JSON.stringify({ kind: 'cniCacheV1', containerId, ifName: ifname, networkName: network, netns: '', config: 'e30=' }));
  if (!fresh) old(file);
  return file;
}

/** Every file of the state directories with its content and mtime, to compare before and after. */
const state = () => Object.assign({}, ...[cacheDir, confDir, ipamDir, flannelDir].map(snapshot));

function snapshot(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out[p] = `${readFileSync(p, 'utf8')} @${statSync(p).mtimeMs}`;
    }
  };
  walk(root);
  return out;
}

describe('readInventory', () => {
  const list = (plugins: Record<string, unknown>[]): NetworkConfigList => ({ file: join(confDir, 'x.conflist'), name: 'net', cniVersion: '1.0.0', disableCheck: false, disableGC: false, plugins });

  it("reads host-local reservations, the network's cache entries and flannel's saved configs, and changes nothing", async () => {
    reserve('net', '10.0.0.3', 'a', 'eth0');
    reserve('net', 'fd00::3', 'a', 'eth0');
    reserve('net', '10.0.0.4', 'legacy');
    writeFileSync(join(ipamDir, 'net', '10.0.0.9'), '');
    writeFileSync(join(ipamDir, 'net', 'last_reserved_ip.0'), '10.0.0.4');
    reserve('other', '10.0.0.5', 'b', 'eth0');
    cacheEntry('net', 'c', 'eth0');
    cacheEntry('other', 'd', 'eth0');
    // flannel: an attachment's file, its per-container copy, and another network's
    writeFileSync(join(flannelDir, 'net:a:eth1'), '{}');
    writeFileSync(join(flannelDir, 'a'), JSON.stringify({ name: 'net' }));
    writeFileSync(join(flannelDir, 'e'), JSON.stringify({ name: 'net' }));
    writeFileSync(join(flannelDir, 'other:f:eth0'), '{}');
    const before = state();

    const got = await readInventory(
      list([
        { type: 'bridge', ipam: { type: 'host-local', dataDir: ipamDir } },
        { type: 'vxlan-flannel', dataDir: flannelDir, ipam: { dataDir: ipamDir } },
      ]),
      cacheDir,
    );
    const rows = got.attachments.map((a) => [a.containerID, a.ifname, a.addresses]).sort();
    expect(rows).toEqual([
      ['a', 'eth0', ['10.0.0.3', 'fd00::3']],
      ['a', 'eth1', []],
      ['c', 'eth0', []],
      ['e', '', []],
      ['legacy', '', ['10.0.0.4']],
    ]);
    expect(got.torn.map((t) => t.address)).toEqual(['10.0.0.9']);
    expect(state()).toEqual(before);
  });

  it('counts addresses parked for a deleted pod (stickyTTL) and never lists them; a parking that has ended is an attachment like any other', async () => {
    const ipam = { type: 'host-local', dataDir: ipamDir, ranges: [[{ subnet: '10.0.0.0/24' }]] };
    const call = async (command: string, id: string, stickyTTL: string) => {
      const env = { CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_NETNS: '/x', CNI_IFNAME: 'eth0', CNI_PATH: '/none', CNI_ARGS: `K8S_POD_NAMESPACE=ns;K8S_POD_NAME=${id}` };
      const out = await handle(hostLocal, env, () => JSON.stringify({ cniVersion: '1.0.0', name: 'net', type: 'bridge', ipam: { ...ipam, stickyTTL } }));
      expect(out.exitCode, out.stdout).toBe(0);
    };
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      await call('ADD', 'parked-pod', '1h');
      await call('DEL', 'parked-pod', '1h');
      await call('ADD', 'ended-pod', '1s');
      await call('DEL', 'ended-pod', '1s');
    } finally {
      stderr.mockRestore();
    }
    // 1.1 s later by the clock (only Date is faked: the files and timers stay real)
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 1_100 });
    try {
      const got = await readInventory(list([{ type: 'bridge', ipam }]), cacheDir);
      expect([got.attachments.map((a) => a.containerID), [...got.parked]]).toEqual([['ended-pod'], ['parked-pod\neth0']]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('names the plugin whose config makes its state unreadable; refuses a network name that is not one', async () => {
    await expect(readInventory(list([{ type: 'bridge' }, { type: 'bridge', ipam: { type: 'host-local', dataDir: 'relative' } }]), cacheDir)).rejects.toThrow(
      /^plugins\[1\] \(bridge\): field "ipam.dataDir" must be an absolute path/,
    );
    await expect(readInventory({ ...list([]), name: '../etc' }, cacheDir)).rejects.toThrow(/network name/);
  });
});

describe('repair', () => {
  let runtime: Server;
  let sandboxes: { id: string; state: string }[];
  let socket: string;

  beforeAll(async () => {
    socket = join(mkdtempSync(join(tmpdir(), 'repair-cri-')), 'cri.sock');
    runtime = await serveCri(socket, {
      ListPodSandbox: () => ({ items: sandboxes.map((s) => ({ ...s, metadata: { name: s.id, namespace: 'ns', uid: s.id }, createdAt: '0' })) }),
    });
  });
  afterAll(() => {
    runtime.forceShutdown();
    rmSync(join(socket, '..'), { recursive: true, force: true });
  });
  beforeEach(() => {
    sandboxes = [
      { id: 'live', state: 'SANDBOX_READY' },
      { id: 'stopped', state: 'SANDBOX_NOTREADY' },
    ];
    // "collector": GC removes the reservation files of its ipam.dataDir whose attachment is named stale and not valid (as host-local does);
    // "oldie" knows CNI up to 1.0.0; both log every call.
    plugin('collector', ['0.4.0', '1.0.0', '1.1.0'], true);
    plugin('oldie', ['0.4.0', '1.0.0'], false);
    conflist('10-net.conflist', 'net', [{ type: 'collector', ipam: { type: 'host-local', dataDir: ipamDir } }, { type: 'oldie' }]);
  });

  function plugin(name: string, versions: string[], collects: boolean): void {
    const file = join(binDir, name);
    writeFileSync(
      file,
      `#!${process.execPath}
const fs = require('node:fs'), path = require('node:path');
const conf = JSON.parse(fs.readFileSync(0, 'utf8'));
const cmd = process.env.CNI_COMMAND;
fs.appendFileSync(${JSON.stringify(log())}, JSON.stringify({ plugin: ${JSON.stringify(name)}, cmd, id: process.env.CNI_CONTAINERID, conf }) + '\\n');
if (cmd === 'VERSION') console.log(JSON.stringify({ cniVersion: '1.0.0', supportedVersions: ${JSON.stringify(versions)} }));
if (cmd === 'GC' && ${collects}) {
  const key = (a) => a.containerID + '/' + a.ifname;
  const valid = new Set(conf['cni.dev/valid-attachments'].map(key));
  const stale = new Set(conf['cni-ts.dev/stale-attachments'].map(key));
  const d = path.join(conf.ipam.dataDir, conf.name);
  for (const f of fs.existsSync(d) ? fs.readdirSync(d) : []) {
    const [id, ifname] = fs.readFileSync(path.join(d, f), 'utf8').split('\\r\\n');
    const k = id + '/' + ifname;
    if (id && ifname !== undefined && stale.has(k) && !valid.has(k)) fs.rmSync(path.join(d, f));
  }
}
`,
    );
    chmodSync(file, 0o755);
  }

  function conflist(file: string, name: string, plugins: unknown[]): void {
    writeFileSync(join(confDir, file), JSON.stringify({ cniVersion: '1.0.0', name, plugins }));
  }

  const calls = (): { plugin: string; cmd: string; id: string; conf: any }[] =>
    existsSync(log()) ? readFileSync(log(), 'utf8').trim().split('\n').map((l) => JSON.parse(l)) : [];
  const options = (o: Partial<RepairOptions> = {}): RepairOptions => ({
    runtimeEndpoint: `unix://${socket}`,
    confDir,
    binDirs: [binDir],
    cacheDir,
    maxConfNum: 1,
    minAgeMs: 5 * MIN,
    dryRun: false,
    ...o,
  });

  /** The scene: live and stopped sandboxes' state, two stale attachments (one only in the cache), a young one, a stale one on a network the runtime does not load. */
  function scene(): void {
    reserve('net', '10.0.0.2', 'live', 'eth0');
    reserve('net', '10.0.0.3', 'stopped', 'eth0');
    reserve('net', '10.0.0.4', 'dead', 'eth0');
    reserve('net', 'fd00::4', 'dead', 'eth0');
    reserve('net', '10.0.0.5', 'young', 'eth0', true);
    cacheEntry('net', 'live', 'eth0');
    cacheEntry('net', 'cached-dead', 'eth0');
    conflist('20-second.conflist', 'second', [{ type: 'collector', ipam: { type: 'host-local', dataDir: ipamDir } }]);
    reserve('second', '10.9.0.4', 'dead', 'eth1');
  }

  it('a dry run lists what would be released, asks the plugins only VERSION, and changes nothing', async () => {
    scene();
    const before = state();
    const report = await repair(options({ dryRun: true }));
    expect(report.released).toEqual([
      { network: 'net', containerID: 'dead', ifname: 'eth0', addresses: ['10.0.0.4', 'fd00::4'] },
      { network: 'net', containerID: 'cached-dead', ifname: 'eth0', addresses: [] },
    ]);
    expect(report).toMatchObject({ keptLive: 2, keptYoung: 1, skipped: [{ network: 'net', type: 'oldie' }], errors: [], ignored: [] });
    expect(calls().map((c) => c.cmd)).toEqual(['VERSION', 'VERSION']);
    expect(state()).toEqual(before);
    expect(formatReleased(report) + formatSummary(report, { dryRun: true, minAge: '5m' })).toBe(
      [
        'NETWORK  CONTAINER    IFNAME  ADDRESSES',
        'net      dead         eth0    10.0.0.4,fd00::4',
        'net      cached-dead  eth0    -',
        'would release 2 attachments; kept 3 (2 of live sandboxes, 1 newer than 5m); not sent GC (no CNI 1.1.0): net/oldie; dry run: nothing was changed',
        '',
      ].join('\n'),
    );
  });

  it('releases exactly the stale attachments through the chain, naming them to GC; a second run has nothing to do', async () => {
    scene();
    const report = await repair(options());
    expect(report.released.map((r) => `${r.network} ${r.containerID}`)).toEqual(['net dead', 'net cached-dead']);
    expect(report.errors).toEqual([]);
    expect(readdirSync(join(ipamDir, 'net')).sort()).toEqual(['10.0.0.2', '10.0.0.3', '10.0.0.5']);
    expect(existsSync(join(cacheDir, 'results', 'net-cached-dead-eth0'))).toBe(false);
    expect(existsSync(join(cacheDir, 'results', 'net-live-eth0'))).toBe(true);
    // not loaded by the runtime (max_conf_num 1): untouched
    expect(readdirSync(join(ipamDir, 'second'))).toEqual(['10.9.0.4']);

    const gc = calls().find((c) => c.cmd === 'GC')!;
    expect(gc.conf['cni-ts.dev/stale-attachments']).toEqual([
      { containerID: 'dead', ifname: 'eth0' },
      { containerID: 'cached-dead', ifname: 'eth0' },
    ]);
    expect(gc.conf['cni.dev/valid-attachments']).toEqual([
      { containerID: 'live', ifname: 'eth0' },
      { containerID: 'stopped', ifname: 'eth0' },
      { containerID: 'young', ifname: 'eth0' },
    ]);
    // the cached one was DELeted through the chain, last plugin first; "oldie" got no GC
    expect(calls().map((c) => `${c.plugin} ${c.cmd} ${c.id}`)).toEqual([
      'oldie DEL cached-dead',
      'collector DEL cached-dead',
      'collector VERSION ',
      'collector GC ',
      'oldie VERSION ',
    ]);

    rmSync(log());
    const again = await repair(options());
    expect([again.released, again.errors, calls()]).toEqual([[], [], []]);
    expect(formatReleased(again) + formatSummary(again, { dryRun: false, minAge: '5m' })).toBe('nothing to release; kept 3 (2 of live sandboxes, 1 newer than 5m)\n');
  });

  it('with --max-conf-num 0 collects every network; a name defined twice once, by its first file; invalid files are reported', async () => {
    scene();
    conflist('30-dup.conflist', 'net', [{ type: 'oldie' }]);
    writeFileSync(join(confDir, '40-broken.conf'), '{');
    const report = await repair(options({ maxConfNum: 0 }));
    expect(report.released.map((r) => `${r.network} ${r.containerID} ${r.ifname}`)).toEqual(['net dead eth0', 'net cached-dead eth0', 'second dead eth1']);
    expect(report.ignored).toEqual([
      { file: join(confDir, '40-broken.conf'), reason: expect.stringMatching(/JSON/) },
      { file: join(confDir, '30-dup.conflist'), reason: `network net is already defined in ${join(confDir, '10-net.conflist')}` },
    ]);
  });

  it('reports an attachment whose state a plugin did not release (and does not list it)', async () => {
    conflist('10-net.conflist', 'net', [{ type: 'oldie', ipam: { type: 'host-local', dataDir: ipamDir } }]);
    reserve('net', '10.0.0.4', 'dead', 'eth0');
    const report = await repair(options());
    expect(report.released).toEqual([]);
    expect(report.errors).toEqual(['network net: container dead (eth0) still holds state after GC (10.0.0.4)']);
  });

  it('a network that sets disableGC keeps its stale attachments, and says so', async () => {
    writeFileSync(join(confDir, '10-net.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'net', disableGC: true, plugins: [{ type: 'collector', ipam: { type: 'host-local', dataDir: ipamDir } }] }));
    reserve('net', '10.0.0.4', 'dead', 'eth0');
    const report = await repair(options());
    expect([report.released, calls()]).toEqual([[], []]);
    expect(report.ignored).toEqual([{ file: join(confDir, '10-net.conflist'), reason: 'network net sets disableGC: 1 stale attachment(s) stay' }]);
  });

  it('refuses when the runtime does not answer: a CriError, and no plugin is run', async () => {
    scene();
    const before = state();
    const err = await repair(options({ runtimeEndpoint: `unix://${join(dir, 'gone.sock')}` })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CriError);
    expect((err as CriError).message).toMatch(/^container runtime at unix:\/\/.*gone.sock does not answer \(ListPodSandbox: /);
    expect(calls()).toEqual([]);
    expect(state()).toEqual(before);
  });
});
