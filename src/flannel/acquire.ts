// Getting this node's subnet: reuse our own lease (same PublicIP), else the
// subnet of the previous subnet.env if it is free, else a random free one of
// the pool. Creation is a transaction that fails when the key exists, so two
// nodes starting at once never share a subnet; a lost race is retried.
import { Prefix } from '../net/ip';
import { Lease, LeaseAttrs, encodeAttrs } from './lease';
import { NetworkConfig, inPool, nthSubnet, poolSize } from './netconfig';
import type { LeaseStore } from './store';

export class PoolFullError extends Error {}

export interface Acquired {
  subnet: Prefix;
  /** The lease value as written, for guarded renewals. */
  value: string;
  how: 'reused' | 'previous' | 'new';
}

const MAX_ATTEMPTS = 20;
const ENUMERATE_LIMIT = 1n << 16n;

function taken(subnet: Prefix, leases: readonly Lease[]): boolean {
  return leases.some((l) => l.subnet.overlaps(subnet));
}

/** A random free subnet of the pool, or undefined when every one is leased. */
export function pickFree(cfg: NetworkConfig, leases: readonly Lease[], random: () => number = Math.random): Prefix | undefined {
  const size = poolSize(cfg);
  if (size <= ENUMERATE_LIMIT) {
    const free: Prefix[] = [];
    for (let i = 0n; i < size; i++) {
      const s = nthSubnet(cfg, i);
      if (!taken(s, leases)) free.push(s);
    }
    return free.length ? free[Math.floor(random() * free.length)] : undefined;
  }
  // A huge pool: random probes find a free subnet almost surely; a scan settles the rest.
  for (let i = 0; i < 256; i++) {
    const s = nthSubnet(cfg, BigInt(Math.floor(random() * Number(size))));
    if (!taken(s, leases)) return s;
  }
  for (let i = 0n; i < size; i++) {
    const s = nthSubnet(cfg, i);
    if (!taken(s, leases)) return s;
  }
  return undefined;
}

export async function acquireLease(
  store: LeaseStore,
  cfg: NetworkConfig,
  attrs: LeaseAttrs,
  opts: { previous?: Prefix; ttlS: number; random?: () => number; log?: (msg: string) => void },
): Promise<Acquired> {
  const value = encodeAttrs(attrs);
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const { leases } = await store.list();
    const own = leases.filter((l) => l.attrs.publicIP.equals(attrs.publicIP) && inPool(cfg, l.subnet));
    if (own.length > 0) {
      if (own.length > 1) opts.log?.(`several leases carry PublicIP ${attrs.publicIP}: ${own.map((l) => l.subnet).join(', ')}; reusing ${own[0].subnet}`);
      if (await store.renew(own[0].subnet, attrs, opts.ttlS, encodeAttrs(own[0].attrs))) return { subnet: own[0].subnet, value, how: 'reused' };
      continue; // changed under us: look again
    }
    const prev = opts.previous;
    if (prev && inPool(cfg, prev) && !taken(prev, leases)) {
      if (await store.create(prev, attrs, opts.ttlS)) return { subnet: prev, value, how: 'previous' };
      continue;
    }
    const pick = pickFree(cfg, leases, opts.random);
    if (!pick) {
      throw new PoolFullError(
        `no free subnet: all ${poolSize(cfg)} /${cfg.subnetLen} subnets from ${cfg.subnetMin} to ${cfg.subnetMax} of ${cfg.network} are leased`,
      );
    }
    if (await store.create(pick, attrs, opts.ttlS)) return { subnet: pick, value, how: 'new' };
    opts.log?.(`subnet ${pick} was taken by another node at the same moment; trying again`);
  }
  throw new Error(`could not acquire a subnet after ${MAX_ATTEMPTS} attempts: other nodes kept taking the same subnets`);
}
