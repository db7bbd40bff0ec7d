// `vxlan-flannel daemon`: holds this node's lease, keeps the VTEP and
// subnet.env in place, and programs every peer's neighbour, FDB entry and
// route. Changes in the store are programmed as they are seen (etcd watch,
// file store poll); a periodic full reconcile repairs whatever drifted.
// When the store is unreachable the overlay is left as it was and the store
// is retried with backoff; nothing is removed on the word of a store we
// cannot read.
import { randomBytes } from 'node:crypto';
import { IP, Prefix } from '../net/ip';
import { readIfExists, removeFile } from '../util/fs';
import { Acquired, PoolFullError, acquireLease } from './acquire';
import { Lease, LeaseAttrs, encodeAttrs } from './lease';
import { ConfigError, NetworkConfig, parseNetworkConfig } from './netconfig';
import { applyPlan, desiredPeers, planPeers, readActual } from './peers';
import { LeaseStore, StoreOptions, StoreUnavailable, openStore } from './store';
import { SubnetEnv, formatSubnetEnv, parseSubnetEnv, writeSubnetEnv } from './subnet-env';
import { Underlay, findUnderlay } from './underlay';
import { ensureVtep, getLink, vtepName, vxlanMismatch, deleteLink } from './vtep';
import type { VxlanSpec } from '../iproute/vxlan';

export interface DaemonOptions {
  iface?: string;
  publicIp?: string;
  store: StoreOptions;
  subnetFile: string;
  leaseTtlS: number;
  reconcileMs: number;
  ipMasq: boolean;
  releaseOnExit: boolean;
  /** Network namespace to program (tests); the daemon's own when absent. */
  netns?: string;
  log?: (msg: string) => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function randomVtepMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0] & 0xfe) | 0x02; // unicast, locally administered
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/** Seconds before expiry at which a lease is renewed: an hour for flannel's 24 h, a quarter for short TTLs. */
export const renewMarginS = (ttlS: number) => Math.min(3600, Math.floor(ttlS / 4));

export class Daemon {
  private store!: LeaseStore;
  private cfg!: NetworkConfig;
  private underlay!: Underlay;
  private spec!: VxlanSpec;
  private subnet!: Prefix;
  private attrs!: LeaseAttrs;
  private leaseValue = '';
  private renewAt = 0;
  private leases: Lease[] = [];
  private stopWatch?: () => void;
  private timer?: NodeJS.Timeout;
  private debounce?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;
  private storeDown = false;
  private readonly reported = new Set<string>();
  readonly log: (msg: string) => void;

  constructor(private readonly opts: DaemonOptions) {
    this.log = opts.log ?? ((msg) => process.stderr.write(`${new Date().toISOString()} vxlan-flannel: ${msg}\n`));
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
        await sleep(delay);
        if (this.stopped) throw new Error('stopped');
      }
    }
  }

  private previousSubnet(): Prefix | undefined {
    try {
      const text = readIfExists(this.opts.subnetFile);
      const env = text === undefined ? undefined : parseSubnetEnv(text);
      return env?.subnet ? Prefix.of(env.subnet.network, env.subnet.length) : undefined;
    } catch {
      return undefined;
    }
  }

  async start(): Promise<void> {
    const o = this.opts;
    this.underlay = await findUnderlay({ iface: o.iface, publicIp: o.publicIp }, o.netns);
    this.log(`underlay ${this.underlay.dev}: local ${this.underlay.localIP}, public ${this.underlay.publicIP}, MTU ${this.underlay.mtu}`);
    this.store = await openStore(o.store);
    this.log(`lease store: ${this.store.description}`);

    this.cfg = await this.retry('read the network config', async () => {
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
    const cfg = this.cfg;
    const mtu = cfg.mtu ?? this.underlay.mtu - 50;
    if (mtu < 68) throw new Error(`VTEP MTU ${mtu} is too small (underlay ${this.underlay.dev} MTU ${this.underlay.mtu})`);
    const name = vtepName(cfg.vni);
    const base = { name, vni: cfg.vni, local: this.underlay.localIP.toString(), dev: this.underlay.dev, port: cfg.port, mtu };
    this.log(`network ${cfg.network}, subnets /${cfg.subnetLen} from ${cfg.subnetMin} to ${cfg.subnetMax}, VTEP ${name} port ${cfg.port} MTU ${mtu}`);

    // The VTEP's MAC is kept: the device's if it is reusable, else the one our lease advertises.
    const existing = await getLink(name, o.netns);
    const reusable = existing && !vxlanMismatch(existing, { ...base, mac: existing.mac });
    const acquired: Acquired = await this.retry('acquire a subnet lease', async () => {
      const { leases } = await this.store.list();
      const own = leases.find((l) => l.attrs.publicIP.equals(this.underlay.publicIP) && l.attrs.vtepMAC);
      const mac = reusable ? existing.mac : (own?.attrs.vtepMAC ?? randomVtepMac());
      this.attrs = { publicIP: this.underlay.publicIP, backendType: 'vxlan', vni: cfg.vni, vtepMAC: mac };
      try {
        return await acquireLease(this.store, cfg, this.attrs, { previous: this.previousSubnet(), ttlS: o.leaseTtlS, log: this.log });
      } catch (err) {
        if (err instanceof PoolFullError) throw new Error(`${err.message}; waiting for a lease to be released or to expire`);
        throw err;
      }
    });
    this.subnet = acquired.subnet;
    this.leaseValue = acquired.value;
    this.renewAt = Date.now() + (o.leaseTtlS - renewMarginS(o.leaseTtlS)) * 1000;
    this.spec = { ...base, mac: this.attrs.vtepMAC! };
    this.log(`lease ${this.subnet} (${acquired.how}), VtepMAC ${this.spec.mac}`);

    try {
      const r = await ensureVtep(this.spec, this.subnet.network.toString(), o.netns);
      if (r.replaced) this.log(`replaced the incompatible ${name}: ${r.replaced}`);
      else this.log(`${r.created ? 'created' : 'reusing'} VTEP ${name}`);
    } catch (err) {
      // Nothing half-done: a lease we just took is given back.
      if (acquired.how !== 'reused') await this.store.remove(this.subnet).catch(() => {});
      throw new Error(`cannot set up VTEP ${name}: ${(err as Error).message}`);
    }
    await this.sync('start'); // peers first: subnet.env (node ready for pods) is written after them
    this.stopWatch = this.store.watch(
      (why) => this.schedule(why),
      (err) => this.logOnce(`watch: ${err.message}`, 'watch'),
    );
    this.timer = setInterval(() => void this.tick(), o.reconcileMs);
    this.log(`running: ${this.peerCount()} peers programmed; reconciling every ${o.reconcileMs / 1000} s`);
  }

  private peerCount(): number {
    return desiredPeers(this.leases, this.self(), this.cfg.network).peers.length;
  }

  private self() {
    return { subnet: this.subnet, publicIP: this.underlay.publicIP, vni: this.cfg.vni };
  }

  private subnetEnv(): SubnetEnv {
    const first = Prefix.of(IP.fromBigInt(4, this.subnet.network.value + 1n), this.subnet.length);
    return { networks: [this.cfg.network], subnet: first, ipv6Networks: [], mtu: this.spec.mtu, ipMasq: this.opts.ipMasq };
  }

  private writeSubnetEnv(): void {
    const want = formatSubnetEnv(this.subnetEnv());
    if (readIfExists(this.opts.subnetFile) === want) return;
    writeSubnetEnv(this.opts.subnetFile, this.subnetEnv());
    this.log(`wrote ${this.opts.subnetFile}`);
  }

  private logOnce(msg: string, key: string): void {
    if (this.reported.has(`${key}\n${msg}`)) return;
    for (const k of this.reported) if (k.startsWith(`${key}\n`)) this.reported.delete(k);
    this.reported.add(`${key}\n${msg}`);
    this.log(msg);
  }

  private schedule(why: string): void {
    if (this.stopped) return;
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => void this.sync(why), 20);
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.store.expire?.();
    } catch (err) {
      this.logOnce(`cannot expire old leases: ${(err as Error).message}`, 'expire');
    }
    if (Date.now() >= this.renewAt) await this.renew();
    await this.sync('periodic reconcile');
  }

  private async renew(): Promise<void> {
    try {
      const ok = await this.store.renew(this.subnet, this.attrs, this.opts.leaseTtlS, this.leaseValue);
      if (!ok) {
        this.log(`cannot renew lease ${this.subnet}: it now holds another node's data`);
        return;
      }
      this.renewAt = Date.now() + (this.opts.leaseTtlS - renewMarginS(this.opts.leaseTtlS)) * 1000;
      this.reported.forEach((k) => k.startsWith('renew\n') && this.reported.delete(k));
      this.log(`renewed lease ${this.subnet} for ${this.opts.leaseTtlS} s`);
    } catch (err) {
      this.logOnce(`cannot renew lease ${this.subnet}: ${(err as Error).message}; retrying every ${this.opts.reconcileMs / 1000} s`, 'renew');
    }
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
      fresh = true;
      if (this.storeDown) this.log(`lease store ${this.store.description} is reachable again`);
      this.storeDown = false;
      for (const b of res.bad) this.logOnce(`ignoring ${b.key}: ${b.why}`, `bad ${b.key}`);
    } catch (err) {
      if (!this.storeDown) {
        this.log(`${err instanceof StoreUnavailable ? '' : 'cannot list leases: '}${(err as Error).message}; keeping the overlay as programmed`);
      }
      this.storeDown = true;
    }
    try {
      if (fresh) await this.checkOwnLease();
      const r = await ensureVtep(this.spec, this.subnet.network.toString(), o.netns);
      if (r.created) this.log(`VTEP ${this.spec.name} was missing (${why}): recreated`);
      if (r.replaced) this.log(`VTEP ${this.spec.name} had been changed (${r.replaced}): replaced`);
      try {
        const { peers, skipped } = desiredPeers(this.leases, this.self(), this.cfg.network);
        for (const s of skipped) this.logOnce(`ignoring ${s}`, `skip ${s.split(':')[0]}`);
        const plan = planPeers(peers, await readActual(this.spec.name, o.netns), this.spec.name, this.cfg.network);
        if (plan.changes.length) {
          await applyPlan(plan, o.netns);
          for (const c of plan.changes) this.log(`${c} (${why})`);
        }
      } finally {
        this.writeSubnetEnv(); // the VTEP is up: pods can be attached even if a peer failed to program
      }
    } catch (err) {
      this.log(`reconcile failed (${why}): ${(err as Error).message}`);
    }
  }

  /** Our lease must still be ours: re-created if it vanished (deleted by hand, expired while the store was down). */
  private async checkOwnLease(): Promise<void> {
    const ours = this.leases.find((l) => l.subnet.toString() === this.subnet.toString());
    if (ours && encodeAttrs(ours.attrs) === this.leaseValue) return;
    if (ours && !ours.attrs.publicIP.equals(this.underlay.publicIP)) {
      this.logOnce(`CONFLICT: subnet ${this.subnet} is now leased by ${ours.attrs.publicIP}; leaving it alone`, 'conflict');
      return;
    }
    const ok = ours
      ? await this.store.renew(this.subnet, this.attrs, this.opts.leaseTtlS, encodeAttrs(ours.attrs))
      : await this.store.create(this.subnet, this.attrs, this.opts.leaseTtlS);
    if (ok) {
      this.renewAt = Date.now() + (this.opts.leaseTtlS - renewMarginS(this.opts.leaseTtlS)) * 1000;
      this.log(`lease ${this.subnet} was ${ours ? 'changed' : 'gone'} in the store: written again`);
      const { leases } = await this.store.list();
      this.leases = leases;
    }
  }

  /** Stops timers and the watch; with releaseOnExit also gives back the lease and removes the VTEP and subnet.env. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.debounce);
    this.stopWatch?.();
    await this.running?.catch(() => {});
    if (this.opts.releaseOnExit && this.subnet) {
      try {
        await this.store.remove(this.subnet);
        this.log(`released lease ${this.subnet}`);
      } catch (err) {
        this.log(`cannot release lease ${this.subnet}: ${(err as Error).message}`);
      }
      await deleteLink(this.spec.name, this.opts.netns).catch((err) => this.log(`cannot delete ${this.spec.name}: ${(err as Error).message}`));
      removeFile(this.opts.subnetFile);
    }
    await this.store?.close();
  }

  get publicIP(): IP {
    return this.underlay.publicIP;
  }
}
