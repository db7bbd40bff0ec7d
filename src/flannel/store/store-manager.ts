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
  /**
   * The last list or delta handed out: its revision (what leaseChanges counts
   * from), the list itself (compared with a new one when the store cannot
   * tell its changes) and the subnet lengths it was filtered by.
   */
  private handedOut?: { revision?: string; list?: LeaseList; lengths: string };
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
    const list = ofSubnetLen(await this.store.list(), this.cfg);
    this.handedOut = { revision: list.revision, list, lengths: subnetLengths(this.cfg) };
    return list;
  }

  /**
   * The changes since the list or delta of `revision`, so that the backend's
   * changes pass costs only what changed. etcd tells them from its watch's
   * events (store.changes: the cost of the change, not of the cluster);
   * otherwise a new list is compared with the last by identity (the file
   * store hands out the same Lease object for a lease that did not change: a
   * list from memory and a set lookup per lease). Undefined (the daemon
   * lists) when `revision` is not the last one handed out, the network
   * config's subnet lengths changed since, or the store cannot be reached.
   */
  async leaseChanges(revision: string): Promise<LeaseDelta | undefined> {
    const before = this.handedOut;
    if (before?.revision !== revision || before.lengths !== subnetLengths(this.cfg)) return undefined;
    try {
      const told = await this.store.changes?.(revision);
      if (told) {
        this.handedOut = { revision: told.revision, lengths: before.lengths };
        return deltaOfSubnetLen(told, this.cfg);
      }
      if (!before.list) return undefined; // the last was a delta: nothing to compare with
      const now = await this.listLeases();
      if (now.revision === undefined) return undefined;
      const gone = new Set(before.list.leases);
      const added = now.leases.filter((l) => !gone.delete(l));
      return { removed: [...gone], added, bad: now.bad, revision: now.revision };
    } catch {
      return undefined; // the daemon's own list reports the trouble
    }
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

/** Why `l` is not a lease of this network: a subnet not of the config's SubnetLen (IPv6SubnetLen); undefined when it is. */
function notOfSubnetLen(l: Lease, cfg: NetworkConfig): string | undefined {
  const why =
    (l.subnet && cfg.v4 && l.subnet.length !== cfg.v4.subnetLen && `its subnet ${l.subnet} is not of the network config's SubnetLen ${cfg.v4.subnetLen}`) ||
    (l.ipv6Subnet && cfg.v6 && l.ipv6Subnet.length !== cfg.v6.subnetLen && `its IPv6 subnet ${l.ipv6Subnet} is not of the network config's IPv6SubnetLen ${cfg.v6.subnetLen}`);
  return why ? `${why}: not programmed` : undefined;
}

/** The subnet lengths leases are filtered by (a delta counts only from a list filtered by the same). */
const subnetLengths = (cfg: NetworkConfig | undefined) => `${cfg?.v4?.subnetLen}/${cfg?.v6?.subnetLen}`;

/**
 * The list with every lease whose subnet is not of the config's SubnetLen
 * (IPv6SubnetLen) moved to `bad`: this network never hands one out, and a
 * smaller one inside a node's subnet would take part of its traffic. The
 * lease objects stay the same (leaseChanges compares them by identity).
 */
function ofSubnetLen(list: LeaseList, cfg: NetworkConfig | undefined): LeaseList {
  if (!cfg) return list;
  let bad: LeaseList['bad'] | undefined;
  const leases = list.leases.filter((l) => {
    const why = notOfSubnetLen(l, cfg);
    if (why) (bad ??= [...list.bad]).push({ key: leaseKey(l), why });
    return !why;
  });
  return bad ? { ...list, leases, bad } : list;
}

/** A delta filtered as ofSubnetLen filters a list: a lease of another length never came, so it never goes either. */
function deltaOfSubnetLen(delta: LeaseDelta, cfg: NetworkConfig | undefined): LeaseDelta {
  if (!cfg) return delta;
  const bad = [...delta.bad];
  const added = delta.added.filter((l) => {
    const why = notOfSubnetLen(l, cfg);
    if (why) bad.push({ key: leaseKey(l), why });
    return !why;
  });
  return { removed: delta.removed.filter((l) => !notOfSubnetLen(l, cfg)), added, bad, revision: delta.revision };
}
