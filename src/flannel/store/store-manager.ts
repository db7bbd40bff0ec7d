// The subnet manager over a lease store (etcd, or the embedded file store):
// leases are chosen. The network config is the store's; this node's lease is
// found or picked by acquire.ts and then kept by a LeaseKeeper; the peers are
// the store's leases, watched.
import { Acquired, PoolFullError, acquireLease, identity } from './acquire';
import { type Lease, type LeaseAttrs, type LeaseSubnets, leaseKey } from '../lease';
import { DEFAULT_RENEW_MARGIN_S, LeaseKeeper } from './lease-keeper';
import type { HeldLease, LeaseDelta, LeaseHooks, LeaseList, SubnetManager, Unwatch } from '../manager';
import { ConfigError, NetworkConfig, parseNetworkConfig } from '../netconfig';
import type { LeaseStore } from './store';

export interface StoreManagerOptions {
  /** Lifetime of a lease this node creates or renews, in seconds (--lease-ttl). */
  leaseTtlS: number;
  /** Renew this long before expiry, in seconds, at most half the TTL (--subnet-lease-renew-margin; an hour by default). */
  renewMarginS?: number;
  /** The subnets of this node's previous subnet.env: tried first when it holds no lease. */
  previous?: LeaseSubnets;
}

export class StoreManager implements SubnetManager {
  /** The list previousAttrs read, for acquireLease right after it: one range read of every lease fewer at a join. */
  private justListed?: LeaseList;
  /** The last list handed out by listLeases: what leaseChanges compares a new list with. */
  private lastListed?: LeaseList;
  /** The network config last read: a lease of another size than its SubnetLen is not one this network hands out. */
  private cfg?: NetworkConfig;

  constructor(
    private readonly store: LeaseStore,
    private readonly opts: StoreManagerOptions,
  ) {}

  get description(): string {
    return this.store.description;
  }

  async getNetworkConfig(): Promise<NetworkConfig> {
    const text = await this.store.getConfig();
    if (text === undefined) throw new Error(`${this.description} has no network config; set one with \`vxlan-flannel network set --network CIDR\``);
    try {
      return (this.cfg = parseNetworkConfig(text));
    } catch (err) {
      if (err instanceof ConfigError) throw new Error(`bad network config in ${this.description}: ${err.message}`);
      throw err;
    }
  }

  /** A store holds no per-node settings: the flags decide. */
  async nodePublicIPs(): Promise<{ publicIp?: string; publicIpv6?: string }> {
    return {};
  }

  async previousAttrs(cfg: NetworkConfig, node: Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'>): Promise<LeaseAttrs | undefined> {
    const me = identity(cfg, node);
    const listed = (this.justListed = await this.store.list());
    return listed.leases.find((l) => me && identity(cfg, l.attrs)?.equals(me))?.attrs;
  }

  async acquireLease(cfg: NetworkConfig, attrs: LeaseAttrs, hooks: LeaseHooks): Promise<HeldLease> {
    this.cfg = cfg;
    let acquired: Acquired;
    try {
      const listed = this.justListed;
      this.justListed = undefined;
      acquired = await acquireLease(this.store, cfg, attrs, { previous: this.opts.previous, ttlS: this.opts.leaseTtlS, log: hooks.log, ...(listed ? { listed } : {}) });
    } catch (err) {
      if (err instanceof PoolFullError) throw new Error(`${err.message}; waiting for a lease to be released or to expire`);
      throw err;
    }
    return new LeaseKeeper(this.store, cfg, this.opts.leaseTtlS, this.opts.renewMarginS ?? DEFAULT_RENEW_MARGIN_S, attrs, acquired, hooks);
  }

  async listLeases(): Promise<LeaseList> {
    return (this.lastListed = ofSubnetLen(await this.store.list(), this.cfg));
  }

  /**
   * The changes since the list of `revision`: a new list compared with that
   * one by identity. The stores hand out the same Lease object for a lease
   * that did not change (etcd's mirror, the file store's picture), so this
   * costs a list from memory and a set lookup per lease, and the backend's
   * changes pass costs only what changed. Undefined (the daemon lists) when
   * `revision` is not the last list's or the store cannot be listed.
   */
  async leaseChanges(revision: string): Promise<LeaseDelta | undefined> {
    const before = this.lastListed;
    if (before?.revision !== revision) return undefined;
    let now: LeaseList;
    try {
      now = await this.listLeases();
    } catch {
      return undefined; // the daemon's own list reports the trouble
    }
    if (now.revision === undefined) return undefined;
    const gone = new Set(before.leases);
    const added = now.leases.filter((l) => !gone.delete(l));
    return { removed: [...gone], added, bad: now.bad, revision: now.revision };
  }

  watchLeases(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): Unwatch {
    return this.store.watch(onChange, onError, after);
  }

  async tidy(): Promise<void> {
    try {
      await this.store.expire?.();
    } catch (err) {
      throw new Error(`cannot expire old leases: ${(err as Error).message}`);
    }
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

/**
 * The list with every lease whose subnet is not of the config's SubnetLen
 * (IPv6SubnetLen) moved to `bad`: this network never hands one out, and a
 * smaller one inside a node's subnet would take part of its traffic. The
 * lease objects stay the same (leaseChanges compares them by identity).
 */
function ofSubnetLen(list: LeaseList, cfg: NetworkConfig | undefined): LeaseList {
  if (!cfg) return list;
  const wrong = (l: Lease) =>
    (l.subnet && cfg.v4 && l.subnet.length !== cfg.v4.subnetLen && `its subnet ${l.subnet} is not of the network config's SubnetLen ${cfg.v4.subnetLen}`) ||
    (l.ipv6Subnet && cfg.v6 && l.ipv6Subnet.length !== cfg.v6.subnetLen && `its IPv6 subnet ${l.ipv6Subnet} is not of the network config's IPv6SubnetLen ${cfg.v6.subnetLen}`);
  let bad: LeaseList['bad'] | undefined;
  const leases = list.leases.filter((l) => {
    const why = wrong(l);
    if (why) (bad ??= [...list.bad]).push({ key: leaseKey(l), why: `${why}: not programmed` });
    return !why;
  });
  return bad ? { ...list, leases, bad } : list;
}
