// The vxlan-flannel CNI plugin: flannel's CNI plugin, compatible config and
// on-disk state, plus CHECK, GC and STATUS. Each container is handed to a
// delegate plugin (bridge by default) with an IPAM config rendered from the
// node's subnet.env; the rendered config is saved per container so DEL can
// replay it even after subnet.env changed.
//
// This module is on the CNI path: it must stay lean (no etcd, no commander).
import * as fs from 'node:fs';
import { basename, join } from 'node:path';
import { CniError, ErrorCode, invalidConfig } from '../../cni/errors';
import { Json, NetConf, optInt, optObject, optString, decodeJson, parseNetConf } from '../../cni/config';
import { delegate, delegateEnv, findPlugin } from '../../cni/delegate';
import { GC_KEYS, gcScope } from '../../cni/gc';
import type { Result } from '../../cni/result';
import type { PluginHandlers, Request } from '../../cni/skel';
import { ensureDir, readIfExists, removeFile, writeFileAtomic } from '../../util/fs';
import { DEFAULT_SUBNET_FILE, SubnetEnv, SubnetEnvError, readSubnetEnv } from '../subnet-env';
import { probeVtep } from '../backend/vxlan/vtep-probe';
import { DEFAULT_DATA_DIR, savedConfigs, savedName } from '../attachments';

const DEFAULT_SUBNET_WAIT_MS = 10_000;

export interface FlannelConf {
  subnetFile: string;
  dataDir: string;
  /** How long ADD/GC wait for a missing or incomplete subnet.env. */
  subnetWaitMs: number;
  delegate: Json;
  ipam: Json;
  runtimeConfig?: Json;
}

/** Reads and checks our own fields; nothing here touches the disk. */
export function loadFlannelConf(conf: NetConf): FlannelConf {
  const subnetFile = optString(conf, 'subnetFile') ?? DEFAULT_SUBNET_FILE;
  const dataDir = optString(conf, 'dataDir') ?? DEFAULT_DATA_DIR;
  if (!subnetFile.startsWith('/')) throw invalidConfig(`field "subnetFile" must be an absolute path, got ${JSON.stringify(subnetFile)}`);
  if (!dataDir.startsWith('/')) throw invalidConfig(`field "dataDir" must be an absolute path, got ${JSON.stringify(dataDir)}`);
  const subnetWaitMs = optInt(conf, 'subnetWaitMs', 0, 600_000) ?? DEFAULT_SUBNET_WAIT_MS;
  const delegateConf = { ...(optObject(conf, 'delegate') ?? {}) };
  // flannel's plugin refuses both too (flannel.go, cmdAdd: "it'll be set by flannel"): a config that
  // works here works with it, and what the field asked for would silently not happen
  if ('name' in delegateConf) {
    throw invalidConfig(
      `field "delegate.name" is not allowed (flannel's plugin refuses it too): the delegate always gets the network's "name" (${JSON.stringify(conf.name)})`,
    );
  }
  if ('ipam' in delegateConf) {
    throw invalidConfig(
      'field "delegate.ipam" is not allowed (flannel\'s plugin refuses it too): the delegate\'s IPAM is host-local on subnet.env\'s subnet; ' +
        'put IPAM settings (routes, dataDir, another "type") in the top-level "ipam"',
    );
  }
  if (delegateConf.type !== undefined && typeof delegateConf.type !== 'string') throw invalidConfig('field "delegate.type" must be a string');
  for (const key of ['isGateway', 'ipMasq'] as const) {
    if (delegateConf[key] !== undefined && typeof delegateConf[key] !== 'boolean') throw invalidConfig(`field "delegate.${key}" must be true or false`);
  }
  optInt(delegateConf, 'mtu', 68, 65535, 'delegate.');
  const ipam = { ...(optObject(conf, 'ipam') ?? {}) };
  if (ipam.type !== undefined && typeof ipam.type !== 'string') throw invalidConfig('field "ipam.type" must be a string');
  if (ipam.routes !== undefined && !Array.isArray(ipam.routes)) throw invalidConfig('field "ipam.routes" must be a list');
  const runtimeConfig = optObject(conf, 'runtimeConfig');
  return { subnetFile, dataDir, subnetWaitMs, delegate: delegateConf, ipam, ...(runtimeConfig ? { runtimeConfig } : {}) };
}

/** The config handed to the delegate, rendered the way flannel's plugin renders it. */
export function renderDelegate(conf: NetConf, fc: FlannelConf, env: SubnetEnv): Json {
  const d: Json = { ...fc.delegate };
  d.cniVersion = conf.cniVersion;
  d.name = conf.name;
  if (d.type === undefined) d.type = 'bridge';
  if (d.ipMasq === undefined) d.ipMasq = !env.ipMasq;
  if (d.mtu === undefined && env.mtu !== undefined) d.mtu = env.mtu;
  if (d.type === 'bridge' && d.isGateway === undefined) d.isGateway = true;

  const ipam: Json = { ...fc.ipam };
  if (ipam.type === undefined) ipam.type = 'host-local';
  const ranges: Json[][] = [];
  if (env.subnet) ranges.push([{ subnet: env.subnet.toString() }]);
  if (env.ipv6Subnet) ranges.push([{ subnet: env.ipv6Subnet.toString() }]);
  ipam.ranges = ranges;
  const routes = [...((fc.ipam.routes as Json[] | undefined) ?? [])];
  for (const n of env.subnet ? env.networks : []) routes.push({ dst: n.toString() });
  for (const n of env.ipv6Subnet ? env.ipv6Networks : []) routes.push({ dst: n.toString() });
  ipam.routes = routes;
  d.ipam = ipam;
  if (fc.runtimeConfig) d.runtimeConfig = fc.runtimeConfig;
  return d;
}

/**
 * The IPAM this plugin hands its delegate for `plugin`, a network's config
 * (`host-local ls` tells range sets apart with it); undefined when `plugin`
 * is not flannel's. Throws when subnet.env cannot be read.
 */
export function delegateIpamOf(plugin: Json, network: string, cniVersion: unknown): Json | undefined {
  if (plugin.type !== 'flannel' && plugin.type !== 'vxlan-flannel') return undefined;
  const conf = parseNetConf(JSON.stringify({ ...plugin, name: network, cniVersion }));
  const fc = loadFlannelConf(conf);
  let env: SubnetEnv;
  try {
    env = readSubnetEnv(fc.subnetFile);
  } catch (err) {
    if (err instanceof SubnetEnvError) throw new Error(`flannel's plugin takes host-local's ranges from subnet.env: ${err.message}`);
    throw err;
  }
  return renderDelegate(conf, fc, env).ipam as Json;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Waits (bounded) for a complete subnet.env: right after boot the daemon may
 * not have a lease yet. A value that is present but wrong fails at once.
 */
async function waitSubnetEnv(fc: FlannelConf): Promise<SubnetEnv> {
  const deadline = Date.now() + fc.subnetWaitMs;
  for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
    try {
      return readSubnetEnv(fc.subnetFile);
    } catch (err) {
      if (!(err instanceof SubnetEnvError)) throw err;
      if (!err.missing) throw invalidConfig(`subnet file ${fc.subnetFile} (field "subnetFile") is invalid: ${err.message}`);
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new CniError(
          ErrorCode.TryAgainLater,
          `no overlay lease on this node yet: ${err.message.startsWith(fc.subnetFile) ? err.message : `${err.message} in ${fc.subnetFile}`} ` +
            `(waited ${fc.subnetWaitMs} ms; is the vxlan-flannel daemon running?)`,
        );
      }
      await sleep(Math.min(left, delay));
    }
  }
}

const savedPath = (fc: Pick<FlannelConf, 'dataDir'>, req: Request) => join(fc.dataDir, savedName(req.conf.name, req.inv.containerId, req.inv.ifname));
const flannelPath = (fc: Pick<FlannelConf, 'dataDir'>, req: Request) => join(fc.dataDir, req.inv.containerId);

/** The attachment files of this container on this network (any ifname). */
function attachmentFiles(fc: Pick<FlannelConf, 'dataDir'>, req: Request): string[] {
  const prefix = savedName(req.conf.name, req.inv.containerId, '');
  try {
    return fs.readdirSync(fc.dataDir).filter((n) => n.startsWith(prefix)).map((n) => join(fc.dataDir, n));
  } catch {
    return [];
  }
}

interface Saved {
  conf: Json;
  text: string;
  file: string;
}

/**
 * The saved config of this attachment, and its file. Falls back to
 * `<dataDir>/<containerID>` when no attachment file of the container exists
 * on this network and it names this network: a container that flannel's
 * plugin added can still be deleted.
 */
function loadSaved(fc: Pick<FlannelConf, 'dataDir'>, req: Request): Saved | undefined {
  const file = savedPath(fc, req);
  const text = readIfExists(file);
  if (text !== undefined) return { conf: decodeJson(text, `saved delegate config ${file}`), text, file };
  // the copy of another ifname's config: replaying it would DEL with the wrong config, removing it would lose that copy
  if (attachmentFiles(fc, req).length > 0) return undefined;
  const legacy = flannelPath(fc, req);
  const old = readIfExists(legacy);
  if (old === undefined) return undefined;
  let conf: Json;
  try {
    conf = decodeJson(old, `saved delegate config ${legacy}`);
  } catch {
    return undefined; // not a config we can replay, so not ours to judge
  }
  // another network's (the same container on two networks): not ours to replay or remove
  return conf.name === req.conf.name ? { conf, text: old, file: legacy } : undefined;
}

/**
 * flannel's `<dataDir>/<containerID>`, written once: the first attachment's config, until it is deleted.
 * Not synced (flannel never syncs it either): it is only a copy for flannel's plugin, and a sync costs
 * ~0.5-2 ms of every pod's ADD; the attachment file we replay is synced.
 */
function writeFlannelCopy(fc: Pick<FlannelConf, 'dataDir'>, req: Request, text: string): void {
  const file = flannelPath(fc, req);
  if (readIfExists(file) === undefined) writeFileAtomic(file, text, { mode: 0o600 });
}

/** After a DEL: the copy goes when it is this attachment's config and no other attachment of the container still has it. */
function dropFlannelCopy(fc: Pick<FlannelConf, 'dataDir'>, req: Request, text: string): void {
  const file = flannelPath(fc, req);
  if (readIfExists(file) !== text) return;
  if (attachmentFiles(fc, req).some((f) => readIfExists(f) === text)) return;
  removeFile(file);
}

async function add(req: Request): Promise<Result> {
  const fc = loadFlannelConf(req.conf);
  const env = await waitSubnetEnv(fc);
  const conf = renderDelegate(req.conf, fc, env);
  const type = conf.type as string;
  const file = findPlugin(type, req.inv.path, 'delegate.type'); // fail before anything is written
  ensureDir(fc.dataDir, 0o700);
  const text = JSON.stringify(conf);
  writeFileAtomic(savedPath(fc, req), text, { mode: 0o600, durable: true });
  writeFlannelCopy(fc, req, text);
  const result = await delegate({ command: 'ADD', type, file, field: 'delegate.type', conf, env: delegateEnv(req.inv), path: req.inv.path });
  if (!result) throw new CniError(ErrorCode.Internal, `delegate "${type}" returned no result`);
  return result;
}

/** DEL needs only dataDir: a config that went bad after ADD must not leak the container's address. */
function loadDataDir(conf: NetConf): Pick<FlannelConf, 'dataDir'> {
  const dataDir = optString(conf, 'dataDir') ?? DEFAULT_DATA_DIR;
  if (!dataDir.startsWith('/')) throw invalidConfig(`field "dataDir" must be an absolute path, got ${JSON.stringify(dataDir)}`);
  return { dataDir };
}

async function del(req: Request): Promise<void> {
  const fc = loadDataDir(req.conf);
  const saved = loadSaved(fc, req);
  if (!saved) return; // never added, or already deleted: nothing to undo
  const type = typeof saved.conf.type === 'string' ? saved.conf.type : 'bridge';
  await delegate({ command: 'DEL', type, field: 'delegate.type', conf: saved.conf, env: delegateEnv(req.inv), path: req.inv.path });
  // Only now: a failed DEL keeps the file, so the runtime's retry can still release the address.
  removeFile(saved.file);
  dropFlannelCopy(fc, req, saved.text);
}

async function check(req: Request): Promise<void> {
  const fc = loadFlannelConf(req.conf);
  const found = loadSaved(fc, req);
  if (!found) {
    throw new CniError(
      ErrorCode.UnknownContainer,
      `container ${req.inv.containerId} (${req.inv.ifname}) has no saved config in ${fc.dataDir} (was it added to network ${req.conf.name}?)`,
    );
  }
  const saved = found.conf;
  const conf: Json = { ...saved, cniVersion: req.conf.cniVersion };
  if (req.conf.prevResult !== undefined) conf.prevResult = req.conf.prevResult;
  const type = typeof saved.type === 'string' ? saved.type : 'bridge';
  await delegate({ command: 'CHECK', type, field: 'delegate.type', conf, env: delegateEnv(req.inv), path: req.inv.path });
  let env: SubnetEnv;
  try {
    env = readSubnetEnv(fc.subnetFile);
  } catch (err) {
    if (err instanceof SubnetEnvError) throw new CniError(ErrorCode.Internal, `overlay not ready: ${err.message}`);
    throw err;
  }
  const problem = await probeVtep(env, undefined, true); // host-gw: no VTEP to look at
  if (problem) throw new CniError(ErrorCode.Internal, `overlay not ready: ${problem}`);
}

async function gc(req: Request): Promise<void> {
  const scope = gcScope(req.conf);
  const fc = loadFlannelConf(req.conf);
  removeDeadTempFiles(fc.dataDir);
  for (const s of savedConfigs(fc.dataDir, req.conf.name)) {
    const garbage = s.ifname === undefined ? scope.releasesContainer(s.containerId) : scope.releases(s.containerId, s.ifname);
    if (!garbage) continue;
    process.stderr.write(`GC removes the saved config ${basename(s.file)}\n`);
    removeFile(s.file);
  }
  const env = await waitSubnetEnv(fc);
  const conf = renderDelegate(req.conf, fc, env);
  for (const key of GC_KEYS) if (key in req.conf) conf[key] = req.conf[key];
  await delegate({ command: 'GC', type: conf.type as string, field: 'delegate.type', conf, env: delegateEnv(req.inv), path: req.inv.path });
}

/** Temp files left by a writer that died; a live one is renamed within milliseconds. */
function removeDeadTempFiles(dataDir: string): void {
  let names: string[] = [];
  try {
    names = fs.readdirSync(dataDir).filter((n) => n.startsWith('.') && n.endsWith('.tmp'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const now = Date.now();
  for (const name of names) {
    const file = join(dataDir, name);
    try {
      if (now - fs.statSync(file).mtimeMs > 60_000) removeFile(file);
    } catch {
      // gone already
    }
  }
}

async function status(req: Request): Promise<void> {
  const fc = loadFlannelConf(req.conf);
  let env: SubnetEnv;
  try {
    env = readSubnetEnv(fc.subnetFile);
  } catch (err) {
    if (err instanceof SubnetEnvError) {
      throw new CniError(ErrorCode.PluginNotAvailable, `no overlay lease on this node: ${err.message.startsWith(fc.subnetFile) ? err.message : `${err.message} in ${fc.subnetFile}`}`);
    }
    throw err;
  }
  const problem = await probeVtep(env, undefined, true); // host-gw: no VTEP to look at
  if (problem) throw new CniError(ErrorCode.PluginNotAvailable, `overlay not ready: ${problem}`);
  const conf = renderDelegate(req.conf, fc, env);
  await delegate({ command: 'STATUS', type: conf.type as string, field: 'delegate.type', conf, env: delegateEnv(req.inv), path: req.inv.path });
}

export const flannelPlugin: PluginHandlers = { name: 'vxlan-flannel', knownArgs: ['IP', 'MAC'], add, del, check, gc, status };
