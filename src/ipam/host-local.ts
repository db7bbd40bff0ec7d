// The host-local IPAM plugin: ADD, DEL, CHECK, GC and STATUS.
import * as fs from 'node:fs';
import { CniError, ErrorCode } from '../cni/errors';
import { parseResult, Result } from '../cni/result';
import type { PluginHandlers, Request } from '../cni/skel';
import { validAttachments } from '../cni/gc';
import { IP } from '../net/ip';
import { loadIpamConfig, loadStoreLocation } from './config';
import { parseResolvConf } from './dns';
import { Owner, ownerToString, reservationName } from './disk';
import { allocate, toIPConfig } from './allocator';
import { NetworkPool } from './pool';

/** A torn file younger than this may be a Go host-local still writing it (it creates, then writes). */
const TORN_GRACE_MS = 60_000;

const ownerOf = (req: Request): Owner => ({ containerId: req.inv.containerId, ifname: req.inv.ifname });

async function add(req: Request): Promise<Result> {
  const cfg = loadIpamConfig(req.conf, req.inv.args);
  const dns = cfg.resolvConf ? parseResolvConf(cfg.resolvConf) : undefined;
  const owner = ownerOf(req);
  const pool = new NetworkPool(cfg.dataDir, cfg.network);
  const allocations = await pool.locked({ create: true, timeoutMs: cfg.lockTimeoutMs }, () => {
    const held = pool.heldBy(owner);
    pool.index.invalidate();
    let result;
    try {
      result = allocate(pool.store, cfg.rangeSets, cfg.requested, owner, held);
    } catch (err) {
      // A CniError comes after allocate() rolled back cleanly: the index is still right.
      if (err instanceof CniError) pool.index.stamp();
      throw err;
    }
    // Addresses held in range sets no longer configured stay held until DEL.
    const kept = held.filter((ip) => !result.some((a) => a.ip.equals(ip)));
    pool.index.set(owner, [...result.map((a) => a.ip), ...kept]);
    pool.index.stamp();
    return result;
  });
  if (!allocations) throw new CniError(ErrorCode.TryAgainLater, `the state directory of network ${cfg.network} was removed during ADD`);
  return { ips: allocations.map(toIPConfig), routes: cfg.routes, ...(dns ? { dns } : {}) };
}

async function del(req: Request): Promise<void> {
  const where = loadStoreLocation(req.conf);
  const pool = new NetworkPool(where.dataDir, where.network);
  await pool.locked({ create: false, timeoutMs: where.lockTimeoutMs }, () => pool.release(ownerOf(req)));
}

async function check(req: Request): Promise<void> {
  const cfg = loadIpamConfig(req.conf, req.inv.args);
  const owner = ownerOf(req);
  const pool = new NetworkPool(cfg.dataDir, cfg.network);
  const held = (await pool.locked({ create: false, timeoutMs: cfg.lockTimeoutMs }, () => pool.heldBy(owner))) ?? [];
  if (held.length === 0) {
    throw new CniError(ErrorCode.Internal, `no address is reserved for ${ownerToString(owner)} in network ${cfg.network}`);
  }
  if (req.conf.prevResult === undefined) return;
  const expected = (parseResult(req.conf.prevResult).ips ?? [])
    .map((c) => IP.parse(c.address.split('/')[0]))
    .filter((ip): ip is IP => !!ip && cfg.rangeSets.some((s) => s.contains(ip)));
  const missing = expected.filter((ip) => !held.some((h) => h.equals(ip)));
  if (missing.length > 0) {
    throw new CniError(
      ErrorCode.Internal,
      `${missing.join(', ')} from prevResult is not reserved for ${ownerToString(owner)} (it holds ${held.join(', ')})`,
    );
  }
}

async function gc(req: Request): Promise<void> {
  const valid = validAttachments(req.conf);
  const where = loadStoreLocation(req.conf);
  const pool = new NetworkPool(where.dataDir, where.network);
  await pool.locked({ create: false, timeoutMs: where.lockTimeoutMs }, async () => {
    const now = Date.now();
    const garbage = (await pool.store.scan()).filter((r) =>
      r.owner
        ? r.owner.ifname === undefined
          ? !valid.hasContainer(r.owner.containerId)
          : !valid.has(r.owner.containerId, r.owner.ifname)
        : now - r.mtimeMs >= TORN_GRACE_MS,
    );
    if (garbage.length === 0) return;
    pool.index.invalidate();
    const owners = new Map<string, Owner>();
    for (const r of garbage) {
      process.stderr.write(`host-local: GC releases ${r.ip} (${r.owner ? ownerToString(r.owner) : 'torn file'})\n`);
      pool.store.release(r.ip);
      if (r.owner) owners.set(JSON.stringify(r.owner), r.owner);
    }
    // Only the released attachments' entries change; the index stays valid for the rest.
    for (const owner of owners.values()) pool.index.set(owner, []);
    pool.index.stamp();
  });
}

async function status(req: Request): Promise<void> {
  const cfg = loadIpamConfig(req.conf, req.inv.args);
  const pool = new NetworkPool(cfg.dataDir, cfg.network);
  const unavailable = (why: string) => new CniError(ErrorCode.PluginNotAvailable, `network ${cfg.network}: ${why}`);

  const problem = pool.probeWritable();
  if (problem) throw unavailable(problem);

  const used = new Map<number, bigint>();
  const names = fs.existsSync(pool.store.dir) ? fs.readdirSync(pool.store.dir) : [];
  for (const name of names) {
    const ip = reservationName(name);
    const set = ip && cfg.rangeSets.find((s) => s.contains(ip));
    if (set) used.set(set.index, (used.get(set.index) ?? 0n) + 1n);
  }
  // Every ADD needs an address from every range set, so one full set is enough to refuse ADDs.
  const full = cfg.rangeSets.filter((s) => (used.get(s.index) ?? 0n) >= s.capacity);
  if (full.length > 0) throw unavailable(`no free addresses in range set ${full.map(String).join('; ')}`);
}

export const hostLocal: PluginHandlers = { name: 'host-local', knownArgs: ['IP'], add, del, check, gc, status };
