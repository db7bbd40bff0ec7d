// A lease store (flannel's Registry): etcd in flannel's schema, shared with
// flanneld nodes (etcd-store.ts), or the embedded file store (file-store.ts).
// Keys and values, nothing more: choosing, renewing and checking a lease is
// store-manager.ts's business; the operator commands (network, leases,
// release, status) work on a store directly. open-store.ts opens the one the
// flags ask for. Types only.
import type { LeaseAttrs, LeaseSubnets } from '../lease';
import type { LeaseDelta, LeaseList, Unwatch } from '../manager';

export const DEFAULT_PREFIX = '/coreos.com/network';
export const DEFAULT_LEASE_DIR = '/var/lib/vxlan-flannel';
export const DEFAULT_LEASE_TTL_S = 24 * 3600;

export interface LeaseStore {
  /** For log lines: "etcd http://10.0.0.1:2379 /coreos.com/network", "file store /var/lib/...". */
  readonly description: string;
  /** The raw network config JSON, or undefined when none was set. */
  getConfig(): Promise<string | undefined>;
  setConfig(text: string): Promise<void>;
  /** Every lease that has not expired; StoreUnavailable when the store cannot be reached. */
  list(): Promise<LeaseList>;
  /**
   * What changed since the last list (or delta) this store handed out, of
   * revision `since`: a changed lease's old object removed and its new one
   * added, unchanged leases never named; undefined when `since` is not the
   * last one handed out. Optional: etcd tells it from its watch's events
   * (etcd-mirror.ts); the file store does not (its leases also expire by
   * time), and the manager compares lists for it.
   */
  changes?(since: string): Promise<LeaseDelta | undefined>;
  /**
   * Creates a lease; false when any lease already holds (or overlaps) one of
   * its subnets, of either family (nothing is changed then). Atomic: of two
   * nodes creating at once, one fails. `chosenFrom`: the list (of this
   * store) the subnets were chosen from: etcd checks against it and guards
   * the write by its revision instead of listing again (a range read of
   * every lease); the file store checks the disk under its lock either way.
   */
  create(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, chosenFrom?: LeaseList): Promise<boolean>;
  /**
   * Re-writes our own lease with a fresh TTL (`ttlS` 0: none, for a
   * reservation, which stays one). `expectedValue` is the value we
   * last saw as stored (a listed Lease's `raw`, or what we wrote ourselves):
   * if the key now holds anything else, it fails (false). etcd compares the
   * bytes; the file store compares the attributes (its files also carry the
   * expiry, which every renewal changes).
   */
  renew(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, expectedValue?: string): Promise<boolean>;
  remove(subnets: LeaseSubnets): Promise<void>;
  /**
   * Calls `onChange` soon after any lease is added, changed, removed or
   * expires, counting from `after` (a list's `revision`: every change made
   * since that list is reported, even one made before the watch started) or
   * from now.
   */
  watch(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): Unwatch;
  /** Housekeeping the backend needs (the file store deletes expired leases). */
  expire?(): Promise<void>;
  close(): Promise<void>;
}

export interface StoreOptions {
  etcdEndpoints?: string[];
  etcdPrefix?: string;
  leaseDir?: string;
  etcdCaFile?: string;
  etcdCertFile?: string;
  etcdKeyFile?: string;
  etcdUsername?: string;
  etcdPassword?: string;
  /** The most any one etcd call may take, retries included (default 5 s); then it fails as unreachable. */
  etcdTimeoutMs?: number;
}
