// `vxlan-flannel daemon`: holds this node's lease, keeps subnet.env in place,
// and has the backend (vxlan: VTEPs, each peer's neighbour, FDB entry and
// route; host-gw: a route per peer) program the peers. Changes are
// programmed as they are seen (the manager's watch); a periodic full
// reconcile repairs whatever drifted. When the lease source is unreachable
// the overlay is left as it was and the source is retried with backoff;
// nothing is removed on the word of a source we cannot read.
//
// Where leases come from (chosen in etcd or the file store, assigned by
// Kubernetes) is the SubnetManager's business (manager.ts), and what is made
// for the peers the Backend's (backend/backend.ts, chosen by Backend.Type):
// the daemon asks both the same questions whichever they are. Beside the
// overlay it keeps flanneld's firewall rules (traffic/keeper.ts) and answers
// how it is (live(), ready(): the /healthz and /readyz of run-daemon.ts) from
// what the last reconcile pass found (overlay-state.ts), never by running a command.
import { readIfExists, removeFile } from '../../util/fs';
import { readSysctl, writeSysctl } from '../../iproute/sysctl';
import { Lease, describeSubnets, leaseKey, sameSubnets } from '../lease';
import { Log, Reporter, printable } from '../log';
import { HeldLease, LeaseList, StoreUnavailable, SubnetManager, Unwatch } from '../manager';
import { describeNetwork } from '../netconfig';
import { ReconcileLoop } from '../../util/reconcile-loop';
import { subnetEnvOf, type Backend, type LeasedFamily } from '../backend/backend';
import { newBackend } from '../backend/registry';
import { formatSubnetEnv, writeSubnetEnv } from '../subnet-env';
import { TrafficKeeper, TrafficSettings } from '../traffic/keeper';
import { UnderlayOptions, describeUnderlay, findUnderlay } from './underlay';
import { ensureBlackhole, removeBlackhole } from './blackhole';
import { reclaimLeftovers } from './leftovers';
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
  /** The flannel CNI plugin's dataDir (--cni-data-dir): attachment files flannel's own plugin left there are removed (leftovers.ts). */
  cniDataDir?: string;
  releaseOnExit: boolean;
  /** Where log lines go, one per call (control characters are escaped before). */
  log: Log;
  /** How much to log, klog's -v (cli/klog-flags.ts): 0 changes and problems, 1 a line per pass, 2 every change. */
  logDetail?: number;
  /** What /metrics exports (metrics.ts); none: nothing is counted. */
  metrics?: DaemonMetrics;
  /** Called after each full pass (run-daemon.ts: gives the memory a full pass used back). */
  afterFullPass?: () => void;
}

const FORWARDING6 = 'net/ipv6/conf/all/forwarding';

/**
 * The full pass period while the kernel's notifications are not followed (a
 * monitor ended, or the backend has none): drift is then found only by
 * reading every table back, as often as before notifications were followed.
 */
export const UNWATCHED_FULL_PASS_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Daemon {
  /** The backend Backend.Type chose (set once the network config is read). */
  private backend?: Backend;
  /** The overlay's families once the lease is held. */
  private families: LeasedFamily[] = [];
  /** This node's lease from the moment it is obtained: what --release-on-exit gives back. */
  private lease?: HeldLease;
  /**
   * The peers' picture: the last list that succeeded (see refreshLeases),
   * kept up to date between lists by the manager's deltas (changesPass). A
   * list, not a Set (at 5,000 peers a Set's table is 160 KiB more); the
   * deltas since it was last asked for wait beside it (a change pass does
   * not ask), applied in one pass over it when it is.
   */
  private leaseList: readonly Lease[] = [];
  /** Since leaseList: the leases gone, and those come (one already held comes again at the end). */
  private readonly leasesGone = new Set<Lease>();
  private readonly leasesCome = new Set<Lease>();
  /** Where leaseList stands in the manager's changes (a list's or a delta's revision); undefined: list on the next pass. */
  private leaseRevision?: string;
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
  /** The watch reported a lease change the next changes pass has not asked the manager for yet. */
  private leaseNews = false;
  /** When the oldest lease change not applied yet reached us (performance.now()), for /metrics. */
  private newsSince?: number;
  /** A full pass armed after one that left something undone (full passes are otherwise minutes apart). */
  private retryTimer?: NodeJS.Timeout;
  private readonly traffic: TrafficKeeper;
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
    // throws when the backend cannot run here (host-gw behind NAT): nothing is written
    const backend = (this.backend = newBackend(cfg, ul, {
      log: this.log,
      problems: this.problems,
      resync: (why) => this.loop.request(why, true),
      changed: (why) => this.loop.request(why),
      watching: (up, why) => this.kernelWatching(up, why),
      detail: o.logDetail ?? 0,
      ...(this.metrics ? { metrics: this.metrics } : {}),
    }));
    this.log(`network ${describeNetwork(cfg)}; ${backend.description}`);

    const { lease, attrs } = await this.retry('acquire a subnet lease', async () => {
      const attrs = await backend.leaseAttrs(await this.manager.previousAttrs(cfg, backend.publicAddresses()));
      const hooks = { log: this.log, resync: (why: string) => this.loop.request(why, true), stopping: this.stopSignal, renewed: () => this.metrics?.leaseRenewed() };
      return { lease: await this.manager.acquireLease(cfg, attrs, hooks), attrs };
    });
    this.lease = lease; // from now on, a stop with --release-on-exit gives it back
    // The list the lease was obtained from is the first picture of the peers: if the
    // source stops answering right now, the overlay is programmed from it, not emptied.
    this.leases = lease.listed.leases;
    this.leaseRevision = lease.listed.revision;
    this.families = backend.attach(lease, attrs);
    this.metrics?.nodeSubnets(this.families.map((s) => s.subnet));
    this.log(`lease ${describeSubnets(lease)} (${lease.how})${backend.leaseNote}`);
    this.checkStopped();

    try {
      await backend.setUp();
      if (cfg.v6) await this.ipv6Forwarding(true);
      // before subnet.env: pods attached from then on are masqueraded as FLANNEL_IPMASQ says
      await this.traffic.start(cfg.nftables ? 'nftables' : 'iptables', this.families.map((s) => ({ network: s.pool.network, subnet: s.subnet })));
    } catch (err) {
      // Nothing half-done: a lease we just took is given back, devices we just made go.
      await backend.undo();
      this.lease = undefined; // given back, or (held before this start) left as it was
      await lease.abandon();
      throw new Error(`cannot set up the overlay: ${(err as Error).message}`);
    }
    this.checkStopped();
    await backend.removeStale();
    this.checkStopped();
    // Drift repaired as the kernel reports it, from before the first pass reads the tables: a full
    // pass is then a rare safety net. A backend that cannot follow the kernel gets the old period.
    if (backend.watchKernel) backend.watchKernel();
    else this.loop.setPeriod(Math.min(o.reconcileMs, UNWATCHED_FULL_PASS_MS));
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
    const repair = backend.watchKernel ? `drift repaired as the kernel reports it, a full reconcile every ${o.reconcileMs / 1000} s` : `reconciling every ${Math.min(o.reconcileMs, UNWATCHED_FULL_PASS_MS) / 1000} s`;
    this.log(`running: ${describePeers(this.overlay)}; ${repair}${problem ? `; not ready: ${problem}, retrying on each reconcile` : ''}`);
  }

  /** The backend's kernel notifications stopped (a monitor ended) or came back: full passes fill in meanwhile. */
  private kernelWatching(up: boolean, why: string): void {
    if (this.stopped) return;
    const period = up ? this.opts.reconcileMs : Math.min(this.opts.reconcileMs, UNWATCHED_FULL_PASS_MS);
    this.log(up ? `following the kernel's notifications again (${why}); a full reconcile every ${period / 1000} s` : `not following the kernel's notifications: ${why}; a full reconcile every ${period / 1000} s meanwhile`);
    this.loop.setPeriod(period);
  }

  private get leases(): readonly Lease[] {
    this.applyLeaseDeltas();
    return this.leaseList;
  }

  /** The deltas waiting beside leaseList applied to it, in one pass over it. */
  private applyLeaseDeltas(): void {
    const { leasesGone: gone, leasesCome: come } = this;
    if (!gone.size && !come.size) return;
    this.leaseList = [...this.leaseList.filter((l) => !gone.has(l) && !come.has(l)), ...come];
    gone.clear();
    come.clear();
  }

  private set leases(list: readonly Lease[]) {
    this.leaseList = [...new Set(list)];
    this.leasesGone.clear();
    this.leasesCome.clear();
  }

  /** Pods' IPv6 traffic is routed by this node: net.ipv6.conf.all.forwarding=1 (as flanneld's vxlan backend needs). */
  private async ipv6Forwarding(atStart: boolean): Promise<void> {
    if (readSysctl(FORWARDING6) === '1') return;
    writeSysctl(FORWARDING6, '1');
    this.log(`IPv6 forwarding was off: set net.ipv6.conf.all.forwarding=1${atStart ? '' : ' again'}`);
  }

  private writeSubnetEnv(): void {
    const env = subnetEnvOf(this.families, this.backend!.mtu, this.opts.traffic.ipMasq);
    if (readIfExists(this.opts.subnetFile) === formatSubnetEnv(env)) return;
    writeSubnetEnv(this.opts.subnetFile, env);
    this.log(`wrote ${this.opts.subnetFile}`);
  }

  /** The watch reported a change: it works (again), so its next failure is reported too. */
  private watchDelivered(why: string): void {
    // back after a failure: changes may have been missed meanwhile, so compare everything once
    const back = this.watchTroubles.clearAll();
    if (back && !this.stopped) this.log(`watch: receiving changes from ${this.manager.description} again (${why})`);
    else if ((this.opts.logDetail ?? 0) >= 2) this.log(`watch: ${why}`);
    this.leaseNews = true;
    this.newsSince ??= performance.now();
    this.loop.request(why, back);
  }

  /** Before each periodic reconcile: the source's housekeeping, IPv6 forwarding put back, what flannel's plugin left. */
  private async housekeeping(): Promise<void> {
    await this.manager.tidy().catch((err) => this.problems.report('tidy', (err as Error).message));
    if (this.opts.cniDataDir) {
      try {
        for (const line of reclaimLeftovers(this.opts.cniDataDir)) this.log(line);
        this.problems.clear('leftovers');
      } catch (err) {
        this.problems.report('leftovers', `cannot remove what flannel's plugin left in ${this.opts.cniDataDir}: ${(err as Error).message}`);
      }
    }
    if (this.families.some((s) => s.family === 6)) await this.ipv6Forwarding(false).catch((err) => this.problems.report('fwd6', `cannot turn IPv6 forwarding on: ${(err as Error).message}`));
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
    const news = this.newsSince;
    this.newsSince = undefined; // a change reaching us from now on is the next pass's
    let ok = false;
    try {
      const overlay: SideState[] = (!full && (await this.changesPass(why))) || (await this.listedPass(why, full));
      if (news !== undefined) this.metrics?.leaseChangeApplied((performance.now() - news) / 1000);
      // full passes only: a changes pass runs no command beyond the changes (see reconcile-loop.ts)
      if (full && this.opts.ipBlackholeRoute) for (const f of this.families) await this.blackhole(f, why);
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
      ok = !this.storeDown && this.overlay.every((s) => s.up) && !!this.backend?.programmedInFull();
    } catch (err) {
      this.problems.report('reconcile', `reconcile failed: ${(err as Error).message}; retrying on each reconcile`);
    } finally {
      const cpu = process.cpuUsage(cpuBefore);
      const seconds = (performance.now() - started) / 1000;
      this.metrics?.reconciled(full ? 'full' : 'changes', seconds, ok, (cpu.user + cpu.system) / 1e6);
      if ((this.opts.logDetail ?? 0) >= 1) {
        this.log(`${full ? 'full' : 'changes'} pass (${why}): ${describePeers(this.overlay)}, ${Math.round(seconds * 1000)} ms${ok ? '' : ', not complete'}`);
      }
      if (full) this.opts.afterFullPass?.();
      this.retryIfIncomplete(ok);
    }
  }

  /**
   * A pass that left the overlay short (a command refused, the store away, a
   * VTEP not up) is followed by a full pass UNWATCHED_FULL_PASS_MS later, and
   * again until one completes: as often as passes ran before drift was
   * followed, not as rarely as the safety net's --reconcile-interval, and
   * never in a tight loop against a kernel that keeps refusing.
   */
  private retryIfIncomplete(ok: boolean): void {
    if (ok || this.stopped) {
      clearTimeout(this.retryTimer);
      this.retryTimer = undefined;
      return;
    }
    this.retryTimer ??= setTimeout(() => {
      this.retryTimer = undefined;
      this.loop.request('retrying what the last pass left undone', true);
    }, Math.min(this.opts.reconcileMs, UNWATCHED_FULL_PASS_MS));
  }

  /** A pass from a fresh list of the leases (the last good one when the source cannot be listed). */
  private async listedPass(why: string, full: boolean): Promise<SideState[]> {
    // our lease written again (deleted by hand, expired while the store was away): list once more to see it
    if ((await this.refreshLeases()) && (await this.lease?.check(this.leases))) this.useList(await this.manager.listLeases());
    return (await this.backend?.reconcile(this.leases, why, full)) ?? [];
  }

  /**
   * A changes pass without a list: the manager's delta since the last pass
   * applied to the picture and handed to the backend, so that its cost
   * follows the change, not the cluster. Undefined when the manager or the
   * backend cannot do it (no delta, nothing programmed in full yet): the
   * pass lists then.
   */
  private async changesPass(why: string): Promise<SideState[] | undefined> {
    const backend = this.backend;
    if (!backend?.reconcileChanges || !this.manager.leaseChanges || this.leaseRevision === undefined || this.storeDown) return undefined;
    // only the kernel reported something: no lease to ask the manager about (a store's delta compares every lease)
    const asked = this.leaseNews;
    this.leaseNews = false;
    const delta = asked ? await this.manager.leaseChanges(this.leaseRevision) : { revision: this.leaseRevision, removed: [], added: [], bad: [] };
    if (!delta) return undefined;
    this.leaseRevision = delta.revision;
    for (const l of delta.removed) {
      this.leasesCome.delete(l);
      this.leasesGone.add(l);
    }
    for (const l of delta.added) this.leasesCome.add(l);
    // applied now and then even without a full pass: the leases gone are not held for long
    if (this.leasesGone.size > Math.max(64, this.leaseList.length / 16)) this.applyLeaseDeltas();
    for (const b of delta.bad) this.problems.report(`bad ${b.key}`, `ignoring ${JSON.stringify(b.key)}: ${b.why}`);
    // Our lease is checked when the change is about its subnets (deleted, expired, rewritten, renewed, taken):
    // looking for it among 5,000 others was a sixth of the pass's CPU. Full passes always check it.
    const ours = this.lease;
    const aboutOurs = !!ours && (delta.removed.some((l) => sameSubnets(l, ours)) || delta.added.some((l) => sameSubnets(l, ours)));
    if (aboutOurs && (await ours.check(this.leases))) {
      this.useList(await this.manager.listLeases());
      return backend.reconcile(this.leases, why, false);
    }
    return (await backend.reconcileChanges(delta, why)) ?? backend.reconcile(this.leases, why, false);
  }

  private useList(list: LeaseList): void {
    this.leases = list.leases;
    this.leaseRevision = list.revision;
  }

  /**
   * Lists the leases; true when that worked. When it did not, `leases` stays
   * the last list that did (at first the one the lease was obtained from):
   * the overlay is never planned from a list that failed.
   */
  private async refreshLeases(): Promise<boolean> {
    try {
      const res = await this.manager.listLeases();
      this.useList(res);
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

  /** --ip-blackhole-route: the family's blackhole route in place. */
  private async blackhole(s: LeasedFamily, why: string): Promise<void> {
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
    if (!lease || !this.families.length) return { reason: 'starting: no lease yet', starting: true };
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
   * and removes the backend's devices and routes, blackhole routes, subnet.env and the firewall rules (without it they
   * all stay, as flanneld leaves them). Closes the manager.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.wake?.();
    clearTimeout(this.retryTimer);
    const passDone = this.loop.stop();
    this.backend?.stop?.();
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
      await this.backend?.remove();
      for (const s of this.families) {
        if (this.opts.ipBlackholeRoute) await removeBlackhole(s.subnet).catch((err) => this.log(`cannot remove the blackhole route to ${s.subnet}: ${(err as Error).message}`));
      }
      removeFile(this.opts.subnetFile);
      await this.traffic.remove();
    }
    await this.manager.close();
  }
}
