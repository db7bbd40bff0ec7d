// `vxlan-flannel daemon`: holds this node's lease, keeps the VTEPs and
// subnet.env in place, and programs every peer's neighbour, FDB entry and
// route. Changes in the store are programmed as they are seen (etcd watch,
// file store poll); a periodic full reconcile repairs whatever drifted.
// When the store is unreachable the overlay is left as it was and the store
// is retried with backoff; nothing is removed on the word of a store we
// cannot read.
//
// IPv4 runs on flannel.<VNI> (IPv4 underlay), IPv6 on flannel-v6.<VNI> (IPv6
// underlay), as flanneld does; a dual-stack overlay has both, an IPv6-only one
// only the second. Everything below is done per family with the same code.
import type { IP } from '../net/ip';
import { Serial } from '../util/serial';
import { readIfExists, removeFile } from '../util/fs';
import { readSysctl, setSysctlsIn, writeSysctl } from '../iproute/sysctl';
import { Acquired, PoolFullError, acquireLease, identity } from './acquire';
import { Lease, LeaseAttrs, LeaseSubnets, describeSubnets, encodeAttrs, leaseKey } from './lease';
import { ConfigError, NetworkConfig, describeNetwork, parseNetworkConfig } from './netconfig';
import { PlanError, applyPlan, desiredPeers, planPeers, readActual } from './peers';
import { LeaseStore, StoreOptions, StoreUnavailable } from './store';
import { openStore } from './open-store';
import { Reporter, printable } from './log';
import { Side, advertise, leasedSides, planSides, publicAddresses, selfOf, subnetEnvOf } from './sides';
import { formatSubnetEnv, parseSubnetEnv, subnetsOf, writeSubnetEnv } from './subnet-env';
import { Underlay, describeUnderlay, findUnderlay } from './underlay';
import { ensureVtep, getLink, vxlanMismatch, deleteLink } from './vtep';
import { listLinks } from '../iproute/vxlan';

export interface DaemonOptions {
  iface?: string;
  publicIp?: string;
  publicIpv6?: string;
  store: StoreOptions;
  subnetFile: string;
  leaseTtlS: number;
  reconcileMs: number;
  ipMasq: boolean;
  releaseOnExit: boolean;
  /** Network namespace to program (tests); the daemon's own when absent. */
  netns?: string;
  log?: (msg: string) => void;
  /** An already open lease store instead of opening `store` (tests). */
  leaseStore?: LeaseStore;
}

const FORWARDING6 = 'net/ipv6/conf/all/forwarding';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Seconds before expiry at which a lease is renewed: an hour for flannel's 24 h, half the TTL for short ones. */
export const renewMarginS = (ttlS: number) => Math.min(3600, ttlS / 2);
/** How soon a renewal that failed is tried again: a tenth of the margin, from 1 s to 1 min. */
export const renewRetryMs = (ttlS: number) => Math.min(60_000, Math.max(1000, renewMarginS(ttlS) * 100));

export class Daemon {
  private store!: LeaseStore;
  private cfg!: NetworkConfig;
  private underlay!: Underlay;
  private sides: Side[] = [];
  private subnets: LeaseSubnets = {};
  private attrs!: LeaseAttrs;
  /** Our lease's value as last seen in the store (or as we wrote it): what a renewal is guarded by. */
  private leaseValue = '';
  private renewAt = 0;
  /** Our lease is a reservation (no TTL, as flannel keeps them): it is never renewed, and re-written without a TTL. */
  private permanent = false;
  private leases: Lease[] = [];
  /**
   * Whether `leases` came from a successful list. Until one has, peers are
   * never planned: an empty list that only means "etcd did not answer" would
   * remove every peer.
   */
  private listed = false;
  private stopWatch?: () => void;
  /** The next periodic reconcile (re-armed when one ends: two never overlap). */
  private timer?: NodeJS.Timeout;
  /** The next renewal of our lease: its own timer, from the TTL, whatever the reconcile interval. */
  private renewTimer?: NodeJS.Timeout;
  /** Writes of our own lease (renewal, re-creation, release), one at a time. */
  private readonly leaseWrites = new Serial();
  private debounce?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;
  /** start() in progress: stop() waits for it to reach a point where it knows whether a lease is held. */
  private starting?: Promise<void>;
  /** Wakes start()'s retry sleeps when stop() is called. */
  private wake?: () => void;
  private readonly stopSignal = new Promise<void>((resolve) => (this.wake = resolve));
  /** The lease this daemon holds (taken or adopted) from the moment it is known: what --release-on-exit gives back. */
  private held?: LeaseSubnets;
  private storeDown = false;
  readonly log: (msg: string) => void;
  /** Failures met on every pass, each logged when it appears, changes or ends. */
  private readonly problems: Reporter;
  /**
   * The watch's errors while etcd is away: each reconnect attempt fails,
   * alternating between two messages; each message is logged once until the
   * watch delivers again.
   */
  private readonly watchTroubles: Reporter;

  constructor(private readonly opts: DaemonOptions) {
    const sink = opts.log ?? ((msg: string) => process.stderr.write(`${new Date().toISOString()} vxlan-flannel: ${msg}\n`));
    this.log = (msg) => sink(printable(msg)); // one line each, whatever the store held
    this.problems = new Reporter(this.log);
    this.watchTroubles = new Reporter(this.log);
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

  /** The subnets of the previous subnet.env (network addresses), tried first. */
  private previousSubnets(): LeaseSubnets | undefined {
    try {
      const text = readIfExists(this.opts.subnetFile);
      return text === undefined ? undefined : subnetsOf(parseSubnetEnv(text));
    } catch {
      return undefined;
    }
  }

  private async readConfig(): Promise<NetworkConfig> {
    return this.retry('read the network config', async () => {
      const text = await this.store.getConfig();
      if (text === undefined) {
        throw new Error(`${this.store.description} has no network config; set one with \`vxlan-flannel network set --network CIDR\``);
      }
      try {
        return parseNetworkConfig(text);
      } catch (err) {
        if (err instanceof ConfigError) throw new Error(`bad network config in ${this.store.description}: ${err.message}`);
        throw err;
      }
    });
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
    this.underlay = await findUnderlay({ iface: o.iface, publicIp: o.publicIp, publicIpv6: o.publicIpv6 }, o.netns);
    const ul = this.underlay;
    this.log(describeUnderlay(ul));
    this.store = o.leaseStore ?? (await openStore(o.store));
    this.log(`lease store: ${this.store.description}`);

    this.cfg = await this.readConfig();
    const cfg = this.cfg;
    const plans = planSides(cfg, ul);
    this.log(`network ${describeNetwork(cfg)}; ${plans.map((p) => `VTEP ${p.vtep.name} MTU ${p.vtep.mtu}`).join(', ')}, port ${cfg.port}`);

    // the devices' MACs where they can be reused (see advertise())
    const deviceMacs = await Promise.all(plans.map(async ({ vtep }) => {
      const link = await getLink(vtep.name, o.netns);
      return link && !vxlanMismatch(link, { ...vtep, mac: link.mac }) ? link.mac : undefined;
    }));
    const me = identity(cfg, publicAddresses(plans));
    const acquired: Acquired = await this.retry('acquire a subnet lease', async () => {
      const { leases } = await this.store.list();
      const own = leases.find((l) => me && identity(cfg, l.attrs)?.equals(me));
      const attrs = advertise(plans, deviceMacs, own?.attrs);
      this.attrs = attrs;
      try {
        return await acquireLease(this.store, cfg, attrs, { previous: this.previousSubnets(), ttlS: o.leaseTtlS, log: this.log });
      } catch (err) {
        if (err instanceof PoolFullError) throw new Error(`${err.message}; waiting for a lease to be released or to expire`);
        throw err;
      }
    });
    this.subnets = { subnet: acquired.subnet, ipv6Subnet: acquired.ipv6Subnet };
    this.held = this.subnets; // from now on, a stop with --release-on-exit gives it back
    // The list the lease was chosen from is the first picture of the peers: if the
    // store stops answering right now, the overlay is programmed from it, not emptied.
    this.leases = acquired.listed.leases;
    this.listed = true;
    this.leaseValue = acquired.value;
    this.permanent = !!acquired.permanent;
    this.leaseWritten();
    this.armRenewal();
    this.sides = leasedSides(plans, acquired, this.attrs);
    this.log(`lease ${describeSubnets(this.subnets)} (${acquired.how}${this.permanent ? ', a reservation: kept without a TTL' : ''}), ${this.sides.map((s) => `${s.spec.name} MAC ${s.spec.mac}`).join(', ')}`);
    this.checkStopped();

    const created: string[] = [];
    try {
      for (const s of this.sides) {
        const r = await ensureVtep(s.spec, s.subnet.network.toString(), o.netns);
        if (r.created) created.push(s.spec.name);
        if (r.replaced) this.log(`replaced the incompatible ${s.spec.name}: ${r.replaced}`);
        else this.log(`${r.created ? 'created' : 'reusing'} VTEP ${s.spec.name}`);
      }
      if (cfg.v6) await this.ipv6Forwarding(true);
    } catch (err) {
      // Nothing half-done: a lease we just took is given back, devices we just made go.
      for (const name of created) await deleteLink(name, o.netns).catch(() => {});
      clearTimeout(this.renewTimer);
      this.held = undefined; // given back, or (reused) left as it was before this start
      if (acquired.how !== 'reused') await this.withLease(() => this.store.remove(this.subnets)).catch(() => {});
      throw new Error(`cannot set up the overlay: ${(err as Error).message}`);
    }
    this.checkStopped();
    await this.removeStaleVteps();
    this.checkStopped();
    // Watch from the list the lease was chosen from, before the first reconcile lists
    // again: a change made at any moment since then is reported (etcd replays it from
    // that revision; the file store compares with that list's signature), none falls
    // between a list and the start of the watch.
    this.stopWatch = this.store.watch(
      (why) => this.watchDelivered(why),
      (err) => this.watchTroubles.report(err.message, `watch: ${err.message}`),
      acquired.listed.revision,
    );
    await this.sync('start'); // peers first: subnet.env (node ready for pods) is written after them
    if (!this.stopped) this.timer = setTimeout(() => void this.tick(), o.reconcileMs);
    this.log(`running: ${this.peerCount()} peers programmed; reconciling every ${o.reconcileMs / 1000} s`);
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
      links = await listLinks(this.opts.netns);
    } catch (err) {
      this.log(`cannot look for VTEPs of an earlier network config: ${(err as Error).message}`);
      return;
    }
    for (const l of links) {
      if (ours.has(l.name) || l.kind !== 'vxlan' || !/^flannel(-v6)?\.\d+$/.test(l.name)) continue;
      try {
        await deleteLink(l.name, this.opts.netns);
        this.log(`removed ${l.name} (VNI ${l.vxlan?.id}), a VTEP of an earlier network config, with its routes, neighbours and FDB entries`);
      } catch (err) {
        this.log(`cannot remove ${l.name}, a VTEP of an earlier network config: ${(err as Error).message}`);
      }
    }
  }

  /** Pods' IPv6 traffic is routed by this node: net.ipv6.conf.all.forwarding=1 (as flanneld's vxlan backend needs). */
  private async ipv6Forwarding(atStart: boolean): Promise<void> {
    if (this.opts.netns) {
      if (atStart) await setSysctlsIn(this.opts.netns, [[FORWARDING6, '1']]);
      return;
    }
    if (readSysctl(FORWARDING6) === '1') return;
    writeSysctl(FORWARDING6, '1');
    this.log(`IPv6 forwarding was off: set net.ipv6.conf.all.forwarding=1${atStart ? '' : ' again'}`);
  }

  private peerCount(): number {
    return this.sides.reduce((n, s) => n + desiredPeers(this.leases, selfOf(s), s.pool.network).peers.length, 0);
  }

  private writeSubnetEnv(): void {
    const env = subnetEnvOf(this.sides, this.opts.ipMasq);
    if (readIfExists(this.opts.subnetFile) === formatSubnetEnv(env)) return;
    writeSubnetEnv(this.opts.subnetFile, env);
    this.log(`wrote ${this.opts.subnetFile}`);
  }

  /** The watch reported a change: it works (again), so its next failure is reported too. */
  private watchDelivered(why: string): void {
    if (this.watchTroubles.clearAll() && !this.stopped) this.log(`watch: receiving changes from ${this.store.description} again (${why})`);
    this.schedule(why);
  }

  private schedule(why: string): void {
    if (this.stopped) return;
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => void this.sync(why), 20);
  }

  /**
   * The periodic reconcile. The next one is armed only when this one has
   * finished: a slow store never makes two run at once (setInterval would).
   */
  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      try {
        await this.store.expire?.();
      } catch (err) {
        this.problems.report('expire', `cannot expire old leases: ${(err as Error).message}`);
      }
      if (this.cfg.v6) await this.ipv6Forwarding(false).catch((err) => this.problems.report('fwd6', `cannot turn IPv6 forwarding on: ${(err as Error).message}`));
      await this.sync('periodic reconcile');
    } finally {
      if (!this.stopped) this.timer = setTimeout(() => void this.tick(), this.opts.reconcileMs);
    }
  }

  private get leaseName(): string {
    return describeSubnets(this.subnets);
  }

  /**
   * Runs a write of our own lease once the previous one has finished: two
   * renewals interleaving in the etcd store could revoke the etcd lease the
   * key had just been moved to, deleting our live lease.
   */
  private withLease<T>(fn: () => Promise<T>): Promise<T> {
    return this.leaseWrites.run(fn);
  }

  /** Our lease was just written with a fresh TTL. */
  private leaseWritten(): void {
    this.renewAt = Date.now() + (this.opts.leaseTtlS - renewMarginS(this.opts.leaseTtlS)) * 1000;
  }

  /** Arms the renewal timer (at renewAt, or after `delayMs`); a reservation is never renewed. */
  private armRenewal(delayMs = this.renewAt - Date.now()): void {
    clearTimeout(this.renewTimer);
    this.renewTimer = undefined;
    if (this.stopped || this.permanent) return;
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(0, Math.min(delayMs, 2 ** 31 - 1)));
  }

  private renew(): Promise<void> {
    return this.withLease(async () => {
      if (this.stopped || this.permanent) return;
      const ttl = this.opts.leaseTtlS;
      try {
        const ok = await this.store.renew(this.subnets, this.attrs, ttl, this.leaseValue);
        if (!ok) {
          this.problems.report('renew', `cannot renew lease ${this.leaseName}: it now holds another node's data`);
          this.schedule('lease renewal refused'); // the reconcile looks at what it holds now
          this.armRenewal(renewRetryMs(ttl));
          return;
        }
        this.leaseValue = encodeAttrs(this.attrs);
        this.leaseWritten();
        this.problems.clear('renew');
        this.log(`renewed lease ${this.leaseName} for ${ttl} s`);
        this.armRenewal();
      } catch (err) {
        this.problems.report('renew', `cannot renew lease ${this.leaseName}: ${(err as Error).message}; retrying every ${renewRetryMs(ttl) / 1000} s`);
        this.armRenewal(renewRetryMs(ttl));
      }
    });
  }

  /** One reconcile at a time; a request while one runs makes it run once more. */
  sync(why: string): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.syncOnce(why);
        } while (this.again && !this.stopped);
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  private async syncOnce(why: string): Promise<void> {
    if (this.stopped) return;
    const o = this.opts;
    let fresh = false;
    try {
      const res = await this.store.list();
      this.leases = res.leases;
      this.listed = true;
      fresh = true;
      if (this.storeDown) this.log(`lease store ${this.store.description} is reachable again`);
      this.storeDown = false;
      for (const b of res.bad) this.problems.report(`bad ${b.key}`, `ignoring ${JSON.stringify(b.key)}: ${b.why}`);
    } catch (err) {
      if (!this.storeDown) {
        this.log(`${err instanceof StoreUnavailable ? '' : 'cannot list leases: '}${(err as Error).message}; keeping the overlay as programmed`);
      }
      this.storeDown = true;
    }
    try {
      if (fresh) await this.checkOwnLease();
      let vtepsUp = true;
      for (const s of this.sides) {
        try {
          const r = await ensureVtep(s.spec, s.subnet.network.toString(), o.netns);
          if (r.created) this.log(`VTEP ${s.spec.name} was missing (${why}): recreated`);
          if (r.replaced) this.log(`VTEP ${s.spec.name} had been changed (${r.replaced}): replaced`);
          this.problems.clear(`vtep ${s.spec.name}`, `VTEP ${s.spec.name} is in place again`);
        } catch (err) {
          vtepsUp = false;
          this.problems.report(`vtep ${s.spec.name}`, `reconcile failed: VTEP ${s.spec.name}: ${(err as Error).message}; retrying on each reconcile`);
          continue;
        }
        if (!this.listed) continue; // no picture of the peers yet: leave them as they are
        try {
          const { peers, skipped } = desiredPeers(this.leases, selfOf(s), s.pool.network);
          // "lease <subnets>: why" — one log line per lease and family until its reason changes
          for (const m of skipped) this.problems.report(`skip${s.family} ${m.split(': ')[0]}`, `ignoring ${m}`);
          const plan = planPeers(peers, await readActual(s.spec.name, o.netns, s.family), s.spec.name, s.pool.network);
          if (plan.changes.length) {
            try {
              await applyPlan(plan, o.netns);
              for (const c of plan.changes) this.log(`${c} (${why})`);
            } catch (err) {
              // the rest was made all the same: say so, then report what the kernel refused
              if (err instanceof PlanError) plan.changes.forEach((c, i) => !err.failedChanges.has(i) && this.log(`${c} (${why})`));
              throw err;
            }
          }
          this.problems.clear(`peers ${s.spec.name}`, `${s.spec.name}: every peer is programmed again`);
        } catch (err) {
          this.problems.report(`peers ${s.spec.name}`, `reconcile failed: ${s.spec.name} peers: ${(err as Error).message}; retrying on each reconcile`);
        }
      }
      // the VTEPs are up: pods can be attached even if a peer failed to program
      if (vtepsUp && this.listed) this.writeSubnetEnv();
      this.problems.clear('reconcile');
    } catch (err) {
      this.problems.report('reconcile', `reconcile failed: ${(err as Error).message}; retrying on each reconcile`);
    }
  }

  /** Our lease must still be ours: re-created if it vanished (deleted by hand, expired while the store was down). */
  private async checkOwnLease(): Promise<void> {
    const key = leaseKey(this.subnets);
    const ours = this.leases.find((l) => leaseKey(l) === key);
    const mine = encodeAttrs(this.attrs);
    if (ours && encodeAttrs(ours.attrs) === mine) {
      // ours, whatever its spelling: the next renewal is guarded by the value as stored
      this.leaseValue = ours.raw ?? mine;
      if (this.permanent !== !!ours.permanent) {
        this.permanent = !!ours.permanent; // an operator turned it into a reservation, or back
        this.armRenewal();
      }
      return;
    }
    const me = identity(this.cfg, this.attrs)!;
    const holder = ours && identity(this.cfg, ours.attrs);
    if (ours && !holder?.equals(me)) {
      this.problems.report('conflict', `CONFLICT: subnet ${this.leaseName} is now leased by ${holder ?? ours.attrs.publicIP ?? ours.attrs.publicIPv6}; leaving it alone`);
      return;
    }
    const ok = await this.withLease(() =>
      ours
        ? this.store.renew(this.subnets, this.attrs, ours.permanent ? 0 : this.opts.leaseTtlS, ours.raw ?? encodeAttrs(ours.attrs))
        : this.store.create(this.subnets, this.attrs, this.opts.leaseTtlS),
    );
    if (ok) {
      this.leaseValue = mine;
      this.permanent = !!ours?.permanent; // a reservation re-written stays one; a re-created lease has a TTL
      this.leaseWritten();
      this.armRenewal();
      this.log(`lease ${this.leaseName} was ${ours ? 'changed' : 'gone'} in the store: written again`);
      const { leases } = await this.store.list();
      this.leases = leases;
    } else if (!ours) {
      this.problems.report('conflict', `CONFLICT: lease ${this.leaseName} is gone from the store and another lease now holds one of its subnets; leaving it alone`);
    }
  }

  /** Stops timers and the watch; with releaseOnExit also gives back the lease and removes the VTEPs and subnet.env. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.wake?.();
    clearTimeout(this.timer);
    clearTimeout(this.renewTimer);
    clearTimeout(this.debounce);
    // A start in progress stops at its next step; once it has, whether a lease is held is known
    // (a lease taken while the signal arrived is given back, not left to expire).
    await this.starting?.catch(() => {});
    clearTimeout(this.renewTimer);
    this.stopWatch?.();
    await this.running?.catch(() => {});
    if (this.opts.releaseOnExit && this.held) {
      try {
        await this.withLease(() => this.store.remove(this.subnets)); // after a renewal in flight, never beside it
        this.log(`released lease ${this.leaseName}`);
      } catch (err) {
        this.log(`cannot release lease ${this.leaseName}: ${(err as Error).message}`);
      }
      for (const s of this.sides) {
        await deleteLink(s.spec.name, this.opts.netns).catch((err) => this.log(`cannot delete ${s.spec.name}: ${(err as Error).message}`));
      }
      removeFile(this.opts.subnetFile);
    }
    await this.store?.close();
  }

  get publicIP(): IP | undefined {
    return this.underlay.publicIP ?? this.underlay.publicIPv6;
  }
}
