// Getting this node's subnets: reuse our own lease (same PublicIP, or
// PublicIPv6 on an IPv6-only overlay), else the subnets of the previous
// subnet.env where free, else random free ones of the pools. Creation is a
// transaction that fails when any lease already holds one of the subnets, so
// two nodes starting at once never share a subnet of either family; a lost
// race is retried.
import { IP, Prefix } from '../../net/ip';
import { LeaseAttrs, LeaseSubnets, describeSubnets, encodeAttrs, subnetOf, taken } from '../lease';
import { NetworkConfig, Pool, inPool, nthSubnet, poolSize } from '../netconfig';
import type { LeaseList } from '../manager';
import type { LeaseStore } from './store';

export class PoolFullError extends Error {}

export interface Acquired extends LeaseSubnets {
  /** The lease value as written, for guarded renewals. */
  value: string;
  how: 'reused' | 'previous' | 'new';
  /** A reservation (no TTL) was adopted: it stays one and is never renewed. */
  permanent?: boolean;
  /** The list the lease was chosen from (without our own lease when it is new), and its revision. */
  listed: LeaseList;
}

const MAX_ATTEMPTS = 20;
const ENUMERATE_LIMIT = 1n << 16n;

/** A random free subnet of the pool, or undefined when every one is leased. */
export function pickFree(pool: Pool, leases: readonly LeaseSubnets[], random: () => number = Math.random): Prefix | undefined {
  const size = poolSize(pool);
  if (size <= ENUMERATE_LIMIT) {
    const free: Prefix[] = [];
    for (let i = 0n; i < size; i++) {
      const s = nthSubnet(pool, i);
      if (!taken(s, leases)) free.push(s);
    }
    return free.length ? free[Math.floor(random() * free.length)] : undefined;
  }
  // A huge pool: random probes find a free subnet almost surely; a scan settles the rest.
  for (let i = 0; i < 256; i++) {
    const s = nthSubnet(pool, BigInt(Math.floor(random() * Number(size))) % size);
    if (!taken(s, leases)) return s;
  }
  for (let i = 0n; i < size; i++) {
    const s = nthSubnet(pool, i);
    if (!taken(s, leases)) return s;
  }
  return undefined;
}

/** The address a node is known by: its PublicIP, or its PublicIPv6 on an IPv6-only overlay. */
export function identity(cfg: NetworkConfig, attrs: Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'>): IP | undefined {
  return cfg.v4 ? attrs.publicIP : attrs.publicIPv6;
}

/** Whether a lease has exactly the subnets this config hands out (one per enabled family, from its pool). */
function fitsConfig(cfg: NetworkConfig, l: LeaseSubnets): boolean {
  const fits = (pool: Pool | undefined, s: Prefix | undefined) => (pool ? !!s && inPool(pool, s) : !s);
  return fits(cfg.v4, l.subnet) && fits(cfg.v6, l.ipv6Subnet);
}

function poolFull(pool: Pool): PoolFullError {
  return new PoolFullError(
    `no free subnet: all ${poolSize(pool)} /${pool.subnetLen} subnets from ${pool.subnetMin} to ${pool.subnetMax} of ${pool.network} are leased`,
  );
}

export async function acquireLease(
  store: LeaseStore,
  cfg: NetworkConfig,
  attrs: LeaseAttrs,
  opts: { previous?: LeaseSubnets; ttlS: number; random?: () => number; log?: (msg: string) => void },
): Promise<Acquired> {
  const value = encodeAttrs(attrs);
  const me = identity(cfg, attrs);
  let previous = opts.previous;
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const listed = await store.list();
    const { leases } = listed;
    const mine = leases.filter((l) => me && identity(cfg, l.attrs)?.equals(me));
    const own = mine.filter((l) => fitsConfig(cfg, l));
    if (own.length > 0) {
      if (own.length > 1) opts.log?.(`several leases carry ${me}: ${own.map(describeSubnets).join(', ')}; reusing ${describeSubnets(own[0])}`);
      const { subnet, ipv6Subnet, permanent } = own[0];
      // A reservation stays one (as flanneld: no TTL). The write is guarded by the
      // value as stored (flanneld's spelling, or a hand-written one), not our re-encoding of it.
      if (await store.renew(own[0], attrs, permanent ? 0 : opts.ttlS, own[0].raw ?? encodeAttrs(own[0].attrs))) {
        return { subnet, ipv6Subnet, value, how: 'reused', ...(permanent ? { permanent } : {}), listed };
      }
      continue; // changed under us: look again
    }
    // Our lease from before a config change (IPv6 switched on, other pools): as
    // flanneld, it goes; unlike flanneld, its subnets are tried first again, so
    // an IPv4 overlay that gains IPv6 keeps its pods' IPv4 subnet.
    const stale = mine.find((l) => !fitsConfig(cfg, l));
    if (stale) {
      opts.log?.(`lease ${describeSubnets(stale)} of ${me} does not fit the network config: replacing it`);
      await store.remove(stale);
      previous = { subnet: stale.subnet ?? previous?.subnet, ipv6Subnet: stale.ipv6Subnet ?? previous?.ipv6Subnet };
      continue;
    }
    const want: LeaseSubnets = {};
    let how: Acquired['how'] = 'previous';
    for (const [family, pool] of [[4, cfg.v4], [6, cfg.v6]] as const) {
      if (!pool) continue;
      const prev = previous && subnetOf(previous, family);
      let pick = prev && inPool(pool, prev) && !taken(prev, leases) ? prev : undefined;
      if (!pick) {
        how = 'new';
        pick = pickFree(pool, leases, opts.random);
      }
      if (!pick) throw poolFull(pool);
      if (family === 4) want.subnet = pick;
      else want.ipv6Subnet = pick;
    }
    if (await store.create(want, attrs, opts.ttlS)) return { ...want, value, how, listed };
    opts.log?.(`subnet ${describeSubnets(want)} was taken by another node at the same moment; trying again`);
  }
  throw new Error(`could not acquire a subnet after ${MAX_ATTEMPTS} attempts: other nodes kept taking the same subnets`);
}
