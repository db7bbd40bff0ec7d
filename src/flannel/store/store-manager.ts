// The subnet manager over a lease store (etcd, or the embedded file store):
// leases are chosen. The network config is the store's; this node's lease is
// found or picked by acquire.ts and then kept by a LeaseKeeper; the peers are
// the store's leases, watched.
import { Acquired, PoolFullError, acquireLease, identity } from './acquire';
import type { LeaseAttrs, LeaseSubnets } from '../lease';
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
      return parseNetworkConfig(text);
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
    return (this.lastListed = await this.store.list());
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
