// Getting this node's subnets: reuse our own lease (same PublicIP, or
// PublicIPv6 on an IPv6-only overlay), else the subnets of the previous
// subnet.env where free, else random free ones of the pools (found between
// the leased ranges: the cost grows with the leases, never with the pool's
// size, whatever their lengths; see pickFree). Creation is a
// transaction that fails when any lease already holds one of the subnets, so
// two nodes starting at once never share a subnet of either family; a lost
// race is retried.
import { IP, Prefix } from '../../net/ip';
import { LeaseAttrs, LeaseSubnets, describeSubnets, encodeAttrs, subnetOf, taken } from '../lease';
import { NetworkConfig, Pool, inPool, nthSubnet, poolSize, subnetSize } from '../netconfig';
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

/**
 * The pool's subnets (by index) that `leases` hold, as sorted, merged
 * [first, last] ranges. A lease of another length counts for every subnet
 * it overlaps (as flanneld counts it, and as the stores' create refuses it):
 * a lease wider than a subnet is one range, not one test per subnet.
 */
function takenRanges(pool: Pool, leases: readonly LeaseSubnets[]): [bigint, bigint][] {
  const step = subnetSize(pool.network.family, pool.subnetLen);
  const min = pool.subnetMin.value;
  const lastIndex = poolSize(pool) - 1n;
  const ranges: [bigint, bigint][] = [];
  for (const l of leases) {
    const s = subnetOf(l, pool.network.family);
    if (!s) continue;
    const first = s.network.value, last = s.last.value;
    if (last < min) continue;
    const lo = first < min ? 0n : (first - min) / step;
    const hi = (last - min) / step;
    if (lo > lastIndex) continue;
    ranges.push([lo, hi < lastIndex ? hi : lastIndex]);
  }
  ranges.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const merged: [bigint, bigint][] = [];
  for (const r of ranges) {
    const top = merged[merged.length - 1];
    if (top && r[0] <= top[1] + 1n) top[1] = r[1] > top[1] ? r[1] : top[1];
    else merged.push([r[0], r[1]]);
  }
  return merged;
}

/**
 * A random free subnet of the pool (each free one equally likely), or
 * undefined when every one is leased. Costs O(L log L) for L leases whatever
 * the pool's size: the free subnets are counted between the leased ranges,
 * never enumerated, so neither a /9 of /24s with thousands of leases nor one
 * wide lease over a pool of 2^32 subnets makes it scan.
 */
export function pickFree(pool: Pool, leases: readonly LeaseSubnets[], random: () => number = Math.random): Prefix | undefined {
  const size = poolSize(pool);
  const ranges = takenRanges(pool, leases);
  const free = ranges.reduce((n, [lo, hi]) => n - (hi - lo + 1n), size);
  if (free <= 0n) return undefined;
  // the k-th free subnet, counting the gaps between the leased ranges
  let k = BigInt(Math.floor(random() * Number(free)));
  if (k >= free) k = free - 1n;
  let cursor = 0n;
  for (const [lo, hi] of ranges) {
    if (k < lo - cursor) break;
    k -= lo - cursor;
    cursor = hi + 1n;
  }
  return nthSubnet(pool, cursor + k);
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
  opts: {
    previous?: LeaseSubnets;
    ttlS: number;
    random?: () => number;
    log?: (msg: string) => void;
    /** A list just read (previousAttrs'): the first attempt chooses from it instead of listing again. */
    listed?: LeaseList;
  },
): Promise<Acquired> {
  const value = encodeAttrs(attrs);
  const me = identity(cfg, attrs);
  let previous = opts.previous;
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    // every write below is guarded (renew by the value, create by the list's revision or the store's lock): an older list only costs a retry
    const listed = attempt === 1 && opts.listed ? opts.listed : await store.list();
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
    if (await store.create(want, attrs, opts.ttlS, listed)) return { ...want, value, how, listed };
    opts.log?.(`subnet ${describeSubnets(want)} was taken by another node at the same moment; trying again`);
  }
  throw new Error(`could not acquire a subnet after ${MAX_ATTEMPTS} attempts: other nodes kept taking the same subnets`);
}
