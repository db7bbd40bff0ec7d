// The host-local IPAM plugin: ADD, DEL, CHECK, GC and STATUS.
import { CniError, ErrorCode } from '../cni/errors';
import { parseResult, Result } from '../cni/result';
import type { PluginHandlers, Request } from '../cni/skel';
import { gcScope, type GcScope } from '../cni/gc';
import { IP } from '../net/ip';
import { loadIpamConfig, loadStoreLocation } from './config';
import { parseResolvConf } from './dns';
import type { Reservation } from './disk-store';
import { Owner, ownerToString } from './owner';
import { toIPConfig } from './allocator';
import { NetworkPool } from './network-pool';
import type { Pod } from './parking-lot';

/** A torn file younger than this may be a Go host-local still writing it (it creates, then writes). */
export const TORN_GRACE_MS = 60_000;

const ownerOf = (req: Request): Owner => ({ containerId: req.inv.containerId, ifname: req.inv.ifname });

/**
 * The pod of the attachment, from CNI_ARGS (runtimes pass these with
 * IgnoreUnknown=1): it owns parked addresses. Any value CNI_ARGS can carry is
 * taken, as the Go host-local takes it: podman passes its container's name
 * (`crazy_antonelli`), other runtimes what they like. The names are only a
 * key (parking-lot.ts keys a parking by the JSON of namespace, name and
 * interface) and are quoted where they are printed.
 */
function podOf(req: Request): Pod | undefined {
  const namespace = req.inv.args.get('K8S_POD_NAMESPACE');
  const name = req.inv.args.get('K8S_POD_NAME');
  return namespace && name ? { namespace, name } : undefined;
}

async function add(req: Request): Promise<Result> {
  const cfg = loadIpamConfig(req.conf, req.inv.args);
  const dns = cfg.resolvConf ? parseResolvConf(cfg.resolvConf) : undefined;
  const allocations = await new NetworkPool(cfg).allocate(ownerOf(req), cfg.rangeSets, cfg.requested, podOf(req));
  return { ips: allocations.map(toIPConfig), routes: cfg.routes, ...(dns ? { dns } : {}) };
}

async function del(req: Request): Promise<void> {
  await new NetworkPool(loadStoreLocation(req.conf)).release(ownerOf(req), podOf(req));
}

async function check(req: Request): Promise<void> {
  const cfg = loadIpamConfig(req.conf, req.inv.args);
  const owner = ownerOf(req);
  const held = await new NetworkPool(cfg).held(owner);
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

/** A reservation GC releases: the scope releases its attachment, or its file is torn and old. */
function isGarbage(r: Reservation, scope: GcScope, now: number): boolean {
  if (!r.owner) return now - (r.tornSinceMs ?? 0) >= TORN_GRACE_MS;
  return r.owner.ifname === undefined ? scope.releasesContainer(r.owner.containerId) : scope.releases(r.owner.containerId, r.owner.ifname);
}

async function gc(req: Request): Promise<void> {
  const scope = gcScope(req.conf);
  const now = Date.now();
  const released = await new NetworkPool(loadStoreLocation(req.conf)).collect(
    (r) => isGarbage(r, scope, now),
    // a parking goes only when its attachment was named stale (host-local repair, whose DEL may have parked it)
    (p) => p.attachment.ifname !== undefined && scope.releasesKept(p.attachment.containerId, p.attachment.ifname),
  );
  for (const r of released) {
    process.stderr.write(`host-local: GC released ${r.ip} (${r.owner ? ownerToString(r.owner) : 'torn file'})\n`);
  }
}

async function status(req: Request): Promise<void> {
  const cfg = loadIpamConfig(req.conf, req.inv.args);
  const pool = new NetworkPool(cfg);
  const unavailable = (why: string) => new CniError(ErrorCode.PluginNotAvailable, `network ${cfg.network}: ${why}`);
  const problem = pool.probeWritable();
  if (problem) throw unavailable(problem);
  // Every ADD needs an address from every range set, so one full set is enough to refuse ADDs.
  const full = pool.fullRangeSets(cfg.rangeSets);
  if (full.length > 0) throw unavailable(`no free addresses in range set ${full.map(String).join('; ')}`);
}

export const hostLocal: PluginHandlers = {
  name: 'host-local',
  knownArgs: ['IP', 'K8S_POD_NAMESPACE', 'K8S_POD_NAME', 'K8S_POD_INFRA_CONTAINER_ID', 'K8S_POD_UID'],
  add,
  del,
  check,
  gc,
  status,
};
