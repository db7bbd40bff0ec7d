// Where this node's lease and its peers' leases come from: the daemon's one
// dependency on the outside world besides the kernel (flannel's
// subnet.Manager). Two kinds of sources fit behind it:
//
// - leases that are chosen (etcd, the embedded file store: store-manager.ts):
//   the node picks a free subnet of the network config's pool, creates the
//   lease with a TTL, renews it, and creates it again if it is lost;
// - leases that are assigned (Kubernetes, as flanneld --kube-subnet-mgr): the
//   node's lease is its Node's spec.podCIDR/podCIDRs, what it advertises goes
//   into its Node's annotations (flannel.alpha.coreos.com/backend-type,
//   backend-data, backend-v6-data, public-ip, public-ipv6,
//   kube-subnet-manager), the peers are the other Nodes' annotations (list +
//   watch), and the network config is a file (net-conf.json).
//
// The daemon only calls this interface and never knows which kind it runs on.
// Types only (and one error): every source implements this; it imports
// nothing but the lease and network config types.
import type { Lease, LeaseAttrs, LeaseSubnets } from './lease';
import type { NetworkConfig } from './netconfig';

/** The source cannot be reached right now (etcd or the API server unreachable, a call timed out): retried, never fatal. */
export class StoreUnavailable extends Error {}

/** Every lease the source holds that has not expired. */
export interface LeaseList {
  leases: Lease[];
  /** Entries that could not be read, with why (logged, never programmed). */
  bad: { key: string; why: string }[];
  /**
   * Where the list was read (etcd's revision, the file store's directory
   * signature, the kube manager's count of Node changes). Passed to watchLeases(): no
   * change made after this list is missed, however late the watch starts.
   */
  revision?: string;
}

/**
 * The leases that changed since a list (or an earlier delta): the objects
 * that left the source's picture and those that came into it (a changed
 * lease is both: its old object removed, its new one added). A source hands
 * out the same object for a lease that did not change, so the two lists are
 * compared by identity.
 */
export interface LeaseDelta {
  removed: Lease[];
  added: Lease[];
  /** Entries that could not be read among the changes. */
  bad: { key: string; why: string }[];
  /** Where the picture is now: the next delta counts from here. */
  revision: string;
}

/** Stops a watch. */
export type Unwatch = () => void;

/** What a held lease tells the daemon while it keeps it. */
export interface LeaseHooks {
  /** One log line (the daemon's log: control characters escaped). */
  log(msg: string): void;
  /** Something about our lease needs a reconcile now (a renewal was refused: the reconcile looks at what the source holds). */
  resync(why: string): void;
  /**
   * Settles when the daemon stops: a wait inside acquireLease gives up then
   * (rejects). Kube: the wait for our Node's podCIDR.
   */
  stopping?: Promise<void>;
  /** The lease was renewed (counted for /metrics). */
  renewed?(): void;
}

/** This node's lease while the daemon holds it. The source keeps it alive by itself: the daemon never renews. */
export interface HeldLease extends LeaseSubnets {
  /**
   * How it was obtained, for the log line `lease <subnets> (<how>)`: "reused",
   * "previous" (the last subnet.env's subnets), "new", with ", a reservation:
   * kept without a TTL" for a flannel reservation. Kube: e.g. "the Node's
   * podCIDR".
   */
  readonly how: string;
  /**
   * The list the lease was obtained from: the first picture of the peers (if
   * the source stops answering right after, the overlay is programmed from it,
   * not emptied) and the revision the watch starts from. Kube: the Nodes the
   * informer had synced when our Node got its podCIDR.
   */
  readonly listed: LeaseList;
  /**
   * Checks our lease against a fresh list; the daemon calls it after every
   * list that succeeded. Chosen leases: re-created if it was deleted or
   * expired (a different node now holding one of its subnets is a conflict,
   * logged and left alone), re-written if its value changed, and an operator
   * turning it into a reservation or back is followed. Resolves true when it
   * wrote the lease again: list again to see it. Kube: our Node's podCIDR
   * cannot be taken away; re-patch our annotations if they were changed, and
   * resolve false.
   */
  check(leases: readonly Lease[]): Promise<boolean>;
  /**
   * What the last reconcile found: undefined when the overlay is in place on
   * this node (its VTEPs up, every peer programmed), else a short reason.
   * Called after every reconcile; a rejection is logged and the call comes
   * again after the next one. Chosen leases: nothing. Kube: our Node's
   * NetworkUnavailable condition follows it, patched when it changes: False
   * (FlannelIsUp, flanneld's CompleteLease) while in place, True with the
   * reason while not; unless --set-node-network-unavailable=false.
   */
  overlayState(problem: string | undefined): Promise<void>;
  /** Stops keeping the lease (renewal timer); it stays where it is for the next start. Kube: nothing. */
  stop(): void;
  /**
   * Stops keeping the lease and gives it back (--release-on-exit: the node
   * leaves), after any write of it in flight. Chosen leases: deleted, so
   * the other nodes drop this one within their watch latency. Kube: the
   * podCIDR is the Node's: flannel's annotations come off our Node.
   */
  release(): Promise<void>;
  /**
   * Start-up failed after the lease was obtained: stops keeping it and gives
   * it back when this start created it; a lease the node held before this
   * start stays as it was. Kube: nothing.
   */
  abandon(): Promise<void>;
}

export interface SubnetManager {
  /** For log lines: "etcd http://10.0.0.1:2379 /coreos.com/network", "file store /var/lib/vxlan-flannel"; kube: "Kubernetes API <url>, node <name>". */
  readonly description: string;
  /**
   * The network config, read now; an Error whose message says what is
   * missing or wrong (the daemon retries and logs it). Chosen leases: the
   * store's config key (<prefix>/config). Kube: the net-conf.json file.
   */
  getNetworkConfig(): Promise<NetworkConfig>;
  /**
   * Public addresses set for this node in the source, which win over
   * --public-ip / --public-ipv6 (flanneld's GetStoredPublicIP); read before
   * the underlay is chosen. Chosen leases: none. Kube: our Node's
   * node-public-ip / node-public-ipv6 annotations (StoreUnavailable until the
   * Nodes are listed; none while our Node does not exist).
   */
  nodePublicIPs(): Promise<{ publicIp?: string; publicIpv6?: string }>;
  /**
   * What this node advertised before, or undefined: the daemon keeps each
   * VTEP's MAC from it when it recreates the device, so its peers need no
   * change. `node` is this node's public addresses. Chosen leases: its lease,
   * found by its PublicIP (PublicIPv6 on an IPv6-only overlay) as flanneld
   * finds it. Kube: our Node's backend-data / backend-v6-data annotations
   * (flanneld's GetStoredMacAddresses).
   */
  previousAttrs(cfg: NetworkConfig, node: Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'>): Promise<LeaseAttrs | undefined>;
  /**
   * Obtains this node's lease, advertising `attrs` (public addresses, VTEP
   * MACs), and keeps it from then on until stop(), release() or abandon().
   * Fails with a message the daemon logs before retrying (a full pool, an
   * unreachable store). Chosen leases: this node's own lease is reused, else
   * the previous subnet.env's subnets if free, else random free ones; created
   * atomically (two nodes never share a subnet), with a TTL, renewed on its
   * own timer. Kube: wait for our Node's podCIDR(s), check they lie in the
   * config's networks, patch our Node's annotations with `attrs` and
   * kube-subnet-manager=true; nothing to renew.
   */
  acquireLease(cfg: NetworkConfig, attrs: LeaseAttrs, hooks: LeaseHooks): Promise<HeldLease>;
  /**
   * Every lease, ours included (the daemon filters). Fails with
   * StoreUnavailable when the source cannot be reached: the overlay then
   * stays as programmed. Kube: every Node with kube-subnet-manager=true, its
   * podCIDR(s) as the subnets and its annotations as the attributes (the
   * watched Nodes; StoreUnavailable only before the first list).
   */
  listLeases(): Promise<LeaseList>;
  /**
   * Calls `onChange` soon after any lease is added, changed or removed (or
   * expires), counting from `after` (a list's revision) or from now; a watch
   * that broke and was made again reports a change too, so the reconcile
   * that follows re-reads everything. `onError` gets each trouble (the daemon
   * logs each message once until the watch delivers again). Kube: the Node
   * informer's add, update (annotations or podCIDR changed) and delete events.
   */
  watchLeases(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): Unwatch;
  /**
   * Housekeeping before each periodic reconcile; an Error says what failed
   * (logged once until it changes). The file store deletes expired leases;
   * etcd expires keys itself. Kube: nothing.
   */
  tidy(): Promise<void>;
  /**
   * The changes since `revision` (a LeaseList's or a LeaseDelta's), without
   * a list, for a changes pass whose cost follows the change, not the
   * cluster; undefined when the source cannot tell (too far behind): the
   * daemon lists then. Optional. Kube: the informer's journal of lease
   * changes; the stores: a list from memory compared with the last one.
   * Either may forget what lies before `revision` once asked from it (one
   * reader, the daemon, which asks from the revision it was given last).
   */
  leaseChanges?(revision: string): LeaseDelta | undefined | Promise<LeaseDelta | undefined>;
  /** How often the source was listed again in full because its watch fell behind (kube: 410 Gone), for /metrics. */
  relists?(): number;
  /** Closes connections (the etcd client; kube: the informer). */
  close(): Promise<void>;
}
