// A small cluster on one machine for the vxlan-flannel tests: an underlay
// bridge in its own namespace, "node" namespaces joined to it by veths (each
// running the daemon, with the VTEP created inside it), an optional etcd in
// its own namespace on the underlay, and pod namespaces attached through the
// CNI plugin run inside the node namespace, as a runtime on that node would.
// Nothing touches the machine's own interfaces; cleanup() removes every
// namespace, process and temp dir, also after a failure.
//
// A host added with `ownFiles` also gets a mount namespace of its own in
// which the node's well-known directories (/run/flannel, /var/lib/cni,
// /etc/cni/net.d, /etc/kube-flannel, the service account directory) are
// directories of the test's temp dir: its daemon and plugins run with their
// default paths, as on a real node, without seeing another node's files or
// the machine's. Such a directory missing on the machine is made as an empty
// mount point and removed again by cleanup().
import { afterEach } from 'vitest';
import { ChildProcess, spawn, execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmdirSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { OUR_BIN, ROOT, makeNetns, removeNetns, runIn, runProcess, sh, tempDir, type PluginRun } from './helpers';
import { waitFor } from '../support/wait';
import { Prefix } from '../../src/net/ip';
import { DEFAULT_SUBNET_FILE } from '../../src/flannel/subnet-env';

export const FLANNEL = join(OUR_BIN, 'vxlan-flannel');
/**
 * The bridge delegate: ours, bin/bridge (FLANNEL_TEST_BRIDGE may name another,
 * e.g. Debian's /usr/lib/cni/bridge, whose v1.1.1 CHECK and GC have known bugs).
 * Which one ran is printed.
 */
export const BRIDGE = process.env.FLANNEL_TEST_BRIDGE ?? join(OUR_BIN, 'bridge');

export const UNDERLAY_PREFIX = '192.168.88';
/** Every host also has an IPv6 underlay address, fd88:88::<octet>/64 (a ULA, inside the test namespaces only). */
export const UNDERLAY6_PREFIX = 'fd88:88::';
export const ETCD_IP = `${UNDERLAY_PREFIX}.100`;
export const NETWORK = '10.88.0.0/16';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Makes a failed test print the daemons' recent log lines (timing failures are
 * otherwise opaque). `daemons` is read when a test fails: the handles assigned by then.
 */
export function printDaemonLogsOnFailure(daemons: () => Record<string, DaemonHandle | undefined>): void {
  afterEach((ctx) => {
    if (ctx.task.result?.state !== 'fail') return;
    for (const [name, d] of Object.entries(daemons())) {
      if (d) process.stdout.write(`--- ${name} log (last 40 lines)\n${d.log().split('\n').slice(-40).join('\n')}\n`);
    }
  });
}

export interface Host {
  name: string;
  ns: string;
  path: string;
  ip: string;
  /** The IPv6 underlay address. */
  ip6: string;
  /** `ownFiles`: its mount namespace (a bind-mounted nsfs file) and the temp dir holding its NODE_DIRS. */
  mnt?: string;
  root?: string;
}

/** The directories a host with `ownFiles` has to itself (see the top of this file). */
export const NODE_DIRS = ['/run/flannel', '/var/lib/cni', '/etc/cni/net.d', '/etc/kube-flannel', '/var/run/secrets/kubernetes.io/serviceaccount'];

/** argv that runs the rest inside a host's network namespace (and mount namespace, if it has its own). */
export function enter(host: Pick<Host, 'path' | 'mnt'>): string[] {
  return ['nsenter', `--net=${host.path}`, ...(host.mnt ? [`--mount=${host.mnt}`] : []), '--'];
}

/** Where a file a host sees at `path` (under one of NODE_DIRS) is, seen from the test. */
export function fileOf(host: Host, path: string): string {
  if (!host.root) return path;
  const dir = NODE_DIRS.find((d) => path === d || path.startsWith(`${d}/`));
  if (!dir) throw new Error(`${path} is not one of ${host.name}'s own directories`);
  return join(host.root, path);
}

export interface DaemonHandle {
  node: Host;
  proc: ChildProcess;
  logFile: string;
  subnetFile: string;
  log(): string;
  exited: Promise<number | null>;
}

export interface Pod {
  name: string;
  ns: string;
  path: string;
  node: Host;
  id: string;
  /** Its IPv4 address (its IPv6 one on an IPv6-only overlay). */
  ip: string;
  /** Its IPv6 address, when the overlay has IPv6. */
  ip6?: string;
  /** The ADD result, the prevResult of a CHECK. */
  result: any;
}

export type RunResult = PluginRun;


export class Topology {
  readonly tmp: { path: string; remove: () => void };
  readonly ul: string;
  readonly cniBin: string;
  private readonly namespaces: string[] = [];
  private readonly procs: ChildProcess[] = [];
  private etcd?: ChildProcess;
  /** Bind mounts on the machine (the mount namespace files, their private directory), unmounted by cleanup(). */
  private readonly mounts: string[] = [];
  /** Mount points made on the machine for NODE_DIRS, removed by cleanup() (deepest first). */
  private readonly madeDirs: string[] = [];
  readonly hosts = new Map<string, Host>();
  private podSeq = 0;

  constructor(readonly prefix: string) {
    if (!existsSync(BRIDGE)) throw new Error(`bridge delegate ${BRIDGE} does not exist`);
    process.stdout.write(`[${prefix}] delegate bridge plugin: ${BRIDGE}\n`);
    this.tmp = tempDir(`flannel-${prefix}`);
    this.ul = `${prefix}-ul`;
    this.cniBin = join(this.tmp.path, 'cni-bin');
    try {
      mkdirSync(this.cniBin);
      symlinkSync(BRIDGE, join(this.cniBin, 'bridge'));
      symlinkSync(join(OUR_BIN, 'host-local'), join(this.cniBin, 'host-local'));
      symlinkSync(FLANNEL, join(this.cniBin, 'vxlan-flannel'));
      this.netns(this.ul);
      this.ip(this.ul, 'link add br0 type bridge');
      this.ip(this.ul, 'link set br0 up');
    } catch (err) {
      void this.cleanup(); // nothing may stay behind when set-up itself fails
      throw err;
    }
  }

  /** A network namespace of the test (removed by cleanup()); returns its path. */
  netns(name: string): string {
    const ns = makeNetns(name);
    this.namespaces.push(name);
    return ns.path;
  }

  ip(ns: string, args: string): string {
    return sh(['ip', '-n', ns, ...args.split(' ')]);
  }

  sysctl(ns: string, key: string, value: string): void {
    sh(['nsenter', `--net=/var/run/netns/${ns}`, '--', 'sh', '-c', `echo ${value} > /proc/sys/${key.replace(/\./g, '/')}`]);
  }

  /**
   * A host on the underlay: a namespace with eth0 at 192.168.88.<octet> and
   * fd88:88::<octet> (no DAD: ready at once), forwarding on (IPv6 forwarding
   * left off with `ipv6Forwarding: false`, for the daemon to turn on), rp_filter off.
   */
  addHost(name: string, octet: number, mtu = 1500, opts: { ipv6Forwarding?: boolean; ownFiles?: boolean } = {}): Host {
    const ns = `${this.prefix}-${name}`;
    const path = this.netns(ns);
    const peer = `${this.prefix}${name}`;
    sh(['ip', 'link', 'add', 'eth0', 'netns', ns, 'mtu', String(mtu), 'type', 'veth', 'peer', 'name', peer, 'netns', this.ul, 'mtu', String(mtu)]);
    this.ip(this.ul, `link set ${peer} master br0 up`);
    this.ip(ns, `addr add ${UNDERLAY_PREFIX}.${octet}/24 dev eth0`);
    this.ip(ns, `addr add ${UNDERLAY6_PREFIX}${octet.toString(16)}/64 dev eth0 nodad`);
    this.ip(ns, 'link set eth0 up');
    this.sysctl(ns, 'net.ipv4.ip_forward', '1');
    this.sysctl(ns, 'net.ipv6.conf.all.forwarding', opts.ipv6Forwarding === false ? '0' : '1');
    this.sysctl(ns, 'net.ipv4.conf.all.rp_filter', '0');
    this.sysctl(ns, 'net.ipv4.conf.default.rp_filter', '0');
    const host: Host = { name, ns, path, ip: `${UNDERLAY_PREFIX}.${octet}`, ip6: `${UNDERLAY6_PREFIX}${octet.toString(16)}` };
    if (opts.ownFiles) Object.assign(host, this.ownFiles(name));
    this.hosts.set(name, host);
    return host;
  }

  /**
   * A mount namespace for host `name` with NODE_DIRS bound to directories of
   * the temp dir. It is a slave of the machine's (new /run/netns entries, the
   * pods', show up in it), and its own mounts stay in it. The nsfs file that
   * keeps it must sit on a private mount: a directory bound onto itself.
   */
  private ownFiles(name: string): { mnt: string; root: string } {
    const nsDir = join(this.tmp.path, 'mntns');
    if (!this.mounts.includes(nsDir)) {
      mkdirSync(nsDir);
      sh(['mount', '--bind', nsDir, nsDir]);
      this.mounts.push(nsDir);
      sh(['mount', '--make-private', nsDir]);
    }
    const mnt = join(nsDir, name);
    writeFileSync(mnt, '');
    sh(['unshare', `--mount=${mnt}`, '--propagation', 'slave', 'true']);
    this.mounts.push(mnt);
    const root = join(this.tmp.path, name, 'root');
    for (const dir of NODE_DIRS) {
      for (let d = dir, missing: string[] = []; ; d = join(d, '..')) {
        if (existsSync(d)) {
          for (const m of missing.reverse()) {
            mkdirSync(m);
            this.madeDirs.push(m);
          }
          break;
        }
        missing.push(d);
      }
      mkdirSync(join(root, dir), { recursive: true });
      sh(['nsenter', `--mount=${mnt}`, '--', 'mount', '--bind', join(root, dir), dir]);
    }
    return { mnt, root };
  }

  /** etcd in its own namespace on the underlay, with a temp data dir. */
  async startEtcd(): Promise<string> {
    const host = this.hosts.get('etcd') ?? this.addHost('etcd', 100);
    const dataDir = join(this.tmp.path, 'etcd-data');
    const endpoint = `http://${host.ip}:2379`;
    const log = openSync(join(this.tmp.path, 'etcd.log'), 'a');
    this.etcd = spawn(
      'nsenter',
      [`--net=${host.path}`, '--', '/usr/bin/etcd', '--name', 'fltest', '--data-dir', dataDir,
        '--listen-client-urls', endpoint, '--advertise-client-urls', endpoint,
        '--listen-peer-urls', 'http://127.0.0.1:2380', '--initial-advertise-peer-urls', 'http://127.0.0.1:2380',
        '--initial-cluster', 'fltest=http://127.0.0.1:2380', '--log-level', 'warn'],
      { stdio: ['ignore', log, log] },
    );
    closeSync(log);
    this.procs.push(this.etcd);
    await waitFor('etcd to answer', async () => (await this.etcdctl(['endpoint', 'health'])).code === 0, 30_000, 200);
    return endpoint;
  }

  /**
   * A second etcd that speaks only TLS and requires a client certificate
   * (--client-cert-auth), on host `name` at 192.168.88.<octet>, with a throwaway
   * CA, server and client certificate made by openssl in the temp dir.
   * Returns its endpoint and the PEM files.
   */
  async startTlsEtcd(name: string, octet: number): Promise<{ endpoint: string; host: Host; ca: string; cert: string; key: string }> {
    const host = this.addHost(name, octet);
    const dir = join(this.tmp.path, `${name}-pki`);
    mkdirSync(dir);
    const f = (n: string) => join(dir, n);
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    sh(['openssl', 'req', '-x509', ...ec, '-keyout', f('ca-key.pem'), '-out', f('ca.pem'), '-days', '1', '-subj', '/CN=fltest-ca']);
    // The server's certificate also allows client authentication, as kubeadm's etcd certificates do: with
    // --client-cert-auth, etcd's JSON gateway (what our client speaks) connects to its own gRPC server with it.
    for (const [who, ext] of [['server', `subjectAltName=IP:${host.ip}\nextendedKeyUsage=serverAuth,clientAuth\n`], ['client', 'extendedKeyUsage=clientAuth\n']]) {
      writeFileSync(f(`${who}.ext`), ext);
      sh(['openssl', 'req', ...ec, '-keyout', f(`${who}-key.pem`), '-out', f(`${who}.csr`), '-subj', `/CN=fltest-${who}`]);
      sh(['openssl', 'x509', '-req', '-in', f(`${who}.csr`), '-CA', f('ca.pem'), '-CAkey', f('ca-key.pem'), '-CAcreateserial', '-days', '1', '-out', f(`${who}.pem`), '-extfile', f(`${who}.ext`)]);
    }
    const endpoint = `https://${host.ip}:2379`;
    const log = openSync(join(this.tmp.path, `${name}.log`), 'a');
    const proc = spawn(
      'nsenter',
      [`--net=${host.path}`, '--', '/usr/bin/etcd', '--name', 'fltls', '--data-dir', join(this.tmp.path, `${name}-data`),
        '--listen-client-urls', endpoint, '--advertise-client-urls', endpoint,
        '--cert-file', f('server.pem'), '--key-file', f('server-key.pem'), '--client-cert-auth', '--trusted-ca-file', f('ca.pem'),
        '--listen-peer-urls', 'http://127.0.0.1:2380', '--initial-advertise-peer-urls', 'http://127.0.0.1:2380',
        '--initial-cluster', 'fltls=http://127.0.0.1:2380', '--log-level', 'warn'],
      { stdio: ['ignore', log, log] },
    );
    closeSync(log);
    this.procs.push(proc);
    const tls = ['--cacert', f('ca.pem'), '--cert', f('client.pem'), '--key', f('client-key.pem')];
    await waitFor(`${name} to answer`, async () => (await runIn(host.path, ['/usr/bin/etcdctl', `--endpoints=${endpoint}`, ...tls, 'endpoint', 'health'], { ETCDCTL_API: '3' })).code === 0, 30_000, 200);
    return { endpoint, host, ca: f('ca.pem'), cert: f('client.pem'), key: f('client-key.pem') };
  }

  async stopEtcd(): Promise<void> {
    const e = this.etcd;
    if (!e || e.exitCode !== null) return;
    const done = new Promise((r) => e.once('exit', r));
    e.kill('SIGTERM');
    await done;
  }

  etcdctl(args: string[], stdin = ''): Promise<RunResult> {
    const host = this.hosts.get('etcd')!;
    return runIn(host.path, ['/usr/bin/etcdctl', `--endpoints=http://${host.ip}:2379`, '--dial-timeout=2s', '--command-timeout=3s', ...args], { ETCDCTL_API: '3' }, stdin);
  }

  /** Runs `vxlan-flannel <args>` (an operator command) on a host. */
  cli(host: Host, args: string[], env: Record<string, string> = {}): Promise<RunResult> {
    return runProcess([...enter(host), FLANNEL, ...args], { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', ...env }, '');
  }

  /** subnet.env of a node as the test sees it: the default path on a host with its own files. */
  subnetFile(node: Host): string {
    return node.root ? fileOf(node, DEFAULT_SUBNET_FILE) : join(this.tmp.path, node.name, 'subnet.env');
  }

  /**
   * Starts the daemon on the node (with `--subnet-file` and `--cni-data-dir` in
   * the temp dir unless the host has its own files); its log goes to <tmp>/<node>/daemon.log.
   * `--iface eth0` unless `opts.iface` is false (e.g. given as FLANNELD_IFACE
   * in `opts.env`, added to the environment).
   */
  startDaemon(node: Host, storeArgs: string[], extra: string[] = [], opts: { iface?: false; env?: Record<string, string> } = {}): DaemonHandle {
    const dir = join(this.tmp.path, node.name);
    mkdirSync(dir, { recursive: true });
    const logFile = join(dir, 'daemon.log');
    const fd = openSync(logFile, 'a');
    const subnetFile = this.subnetFile(node);
    const iface = opts.iface === false ? [] : ['--iface', 'eth0'];
    const proc = spawn(
      enter(node)[0],
      // a host without its own files: the node's files in the temp dir (subnet.env, the plugin's dataDir), never the machine's
      [...enter(node).slice(1), FLANNEL, 'daemon', ...iface, ...(node.root ? [] : ['--subnet-file', subnetFile, '--cni-data-dir', this.cniConfig(node).dataDir as string]), '--reconcile-interval', '1', ...storeArgs, ...extra],
      { stdio: ['ignore', fd, fd], env: { ...process.env, ...opts.env } },
    );
    closeSync(fd);
    this.procs.push(proc);
    const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
    return { node, proc, logFile, subnetFile, exited, log: () => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : '') };
  }

  async stopDaemon(d: DaemonHandle, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    if (d.proc.exitCode === null && d.proc.signalCode === null) d.proc.kill(signal);
    return d.exited;
  }

  /**
   * subnet.env of a running daemon, once written: its IPv4 subnet and VTEP
   * address, and its IPv6 ones (subnet6, vtepIP6; '' when a family is off).
   */
  async waitSubnet(d: DaemonHandle, timeoutMs = 20_000): Promise<{ subnet: string; vtepIP: string; subnet6: string; vtepIP6: string; env: string }> {
    const { value } = await waitFor(
      `${d.node.name}'s subnet.env (daemon log:\n${d.log()})`,
      () => (existsSync(d.subnetFile) ? readFileSync(d.subnetFile, 'utf8') : ''),
      timeoutMs,
    );
    const m = /FLANNEL_SUBNET=(\d+\.\d+\.\d+)\.1\/(\d+)/.exec(value);
    const m6 = /FLANNEL_IPV6_SUBNET=(\S+)/.exec(value);
    const p6 = m6 ? Prefix.parse(m6[1]) : undefined;
    return {
      subnet: m ? `${m[1]}.0/${m[2]}` : '',
      vtepIP: m ? `${m[1]}.0` : '',
      subnet6: p6 ? `${p6.network}/${p6.length}` : '',
      vtepIP6: p6 ? p6.network.toString() : '',
      env: value,
    };
  }

  /** Waits until every node has a route to every other node's subnet on `dev` (the overlay has converged). */
  async waitMesh(nodes: { node: Host; subnet: string }[], timeoutMs = 10_000, dev = 'flannel.1'): Promise<void> {
    const family = nodes.some((n) => n.subnet.includes(':')) ? '-6 ' : '';
    await waitFor(`every node to program every other on ${dev}`, () =>
      nodes.every((a) => {
        const routes = this.json<{ dst: string }[]>(a.node.ns, `${family}route show dev ${dev}`).map((r) => r.dst);
        return nodes.every((b) => b === a || routes.includes(b.subnet));
      }), timeoutMs, 50);
  }

  /** The CNI config of a node, as a runtime would hand it to the plugin. */
  cniConfig(node: Host, extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      cniVersion: '1.0.0',
      name: `${this.prefix}-podnet`,
      type: 'vxlan-flannel',
      subnetFile: this.subnetFile(node),
      dataDir: join(this.tmp.path, node.name, 'flannel-data'),
      ipam: { dataDir: join(this.tmp.path, node.name, 'ipam') },
      ...extra,
    };
  }

  /** Runs the plugin on the node with a CNI environment. */
  plugin(node: Host, command: string, conf: unknown, env: Record<string, string> = {}): Promise<RunResult> {
    return runProcess([...enter(node), FLANNEL], { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', CNI_COMMAND: command, CNI_PATH: this.cniBin, ...env }, JSON.stringify(conf));
  }

  /** A pod namespace attached to the overlay through the plugin (ADD), returning its address; `extra` goes into its CNI config. */
  async addPod(node: Host, extra: Record<string, unknown> = {}): Promise<Pod> {
    const name = `p${++this.podSeq}`;
    const ns = `${this.prefix}-${name}`;
    const path = this.netns(ns);
    const id = `${this.prefix}-ctr-${name}`;
    const r = await this.plugin(node, 'ADD', this.cniConfig(node, extra), { CNI_CONTAINERID: id, CNI_NETNS: path, CNI_IFNAME: 'eth0' });
    if (r.code !== 0) throw new Error(`ADD ${name} on ${node.name} failed (${r.code}): ${r.stdout} ${r.stderr}`);
    const addrs = (r.json.ips as { address: string }[]).map((i) => i.address.split('/')[0]);
    const ip6 = addrs.find((a) => a.includes(':'));
    const ip = addrs.find((a) => !a.includes(':')) ?? ip6!;
    return { name, ns, path, node, id, ip, ...(ip6 ? { ip6 } : {}), result: r.json };
  }

  delPod(pod: Pod): Promise<RunResult> {
    return this.plugin(pod.node, 'DEL', this.cniConfig(pod.node), { CNI_CONTAINERID: pod.id, CNI_NETNS: pod.path, CNI_IFNAME: 'eth0' });
  }

  /** One ping from a pod (or host) namespace; true when answered. */
  /**
   * One echo request, tried up to `attempts` times (default 3): right after the
   * first ADD on a node, IPv6 neighbour discovery across a brand-new bridge can
   * lose the very first packet. Pass attempts: 1 where a ping must fail.
   */
  async ping(
    from: { path: string },
    to: string,
    opts: { size?: number; dontFragment?: boolean; timeoutS?: number; attempts?: number } = {},
  ): Promise<boolean> {
    const args = ['ping', '-n', '-q', '-c', '1', '-W', String(opts.timeoutS ?? 2)];
    if (opts.size !== undefined) args.push('-s', String(opts.size));
    if (opts.dontFragment) args.push('-M', 'do');
    for (let i = 0; i < (opts.attempts ?? 3); i++) {
      if ((await runIn(from.path, [...args, to])).code === 0) return true;
    }
    return false;
  }

  /**
   * A TCP server in a namespace on `port` that answers each connection with
   * the address it came from and closes it: what a peer sees of a sender
   * (masqueraded or not). Resolves once it listens; cleanup() stops it.
   */
  async startPeerEcho(at: { path: string }, port: number): Promise<void> {
    const script = "require('net').createServer((s) => s.end(s.remoteAddress.replace(/^::ffff:/, ''))).listen(+process.argv[1], () => console.log('listening'))";
    const proc = spawn('nsenter', [`--net=${at.path}`, '--', process.execPath, '-e', script, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    this.procs.push(proc);
    await new Promise<void>((resolve, reject) => {
      proc.stdout!.once('data', () => resolve());
      proc.once('exit', (code) => reject(new Error(`the echo server in ${at.path} exited (${code})`)));
    });
  }

  /** Connects from a namespace to a startPeerEcho server; resolves with the address it reported. */
  async addressSeenBy(from: { path: string }, host: string, port: number): Promise<string> {
    const script =
      "const s = require('net').connect(+process.argv[2], process.argv[1]); let d = ''; s.on('data', (c) => (d += c));" +
      "s.on('end', () => console.log(d)); s.on('error', (e) => { console.error(e.message); process.exit(1); }); setTimeout(() => process.exit(2), 3000).unref();";
    const r = await runIn(from.path, [process.execPath, '-e', script, host, String(port)]);
    if (r.code !== 0) throw new Error(`connecting to ${host}:${port} failed (${r.code}): ${r.stderr}`);
    return r.stdout.trim();
  }

  /** Runs a node script inside a namespace (e.g. an HTTP request, or a change and a request in one go); resolves with its stdout. */
  async nodeIn(at: { path: string }, script: string): Promise<string> {
    const r = await runIn(at.path, [process.execPath, '-e', script]);
    if (r.code !== 0) throw new Error(`node script in ${at.path} failed (${r.code}): ${r.stderr}`);
    return r.stdout.trim();
  }

  json<T = any>(ns: string, args: string): T {
    const out = sh(['ip', '-n', ns, '-j', ...args.split(' ')]);
    return (out.trim() ? JSON.parse(out) : []) as T;
  }

  fdb(ns: string, dev: string): { mac: string; dst?: string }[] {
    const out = sh(['bridge', '-n', ns, '-j', 'fdb', 'show', 'dev', dev]);
    return out.trim() ? JSON.parse(out) : [];
  }

  /**
   * Whether node `ns` has peer `subnet` programmed: neighbour → mac, FDB mac →
   * dst, route via the VTEP IP (an IPv6 subnet: on flannel-v6.1 unless `dev` says otherwise).
   */
  peerState(ns: string, subnet: string, mac: string, dst: string, dev?: string): { neigh: boolean; fdb: boolean; route: boolean; staleFdb: string[] } {
    const v6 = subnet.includes(':');
    dev ??= v6 ? 'flannel-v6.1' : 'flannel.1';
    const vtepIP = subnet.split('/')[0];
    const neigh = this.json<{ dst: string; lladdr?: string; state?: string[] }[]>(ns, `neigh show dev ${dev}`);
    const fdb = this.fdb(ns, dev);
    const routes = this.json<{ dst: string; gateway?: string; flags?: string[] }[]>(ns, `${v6 ? '-6 ' : ''}route show dev ${dev}`);
    return {
      neigh: neigh.some((n) => n.dst === vtepIP && n.lladdr === mac && !!n.state?.includes('PERMANENT')),
      fdb: fdb.some((f) => f.mac === mac && f.dst === dst),
      route: routes.some((r) => r.dst === subnet && r.gateway === vtepIP && !!r.flags?.includes('onlink')),
      staleFdb: fdb.filter((f) => f.dst === dst && f.mac !== mac).map((f) => f.mac),
    };
  }

  /** Kills every process, removes every namespace and the temp dir; safe to call twice. */
  async cleanup(): Promise<void> {
    for (const p of this.procs) {
      if (p.exitCode === null && p.signalCode === null) {
        const done = new Promise((r) => p.once('exit', r));
        p.kill('SIGTERM');
        await Promise.race([done, sleep(3000)]);
        if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
      }
    }
    for (const ns of this.namespaces.reverse()) {
      removeNetns(ns);
    }
    this.namespaces.length = 0;
    for (const m of this.mounts.reverse()) {
      try {
        execFileSync('umount', [m], { stdio: 'ignore' });
      } catch {
        execFileSync('umount', ['--lazy', m], { stdio: 'ignore' });
      }
    }
    this.mounts.length = 0;
    for (const d of this.madeDirs.reverse()) {
      try {
        rmdirSync(d);
      } catch {
        // not empty: someone else uses it now; left alone
      }
    }
    this.madeDirs.length = 0;
    this.tmp.remove();
  }
}

export { ROOT, writeFileSync };
