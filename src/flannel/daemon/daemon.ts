// `vxlan-flannel daemon`: holds this node's lease, keeps the VTEPs and
// subnet.env in place, and programs every peer's neighbour, FDB entry and
// route. Changes are programmed as they are seen (the manager's watch); a
// periodic full reconcile repairs whatever drifted. When the lease source is
// unreachable the overlay is left as it was and the source is retried with
// backoff; nothing is removed on the word of a source we cannot read.
//
// Where leases come from (chosen in etcd or the file store, assigned by
// Kubernetes) is the SubnetManager's business (manager.ts): the daemon only
// calls it. The families (IPv4 on flannel.<VNI>, IPv6 on flannel-v6.<VNI>)
// are "sides" (sides.ts), all handled by the same code. Beside the overlay it
// keeps flanneld's firewall rules (traffic-keeper.ts) and answers how it is
// (health(), ready(): the /healthz and /readyz of run-daemon.ts) from what
// the last reconcile pass found (overlay-state.ts), never by running a command.
import { readIfExists, removeFile } from '../../util/fs';
import { settleAll } from '../../util/settle';
import { readSysctl, writeSysctl } from '../../iproute/sysctl';
import { deleteLink, getLink, linkKind, linkMac, listLinks } from '../../iproute/link';
import { vxlanAttrs, vxlanMismatch } from '../../iproute/vxlan';
import type { VxlanSpec } from '../../iproute/vxlan';
import type { Prefix } from '../../net/ip';
import { Lease, describeSubnets, leaseKey } from '../lease';
import { Log, Reporter, printable } from '../log';
import { HeldLease, StoreUnavailable, SubnetManager, Unwatch } from '../manager';
import { NetworkConfig, describeNetwork } from '../netconfig';
import { Peer, PeerMemo, PlanError, applyPlan, desiredPeers, planChanges, planPeers, readActual } from '../backend/vxlan/peers';
import { ReconcileLoop } from '../../util/reconcile-loop';
import { Side, advertise, leasedSides, planSides, publicAddresses, selfOf, subnetEnvOf } from './sides';
import { formatSubnetEnv, writeSubnetEnv } from '../subnet-env';
import { TrafficKeeper, TrafficSettings } from '../traffic/keeper';
import { UnderlayOptions, describeUnderlay, findUnderlay } from './underlay';
import { ensureVtep } from '../backend/vxlan/vtep';
import { ensureBlackhole, removeBlackhole } from './blackhole';
import { SideState, describePeers, overlayProblem } from './overlay-state';
import type { DaemonMetrics } from './metrics';

/** The underlay flags (--iface, --iface-regex, --iface-can-reach, --public-ip, --public-ipv6) and the rest. */
export interface DaemonOptions extends UnderlayOptions {
  subnetFile: string;
  reconcileMs: number;
  /** --ip-masq and the other firewall settings; ipMasq also goes into subnet.env (FLANNEL_IPMASQ). */
  traffic: TrafficSettings;
  /** --ip-blackhole-route: a blackhole route for our own subnets (blackhole.ts). */
  ipBlackholeRoute?: boolean;
  releaseOnExit: boolean;
  /** Where log lines go, one per call (control characters are escaped before). */
  log: Log;
  /** What /metrics exports (metrics.ts); none: nothing is counted. */
  metrics?: DaemonMetrics;
}

const FORWARDING6 = 'net/ipv6/conf/all/forwarding';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
function describeBackend(cfg: NetworkConfig, direct: readonly Prefix[]): string {
  const on = [
    ...(cfg.directRouting ? [`DirectRouting (peers on ${direct.join(', ') || 'no connected subnet'} routed directly)`] : []),
    ...(cfg.gbp ? ['GBP'] : []),
    ...(cfg.learning ? ['Learning'] : []),
  ];
  return on.length ? `, ${on.join(', ')}` : '';
}

export class Daemon {
  private sides: Side[] = [];
  /** This node's lease from the moment it is obtained: what --release-on-exit gives back. */
  private lease?: HeldLease;
  /** The peers' picture: the last list that succeeded (see refreshLeases). */
  private leases: Lease[] = [];
  private storeDown = false;
  private stopWatch?: Unwatch;
  private readonly loop: ReconcileLoop;
  private stopped = false;
  /** start() has finished: rules in place, subnet.env written (/readyz). */
  private running = false;
  /** What the last reconcile pass found on each VTEP (empty before the first). */
  private overlay: SideState[] = [];
  /** When the last reconcile pass finished (ms since the epoch): a loop that stops passing is reported. */
  private lastPassAt = 0;
  /** DirectRouting: this node's connected underlay subnets (empty: every peer over VXLAN). */
  private direct: Prefix[] = [];
  private readonly traffic: TrafficKeeper;
  /**
   * Per VTEP, the peers the last pass programmed in full: what a changes
   * pass plans from. Absent: not known (start, a failure): the next pass reads the kernel.
   */
  private readonly programmed = new Map<string, Peer[]>();
  /** Per VTEP, what each lease object was judged to be (a peer, or why not): judged once per object. */
  private readonly peerMemos = new Map<string, PeerMemo>();
  private readonly metrics?: DaemonMetrics;
  /** start() in progress: stop() waits for it to reach a point where it knows whether a lease is held. */
  private starting?: Promise<void>;
  /** Wakes start()'s retry sleeps when stop() is called. */
  private wake?: () => void;
  private readonly stopSignal = new Promise<void>((resolve) => (this.wake = resolve));
  private readonly log: Log;
  /** Failures met on every pass, each logged when it appears, changes or ends. */
  private readonly problems: Reporter;
  /**
   * The watch's errors while etcd is away: each reconnect attempt fails,
   * alternating between two messages; each message is logged once until the
   * watch delivers again.
   */
  private readonly watchTroubles: Reporter;

  /** `manager` is open; stop() closes it. */
  constructor(
    private readonly manager: SubnetManager,
    private readonly opts: DaemonOptions,
  ) {
    this.log = (msg) => opts.log(printable(msg)); // one line each, whatever the store held
    this.problems = new Reporter(this.log);
    this.watchTroubles = new Reporter(this.log);
    this.loop = new ReconcileLoop((why, full) => this.reconcile(why, full), opts.reconcileMs, () => this.housekeeping());
    this.traffic = new TrafficKeeper(opts.traffic, this.log);
    this.metrics = opts.metrics;
  }

  /**
   * Runs `fn` until it succeeds, logging each failure and backing off (1 s
   * doubling to 10 s; back to 1 s when the reason changes, e.g. etcd came back
   * but the pool is full).
   */
  private async retry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    let lastReason = '';
    for (let delay = 1000; ; delay = Math.min(delay * 2, 10_000)) {
      try {
        return await fn();
      } catch (err) {
        if (this.stopped) throw err;
        const reason = (err as Error).message;
        if (reason !== lastReason) delay = 1000;
        lastReason = reason;
        this.log(`cannot ${what}: ${reason}; retrying in ${delay / 1000} s`);
        await Promise.race([sleep(delay), this.stopSignal]);
        if (this.stopped) throw new Error('stopped');
      }
    }
  }

  /** Brings the overlay up; resolves once it runs. stop() may be called at any time, also during start(). */
  start(): Promise<void> {
    this.starting = this.startUp();
    return this.starting;
  }

  /** Throws when stop() was called: start() goes no further (stop() then releases what is held). */
  private checkStopped(): void {
    if (this.stopped) throw new Error('stopped while starting');
  }

  private async startUp(): Promise<void> {
    const o = this.opts;
    this.log(`lease store: ${this.manager.description}`);
    // addresses set for this node in the source win over the flags, as in flanneld
    const set = await this.retry('read this node\'s settings', () => this.manager.nodePublicIPs());
    for (const [flag, ip] of [['--public-ip', set.publicIp], ['--public-ipv6', set.publicIpv6]]) if (ip) this.log(`${flag} ${ip}, as set for this node in ${this.manager.description}`);
    const ul = await findUnderlay({ ...o, publicIp: set.publicIp ?? o.publicIp, publicIpv6: set.publicIpv6 ?? o.publicIpv6 });
    this.log(describeUnderlay(ul));

    const cfg = await this.retry('read the network config', () => this.manager.getNetworkConfig());
    const plans = planSides(cfg, ul);
    this.direct = cfg.directRouting ? ul.subnets : [];
    this.log(`network ${describeNetwork(cfg)}; ${plans.map((p) => `VTEP ${p.vtep.name} MTU ${p.vtep.mtu}`).join(', ')}, port ${cfg.port}${describeBackend(cfg, this.direct)}`);
    if (cfg.mtu !== undefined && cfg.mtu > ul.mtu) {
      this.log(`Backend.MTU ${cfg.mtu} is above ${ul.dev}'s MTU ${ul.mtu}: the VTEPs are sized for ${ul.mtu} (the kernel would clamp them there)`);
    }

    // the devices' MACs where they can be reused (see advertise())
    const deviceMacs = await settleAll(
      plans.map(async ({ vtep }) => {
        const link = await getLink(vtep.name);
        return link && !vxlanMismatch(link, { ...vtep, mac: linkMac(link) }) ? linkMac(link) : undefined;
      }),
    );
    const { lease, attrs } = await this.retry('acquire a subnet lease', async () => {
      const attrs = advertise(plans, deviceMacs, await this.manager.previousAttrs(cfg, publicAddresses(plans)));
      const hooks = { log: this.log, resync: (why: string) => this.loop.request(why, true), stopping: this.stopSignal, renewed: () => this.metrics?.leaseRenewed() };
      return { lease: await this.manager.acquireLease(cfg, attrs, hooks), attrs };
    });
    this.lease = lease; // from now on, a stop with --release-on-exit gives it back
    // The list the lease was obtained from is the first picture of the peers: if the
    // source stops answering right now, the overlay is programmed from it, not emptied.
    this.leases = lease.listed.leases;
    this.sides = leasedSides(plans, lease, attrs);
    this.metrics?.nodeSubnets(this.sides.map((s) => s.subnet));
    this.log(`lease ${describeSubnets(lease)} (${lease.how}), ${this.sides.map((s) => `${s.spec.name} MAC ${s.spec.mac}`).join(', ')}`);
    this.checkStopped();

    const created: string[] = [];
    try {
      for (const s of this.sides) {
        const r = await ensureVtep(s.spec, s.subnet.network.toString()).catch((err) => {
          throw vtepFailure(s.spec, err);
        });
        if (r.created) created.push(s.spec.name);
        if (r.replaced) this.log(`replaced the incompatible ${s.spec.name}: ${r.replaced}`);
        else this.log(`${r.created ? 'created' : 'reusing'} VTEP ${s.spec.name}`);
      }
      if (cfg.v6) await this.ipv6Forwarding(true);
      // before subnet.env: pods attached from then on are masqueraded as FLANNEL_IPMASQ says
      await this.traffic.start(cfg.nftables ? 'nftables' : 'iptables', this.sides.map((s) => ({ network: s.pool.network, subnet: s.subnet })));
    } catch (err) {
      // Nothing half-done: a lease we just took is given back, devices we just made go.
      for (const name of created) await deleteLink(name).catch(() => {});
      this.lease = undefined; // given back, or (held before this start) left as it was
      await lease.abandon();
      throw new Error(`cannot set up the overlay: ${(err as Error).message}`);
    }
    this.checkStopped();
    await this.removeStaleVteps();
    this.checkStopped();
    // Watch from the list the lease was obtained from, before the first reconcile lists
    // again: a change made at any moment since then is reported (etcd replays it from
    // that revision; the file store compares with that list's signature), none falls
    // between a list and the start of the watch.
    this.stopWatch = this.manager.watchLeases(
      (why) => this.watchDelivered(why),
      (err) => {
        this.metrics?.watchError();
        this.watchTroubles.report(err.message, `watch: ${err.message}`);
      },
      lease.listed.revision,
    );
    await this.loop.run('start'); // peers first: subnet.env (node ready for pods) is written after them
    this.loop.startPeriodic();
    this.running = !this.stopped;
    const problem = overlayProblem(this.overlay);
    this.log(`running: ${describePeers(this.overlay)}; reconciling every ${o.reconcileMs / 1000} s${problem ? `; not ready: ${problem}, retrying on each reconcile` : ''}`);
  }

  /**
   * VTEPs of an earlier network config: vxlan devices named as we name ours
   * (flannel.<VNI>, flannel-v6.<VNI>) that this config does not use (another
   * VNI, a family now off). Their routes, neighbours and FDB entries go with
   * them; left alone they would keep routing to nodes of the old overlay.
   */
  private async removeStaleVteps(): Promise<void> {
    const ours = new Set(this.sides.map((s) => s.spec.name));
    let links;
    try {
      links = await listLinks();
    } catch (err) {
      this.log(`cannot look for VTEPs of an earlier network config: ${(err as Error).message}`);
      return;
    }
    for (const l of links) {
      if (ours.has(l.ifname) || linkKind(l) !== 'vxlan' || !/^flannel(-v6)?\.\d+$/.test(l.ifname)) continue;
      try {
        await deleteLink(l.ifname);
        this.log(`removed ${l.ifname} (VNI ${vxlanAttrs(l)?.id}), a VTEP of an earlier network config, with its routes, neighbours and FDB entries`);
      } catch (err) {
        this.log(`cannot remove ${l.ifname}, a VTEP of an earlier network config: ${(err as Error).message}`);
      }
    }
  }

  /** Pods' IPv6 traffic is routed by this node: net.ipv6.conf.all.forwarding=1 (as flanneld's vxlan backend needs). */
  private async ipv6Forwarding(atStart: boolean): Promise<void> {
    if (readSysctl(FORWARDING6) === '1') return;
    writeSysctl(FORWARDING6, '1');
    this.log(`IPv6 forwarding was off: set net.ipv6.conf.all.forwarding=1${atStart ? '' : ' again'}`);
  }

  private writeSubnetEnv(): void {
    const env = subnetEnvOf(this.sides, this.opts.traffic.ipMasq);
    if (readIfExists(this.opts.subnetFile) === formatSubnetEnv(env)) return;
    writeSubnetEnv(this.opts.subnetFile, env);
    this.log(`wrote ${this.opts.subnetFile}`);
  }

  /** The watch reported a change: it works (again), so its next failure is reported too. */
  private watchDelivered(why: string): void {
    // back after a failure: changes may have been missed meanwhile, so compare everything once
    const back = this.watchTroubles.clearAll();
    if (back && !this.stopped) this.log(`watch: receiving changes from ${this.manager.description} again (${why})`);
    this.loop.request(why, back);
  }

  /** Before each periodic reconcile: the source's housekeeping, IPv6 forwarding put back. */
  private async housekeeping(): Promise<void> {
    await this.manager.tidy().catch((err) => this.problems.report('tidy', (err as Error).message));
    if (this.sides.some((s) => s.family === 6)) await this.ipv6Forwarding(false).catch((err) => this.problems.report('fwd6', `cannot turn IPv6 forwarding on: ${(err as Error).message}`));
  }

  /**
   * One reconcile pass (the loop runs them one at a time): the leases, our
   * lease, each side's VTEP and peers, subnet.env. A full pass (start,
   * periodic, after a failure) compares with what the kernel has; a changes
   * pass (the watch saw a change) applies the difference from what the last
   * pass programmed, without reading the kernel: its cost does not grow with
   * the kernel's tables.
   */
  private async reconcile(why: string, full: boolean): Promise<void> {
    const started = performance.now();
    const cpuBefore = process.cpuUsage();
    let ok = false;
    try {
      // our lease written again (deleted by hand, expired while the store was away): list once more to see it
      if ((await this.refreshLeases()) && (await this.lease?.check(this.leases))) this.leases = (await this.manager.listLeases()).leases;
      const overlay: SideState[] = [];
      for (const s of this.sides) overlay.push(await this.reconcileSide(s, why, full));
      this.overlay = overlay;
      this.lastPassAt = Date.now();
      // The VTEPs are up: subnet.env holds only this node's own facts (its subnet, the MTU), true
      // whatever the peers; whether the overlay reaches them is readiness's and the Node condition's.
      if (overlay.every((s) => s.up)) this.writeSubnetEnv();
      const problem = overlayProblem(overlay);
      await this.lease?.overlayState(problem).then(
        () => this.problems.clear('up'),
        (err) => this.problems.report('up', `cannot tell ${this.manager.description} whether the overlay is up: ${(err as Error).message}; retrying after each reconcile`),
      );
      this.problems.clear('reconcile');
      ok = !this.storeDown && this.overlay.every((s) => s.up) && this.sides.every((s) => this.programmed.has(s.spec.name));
    } catch (err) {
      this.problems.report('reconcile', `reconcile failed: ${(err as Error).message}; retrying on each reconcile`);
    } finally {
      const cpu = process.cpuUsage(cpuBefore);
      this.metrics?.reconciled(full ? 'full' : 'changes', (performance.now() - started) / 1000, ok, (cpu.user + cpu.system) / 1e6);
    }
  }

  /**
   * Lists the leases; true when that worked. When it did not, `leases` stays
   * the last list that did (at first the one the lease was obtained from):
   * the overlay is never planned from a list that failed.
   */
  private async refreshLeases(): Promise<boolean> {
    try {
      const res = await this.manager.listLeases();
      this.leases = res.leases;
      if (this.storeDown) this.log(`lease store ${this.manager.description} is reachable again`);
      this.storeDown = false;
      for (const b of res.bad) this.problems.report(`bad ${b.key}`, `ignoring ${JSON.stringify(b.key)}: ${b.why}`);
      return true;
    } catch (err) {
      if (!this.storeDown) {
        this.log(`${err instanceof StoreUnavailable ? '' : 'cannot list leases: '}${(err as Error).message}; keeping the overlay as programmed`);
      }
      this.storeDown = true;
      return false;
    }
  }

  /**
   * One side: its VTEP in place (full passes), then its peers' neighbours,
   * FDB entries and routes. Resolves with what it found. A changes pass
   * trusts the VTEP the last full pass saw up: a change the kernel refuses
   * (the VTEP gone) brings a full pass at once.
   */
  private async reconcileSide(s: Side, why: string, full: boolean): Promise<SideState> {
    const name = s.spec.name;
    const state: SideState = { vtep: name, up: false, wanted: 0, failed: [], staleLeft: 0 };
    const before = this.programmed.get(name);
    if (full || !before) {
      if (!(await this.reconcileVtep(s, why))) return state;
      if (this.opts.ipBlackholeRoute) await this.blackhole(s, why);
    }
    state.up = true;
    let memo = this.peerMemos.get(name);
    if (!memo) this.peerMemos.set(name, (memo = new WeakMap()));
    const { peers, skipped } = desiredPeers(this.leases, selfOf(s), s.pool.network, memo);
    state.wanted = peers.length;
    try {
      // "lease <subnets>: why" — one log line per lease and family until its reason changes
      for (const m of skipped) this.problems.report(`skip${s.family} ${m.split(': ')[0]}`, `ignoring ${m}`);
      // Always with the network: direct routes of a run with DirectRouting on are found (and go) when it is off.
      const plan = before && !full
        ? planChanges(before, peers, name, s.pool.network, this.direct)
        : planPeers(peers, await readActual(name, undefined, s.family, s.pool.network), name, s.pool.network, this.direct);
      this.programmed.delete(name); // until the plan is applied in full
      if (plan.changes.length) {
        try {
          await applyPlan(plan);
          for (const c of plan.changes) this.log(`${c} (${why})`);
          this.metrics?.changesApplied(s.family, plan.changes.length);
        } catch (err) {
          // the rest was made all the same: say so, then report what the kernel refused
          if (err instanceof PlanError) {
            plan.changes.forEach((c, i) => !err.failedChanges.has(i) && this.log(`${c} (${why})`));
            this.metrics?.changesApplied(s.family, plan.changes.length - err.failedChanges.size);
            this.metrics?.changesFailed(s.family, err.failedChanges.size);
            const failed = new Set<string>();
            for (const i of err.failedChanges) {
              const subject = plan.subjects[i];
              if (subject === undefined) state.staleLeft++;
              else failed.add(subject);
            }
            state.failed = [...failed];
          } else state.failed = peers.map((p) => p.subnet.toString());
          // Nothing is recorded as programmed: the next pass is a full one. After a changes pass it
          // comes at once (the VTEP may be gone: the full pass makes it again); a full pass that
          // failed waits for the next change or period, not to spin on a refusing kernel.
          if (before && !full) this.loop.request(`${name}: some changes were refused`, true);
          throw err;
        }
      }
      this.programmed.set(name, peers);
      this.metrics?.peers(s.family, peers.length);
      this.problems.clear(`peers ${name}`, `${name}: every peer is programmed again`);
    } catch (err) {
      // not read, or not applied at all: none of them is known to be in place
      if (!(err instanceof PlanError)) state.failed = peers.map((p) => p.subnet.toString());
      const counted = state.failed.length ? ` (${state.failed.length} of ${peers.length} peers not programmed: ${state.failed.join(', ')})` : '';
      this.problems.report(`peers ${name}`, `reconcile failed: ${name} peers: ${(err as Error).message}${counted}; retrying on each reconcile`);
    }
    return state;
  }

  /** The side's VTEP in place; false (reported) when it cannot be. */
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

  /** --ip-blackhole-route: the side's blackhole route in place. */
  private async blackhole(s: Side, why: string): Promise<void> {
    try {
      for (const change of await ensureBlackhole(s.subnet, s.pool.network)) this.log(`${change} (${why})`);
      this.problems.clear(`blackhole ${s.family}`);
    } catch (err) {
      this.problems.report(`blackhole ${s.family}`, `cannot put the blackhole route to ${s.subnet} in place: ${(err as Error).message}; retrying on each reconcile`);
    }
  }

  /**
   * Why this node's overlay is not in place (a short reason), or undefined
   * when start-up has finished, it holds its lease (ours is in the last list
   * the source gave), the reconcile loop is passing, and the last pass found
   * every VTEP up and every peer programmed. `starting` says whether the
   * reason is that start-up has not finished. Answered from memory: a probe
   * costs no command and no request to the source.
   */
  private problem(): { reason: string; starting: boolean } | undefined {
    if (this.stopped) return { reason: 'stopping', starting: false };
    const lease = this.lease;
    if (!lease || !this.sides.length) return { reason: 'starting: no lease yet', starting: true };
    if (!this.lastPassAt) return { reason: 'starting: overlay not programmed yet', starting: true };
    if (!this.leases.some((l) => leaseKey(l) === leaseKey(lease))) return { reason: 'lease not in the lease store (being written again)', starting: false };
    // one pass per interval: three missed is a loop that stopped (a pass stuck on a command)
    if (Date.now() - this.lastPassAt > 3 * this.opts.reconcileMs + 30_000) return { reason: 'reconcile loop stalled', starting: false };
    const overlay = overlayProblem(this.overlay);
    if (overlay) return { reason: overlay, starting: false };
    return this.running ? undefined : { reason: 'starting', starting: true };
  }

  /** /healthz (liveness): why the daemon is not doing its job; start-up is not a failure. */
  live(): string | undefined {
    const p = this.problem();
    return p && !p.starting ? p.reason : undefined;
  }

  /** /readyz (readiness): why this node's overlay is not in place, start-up included. */
  ready(): string | undefined {
    return this.problem()?.reason;
  }

  /**
   * Stops timers and the watch; with releaseOnExit also gives back the lease
   * and removes the VTEPs, blackhole routes, subnet.env and the firewall rules (without it they
   * all stay, as flanneld leaves them). Closes the manager.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.wake?.();
    const passDone = this.loop.stop();
    const rulesDone = this.traffic.stop();
    this.lease?.stop();
    // A start in progress stops at its next step; once it has, whether a lease is held is known
    // (a lease taken while the signal arrived is given back, not left to expire).
    await this.starting?.catch(() => {});
    this.lease?.stop();
    this.stopWatch?.();
    await passDone;
    await rulesDone;
    if (this.opts.releaseOnExit && this.lease) {
      const name = describeSubnets(this.lease);
      try {
        await this.lease.release();
        this.log(`released lease ${name}`);
      } catch (err) {
        this.log(`cannot release lease ${name}: ${(err as Error).message}`);
      }
      for (const s of this.sides) {
        await deleteLink(s.spec.name).catch((err) => this.log(`cannot delete ${s.spec.name}: ${(err as Error).message}`));
        if (this.opts.ipBlackholeRoute) await removeBlackhole(s.subnet).catch((err) => this.log(`cannot remove the blackhole route to ${s.subnet}: ${(err as Error).message}`));
      }
      removeFile(this.opts.subnetFile);
      await this.traffic.remove();
    }
    await this.manager.close();
  }
}
