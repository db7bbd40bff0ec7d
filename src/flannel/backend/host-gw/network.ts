// flannel's host-gw backend behind the daemon's Backend seam: no device of
// its own; each peer's pod subnet is routed straight to the peer's public
// address on the underlay (routes.ts). That only works where every node is
// on one L2 segment: the kernel refuses a gateway that is not on a connected
// subnet, and the next hop must be the node itself. Facts from flannel's
// pkg/backend/hostgw: the lease says BackendType "host-gw" and no
// BackendData; the pods' MTU is the interface's own (no encapsulation); a
// public address that is not the interface's own (NAT) is refused.
import type { Lease, LeaseAttrs, LeaseSubnets } from '../../lease';
import type { NetworkConfig, Pool } from '../../netconfig';
import { IP, type Prefix } from '../../../net/ip';
import { PUT_BACK, changeLines, familiesOf, leasedSubnet, peersToPlan, programmedAfterChanges, recordRefused, type Backend, type BackendContext, type ExternalInterface, type LeaseChanges, type LeasedFamily, type SideState } from '../backend';
import { removeOtherVteps } from '../vxlan/vtep';
import { RouteIndex, RoutePeer, RoutePlanError, applyRoutes, planRoutes, programmedRoutes, readRoutes, routeDrift } from './routes';
import { KernelWatch } from '../kernel-watch';

/** flanneld's words, kept so that operators searching for them find the cause. */
export const NAT_REASON = "your PublicIP differs from interface IP, meaning that probably you're on a NAT, which is not supported by host-gw backend";

/** A full pass making more changes than this logs a summary line instead of one line per change. */
const SUMMARY_OVER = 20;

export class HostGwNetwork implements Backend {
  readonly type = 'host-gw';
  readonly description: string;
  readonly mtu: number;
  readonly leaseNote = '';
  private readonly dev: string;
  private readonly planned: { family: 4 | 6; pool: Pool; publicIP: LeasedFamily['publicIP'] }[];
  private families: LeasedFamily[] = [];
  /** The last pass routed every peer. */
  private allRouted = false;
  /**
   * Per family, the routes the last pass made in full, by subnet: what a
   * changes pass plans from. Absent: not known (start, a failure): the next
   * pass reads the kernel.
   */
  private readonly programmed = new Map<4 | 6, Map<string, RoutePeer>>();
  /** Per family, the routes the leases ask for, kept lease by lease. */
  private readonly indexes = new Map<4 | 6, RouteIndex>();
  /** What a peer's public address may not be: this node's addresses, its underlay's broadcast. */
  private readonly addresses: { own?: readonly IP[]; underlay: readonly Prefix[] };
  /** Families whose routes could not be read on the last pass. */
  private readonly unread = new Set<string>();
  private readonly log;
  private readonly detail: number;
  private readonly problems;
  private readonly resync: (why: string) => void;
  private readonly ctx: BackendContext;
  /** The kernel's notifications of routes into the network, once watchKernel() started them. */
  private watch?: KernelWatch;

  /** Throws flanneld's reason when this node is behind NAT (its public address is not the interface's). */
  constructor(cfg: NetworkConfig, ext: ExternalInterface, ctx: BackendContext) {
    this.log = ctx.log;
    this.detail = ctx.detail ?? 0;
    this.problems = ctx.problems;
    this.resync = ctx.resync;
    this.ctx = ctx;
    this.planned = familiesOf(cfg, ext);
    for (const f of this.planned) {
      const local = f.family === 4 ? ext.localIP : ext.localIPv6;
      if (!local?.equals(f.publicIP)) {
        throw new Error(`${NAT_REASON} (${f.family === 4 ? '--public-ip' : '--public-ipv6'} ${f.publicIP}, ${ext.dev} has ${local})`);
      }
    }
    this.dev = ext.dev;
    this.mtu = ext.mtu;
    this.addresses = { own: ext.ownAddresses, underlay: ext.subnets };
    this.description = `host-gw: peers routed via their public addresses on ${ext.dev}, MTU ${ext.mtu}`;
  }

  publicAddresses(): Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'> {
    const out: Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'> = {};
    for (const f of this.planned) out[f.family === 4 ? 'publicIP' : 'publicIPv6'] = f.publicIP;
    return out;
  }

  async leaseAttrs(): Promise<LeaseAttrs> {
    return { ...this.publicAddresses(), backendType: 'host-gw' };
  }

  attach(lease: LeaseSubnets): LeasedFamily[] {
    this.families = this.planned.map(({ family, pool, publicIP }) => ({ family, pool, publicIP, subnet: leasedSubnet(lease, family) }));
    return this.families;
  }

  async setUp(): Promise<void> {}

  async undo(): Promise<void> {}

  /** A node that ran the vxlan backend before: its VTEPs go, and their routes with them. */
  removeStale(): Promise<void> {
    return removeOtherVteps(new Set(), 'a VTEP of the vxlan backend this node ran before', this.log);
  }

  /**
   * A full pass reads the routes into the overlay and compares (one `ip`
   * exec per family); a changes pass, once a pass routed a family in full,
   * plans only the peer subnets whose leases changed, from what it made, and
   * reads nothing.
   */
  async reconcile(leases: readonly Lease[], why: string, full: boolean): Promise<SideState[]> {
    return this.pass({ leases }, why, full);
  }

  /** A changes pass from the leases that changed: undefined until a pass has routed every family in full. */
  async reconcileChanges(changes: LeaseChanges, why: string): Promise<SideState[] | undefined> {
    if (!this.families.every((f) => this.programmed.has(f.family))) return undefined;
    return this.pass(changes, why, false);
  }

  private async pass(change: { leases: readonly Lease[] } | LeaseChanges, why: string, full: boolean): Promise<SideState[]> {
    const states: SideState[] = [];
    for (const f of this.families) states.push(await this.reconcileFamily(f, change, why, full));
    this.allRouted = states.every((st) => st.failed.length === 0 && st.staleLeft === 0 && !this.unread.has(st.vtep));
    return states;
  }

  programmedInFull(): boolean {
    return this.allRouted;
  }

  /** The routes into each family's network via a gateway (one `ip monitor` per family). */
  watchKernel(): void {
    if (this.watch || !this.families.length) return;
    const networks = new Map(this.families.map((f) => [f.family, f.pool.network]));
    this.watch = new KernelWatch(
      this.families.map((f) => f.family),
      { neigh: false, fdb: false },
      (e, family) => {
        if (e.kind !== 'route' || !e.route.gateway) return false;
        const dst = IP.parse(e.route.dst.split('/')[0]);
        return !!dst && !!networks.get(family)?.contains(dst);
      },
      { changed: (why) => this.ctx.changed?.(why), missed: (why) => this.resync(why), watching: (up, why) => this.ctx.watching?.(up, why) },
    );
    this.watch.start();
  }

  stop(): void {
    this.watch?.stop();
  }

  /** One family's peer routes. No device of ours to be down: `up` always (named after the underlay they go through). */
  private async reconcileFamily(f: LeasedFamily, change: { leases: readonly Lease[] } | LeaseChanges, why: string, full: boolean): Promise<SideState> {
    const key = `routes${f.family}`;
    let index = this.indexes.get(f.family);
    if (!index) this.indexes.set(f.family, (index = new RouteIndex({ ...f, ...this.addresses }, f.pool.network)));
    const last = this.programmed.get(f.family);
    const before = full ? undefined : last;
    const { peers, keys, skipped } = peersToPlan(index, change, !!before, `IPv${f.family} routes`);
    // what the kernel reported since the last pass: a full pass reads it all, a changes pass plans the routes changed behind its back
    const seen = this.watch?.take(f.family);
    const drift = before && seen ? routeDrift(seen.routes, before, this.dev, f.pool.network) : undefined;
    for (const k of drift?.keys ?? []) {
      if (keys!.has(k)) continue;
      keys!.add(k);
      const p = index.wanted(k);
      if (p) peers.push(p);
    }
    const state: SideState = { vtep: `${this.dev} (IPv${f.family} routes)`, up: true, wanted: before ? before.size : peers.length, failed: [], staleLeft: 0 };
    // one line per lease until its reason changes; a lease of another backend is one line for both families
    for (const m of skipped) this.problems.report(`skip${m.endsWith(' is not host-gw') ? '' : f.family} ${m.split(': ')[0]}`, `ignoring ${m}`);
    this.unread.delete(state.vtep);
    try {
      const was = before && programmedRoutes([...keys!].map((k) => before.get(k)).filter((p): p is RoutePeer => !!p), this.dev);
      const actual = was ? (drift ? drift.overlay(was, keys!) : was) : await readRoutes(f.pool.network);
      const plan = planRoutes(peers, actual, this.dev, f.pool.network);
      this.programmed.delete(f.family); // until the plan is applied in full
      // a route a full pass adds was in place after the last pass if its peer is the same
      let bySubnet: Map<string, RoutePeer> | undefined; // made only when a change is logged
      const unchanged = (subject: string) => {
        const was = last?.get(subject);
        return !!was && (bySubnet ??= new Map(peers.map((p) => [p.subnet.toString(), p]))).get(subject)?.gateway === was.gateway;
      };
      try {
        await applyRoutes(plan);
        this.logChanges(changeLines(plan, unchanged), why, !before);
      } catch (err) {
        if (err instanceof RoutePlanError) {
          this.logChanges(changeLines(plan, unchanged, err.failedChanges), why, !before);
          recordRefused(state, plan.subjects, err.failedChanges);
        }
        // after a changes pass the full pass comes at once (see vxlan)
        if (before) this.resync(`IPv${f.family} routes: some changes were refused`);
        throw err;
      }
      const now = before ? programmedAfterChanges(before, keys!, (k) => index.wanted(k)) : new Map(peers.map((p) => [p.subnet.toString(), p]));
      this.programmed.set(f.family, now);
      state.wanted = now.size;
      this.problems.clear(key, `IPv${f.family}: every peer is routed again`);
    } catch (err) {
      // not read, or not applied at all: none of them is known to be in place
      if (!(err instanceof RoutePlanError)) {
        state.failed = peers.map((p) => p.subnet.toString());
        this.unread.add(state.vtep);
      }
      const counted = state.failed.length ? ` (${state.failed.length} of ${peers.length} peers not routed: ${state.failed.join(', ')})` : '';
      this.problems.report(key, `reconcile failed: IPv${f.family} peer routes: ${(err as Error).message}${counted}; retrying on each reconcile`);
    }
    return state;
  }

  /** One log line per change; a full pass making many (the first: one per peer) logs how many, in one line (but with -v=2). */
  private logChanges(changes: readonly string[], why: string, fullPass: boolean): void {
    if (fullPass && changes.length > SUMMARY_OVER && this.detail < 2) {
      const added = changes.filter((c) => c.endsWith(': added')).length;
      const putBack = changes.filter((c) => c.endsWith(PUT_BACK)).length;
      const back = putBack ? `${putBack} put back (had gone missing), ` : '';
      this.log(`${changes.length} route changes (${why}): ${added} added, ${back}${changes.length - added - putBack} removed or replaced`);
      return;
    }
    for (const c of changes) this.log(`${c} (${why})`);
  }

  /** The node leaves: its peer routes go (they would lead nowhere once its pods are gone). */
  async remove(): Promise<void> {
    for (const f of this.families) {
      try {
        await applyRoutes(planRoutes([], await readRoutes(f.pool.network), this.dev, f.pool.network));
      } catch (err) {
        this.log(`cannot remove the IPv${f.family} peer routes: ${(err as Error).message}`);
      }
    }
  }
}
