// flannel's vxlan backend behind the daemon's Backend seam: one VTEP per
// family (flannel.<VNI>, flannel-v6.<VNI>), each peer's neighbour, FDB entry
// and route on it (peers.ts), DirectRouting's plain routes to peers on this
// node's underlay subnets.
import { settleAll } from '../../../util/settle';
import { deleteLink, getLink, linkMac } from '../../../iproute/link';
import { vxlanMismatch, type VxlanSpec } from '../../../iproute/vxlan';
import { IP, type Prefix } from '../../../net/ip';
import type { Lease, LeaseAttrs, LeaseSubnets } from '../../lease';
import type { NetworkConfig } from '../../netconfig';
import { PUT_BACK, changeLines, peersToPlan, programmedAfterChanges, recordRefused, type Backend, type BackendContext, type BackendMetrics, type ExternalInterface, type LeaseChanges, type LeasedFamily, type SideState } from '../backend';
import { Peer, PlanError, applyPlans, planPeers, programmed, readActual, type Plan } from './peers';
import { driftOf } from './drift';
import { KernelWatch } from '../kernel-watch';
import type { KernelEvent } from '../../../iproute/monitor';
import { PeerIndex } from './peer-index';
import { Side, SidePlan, advertise, leasedSides, planSides, podMtu, publicAddresses, selfOf } from './sides';
import { ensureVtep, removeOtherVteps } from './vtep';

/**
 * A VTEP the kernel would not make: the network config fields that ask for
 * VXLAN features beyond the basic device are named, as the likely cause.
 */
function vtepFailure(spec: VxlanSpec, err: unknown): Error {
  const fields = [...(spec.gbp ? ['"Backend.GBP"'] : []), ...(spec.learning ? ['"Backend.Learning"'] : [])];
  const hint = fields.length ? ` (network config field${fields.length > 1 ? 's' : ''} ${fields.join(' and ')} ask${fields.length > 1 ? '' : 's'} for a VXLAN feature: does this kernel support it?)` : '';
  return new Error(`VTEP ${spec.name}: ${(err as Error).message}${hint}`);
}

/** For the start-up log line: the backend options that are on. */
function describeOptions(cfg: NetworkConfig, direct: readonly Prefix[]): string {
  const on = [
    ...(cfg.directRouting ? [`DirectRouting (peers on ${direct.join(', ') || 'no connected subnet'} routed directly)`] : []),
    ...(cfg.gbp ? ['GBP'] : []),
    ...(cfg.learning ? ['Learning'] : []),
  ];
  return on.length ? `, ${on.join(', ')}` : '';
}

/** One VTEP's pass between planning and applying: its plan (none: nothing to change, or it failed before) and what records the outcome. */
interface SidePass {
  state: SideState;
  plan?: Plan;
  /** Logs, counts and records the pass: `err` is what applying the plan threw (undefined: all made). */
  finish(err: Error | undefined): void;
}

/** A full pass making more changes than this logs a summary line instead of one line per change. */
const SUMMARY_OVER = 20;

export class VxlanNetwork implements Backend {
  readonly type = 'vxlan';
  readonly description: string;
  readonly mtu: number;
  private readonly plans: SidePlan[];
  private sides: Side[] = [];
  /** DirectRouting: this node's connected underlay subnets (empty: every peer over VXLAN). */
  private readonly direct: Prefix[];
  /** VTEPs setUp() created (undo() removes them). */
  private created: string[] = [];
  private readonly log;
  private readonly detail: number;
  private readonly problems;
  private readonly resync: (why: string) => void;
  private readonly ctx: BackendContext;
  private readonly metrics?: BackendMetrics;
  /** The kernel's notifications of the VTEPs' entries, once watchKernel() started them. */
  private watch?: KernelWatch;
  /**
   * Per VTEP, the peers the last pass programmed in full, by subnet: what a
   * changes pass plans from. Absent: not known (start, a failure): the next
   * pass reads the kernel.
   */
  private readonly programmed = new Map<string, Map<string, Peer>>();
  /** Per VTEP, the peers the leases ask for, kept lease by lease (each lease object judged once). */
  private readonly indexes = new Map<string, PeerIndex>();
  /** What a peer's public address may not be: this node's addresses, its underlay's broadcast. */
  private readonly addresses: { own?: readonly IP[]; underlay: readonly Prefix[] };

  constructor(cfg: NetworkConfig, ext: ExternalInterface, ctx: BackendContext) {
    this.log = ctx.log;
    this.detail = ctx.detail ?? 0;
    this.problems = ctx.problems;
    this.resync = ctx.resync;
    this.ctx = ctx;
    this.metrics = ctx.metrics;
    this.plans = planSides(cfg, ext);
    this.mtu = podMtu(this.plans);
    this.direct = cfg.directRouting ? ext.subnets : [];
    this.addresses = { own: ext.ownAddresses, underlay: ext.subnets };
    this.description = `vxlan: ${this.plans.map((p) => `VTEP ${p.vtep.name} MTU ${p.vtep.mtu}`).join(', ')}, port ${cfg.port}${describeOptions(cfg, this.direct)}`;
    if (cfg.mtu !== undefined && cfg.mtu > ext.mtu) {
      this.log(`Backend.MTU ${cfg.mtu} is above ${ext.dev}'s MTU ${ext.mtu}: the VTEPs are sized for ${ext.mtu} (the kernel would clamp them there)`);
    }
  }

  publicAddresses(): Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'> {
    return publicAddresses(this.plans);
  }

  /** Each VTEP keeps its MAC: the device's own where it can be reused, else the one advertised `before` (see advertise()). */
  async leaseAttrs(before: LeaseAttrs | undefined): Promise<LeaseAttrs> {
    const deviceMacs = await settleAll(
      this.plans.map(async ({ vtep }) => {
        const link = await getLink(vtep.name);
        return link && !vxlanMismatch(link, { ...vtep, mac: linkMac(link) }) ? linkMac(link) : undefined;
      }),
    );
    return advertise(this.plans, deviceMacs, before);
  }

  attach(lease: LeaseSubnets, attrs: LeaseAttrs): LeasedFamily[] {
    this.sides = leasedSides(this.plans, lease, attrs);
    return this.sides;
  }

  get leaseNote(): string {
    return `, ${this.sides.map((s) => `${s.spec.name} MAC ${s.spec.mac}`).join(', ')}`;
  }

  async setUp(): Promise<void> {
    for (const s of this.sides) {
      const r = await ensureVtep(s.spec, s.subnet.network.toString()).catch((err) => {
        throw vtepFailure(s.spec, err);
      });
      if (r.created) this.created.push(s.spec.name);
      if (r.replaced) this.log(`replaced the incompatible ${s.spec.name}: ${r.replaced}`);
      else this.log(`${r.created ? 'created' : 'reusing'} VTEP ${s.spec.name}`);
    }
  }

  async undo(): Promise<void> {
    for (const name of this.created) await deleteLink(name).catch(() => {});
    this.created = [];
  }

  /** VTEPs of an earlier network config (another VNI, a family now off), with their routes, neighbours and FDB entries. */
  removeStale(): Promise<void> {
    return removeOtherVteps(new Set(this.sides.map((s) => s.spec.name)), 'a VTEP of an earlier network config', this.log);
  }

  reconcile(leases: readonly Lease[], why: string, full: boolean): Promise<SideState[]> {
    return this.reconcileSides({ leases }, why, full);
  }

  /** A changes pass from the leases that changed: undefined until a pass has programmed every VTEP in full. */
  async reconcileChanges(changes: LeaseChanges, why: string): Promise<SideState[] | undefined> {
    if (!this.programmedInFull()) return undefined;
    return this.reconcileSides(changes, why, false);
  }

  programmedInFull(): boolean {
    return this.sides.every((s) => this.programmed.has(s.spec.name));
  }

  /** Each VTEP's neighbours and routes (one `ip monitor` per family) and FDB entries (one `bridge monitor`). */
  watchKernel(): void {
    if (this.watch || !this.sides.length) return;
    this.watch = new KernelWatch(
      this.sides.map((s) => s.family),
      { neigh: true, fdb: true },
      (e, family) => this.concerns(e, family),
      {
        changed: (why) => this.ctx.changed?.(why),
        missed: (why) => this.resync(why),
        watching: (up, why) => this.ctx.watching?.(up, why),
      },
    );
    this.watch.start();
  }

  /** An event about family's VTEP, or (DirectRouting) a route into the network via a gateway elsewhere. */
  private concerns(e: KernelEvent, family: 4 | 6): boolean {
    const s = this.sides.find((x) => x.family === family);
    if (!s) return false;
    if (e.kind !== 'route') return e.dev === s.spec.name;
    if (e.route.dev === s.spec.name) return true;
    if (!this.direct.length || !e.route.gateway) return false;
    const dst = IP.parse(e.route.dst.split('/')[0]);
    return !!dst && s.pool.network.contains(dst);
  }

  stop(): void {
    this.watch?.stop();
  }

  private indexOf(s: Side): PeerIndex {
    let index = this.indexes.get(s.spec.name);
    if (!index) this.indexes.set(s.spec.name, (index = new PeerIndex({ ...selfOf(s), ...this.addresses }, s.pool.network)));
    return index;
  }

  /**
   * Every VTEP: each plans its pass, then all plans are applied together (one
   * process per batch for both families), then each records its outcome.
   */
  private async reconcileSides(change: { leases: readonly Lease[] } | LeaseChanges, why: string, full: boolean): Promise<SideState[]> {
    const passes: SidePass[] = [];
    for (const s of this.sides) passes.push(await this.planSide(s, change, why, full));
    const planned = passes.filter((p) => p.plan);
    // a batch that could not run at all (not a refused line) fails every plan in it
    const outcomes = await applyPlans(planned.map((p) => p.plan!)).catch((err: Error) => planned.map(() => err));
    for (const p of passes) p.finish(p.plan && outcomes[planned.indexOf(p)]);
    return passes.map((p) => p.state);
  }

  /**
   * One VTEP's pass, up to its plan. A full pass (or the first) judges every
   * lease and compares with the kernel; a changes pass, with a VTEP programmed
   * in full before, takes the leases that changed (given, or found by
   * comparing the list with the last one) and plans only the peer subnets they
   * touch, from what was programmed. `finish` records how applying it went.
   */
  private async planSide(s: Side, change: { leases: readonly Lease[] } | LeaseChanges, why: string, full: boolean): Promise<SidePass> {
    const name = s.spec.name;
    const state: SideState = { vtep: name, up: false, wanted: 0, failed: [], staleLeft: 0 };
    const nothingToFinish = { state, finish: () => {} };
    const last = this.programmed.get(name);
    const before = full ? undefined : last;
    if (!before) {
      if (!(await this.reconcileVtep(s, why))) return nothingToFinish;
    }
    state.up = true;
    const index = this.indexOf(s);
    const { peers, keys, skipped } = peersToPlan(index, change, !!before, name);
    // What the kernel reported since the last pass: a full pass reads it all; a changes pass also
    // plans the peers whose entries were changed behind its back.
    const seen = this.watch?.take(s.family);
    const drift = before && seen ? driftOf(seen, before, index, name, s.pool.network, this.direct) : undefined;
    for (const k of drift?.keys ?? []) {
      if (keys!.has(k)) continue;
      keys!.add(k);
      const p = index.wanted(k);
      if (p) peers.push(p);
    }
    state.wanted = before ? before.size : peers.length;
    const failed = (err: unknown) => {
      // not read, or not applied at all: none of them is known to be in place
      if (!(err instanceof PlanError)) state.failed = peers.map((p) => p.subnet.toString());
      const counted = state.failed.length ? ` (${state.failed.length} of ${peers.length} peers not programmed: ${state.failed.join(', ')})` : '';
      this.problems.report(`peers ${name}`, `reconcile failed: ${name} peers: ${(err as Error).message}${counted}; retrying on each reconcile`);
    };
    let plan: Plan;
    try {
      // "lease <subnets>: why" — one log line per lease and family until its reason changes
      for (const m of skipped) this.problems.report(`skip${s.family} ${m.split(': ')[0]}`, `ignoring ${m}`);
      // Always with the network: direct routes of a run with DirectRouting on are found (and go) when it is off.
      if (before) {
        const was = programmed([...keys!].map((k) => before.get(k)).filter((p): p is Peer => !!p), this.direct);
        plan = planPeers(peers, drift ? drift.overlay(was, keys!) : was, name, s.pool.network, this.direct);
      } else plan = planPeers(peers, await readActual(name, undefined, s.family, s.pool.network), name, s.pool.network, this.direct);
    } catch (err) {
      failed(err);
      return nothingToFinish;
    }
    this.programmed.delete(name); // until the plan is applied in full
    // a peer whose entry a full pass adds had it in place after the last pass if it is the same peer
    let byKey: Map<string, Peer> | undefined; // made only when a change is logged
    const unchanged = (subject: string) => {
      const was = last?.get(subject);
      const now = (byKey ??= new Map(peers.map((p) => [p.key ?? p.subnet.toString(), p]))).get(subject);
      return !!was && !!now && was.mac === now.mac && was.publicIP === now.publicIP && was.vtepIP === now.vtepIP;
    };
    const finish = (err: Error | undefined) => {
      if (err) {
        // the rest was made all the same: say so, then report what the kernel refused
        if (err instanceof PlanError) {
          this.logChanges(changeLines(plan, unchanged, err.failedChanges), why, !before);
          this.metrics?.changesApplied(s.family, plan.changes.length - err.failedChanges.size);
          this.metrics?.changesFailed(s.family, err.failedChanges.size);
          recordRefused(state, plan.subjects, err.failedChanges);
        }
        // Nothing is recorded as programmed: the next pass is a full one. After a changes pass it
        // comes at once (the VTEP may be gone: the full pass makes it again); a full pass that
        // failed waits for the next change or period, not to spin on a refusing kernel.
        if (before) this.resync(`${name}: some changes were refused`);
        return failed(err);
      }
      if (plan.changes.length) {
        this.logChanges(changeLines(plan, unchanged), why, !before);
        this.metrics?.changesApplied(s.family, plan.changes.length);
      }
      const now = before ? programmedAfterChanges(before, keys!, (k) => index.wanted(k)) : new Map(peers.map((p) => [p.key ?? p.subnet.toString(), p]));
      this.programmed.set(name, now);
      state.wanted = now.size;
      this.metrics?.peers(s.family, now.size);
      this.problems.clear(`peers ${name}`, `${name}: every peer is programmed again`);
    };
    return { state, ...(plan.changes.length ? { plan } : {}), finish };
  }

  /**
   * The changes made, one log line each; but a full pass that made many
   * (the first one, at start: three per peer) logs how many of each kind, in
   * one line: thousands of lines cost more than programming the entries
   * (unless -v=2 asks for every line).
   */
  private logChanges(changes: readonly string[], why: string, fullPass: boolean): void {
    if (fullPass && changes.length > SUMMARY_OVER && this.detail < 2) {
      const kinds = new Map<string, number>();
      for (const c of changes) {
        const how = c.endsWith(PUT_BACK) ? 'put back (had gone missing)'
          : c.endsWith('added') ? 'added'
          : c.includes('removed') ? 'removed'
          : 'changed';
        const kind = `${c.slice(0, c.indexOf(' '))} ${how}`;
        kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
      }
      this.log(`${changes.length} changes (${why}): ${[...kinds].map(([k, n]) => `${n} ${k}`).join(', ')}`);
      return;
    }
    for (const c of changes) this.log(`${c} (${why})`);
  }

  private async reconcileVtep(s: Side, why: string): Promise<boolean> {
    const name = s.spec.name;
    try {
      const r = await ensureVtep(s.spec, s.subnet.network.toString());
      if (r.created) this.log(`VTEP ${name} was missing (${why}): recreated`);
      if (r.replaced) this.log(`VTEP ${name} had been changed (${r.replaced}): replaced`);
      this.problems.clear(`vtep ${name}`, `VTEP ${name} is in place again`);
    } catch (err) {
      this.problems.report(`vtep ${name}`, `reconcile failed: VTEP ${name}: ${(err as Error).message}; retrying on each reconcile`);
      return false;
    }
    return true;
  }


  async remove(): Promise<void> {
    for (const s of this.sides) await deleteLink(s.spec.name).catch((err) => this.log(`cannot delete ${s.spec.name}: ${(err as Error).message}`));
  }
}
