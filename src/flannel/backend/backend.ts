// The seam between the daemon and a backend, shaped as flannel's
// backend.Backend / backend.Network: the daemon finds the underlay, reads the
// network config and holds the lease; the backend says what this node
// advertises in its lease, makes its devices (if any) and programs the peers.
// One object per run, chosen by Backend.Type (registry.ts); the daemon never
// asks which one it has.
import { Prefix, type IP } from '../../net/ip';
import type { Lease, LeaseAttrs, LeaseSubnets } from '../lease';
import type { Log, Reporter } from '../log';
import type { BackendType, Pool } from '../netconfig';
import type { SubnetEnv } from '../subnet-env';

/**
 * The underlay as a backend sees it (flannel's ExternalInterface): the
 * interface, its own address of each family (`local*`) and the one peers are
 * told to use (`public*`: the same unless set by hand, e.g. behind NAT).
 */
export interface ExternalInterface {
  dev: string;
  /** Source address of the IPv4 tunnel (on `dev`); undefined when it has no IPv4 address. */
  localIP?: IP;
  /** Address peers send to (the lease's PublicIP); localIP unless --public-ip says otherwise. */
  publicIP?: IP;
  /** Source address of the IPv6 tunnel: the address chosen by the options if `dev` holds it, else its first global IPv6. */
  localIPv6?: IP;
  /** The lease's PublicIPv6; localIPv6 unless --public-ipv6 says otherwise. */
  publicIPv6?: IP;
  /** The subnets `dev` is directly on (its IPv4 and global IPv6 prefixes): DirectRouting's input. */
  subnets: Prefix[];
  /** Every address of this node's interfaces: no peer's public address may be one (backend/public-address.ts). */
  ownAddresses?: IP[];
  mtu: number;
}

/** One family of the overlay once the lease is held. */
export interface LeasedFamily {
  family: 4 | 6;
  pool: Pool;
  /** The address peers reach this node at, in this family. */
  publicIP: IP;
  /** This node's subnet. */
  subnet: Prefix;
}

/**
 * What a reconcile pass found on one device the peers are programmed on
 * (vxlan: a VTEP; host-gw: the underlay, named here for the peers it
 * routes): the daemon's health, readiness and Node condition answer from it.
 */
export interface SideState {
  vtep: string;
  up: boolean;
  /** The peers the leases ask for on it. */
  wanted: number;
  /** Peer subnets whose entries the kernel refused (or that could not be read). */
  failed: string[];
  /** Stale entries the kernel would not remove (they may steer traffic to a node that left). */
  staleLeft: number;
}

/**
 * What a changes pass leaves programmed: `before` (what the last pass
 * programmed, by key) with each re-judged key set to what the index now
 * wants there, or removed. Changes `before` in place and returns it.
 */
export function programmedAfterChanges<P>(before: Map<string, P>, keys: Iterable<string>, wanted: (key: string) => P | undefined): Map<string, P> {
  for (const k of keys) {
    const p = wanted(k);
    if (p) before.set(k, p);
    else before.delete(k);
  }
  return before;
}

/** What a backend keeps of the peers the leases ask for, lease by lease (vxlan's PeerIndex, host-gw's RouteIndex). */
export interface LeaseIndex<P> {
  /** Every lease judged again: all the peers they ask for. */
  reset(leases: readonly Lease[]): { peers: P[]; skipped: string[] };
  /** The lease objects that left and came since the leases it last held. */
  diff(leases: readonly Lease[]): LeaseChanges;
  /** Those changes applied: the peer keys that may want something else now. */
  apply(removed: readonly Lease[], added: readonly Lease[]): { keys: Set<string>; skipped: string[] };
  wanted(key: string): P | undefined;
}

/**
 * The peers one pass plans: for a changes pass (something was programmed in
 * full before), only those at the keys the changed leases touch (`keys`);
 * for a full pass, every peer the leases ask for. `change` is the whole list
 * (compared with the index's) or the manager's delta; a delta needs a full
 * pass before it, else throws naming `what`.
 */
export function peersToPlan<P>(index: LeaseIndex<P>, change: { leases: readonly Lease[] } | LeaseChanges, changesPass: boolean, what: string): { peers: P[]; keys?: Set<string>; skipped: string[] } {
  if (changesPass) {
    const { removed, added } = 'leases' in change ? index.diff(change.leases) : change;
    const { keys, skipped } = index.apply(removed, added);
    return { peers: [...keys].map((k) => index.wanted(k)).filter((p): p is P => !!p), keys, skipped };
  }
  if (!('leases' in change)) throw new Error(`${what}: a changes pass before a full one`);
  return index.reset(change.leases);
}

/**
 * Records on `state` what the kernel refused of a plan: `subjects[i]` is the
 * peer subnet change i was for, or undefined for the removal of a stale entry.
 */
export function recordRefused(state: SideState, subjects: readonly (string | undefined)[], refused: ReadonlySet<number>): void {
  const failed = new Set<string>();
  for (const i of refused) {
    const subject = subjects[i];
    if (subject === undefined) state.staleLeft++;
    else failed.add(subject);
  }
  state.failed = [...failed];
}

/**
 * A pass's change lines for the log, but those at `omit` (refused). A full
 * pass that adds an entry of a peer the last pass had programmed, unchanged
 * since (`unchanged(subject)`), has found it gone: deleted by hand or by
 * another program. The line says so ("...: was missing, put back"), as the
 * drift it is, not as a new peer's entry.
 */
export function changeLines(
  plan: { changes: readonly string[]; subjects: readonly (string | undefined)[] },
  unchanged: (subject: string) => boolean,
  omit?: ReadonlySet<number>,
): string[] {
  const lines: string[] = [];
  plan.changes.forEach((c, i) => {
    if (omit?.has(i)) return;
    const subject = plan.subjects[i];
    lines.push(subject !== undefined && c.endsWith(': added') && unchanged(subject) ? `${c.slice(0, -': added'.length)}: ${PUT_BACK}` : c);
  });
  return lines;
}

/** How changeLines words an entry a full pass found missing. */
export const PUT_BACK = 'was missing, put back';

/** Leases that left and came since the last pass, compared by identity (the manager's LeaseDelta). */
export interface LeaseChanges {
  removed: readonly Lease[];
  added: readonly Lease[];
}

/** The /metrics counters a backend feeds (the daemon's DaemonMetrics is one). */
export interface BackendMetrics {
  changesApplied(family: 4 | 6, n: number): void;
  changesFailed(family: 4 | 6, n: number): void;
  peers(family: 4 | 6, n: number): void;
}

/** What the daemon lends a backend: its log, its reporter of conditions met on every pass, passes on request, /metrics. */
export interface BackendContext {
  log: Log;
  /** klog's -v (DaemonOptions.logDetail): 2 and above logs every change, never a summary line. */
  detail?: number;
  problems: Reporter;
  /** Asks for a full pass soon (a changes pass the kernel refused, kernel events missed). */
  resync(why: string): void;
  /** Asks for a changes pass soon (the kernel reported a change of the backend's entries). */
  changed?(why: string): void;
  /** Whether the kernel's notifications are followed (true), or drift is found by full passes only (false). */
  watching?(up: boolean, why: string): void;
  metrics?: BackendMetrics;
}

export interface Backend {
  readonly type: BackendType;
  /** For the start-up log line: what this backend makes ("VTEP flannel.1 MTU 1450, port 8472", "routes via eth0"). */
  readonly description: string;
  /** The pods' MTU (FLANNEL_MTU). */
  readonly mtu: number;
  /** The addresses this node is reached at (the lease's PublicIP, PublicIPv6). */
  publicAddresses(): Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'>;
  /** What this node advertises in its lease; `before`: what it advertised last time (vxlan keeps its VTEP MACs). */
  leaseAttrs(before: LeaseAttrs | undefined): Promise<LeaseAttrs>;
  /** The lease is held: the families it gives this node. Throws when the lease lacks one the config needs. */
  attach(lease: LeaseSubnets, attrs: LeaseAttrs): LeasedFamily[];
  /** For the lease log line (", flannel.1 MAC 0a:..."); empty when there is nothing to say. */
  readonly leaseNote: string;
  /** Makes this node's devices; on failure the daemon calls undo(). */
  setUp(): Promise<void>;
  /** Removes what setUp() created in this run. */
  undo(): Promise<void>;
  /** Removes what an earlier network config (another backend, another VNI) left behind. */
  removeStale(): Promise<void>;
  /**
   * One pass: devices in place, peers programmed from `leases`. Resolves with
   * what it found, one entry per device. `full`: compare with the kernel
   * (start, periodic, after a failure); else a changes pass (the watch saw a
   * change), which a backend may plan from what it programmed last.
   */
  reconcile(leases: readonly Lease[], why: string, full: boolean): Promise<SideState[]>;
  /**
   * A changes pass from the leases that changed since the last pass (the
   * objects that left and came: a changed lease is both), without the whole
   * list: its cost follows the change, not the cluster. Resolves as
   * reconcile() does, or undefined when it needs the whole list (nothing
   * programmed in full yet): the daemon calls reconcile() then. Optional.
   */
  reconcileChanges?(changes: LeaseChanges, why: string): Promise<SideState[] | undefined>;
  /** The last pass programmed every peer (/metrics counts a pass as ok). */
  programmedInFull(): boolean;
  /**
   * Follows the kernel's notifications of the backend's entries from now on
   * (after setUp): what changed is repaired by the next changes pass, so full
   * passes are only a safety net (kernel-watch.ts). Optional.
   */
  watchKernel?(): void;
  /** Stops following the kernel (the daemon stops). */
  stop?(): void;
  /** The node leaves (--release-on-exit): its devices and peer routes go. */
  remove(): Promise<void>;
}

/**
 * subnet.env for these families: each one's network and first host address,
 * the pods' MTU and FLANNEL_IPMASQ.
 */
export function subnetEnvOf(families: readonly LeasedFamily[], mtu: number, ipMasq: boolean): SubnetEnv {
  const first = (p: Prefix) => Prefix.of(p.network.next(), p.length);
  const env: SubnetEnv = { networks: [], ipv6Networks: [], ipMasq };
  for (const s of families) {
    if (s.family === 4) Object.assign(env, { networks: [s.pool.network], subnet: first(s.subnet) });
    else Object.assign(env, { ipv6Networks: [s.pool.network], ipv6Subnet: first(s.subnet) });
  }
  env.mtu = mtu;
  return env;
}

/**
 * The families the network config enables, on this interface, before the
 * lease: fails when the interface lacks an address of a family the config needs.
 */
export function familiesOf(cfg: { v4?: Pool; v6?: Pool }, ext: ExternalInterface): { family: 4 | 6; pool: Pool; localIP: IP; publicIP: IP }[] {
  if (cfg.v4 && !ext.localIP) throw new Error(`the network config enables IPv4 but underlay interface ${ext.dev} has no IPv4 address`);
  if (cfg.v6 && !ext.localIPv6) {
    throw new Error(`the network config enables IPv6 but underlay interface ${ext.dev} has no global IPv6 address (add one, or give --iface/--public-ipv6)`);
  }
  const out: { family: 4 | 6; pool: Pool; localIP: IP; publicIP: IP }[] = [];
  if (cfg.v4) out.push({ family: 4, pool: cfg.v4, localIP: ext.localIP!, publicIP: ext.publicIP! });
  if (cfg.v6) out.push({ family: 6, pool: cfg.v6, localIP: ext.localIPv6!, publicIP: ext.publicIPv6! });
  return out;
}

/** The subnet the lease gives `family`; throws when it gives none. */
export function leasedSubnet(lease: LeaseSubnets, family: 4 | 6): Prefix {
  const subnet = family === 4 ? lease.subnet : lease.ipv6Subnet;
  if (!subnet) throw new Error(`the lease has no IPv${family} subnet`);
  return subnet;
}
