// The one model of the kernel-facing tools for unit tests: per namespace it
// keeps links (bridges, veths, VXLAN devices), addresses, routes, neighbours
// and FDB entries, and answers what the plugins and the flannel daemon run:
// `ip -batch` lines (the bridge plugin's, flannel's `-force` ones), the single
// `ip -json` shows the daemon reads, `bridge` FDB batches and shows. It
// records every command and every write to the host's /proc/sys, and can be
// told to fail a line; with a FakeFirewall attached it
// answers the firewall commands too. Installed with setRunner and setProcSys,
// so plugin and daemon logic run unchanged against it. Tests check the state
// it ends in, not the order of the lines that made it.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { setProcSys, setRunner, type ProcSys, type RunResult, type Runner } from '../../src/iproute/exec';
import { NSFS_MAGIC, setFsTypeOf, setNetnsRunDirs } from '../../src/iproute/netns';
import { setMonitorSpawn, type MonitorHandlers, type MonitorSpawn } from '../../src/iproute/monitor';
import { IP, Prefix } from '../../src/net/ip';
import type { FakeFirewall } from './fake-firewall';

export interface FakeLink {
  ifindex: number;
  name: string;
  kind: string;
  mtu: number;
  mac: string;
  up: boolean;
  promisc: boolean;
  master?: string;
  alias?: string;
  peer?: { ns: string; name: string };
  addrs: { local: string; prefixlen: number; family: string }[];
  slave: Record<string, unknown>;
  bridge: Record<string, unknown>;
  /** A VXLAN device's settings, as `ip -d` shows them. */
  vxlan?: { id: number; local: string; link: string; port: number; learning: boolean; gbp?: boolean };
}

export interface FakeRoute {
  dst: string;
  gateway?: string;
  /** None for a blackhole route. */
  dev?: string;
  /** Made with `onlink` (flannel's routes via a peer's VTEP address). */
  onlink?: true;
  type?: 'blackhole';
  metric?: number;
}

export interface FakeNeigh {
  dev: string;
  dst: string;
  lladdr: string;
}

export interface FakeFdb {
  dev: string;
  mac: string;
  dst: string;
}

/** A monitor child the daemon started on the fake kernel (`ip -4 monitor ...`, `bridge monitor fdb`). */
export interface FakeMonitor {
  argv: readonly string[];
  handlers: MonitorHandlers & { started(): void; exited(why: string): void };
  stopped: boolean;
}

export interface Recorded {
  argv: string[];
  input?: string;
  netns?: string;
}

let nextIndex = 100;
let macCounter = 1;
const newMac = () => `02:00:00:00:00:${(macCounter++ % 256).toString(16).padStart(2, '0')}`;

export class FakeKernel {
  readonly ns = new Map<string, Map<string, FakeLink>>([['', new Map()]]);
  readonly routes = new Map<string, FakeRoute[]>();
  private readonly neighs = new Map<string, FakeNeigh[]>();
  private readonly fdbs = new Map<string, FakeFdb[]>();
  /** Answers the firewall commands (iptables-save/-restore, nft) when set. */
  firewall?: FakeFirewall;
  readonly calls: Recorded[] = [];
  /** Holds a command until the promise it returns settles (a kernel, or a dump, that takes its time); undefined: at once. */
  gate?: (argv: string[]) => Promise<void> | undefined;
  /** `sysctl` processes run in other namespaces. */
  readonly sysctls: { netns?: string; settings: string[] }[] = [];
  /** The host's /proc/sys as written ("key=value", in order) and its current values. */
  readonly hostSysctls: string[] = [];
  readonly hostSysctlValues = new Map<string, string>();
  /**
   * Lines (joined with spaces, matched by substring) that fail with the given
   * message; host sysctl writes match as "key=value" with netns ''.
   */
  readonly failures: { match: string; msg: string; netns?: string }[] = [];
  /** Replies for non-ip programs (iptables-save, nft ...), by argv[0]. */
  readonly replies = new Map<string, (r: Recorded) => RunResult>();
  /** IPv6 DAD: an address listed here shows as tentative for `shows` reads, or as dadfailed. */
  readonly dad = new Map<string, { failed?: boolean; shows: number }>();
  private prev?: { runner: Runner; procSys: ProcSys; runDirs?: readonly string[]; fsType: (path: string) => number };
  /** `ip -n NAME` exits as ip does where it may not remount /sys for the namespace. */
  ipCannotEnter = false;
  /** With install({ netnsRunDir }): where `ip -n NAME` finds NAME (namespaces are files there). */
  private runDir?: string;
  /** The monitors started, running or not. */
  readonly monitors: FakeMonitor[] = [];
  /** Monitors started from now on end at once (a tool that cannot run). */
  monitorsFail = false;
  private prevSpawn?: MonitorSpawn;

  /**
   * `netnsRunDir`: namespaces that are files in this directory have a name
   * (`ip -n NAME`, `netns exec NAME` lines), as under /run/netns.
   */
  install(o: { netnsRunDir?: string } = {}): this {
    {
      // monitor children too: the daemon's `ip monitor` must never watch the machine's tables in a unit test
      this.prevSpawn = setMonitorSpawn((argv, handlers) => {
        const m: FakeMonitor = { argv, handlers, stopped: false };
        this.monitors.push(m);
        const fail = this.monitorsFail;
        queueMicrotask(() => !m.stopped && (fail ? this.endMonitor(m, `${argv[0]} monitor exited (status 1)`) : handlers.started()));
        return { stop: () => (m.stopped = true) };
      });
    }
    const procSys: ProcSys = {
      read: (path) => this.hostSysctlValues.get(path),
      write: (path, value) => {
        const text = `${path}=${value}`;
        const injected = this.failures.find((f) => text.includes(f.match) && (f.netns === undefined || f.netns === ''));
        if (injected) throw new Error(injected.msg);
        this.hostSysctls.push(text);
        this.hostSysctlValues.set(path, value);
      },
    };
    this.prev = {
      runner: setRunner(async (argv, input) => {
        await this.gate?.([...argv]);
        return this.run([...argv], input);
      }),
      procSys: setProcSys(procSys),
      runDirs: o.netnsRunDir ? setNetnsRunDirs([o.netnsRunDir]) : undefined,
      // the fake's namespaces are plain files: any file there is one (a missing one is missing, as for real)
      fsType: setFsTypeOf((path) => (statSync(path), NSFS_MAGIC)),
    };
    this.runDir = o.netnsRunDir;
    return this;
  }

  uninstall(): void {
    if (this.prevSpawn) setMonitorSpawn(this.prevSpawn);
    this.prevSpawn = undefined;
    if (!this.prev) return;
    setRunner(this.prev.runner);
    setProcSys(this.prev.procSys);
    if (this.prev.runDirs) setNetnsRunDirs(this.prev.runDirs);
    setFsTypeOf(this.prev.fsType);
  }

  links(netns = ''): Map<string, FakeLink> {
    let m = this.ns.get(netns);
    if (!m) this.ns.set(netns, (m = new Map()));
    return m;
  }

  /** The routes of a namespace (the array itself: tests may change it). */
  routesIn(netns = ''): FakeRoute[] {
    let r = this.routes.get(netns);
    if (!r) this.routes.set(netns, (r = []));
    return r;
  }

  neigh(netns = ''): FakeNeigh[] {
    let n = this.neighs.get(netns);
    if (!n) this.neighs.set(netns, (n = []));
    return n;
  }

  fdb(netns = ''): FakeFdb[] {
    let f = this.fdbs.get(netns);
    if (!f) this.fdbs.set(netns, (f = []));
    return f;
  }

  /** A node on the underlay eth0 (192.168.88.1/24): what the daemon's and the backends' tests start from. Not installed yet. */
  static withUnderlay(): FakeKernel {
    const kernel = new FakeKernel();
    kernel.links().set('eth0', FakeKernel.link({ name: 'eth0', kind: 'veth', mtu: 1500, mac: '52:54:00:00:00:01', addrs: [{ family: 'inet', local: '192.168.88.1', prefixlen: 24 }] }));
    return kernel;
  }

  /** A link as a test puts it in place by hand (the rest of FakeLink filled in). */
  static link(l: Pick<FakeLink, 'name' | 'mtu' | 'mac'> & Partial<FakeLink>): FakeLink {
    return { ifindex: nextIndex++, kind: l.vxlan ? 'vxlan' : 'dummy', up: true, promisc: false, addrs: [], slave: {}, bridge: {}, ...l };
  }

  /** The monitors running now. */
  running(): FakeMonitor[] {
    return this.monitors.filter((m) => !m.stopped);
  }

  /** A monitor that ends on its own (killed): it is told so, as a real child's exit is. */
  endMonitor(m: FakeMonitor, why = 'ip monitor exited (SIGKILL)'): void {
    m.stopped = true;
    m.handlers.exited(why);
  }

  /** A change made by hand in the host namespace (`ip ...` or `bridge ...` argv), as an operator would run it; throws what it failed with. */
  byHand(argv: string[]): void {
    const r = argv[0] === 'ip' ? this.ipSingle(argv, '') : this.bridgeCmd([...argv.slice(0, 1), '-batch', '-'], argv.slice(1).join(' '), '');
    if (r.code !== 0) throw new Error(r.stderr);
  }

  /** What the kernel tells the running monitors of a change in the host namespace, as iproute2 6.1 prints it. */
  private emit(kind: 'neigh' | 'route' | 'fdb', deleted: boolean, text: string, netns: string, family: 4 | 6 = 4): void {
    if (netns !== '') return;
    for (const m of this.running()) {
      const isBridge = m.argv[0] === 'bridge';
      if (kind === 'fdb' ? !isBridge : isBridge || !m.argv.includes(`-${family}`)) continue;
      const label = kind === 'fdb' ? '' : kind === 'neigh' ? '[NEIGH]' : '[ROUTE]';
      m.handlers.line(`${label}${deleted ? 'Deleted ' : ''}${text}`);
    }
  }

  private emitRoute(r: FakeRoute, deleted: boolean, netns: string): void {
    if (r.type) return;
    const family = (r.dst === 'default' ? (r.gateway ?? '') : r.dst).includes(':') ? 6 : 4;
    this.emit('route', deleted, `${r.dst}${r.gateway ? ` via ${r.gateway}` : ''} dev ${r.dev}${r.onlink ? ' onlink' : ''}`, netns, family);
  }

  private emitNeigh(n: FakeNeigh, deleted: boolean, netns: string): void {
    this.emit('neigh', deleted, `${n.dst} dev ${n.dev} lladdr ${n.lladdr} PERMANENT`, netns, n.dst.includes(':') ? 6 : 4);
  }

  private emitFdb(f: FakeFdb, deleted: boolean, netns: string): void {
    this.emit('fdb', deleted, `${f.mac} dev ${f.dev} dst ${f.dst} self permanent`, netns);
  }

  /** Every batch line sent to `ip`, with its namespace ('' = host). */
  ipLines(): { netns: string; line: string }[] {
    return this.calls
      .filter((c) => c.argv[0] === 'ip' && c.input)
      .flatMap((c) => c.input!.trim().split('\n').map((line) => ({ netns: c.netns ?? '', line })));
  }

  private run(full: string[], input?: string): RunResult {
    let argv = full;
    let netns: string | undefined;
    if (argv[0] === 'nsenter') {
      netns = argv[1].replace('--net=', '');
      argv = argv.slice(3);
    } else if (argv[0] === 'ip' && argv[1] === '-n') {
      if (this.ipCannotEnter) {
        this.calls.push({ argv: full, input });
        return { stdout: '', stderr: 'mount of /sys failed: Permission denied\n', code: 255 };
      }
      netns = this.named(argv[2]);
      argv = ['ip', ...argv.slice(3)];
    }
    const rec: Recorded = { argv, input, netns };
    this.calls.push(rec);
    const fw = this.firewall?.run(argv, input);
    if (fw) return fw;
    if (argv[0] === 'ip') return argv.includes('-batch') ? this.ipBatch(argv, input ?? '', netns ?? '') : this.ipSingle(argv, netns ?? '');
    if (argv[0] === 'sysctl') {
      this.sysctls.push({ netns, settings: argv.filter((a) => a.includes('=')) });
      return { stdout: '', stderr: '', code: 0 };
    }
    const reply = this.replies.get(argv[0]);
    if (reply) return reply(rec);
    if (argv[0] === 'bridge') return this.bridgeCmd(argv, input ?? '', netns ?? '');
    return { stdout: '', stderr: '', code: 0 };
  }

  /** The namespace path of a name (`ip -n NAME`). */
  private named(name: string): string {
    if (!this.runDir) throw new Error(`fake kernel: ip -n ${name} without a netnsRunDir`);
    return join(this.runDir, name);
  }

  /** One `ip` command without a batch: a show, or one change as a batch line would make it. */
  private ipSingle(argv: string[], netns: string): RunResult {
    const w = argv.slice(1).filter((a) => !a.startsWith('-'));
    if (w[1] === 'show') return this.ipShow(argv, netns);
    const injected = this.failures.find((f) => w.join(' ').includes(f.match) && (f.netns === undefined || f.netns === netns));
    try {
      if (injected) throw new Error(injected.msg);
      this.line(w, netns);
      return { stdout: '', stderr: '', code: 0 };
    } catch (err) {
      return { stdout: '', stderr: `${(err as Error).message}\n`, code: 2 };
    }
  }

  /** One `ip [-json] [-details] [-4|-6] OBJECT show ...`: the shows the flannel daemon reads. */
  private ipShow(argv: string[], netns: string): RunResult {
    const family = argv.includes('-4') ? 4 : argv.includes('-6') ? 6 : undefined;
    const w = argv.slice(1).filter((a) => !a.startsWith('-'));
    const opt = (key: string) => (w.includes(key) ? w[w.indexOf(key) + 1] : undefined);
    const ofFamily = (addr: string) => family === undefined || (addr.includes(':') ? 6 : 4) === family;
    const links = this.links(netns);
    const dev = opt('dev');
    if (dev !== undefined && !links.has(dev)) {
      return { stdout: '', stderr: w[0] === 'addr' || w[0] === 'link' ? `Device "${dev}" does not exist.\n` : `Cannot find device "${dev}"\n`, code: 1 };
    }
    const json = (v: unknown): RunResult => ({ stdout: JSON.stringify(v), stderr: '', code: 0 });
    if ((w[0] === 'addr' || w[0] === 'link') && w[1] === 'show') return json([...links.values()].filter((l) => !dev || l.name === dev).map((l) => this.show(l, netns)));
    if (w[0] === 'neigh' && w[1] === 'show') {
      return json(this.neigh(netns).filter((n) => (!dev || n.dev === dev) && ofFamily(n.dst)).map((n) => ({ dst: n.dst, ...(dev ? {} : { dev: n.dev }), lladdr: n.lladdr, state: ['PERMANENT'] })));
    }
    if (w[0] === 'route' && w[1] === 'show') {
      const root = opt('root') && Prefix.parse(opt('root')!)!;
      const type = opt('type');
      const routes = this.routesIn(netns).filter((r) =>
        (!dev || r.dev === dev) && (!type || r.type === type) && (!root || (r.dst !== 'default' && root.contains(Prefix.parse(r.dst)!.network))));
      return json(routes.filter((r) => ofFamily(r.dst === 'default' ? (r.gateway ?? '') : r.dst)).map((r) => ({
        ...(r.type ? { type: r.type } : {}), dst: r.dst, ...(r.gateway ? { gateway: r.gateway } : {}), ...(dev || !r.dev ? {} : { dev: r.dev }),
        ...(r.metric !== undefined ? { metric: r.metric } : {}), flags: r.onlink ? ['onlink'] : [],
      })));
    }
    return { stdout: '', stderr: `fake kernel: unsupported command ${argv.join(' ')}\n`, code: 1 };
  }

  /** `bridge -batch` (FDB lines; VLAN lines are accepted as they are) and `bridge -json fdb show dev X`. */
  private bridgeCmd(argv: string[], input: string, netns: string): RunResult {
    const links = this.links(netns);
    if (!argv.includes('-batch')) {
      const w = argv.slice(1).filter((a) => !a.startsWith('-'));
      if (w[0] !== 'fdb' || w[1] !== 'show') return { stdout: '', stderr: '', code: 0 };
      const dev = w[w.indexOf('dev') + 1];
      if (!links.has(dev)) return { stdout: '', stderr: `Cannot find device "${dev}"\n`, code: 1 };
      return { stdout: JSON.stringify(this.fdb(netns).filter((f) => f.dev === dev).map((f) => ({ mac: f.mac, dst: f.dst, flags: ['self'], state: 'permanent' }))), stderr: '', code: 0 };
    }
    let stderr = '';
    const force = argv.includes('-force');
    for (const [i, line] of input.trim().split('\n').filter(Boolean).entries()) {
      const w = line.split(' ');
      const injected = this.failures.find((f) => line.includes(f.match) && (f.netns === undefined || f.netns === netns));
      let err = injected?.msg;
      if (!err && w[0] === 'fdb') {
        const dev = w[w.indexOf('dev') + 1];
        const dst = w.includes('dst') ? w[w.indexOf('dst') + 1] : undefined;
        if (!links.has(dev)) err = `Cannot find device "${dev}"`;
        else {
          const gone = (f: FakeFdb) => f.dev === dev && f.mac === w[2] && (w[1] === 'replace' || dst === undefined || f.dst === dst);
          const kept = this.fdb(netns).filter((f) => !gone(f));
          // a replace rewrites the entry in place: the kernel reports the new one only
          if (w[1] !== 'replace') for (const f of this.fdb(netns).filter(gone)) this.emitFdb(f, true, netns);
          if (w[1] === 'replace') kept.push({ dev, mac: w[2], dst: dst! });
          this.fdbs.set(netns, kept);
          if (w[1] === 'replace') this.emitFdb({ dev, mac: w[2], dst: dst! }, false, netns);
        }
      }
      if (err) {
        stderr += `${err}\nCommand failed -:${i + 1}\n`;
        if (!force) break;
      }
    }
    return { stdout: '', stderr, code: stderr ? 1 : 0 };
  }

  /** The link whose addresses' subnet holds `gateway` (where a route without `dev` goes). */
  private linkOnSubnetOf(gateway: string, netns: string): string | undefined {
    const ip = IP.parse(gateway);
    for (const l of this.links(netns).values()) {
      if (ip && l.addrs.some((a) => Prefix.parse(`${a.local}/${a.prefixlen}`)?.contains(ip))) return l.name;
    }
    return undefined;
  }

  private ipBatch(argv: string[], input: string, netns: string): RunResult {
    const json = argv.includes('-json');
    // Without -force, ip stops at the first failing line.
    const force = argv.includes('-force');
    let stdout = '';
    let stderr = '';
    let failed = false;
    for (const [i, text] of input.trim().split('\n').entries()) {
      const injected = this.failures.find((f) => text.includes(f.match) && (f.netns === undefined || f.netns === netns));
      let out: string | undefined;
      try {
        if (injected) throw new Error(injected.msg);
        out = this.line(text.split(' '), netns);
      } catch (err) {
        failed = true;
        stderr += `${(err as Error).message}\nCommand failed -:${i + 1}\n`;
        if (force) continue;
        break;
      }
      if (out !== undefined && json) stdout += out + '\n';
    }
    return { stdout, stderr, code: failed ? 1 : 0 };
  }

  private line(w: string[], netns: string): string | undefined {
    const links = this.links(netns);
    const opt = (key: string) => {
      const i = w.indexOf(key);
      return i >= 0 ? w[i + 1] : undefined;
    };
    const dev = () => {
      const name = opt('dev') ?? opt('name')!;
      const l = links.get(name);
      if (!l) throw new Error(`Cannot find device "${name}"`);
      return l;
    };
    const [obj, verb] = w;
    if (obj === 'netns' && verb === 'exec' && w[3] === 'sysctl') {
      this.sysctls.push({ netns: this.named(w[2]), settings: w.filter((a) => a.includes('=')) });
      return undefined;
    }
    if (obj === 'link' && verb === 'add') {
      const typeAt = w.indexOf('type');
      const name = opt('name')!;
      if (links.has(name)) throw new Error('RTNETLINK answers: File exists');
      const kind = w[typeAt + 1];
      const head = w.slice(0, typeAt);
      const mk = (n: string, words: string[]): FakeLink => ({
        ifindex: nextIndex++,
        name: n,
        kind,
        mtu: Number(words[words.indexOf('mtu') + 1]) || 1500,
        mac: words.includes('address') ? words[words.indexOf('address') + 1] : newMac(),
        up: words.includes('up'),
        promisc: false,
        addrs: [],
        slave: {},
        bridge: kind === 'bridge' ? { vlan_filtering: w.includes('vlan_filtering') ? 1 : 0, vlan_default_pvid: 1 } : {},
      });
      const link = mk(name, head);
      if (kind === 'vxlan') {
        const tail = w.slice(typeAt + 2);
        const at = (k: string) => tail[tail.indexOf(k) + 1];
        link.vxlan = { id: Number(at('id')), local: at('local'), link: at('dev'), port: Number(at('dstport')), learning: !tail.includes('nolearning'), ...(tail.includes('gbp') ? { gbp: true } : {}) };
      }
      const master = head.includes('master') ? head[head.indexOf('master') + 1] : undefined;
      if (master) {
        if (links.get(master)?.kind !== 'bridge') throw new Error(`Device "${master}" does not exist.`);
        link.master = master;
      }
      if (kind === 'veth') {
        const tail = w.slice(w.indexOf('peer') + 1);
        const peerName = tail[tail.indexOf('name') + 1];
        const peerNs = tail.includes('netns') ? tail[tail.indexOf('netns') + 1] : netns;
        const peerLinks = this.links(peerNs);
        if (peerLinks.has(peerName)) throw new Error('RTNETLINK answers: File exists');
        const peer = mk(peerName, tail);
        peer.up = false;
        peer.peer = { ns: netns, name };
        link.peer = { ns: peerNs, name: peerName };
        peerLinks.set(peerName, peer);
      }
      links.set(name, link);
      return undefined;
    }
    if (obj === 'link' && verb === 'set') {
      const l = dev();
      if (w.includes('type')) {
        const t = w[w.indexOf('type') + 1];
        const rest = w.slice(w.indexOf('type') + 2);
        if (t === 'bridge_slave') {
          if (!l.master) throw new Error('RTNETLINK answers: Operation not supported');
          for (let i = 0; i < rest.length; i += 2) l.slave[rest[i]] = rest[i + 1] === 'on';
        } else if (t === 'bridge') {
          for (let i = 0; i < rest.length; i += 2) l.bridge[rest[i]] = Number(rest[i + 1]);
        }
        return undefined;
      }
      if (w.includes('up')) l.up = true;
      if (w.includes('down')) l.up = false;
      if (w.includes('promisc')) l.promisc = opt('promisc') === 'on';
      if (w.includes('master')) l.master = opt('master');
      if (w.includes('nomaster')) l.master = undefined;
      if (w.includes('address')) l.mac = opt('address')!;
      if (w.includes('alias')) l.alias = opt('alias');
      if (w.includes('mtu')) l.mtu = Number(opt('mtu'));
      return undefined;
    }
    if (obj === 'link' && verb === 'show' && w.includes('master')) {
      const master = opt('master')!;
      if (!links.has(master)) throw new Error(`Error: argument "${master}" is wrong: Device does not exist`);
      const kind = opt('type');
      return JSON.stringify([...links.values()].filter((l) => l.master === master && (!kind || l.kind === kind)).map((l) => this.show(l, netns)));
    }
    if (obj === 'link' && verb === 'del') {
      const l = dev();
      links.delete(l.name);
      if (l.peer) this.links(l.peer.ns).delete(l.peer.name);
      // what hangs on the device goes with it
      for (const r of this.routesIn(netns).filter((r) => r.dev === l.name)) this.emitRoute(r, true, netns);
      for (const n of this.neigh(netns).filter((n) => n.dev === l.name)) this.emitNeigh(n, true, netns);
      for (const f of this.fdb(netns).filter((f) => f.dev === l.name)) this.emitFdb(f, true, netns);
      this.routes.set(netns, this.routesIn(netns).filter((r) => r.dev !== l.name));
      this.neighs.set(netns, this.neigh(netns).filter((n) => n.dev !== l.name));
      this.fdbs.set(netns, this.fdb(netns).filter((f) => f.dev !== l.name));
      return undefined;
    }
    if (obj === 'neigh' && (verb === 'replace' || verb === 'del')) {
      const name = dev().name;
      const here = (n: FakeNeigh) => n.dev === name && n.dst === w[2];
      if (verb === 'del' && !this.neigh(netns).some(here)) throw new Error('RTNETLINK answers: No such file or directory');
      const kept = this.neigh(netns).filter((n) => !here(n));
      if (verb === 'del') for (const n of this.neigh(netns).filter(here)) this.emitNeigh(n, true, netns);
      if (verb === 'replace') kept.push({ dev: name, dst: w[2], lladdr: opt('lladdr')! });
      this.neighs.set(netns, kept);
      if (verb === 'replace') this.emitNeigh(kept.at(-1)!, false, netns);
      return undefined;
    }
    if (obj === 'route' && w[2] === 'blackhole' && (verb === 'add' || verb === 'del')) {
      const routes = this.routesIn(netns);
      const metric = opt('metric') === undefined ? undefined : Number(opt('metric'));
      const at = routes.findIndex((r) => r.type === 'blackhole' && r.dst === w[3] && r.metric === metric);
      if (verb === 'add') {
        if (at >= 0) throw new Error('RTNETLINK answers: File exists');
        routes.push({ type: 'blackhole', dst: w[3], ...(metric !== undefined ? { metric } : {}) });
      } else {
        if (at < 0) throw new Error('RTNETLINK answers: No such process');
        routes.splice(at, 1);
      }
      return undefined;
    }
    if (obj === 'route' && (verb === 'replace' || verb === 'del')) {
      const via = opt('via');
      const name = opt('dev') ?? (via && this.linkOnSubnetOf(via, netns));
      if (!name) throw new Error('Error: Nexthop has invalid gateway.');
      if (!links.has(name)) throw new Error(`Cannot find device "${name}"`);
      const routes = this.routesIn(netns);
      const same = (r: FakeRoute) => r.dst === w[2] && r.dev === name;
      if (verb === 'del' && !routes.some(same)) throw new Error('RTNETLINK answers: No such process');
      const kept = routes.filter((r) => !(verb === 'replace' ? r.dst === w[2] : same(r)));
      if (verb === 'del') for (const r of routes.filter(same)) this.emitRoute(r, true, netns);
      if (verb === 'replace') kept.push({ dst: w[2], ...(via ? { gateway: via } : {}), dev: name, ...(w.includes('onlink') ? { onlink: true as const } : {}) });
      this.routes.set(netns, kept);
      if (verb === 'replace') this.emitRoute(kept.at(-1)!, false, netns);
      return undefined;
    }
    if (obj === 'addr' && (verb === 'add' || verb === 'replace' || verb === 'del')) {
      const l = dev();
      const [local, len] = w[2].split('/');
      const have = l.addrs.findIndex((a) => a.local === local && a.prefixlen === Number(len));
      if (verb === 'del') {
        if (have < 0) throw new Error('RTNETLINK answers: Cannot assign requested address');
        l.addrs.splice(have, 1);
      } else if (have >= 0) {
        if (verb === 'add') throw new Error('RTNETLINK answers: File exists');
      } else l.addrs.push({ local, prefixlen: Number(len), family: local.includes(':') ? 'inet6' : 'inet' });
      return undefined;
    }
    if (obj === 'route' && verb === 'append') {
      const name = opt('dev')!;
      if (!links.has(name)) throw new Error(`Cannot find device "${name}"`);
      const list = this.routes.get(netns) ?? [];
      const dst = w[2] === '0.0.0.0/0' || w[2] === '::/0' ? 'default' : w[2];
      list.push({ dst, gateway: opt('via'), dev: name });
      this.routes.set(netns, list);
      return undefined;
    }
    if (obj === 'addr' && verb === 'show') return JSON.stringify(opt('dev') ? [this.show(dev(), netns)] : [...links.values()].map((l) => this.show(l, netns)));
    if (obj === 'route' && verb === 'show') return JSON.stringify(this.routes.get(netns) ?? []);
    throw new Error(`fake kernel: unsupported line ${w.join(' ')}`);
  }

  private show(l: FakeLink, netns: string): Record<string, unknown> {
    const peer = l.peer ? this.links(l.peer.ns).get(l.peer.name) : undefined;
    return {
      ifindex: l.ifindex,
      ifname: l.name,
      flags: [...(l.up ? ['UP'] : []), ...(l.promisc ? ['PROMISC'] : [])],
      mtu: l.mtu,
      ...(l.master ? { master: l.master } : {}),
      ...(l.alias !== undefined ? { ifalias: l.alias } : {}),
      address: l.mac,
      ...(peer ? { link_index: peer.ifindex, ...(l.peer!.ns !== netns ? { link_netnsid: 0 } : {}) } : {}),
      linkinfo: {
        info_kind: l.kind,
        ...(l.kind === 'bridge' ? { info_data: l.bridge } : {}),
        ...(l.vxlan ? { info_data: l.vxlan } : {}),
        ...(l.master ? { info_slave_kind: 'bridge', info_slave_data: l.slave } : {}),
      },
      addr_info: l.addrs.map((a) => {
        const d = this.dad.get(a.local);
        if (!d) return { ...a, scope: 'global' };
        if (d.failed) return { ...a, scope: 'global', tentative: true, dadfailed: true };
        if (d.shows-- > 0) return { ...a, scope: 'global', tentative: true };
        return { ...a, scope: 'global' };
      }),
    };
  }
}
