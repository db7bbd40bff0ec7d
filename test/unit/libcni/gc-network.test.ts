// The GC runner against fake plugins that record every call (argv-free: the
// CNI_* environment and stdin), so each test checks exactly what each plugin
// received and in which order.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gcNetwork, staleCachedAttachments } from '../../../src/libcni/gc-network';
import type { NetworkConfigList } from '../../../src/libcni/conf-dir';

let dir: string;
let bin: string;
let cacheDir: string;
let log: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gc-network-'));
  bin = join(dir, 'bin');
  cacheDir = join(dir, 'cache');
  log = join(dir, 'calls.jsonl');
  mkdirSync(bin);
  mkdirSync(join(cacheDir, 'results'), { recursive: true });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

interface Behaviour {
  /** What VERSION answers as supportedVersions; null: the old "unknown CNI_COMMAND" error. */
  versions: string[] | null;
  /** Commands answered with an error object. */
  fails?: string[];
}

/** A plugin that appends {plugin, env (CNI_*), stdin} to the call log, then answers per `behaviour`. */
function fakePlugin(name: string, behaviour: Behaviour): void {
  const file = join(bin, name);
  writeFileSync(
    file,
    `#!${process.execPath}
const fs = require('node:fs');
const b = ${JSON.stringify(behaviour)};
const stdin = fs.readFileSync(0, 'utf8');
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('CNI_')));
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify({ plugin: ${JSON.stringify(name)}, env, stdin: JSON.parse(stdin) }) + '\\n');
const cmd = process.env.CNI_COMMAND;
if (cmd === 'VERSION' && b.versions === null) { console.log(JSON.stringify({ code: 4, msg: 'unknown CNI_COMMAND: VERSION' })); process.exit(1); }
if ((b.fails || []).includes(cmd)) { console.log(JSON.stringify({ cniVersion: '1.0.0', code: 11, msg: cmd + ' refused' })); process.exit(1); }
if (cmd === 'VERSION') console.log(JSON.stringify({ cniVersion: '1.1.0', supportedVersions: b.versions }));
`,
  );
  chmodSync(file, 0o755);
}

const calls = (): { plugin: string; env: Record<string, string>; stdin: any }[] =>
  existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l)) : [];

/** A results cache file as libcni writes it. */
function cached(network: string, containerId: string, ifname: string, extra: Record<string, unknown> = {}): string {
  const file = join(cacheDir, 'results', `${network}-${containerId}-${ifname}`);
  writeFileSync(file, JSON.stringify({ kind: 'cniCacheV1', containerId, config: 'e30=', ifName: ifname, networkName: network, ...extra }));
  return file;
}

const NEW = ['0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const OLD = ['0.3.1', '0.4.0', '1.0.0'];
const bridgeConf = { type: 'fresh', bridge: 'br9', ipam: { type: 'host-local', subnet: '10.9.0.0/24' } };
const portmapConf = { type: 'legacy', capabilities: { portMappings: true, bandwidth: false } };

function list(over: Partial<NetworkConfigList> = {}): NetworkConfigList {
  return { file: '/etc/cni/net.d/10-k8s.conflist', name: 'k8s', cniVersion: '1.0.0', disableCheck: false, disableGC: false, plugins: [bridgeConf, portmapConf], ...over };
}

const VALID = [{ containerID: 'live', ifname: 'eth0' }];

describe('gcNetwork', () => {
  it('DELs stale cached attachments through the chain, then sends GC at 1.1.0 to the plugins whose VERSION lists it', async () => {
    fakePlugin('fresh', { versions: NEW });
    fakePlugin('legacy', { versions: OLD });
    const live = cached('k8s', 'live', 'eth0');
    const stale = cached('k8s', 'dead', 'eth0', {
      netns: '/var/run/netns/cni-1234',
      cniArgs: [['K8S_POD_NAME', 'web'], ['IgnoreUnknown', '1']],
      capabilityArgs: { portMappings: [{ hostPort: 80, containerPort: 8080, protocol: 'tcp' }], bandwidth: { ingressRate: 1 } },
      result: { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/cni-1234' }], ips: [{ address: '10.9.0.7/24', interface: 0 }] },
    });
    const otherNetwork = cached('other', 'dead', 'eth0');
    writeFileSync(join(cacheDir, 'results', 'k8s-garbage-eth0'), 'not json');

    const report = await gcNetwork(list(), { path: [bin], validAttachments: VALID, cacheDir });

    const prevResult = { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/cni-1234' }], ips: [{ address: '10.9.0.7/24', interface: 0 }], dns: {} };
    const delEnv = { CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'dead', CNI_NETNS: '/var/run/netns/cni-1234', CNI_IFNAME: 'eth0', CNI_ARGS: 'K8S_POD_NAME=web;IgnoreUnknown=1', CNI_PATH: bin };
    const gcEnv = { CNI_COMMAND: 'GC', CNI_CONTAINERID: '', CNI_NETNS: '', CNI_IFNAME: '', CNI_ARGS: '', CNI_PATH: bin };
    const versionEnv = { CNI_COMMAND: 'VERSION', CNI_CONTAINERID: '', CNI_NETNS: 'dummy', CNI_IFNAME: 'dummy', CNI_ARGS: '', CNI_PATH: 'dummy' };
    expect(calls()).toEqual([
      // the chain backwards, at the list's version, with the cached result and the declared capabilities only
      { plugin: 'legacy', env: delEnv, stdin: { ...portmapConf, name: 'k8s', cniVersion: '1.0.0', prevResult, runtimeConfig: { portMappings: [{ hostPort: 80, containerPort: 8080, protocol: 'tcp' }] } } },
      { plugin: 'fresh', env: delEnv, stdin: { ...bridgeConf, name: 'k8s', cniVersion: '1.0.0', prevResult } },
      { plugin: 'fresh', env: versionEnv, stdin: { cniVersion: '1.1.0' } },
      { plugin: 'fresh', env: gcEnv, stdin: { ...bridgeConf, name: 'k8s', cniVersion: '1.1.0', 'cni.dev/valid-attachments': VALID, 'cni.dev/attachments': VALID } },
      { plugin: 'legacy', env: versionEnv, stdin: { cniVersion: '1.1.0' } },
    ]);
    expect(report).toMatchObject({ network: 'k8s', disabled: false, collected: ['fresh'], skipped: [{ type: 'legacy', supportedVersions: OLD }], errors: [] });
    expect(report.deleted.map((a) => [a.network, a.containerId, a.ifname])).toEqual([['k8s', 'dead', 'eth0']]);
    expect([existsSync(live), existsSync(stale), existsSync(otherNetwork)]).toEqual([true, false, true]);
  });

  it('sends no prevResult below 0.4.0 and no runtimeConfig without a declared capability', async () => {
    fakePlugin('fresh', { versions: NEW });
    cached('k8s', 'dead', 'net1', { result: { cniVersion: '0.3.1', ips: [{ version: '4', address: '10.9.0.7/24' }] }, capabilityArgs: { portMappings: [] } });
    await gcNetwork(list({ cniVersion: '0.3.1', plugins: [bridgeConf] }), { path: [bin], validAttachments: VALID, cacheDir });
    expect(calls()[0]).toEqual({
      plugin: 'fresh',
      env: expect.objectContaining({ CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'dead', CNI_IFNAME: 'net1', CNI_NETNS: '' }),
      stdin: { ...bridgeConf, name: 'k8s', cniVersion: '0.3.1' },
    });
  });

  it('does nothing at all when the list sets disableGC', async () => {
    fakePlugin('fresh', { versions: NEW });
    const stale = cached('k8s', 'dead', 'eth0');
    const report = await gcNetwork(list({ disableGC: true, plugins: [bridgeConf] }), { path: [bin], validAttachments: [], cacheDir });
    expect(report).toEqual({ network: 'k8s', disabled: true, deleted: [], collected: [], skipped: [], errors: [] });
    expect(calls()).toEqual([]);
    expect(existsSync(stale)).toBe(true);
  });

  it('records each failure, keeps the cache of an attachment whose DEL failed, and runs the rest', async () => {
    fakePlugin('fresh', { versions: NEW, fails: ['GC'] });
    fakePlugin('legacy', { versions: OLD, fails: ['DEL'] });
    fakePlugin('ancient', { versions: null });
    fakePlugin('later', { versions: NEW });
    const stale = cached('k8s', 'dead', 'eth0');
    const chain = [bridgeConf, portmapConf, { type: 'missing' }, { type: 'ancient' }, { type: 'later' }];
    const report = await gcNetwork(list({ plugins: chain }), { path: [bin], validAttachments: VALID, cacheDir });
    expect(report.errors).toEqual([
      'DEL of stale attachment dead eth0: plugin "missing" (field "plugins[2].type") not found in CNI_PATH ' + bin,
      'GC of plugin "fresh": fresh: GC refused',
      'GC of plugin "missing": plugin "missing" (field "plugins[2].type") not found in CNI_PATH ' + bin,
    ]);
    expect(report.collected).toEqual(['later']);
    expect(report.skipped).toEqual([{ type: 'legacy', supportedVersions: OLD }, { type: 'ancient', supportedVersions: ['0.1.0'] }]);
    expect(report.deleted).toEqual([]);
    expect(existsSync(stale)).toBe(true);
    // the DEL stopped at the first plugin that could not run (the chain is walked backwards)
    expect(calls().filter((c) => c.env.CNI_COMMAND === 'DEL').map((c) => c.plugin)).toEqual(['later', 'ancient']);
  });

  it('a DEL refused by a plugin stops that attachment only', async () => {
    fakePlugin('fresh', { versions: NEW });
    fakePlugin('legacy', { versions: OLD, fails: ['DEL'] });
    const first = cached('k8s', 'a', 'eth0');
    const second = cached('k8s', 'b', 'eth0');
    const report = await gcNetwork(list(), { path: [bin], validAttachments: [], cacheDir });
    expect(report.errors).toEqual(['DEL of stale attachment a eth0: legacy: DEL refused', 'DEL of stale attachment b eth0: legacy: DEL refused']);
    expect([existsSync(first), existsSync(second)]).toEqual([true, true]);
    expect(report.collected).toEqual(['fresh']);
  });
});

describe('gcNetwork for repair', () => {
  it('with staleAttachments DELs only the named cached attachments and sends them as cni-ts.dev/stale-attachments', async () => {
    fakePlugin('fresh', { versions: NEW });
    const named = cached('k8s', 'dead', 'eth0');
    const unnamed = cached('k8s', 'fresh-pod', 'eth0');
    const stale = [{ containerID: 'dead', ifname: 'eth0' }];
    const report = await gcNetwork(list({ plugins: [bridgeConf] }), { path: [bin], validAttachments: VALID, cacheDir, staleAttachments: stale });
    expect(report).toMatchObject({ collected: ['fresh'], skipped: [], errors: [] });
    expect(report.deleted.map((a) => a.containerId)).toEqual(['dead']);
    expect([existsSync(named), existsSync(unnamed)]).toEqual([false, true]);
    expect(calls().map((c) => [c.plugin, c.env.CNI_COMMAND, c.env.CNI_CONTAINERID])).toEqual([
      ['fresh', 'DEL', 'dead'],
      ['fresh', 'VERSION', ''],
      ['fresh', 'GC', ''],
    ]);
    expect(calls()[2].stdin).toEqual({
      ...bridgeConf,
      name: 'k8s',
      cniVersion: '1.1.0',
      'cni.dev/valid-attachments': VALID,
      'cni.dev/attachments': VALID,
      'cni-ts.dev/stale-attachments': stale,
    });
  });

  it('a dry run only asks VERSION, and reports what it would DEL, collect and skip', async () => {
    fakePlugin('fresh', { versions: NEW });
    fakePlugin('legacy', { versions: OLD });
    const stale = cached('k8s', 'dead', 'eth0');
    const report = await gcNetwork(list(), { path: [bin], validAttachments: VALID, cacheDir, dryRun: true });
    expect(report).toMatchObject({ collected: ['fresh'], skipped: [{ type: 'legacy', supportedVersions: OLD }], errors: [] });
    expect(report.deleted.map((a) => a.containerId)).toEqual(['dead']);
    expect(calls().map((c) => c.env.CNI_COMMAND)).toEqual(['VERSION', 'VERSION']);
    expect(existsSync(stale)).toBe(true);
  });

  it("hands a cached /proc/<pid> netns to the DEL only while that pid is the process that was there when the entry was written", async () => {
    fakePlugin('fresh', { versions: NEW });
    const ours = `/proc/${process.pid}/ns/net`;
    // written now: our process was already running, so the path is still the container's
    cached('k8s', 'current', 'eth0', { netns: ours });
    // written before our process started: the pid has been reused since
    const old = cached('k8s', 'reused', 'eth0', { netns: ours });
    const longAgo = new Date(Date.now() - 365 * 24 * 3600_000);
    utimesSync(old, longAgo, longAgo);
    cached('k8s', 'gone', 'eth0', { netns: '/proc/999999999/ns/net' });
    await gcNetwork(list({ plugins: [bridgeConf] }), { path: [bin], validAttachments: VALID, cacheDir });
    const dels = calls().filter((c) => c.env.CNI_COMMAND === 'DEL');
    expect(Object.fromEntries(dels.map((c) => [c.env.CNI_CONTAINERID, c.env.CNI_NETNS]))).toEqual({ current: ours, reused: '', gone: '' });
  });
});

describe('staleCachedAttachments', () => {
  it("lists the network's cached attachments that are not valid, by (containerID, ifname)", () => {
    cached('k8s', 'live', 'eth0');
    cached('k8s', 'live', 'eth1');
    cached('k8s', 'dead', 'eth0', { netns: '/proc/1/ns/net' });
    cached('k8s-other', 'dead', 'eth0');
    writeFileSync(join(cacheDir, 'results', 'k8s-x-eth0'), JSON.stringify({ kind: 'other', networkName: 'k8s', ifName: 'eth0' }));
    writeFileSync(join(cacheDir, 'results', 'k8s-y-eth0'), JSON.stringify({ kind: 'cniCacheV1', networkName: 'k8s', ifName: '' }));
    const stale = staleCachedAttachments('k8s', VALID, cacheDir);
    expect(stale.map((a) => [a.containerId, a.ifname, a.netns])).toEqual([
      ['dead', 'eth0', '/proc/1/ns/net'],
      ['live', 'eth1', ''],
    ]);
    expect(readdirSync(join(cacheDir, 'results'))).toHaveLength(6);
  });

  it('finds nothing in a cache directory that does not exist', () => {
    expect(staleCachedAttachments('k8s', [], join(dir, 'nope'))).toEqual([]);
  });
});
