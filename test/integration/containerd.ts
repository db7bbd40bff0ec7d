// A private containerd (Debian's 1.6 with runc) for tests: its own root,
// state, socket and config, running our bin/ plugins through its CRI plugin,
// exactly as a kubelet's node does.
//
// Isolation: containerd runs inside a "node" network namespace of its own, so
// the plugins it runs (bridge, host-local, loopback) put the bridge, the host
// veths, sysctls and rules there, never on the machine's interfaces. Pods get
// namespaces from containerd (bind-mounted under our state dir). The pause
// image is built here from busybox-static, no registry: a docker-archive
// (manifest.json, image config, one layer holding /bin/busybox) imported with
// `ctr images import`.
//
// Cleanup leaves nothing: sandboxes are stopped and removed through CRI while
// containerd runs, then every process of this instance (containerd, its shims,
// the pause processes) is killed by pid, mounts under our directory are
// unmounted, the node namespace goes (and the bridge with it), libcni's cache
// files of our pods are removed and the directory deleted. The same sweep runs
// before a start, so a run killed midway is cleaned by the next.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, rmdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CriClient, type PodSandbox } from '../../src/runtime/cri';
import { GO_BIN, OUR_BIN, makeNetns, removeNetns, sh } from './helpers';

export interface ContainerdOptions {
  /** Names this instance: /tmp/cni-ts-containerd-<name>, node netns cni-ts-<name>-node, network cni-ts-<name>. */
  name: string;
  /** The test network's bridge (at most 15 bytes) and IPv4 subnet. */
  bridge: string;
  subnet: string;
  /** The bridge masquerades the pods' traffic (default false). */
  ipMasq?: boolean;
  /** host-local's stickyTTL on the test network: a removed pod's addresses are parked for it. */
  stickyTTL?: string;
  /**
   * A second network, the pods' eth1: vxlan-flannel's CNI plugin (over bridge
   * + host-local, with ipMasq) from a fixed subnet.env, no daemon (the plugin
   * needs only the file). containerd then loads two configs (max_conf_num 2).
   */
  overlay?: { bridge: string; subnet: string };
}

export interface Pod {
  id: string;
  name: string;
  /** The pod's IPs as containerd reports them (from the CNI result). */
  ips: string[];
  /** The pod's network namespace (a bind mount under the state dir). */
  netns: string;
}

export const PAUSE_IMAGE = 'localhost/pause:test';
const CRI_NAMESPACE = 'k8s.io';
/** containerd 1.6 puts every shim's socket here, whatever its state dir (runtime/v2/shim/util_unix.go). */
const SHIM_SOCKET_DIR = '/run/containerd/s';
const LIBCNI_RESULTS = '/var/lib/cni/results';

export class PrivateContainerd {
  readonly dir: string;
  readonly socket: string;
  readonly endpoint: string;
  readonly binDir: string;
  /**
   * The same plugins, each run inside the node namespace: a CNI_PATH for
   * code under test that runs plugins the way a node's own tools would.
   */
  readonly nodeBinDir: string;
  readonly confDir: string;
  /** host-local's dataDir in the test network. */
  readonly ipamDir: string;
  readonly network: string;
  /** The overlay network's name (options.overlay), its flannel dataDir and subnet.env. */
  readonly overlayNetwork: string;
  readonly flannelDir: string;
  readonly subnetFile: string;
  readonly nodeNetns: string;
  readonly nodeNetnsPath: string;
  readonly cri: CriClient;
  private daemon?: ChildProcess;

  private constructor(readonly options: ContainerdOptions) {
    this.dir = `/tmp/cni-ts-containerd-${options.name}`;
    this.socket = join(this.dir, 'containerd.sock');
    this.endpoint = `unix://${this.socket}`;
    this.binDir = join(this.dir, 'cni-bin');
    this.nodeBinDir = join(this.dir, 'node-bin');
    this.confDir = join(this.dir, 'cni-conf');
    this.ipamDir = join(this.dir, 'ipam');
    this.network = `cni-ts-${options.name}`;
    this.overlayNetwork = `${this.network}-overlay`;
    this.flannelDir = join(this.dir, 'flannel');
    this.subnetFile = join(this.dir, 'subnet.env');
    this.nodeNetns = `cni-ts-${options.name}-node`;
    this.nodeNetnsPath = `/run/netns/${this.nodeNetns}`;
    this.cri = new CriClient(this.endpoint, { timeoutMs: 30_000 });
  }

  /** Starts containerd with the test network and the pause image; cleans up and throws if it cannot. */
  static async start(options: ContainerdOptions): Promise<PrivateContainerd> {
    const c = new PrivateContainerd(options);
    try {
      c.sweep();
      c.prepare();
      await c.startDaemon();
      sh(['ctr', '--address', c.socket, '-n', CRI_NAMESPACE, 'images', 'import', buildPauseImage(join(c.dir, 'image'))]);
      return c;
    } catch (err) {
      const log = c.log();
      await c.stop();
      throw new Error(`private containerd did not start: ${(err as Error).message}\n--- containerd log (tail) ---\n${log.slice(-3000)}`);
    }
  }

  /** Runs a pod sandbox through CRI (containerd runs CNI ADD) and reads back its IPs and netns. */
  async runPod(name: string): Promise<Pod> {
    const id = await this.cri.runPodSandbox({ name, namespace: 'cni-ts', uid: `${name}-uid` });
    const status = await this.cri.podSandboxStatus(id, { verbose: true });
    const spec = JSON.parse(status.info.info ?? '{}').runtimeSpec as { linux?: { namespaces?: { type: string; path?: string }[] } } | undefined;
    const netns = spec?.linux?.namespaces?.find((n) => n.type === 'network')?.path;
    if (!netns) throw new Error(`containerd reported no network namespace for pod ${name} (${id})`);
    return { id, name, ips: status.ips, netns };
  }

  /** Stops (CNI DEL) and removes a pod sandbox. */
  async removePod(id: string): Promise<void> {
    await this.cri.stopPodSandbox(id);
    await this.cri.removePodSandbox(id);
  }

  /** Runs argv inside the node namespace (where the bridge and host veths are). */
  inNode(argv: string[]): string {
    return sh(['nsenter', `--net=${this.nodeNetnsPath}`, '--', ...argv]);
  }

  /** Stops the daemon only (SIGTERM, then SIGKILL after 10 s); pods, mounts and state stay for stop(). */
  async stopDaemon(): Promise<void> {
    const daemon = this.daemon;
    if (!daemon || daemon.exitCode !== null || daemon.signalCode !== null) return;
    const exited = new Promise((res) => daemon.once('exit', res));
    daemon.kill('SIGTERM');
    const timer = setTimeout(() => daemon.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }

  /** Removes everything this instance made. Safe to call at any point, and twice. */
  async stop(): Promise<void> {
    if (this.daemon?.exitCode === null && this.daemon.signalCode === null) {
      // The clean way first: sandboxes stopped by containerd run CNI DEL and unmount their netns.
      let pods: PodSandbox[] = [];
      try {
        pods = await this.cri.listPodSandboxes();
      } catch {
        // not answering: the sweep below does it by force
      }
      for (const pod of pods) await this.removePod(pod.id).catch(() => {});
    }
    this.cri.close();
    await this.stopDaemon();
    this.sweep();
  }

  /** containerd's log so far ('' when there is none). */
  log(): string {
    try {
      return readFileSync(join(this.dir, 'containerd.log'), 'utf8');
    } catch {
      return '';
    }
  }

  private prepare(): void {
    for (const d of [this.dir, this.binDir, this.nodeBinDir, this.confDir, this.ipamDir]) mkdirSync(d, { recursive: true, mode: 0o700 });
    // containerd's CRI adds a loopback network of its own to every pod.
    const plugins = {
      bridge: join(OUR_BIN, 'bridge'),
      'host-local': join(OUR_BIN, 'host-local'),
      'vxlan-flannel': join(OUR_BIN, 'vxlan-flannel'),
      loopback: join(GO_BIN, 'loopback'),
    };
    for (const [name, file] of Object.entries(plugins)) {
      symlinkSync(file, join(this.binDir, name));
      const wrapper = join(this.nodeBinDir, name);
      writeFileSync(wrapper, `#!/bin/sh\nexec nsenter --net=${shellQuote(this.nodeNetnsPath)} -- ${shellQuote(file)} "$@"\n`);
      chmodSync(wrapper, 0o755);
    }
    // containerd 1.6's libcni speaks CNI up to 1.0.0.
    const conflist = {
      cniVersion: '1.0.0',
      name: this.network,
      plugins: [
        {
          type: 'bridge',
          bridge: this.options.bridge,
          isGateway: true,
          ipMasq: this.options.ipMasq ?? false,
          ipam: {
            type: 'host-local',
            dataDir: this.ipamDir,
            ranges: [[{ subnet: this.options.subnet }]],
            routes: [{ dst: '0.0.0.0/0' }],
            ...(this.options.stickyTTL ? { stickyTTL: this.options.stickyTTL } : {}),
          },
        },
      ],
    };
    writeFileSync(join(this.confDir, `10-${this.network}.conflist`), JSON.stringify(conflist, null, 2));
    const overlay = this.options.overlay;
    if (overlay) {
      const flannel = {
        cniVersion: '1.0.0',
        name: this.overlayNetwork,
        plugins: [
          {
            type: 'vxlan-flannel',
            subnetFile: this.subnetFile,
            dataDir: this.flannelDir,
            delegate: { bridge: overlay.bridge },
            ipam: { dataDir: this.ipamDir },
          },
        ],
      };
      writeFileSync(join(this.confDir, `20-${this.overlayNetwork}.conflist`), JSON.stringify(flannel, null, 2));
      // the node's lease: the overlay's first host address on this node, flannel's format
      const [base, len] = overlay.subnet.split('/');
      const first = base.replace(/\.0$/, '.1');
      writeFileSync(this.subnetFile, `FLANNEL_NETWORK=${overlay.subnet}\nFLANNEL_SUBNET=${first}/${len}\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n`);
    }
    writeFileSync(join(this.dir, 'config.toml'), this.config());
    makeNetns(this.nodeNetns);
  }

  private config(): string {
    const q = JSON.stringify;
    return `version = 2
root = ${q(join(this.dir, 'root'))}
state = ${q(join(this.dir, 'state'))}
# the opt plugin would write /opt/containerd
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = ${q(this.socket)}

[ttrpc]
  address = ${q(`${this.socket}.ttrpc`)}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${q(PAUSE_IMAGE)}
  # runc fails on this kernel's cgroup layout; pods need no limits here
  disable_cgroup = true
  restrict_oom_score_adj = true
  # pod netns bind mounts under our state dir, not /var/run/netns
  netns_mounts_under_state_dir = true

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = ${q(this.binDir)}
  conf_dir = ${q(this.confDir)}
  max_conf_num = ${this.options.overlay ? 2 : 1}

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  Root = ${q(join(this.dir, 'runc'))}
`;
  }

  private async startDaemon(): Promise<void> {
    const log = openSync(join(this.dir, 'containerd.log'), 'a');
    try {
      this.daemon = spawn('nsenter', [`--net=${this.nodeNetnsPath}`, '--', 'containerd', '--config', join(this.dir, 'config.toml')], {
        stdio: ['ignore', log, log],
      });
    } finally {
      closeSync(log); // the daemon has its own copy
    }
    const deadline = Date.now() + 60_000; // a busy machine: containerd's start-up is slow, not broken
    for (;;) {
      if (this.daemon.exitCode !== null) throw new Error(`containerd exited with code ${this.daemon.exitCode}`);
      try {
        await this.cri.version();
        return;
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((res) => setTimeout(res, 100));
      }
    }
  }

  /** Removes whatever an instance of this name left: processes, mounts, node netns, cache files, directories. */
  private sweep(): void {
    const pids = this.processes();
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    waitGone(pids);
    for (const mount of mountsUnder(this.dir)) {
      try {
        sh(['umount', mount]);
      } catch {
        sh(['umount', '--lazy', mount]);
      }
    }
    removeNetns(this.nodeNetns);
    this.removeCacheFiles();
    this.removeShimSockets();
    rmSync(this.dir, { recursive: true, force: true });
    // containerd made these for our shims; a containerd of the machine would keep its socket there
    for (const d of [SHIM_SOCKET_DIR, '/run/containerd']) {
      try {
        rmdirSync(d); // only when empty
      } catch {
        // not empty, or not there
      }
    }
  }

  /** containerd of this instance, its shims (they name our socket) and all their descendants. */
  private processes(): number[] {
    const configArg = join(this.dir, 'config.toml');
    const table = readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .map((p) => {
        try {
          const cmdline = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
          const ppid = Number(readFileSync(`/proc/${p}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')[1]);
          return { pid: Number(p), ppid, cmdline };
        } catch {
          return undefined;
        }
      })
      .filter((x) => x !== undefined);
    const ours = new Set(
      table.filter((p) => p.pid !== process.pid && (p.cmdline.includes(configArg) || p.cmdline.includes(this.socket))).map((p) => p.pid),
    );
    for (let grew = true; grew; ) {
      grew = false;
      for (const p of table) {
        if (ours.has(p.ppid) && !ours.has(p.pid)) {
          ours.add(p.pid);
          grew = true;
        }
      }
    }
    return [...ours];
  }

  /** libcni's results cache entries of our pods: our networks', and containerd's loopback network's. */
  private removeCacheFiles(): void {
    let sandboxes: string[] = [];
    let names: string[] = [];
    try {
      sandboxes = readdirSync(join(this.dir, 'root', 'io.containerd.grpc.v1.cri', 'sandboxes'));
    } catch {
      // none ran
    }
    try {
      names = readdirSync(LIBCNI_RESULTS);
    } catch {
      return;
    }
    for (const name of names) {
      const file = join(LIBCNI_RESULTS, name);
      try {
        const info = JSON.parse(readFileSync(file, 'utf8')) as { networkName?: string; containerId?: string };
        const ours = info.networkName === this.network || info.networkName === this.overlayNetwork;
        if (ours || sandboxes.includes(info.containerId ?? '')) rmSync(file, { force: true });
      } catch {
        // not a cache file
      }
    }
  }

  /** A shim killed by force leaves its socket: /run/containerd/s/sha256(<our socket>/<ns>/<id>). */
  private removeShimSockets(): void {
    const tasks = join(this.dir, 'state', 'io.containerd.runtime.v2.task', CRI_NAMESPACE);
    let ids: string[] = [];
    try {
      ids = readdirSync(tasks);
    } catch {
      return;
    }
    for (const id of ids) {
      const hash = createHash('sha256').update(join(this.socket, CRI_NAMESPACE, id)).digest('hex');
      rmSync(join(SHIM_SOCKET_DIR, hash), { force: true });
    }
  }
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Mount points at or below `dir`, deepest first. */
function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4]?.replace(/\\040/g, ' '))
    .filter((m): m is string => m !== undefined && (m === dir || m.startsWith(`${dir}/`)))
    .sort((a, b) => b.length - a.length);
}

function waitGone(pids: number[]): void {
  const deadline = Date.now() + 5_000;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (pids.some((pid) => existsSync(`/proc/${pid}`)) && Date.now() < deadline) Atomics.wait(pause, 0, 0, 50);
}

/**
 * The pause image as a docker-archive: one layer holding a static busybox,
 * run as `busybox sleep` (all a sandbox needs is a process that stays).
 */
function buildPauseImage(dir: string): string {
  const rootfs = join(dir, 'rootfs');
  mkdirSync(join(rootfs, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(rootfs, 'bin', 'busybox'));
  chmodSync(join(rootfs, 'bin', 'busybox'), 0o755);
  const layer = join(dir, 'layer.tar');
  sh(['tar', '--owner=0', '--group=0', '-C', rootfs, '-cf', layer, 'bin']);
  const sha = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');
  const config = JSON.stringify({
    architecture: { x64: 'amd64', arm64: 'arm64' }[process.arch as string] ?? process.arch,
    os: 'linux',
    config: { Cmd: ['/bin/busybox', 'sleep', '1000000'] },
    rootfs: { type: 'layers', diff_ids: [`sha256:${sha(readFileSync(layer))}`] },
  });
  const configFile = `${sha(config)}.json`;
  writeFileSync(join(dir, configFile), config);
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify([{ Config: configFile, RepoTags: [PAUSE_IMAGE], Layers: ['layer.tar'] }]));
  const archive = join(dir, 'pause.tar');
  sh(['tar', '-C', dir, '-cf', archive, 'manifest.json', configFile, 'layer.tar']);
  return archive;
}

/** The reservations host-local holds in `dir`: address → [containerID, ifname]. */
export function reservations(ipamDir: string, network: string): Record<string, [string, string]> {
  const dir = join(ipamDir, network);
  const out: Record<string, [string, string]> = {};
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of names.filter((n) => /^[\d.]+$|:/.test(n))) {
    const [id, ifname = ''] = readFileSync(join(dir, name), 'utf8').split('\r\n');
    out[name] = [id, ifname];
  }
  return out;
}

/** The interfaces of a pod's namespace, by name, with their IPv4 addresses. */
export function podAddresses(netns: string): Record<string, string[]> {
  const links = JSON.parse(sh(['nsenter', `--net=${netns}`, '--', 'ip', '-j', '-4', 'addr', 'show'])) as { ifname: string; addr_info: { local: string; prefixlen: number }[] }[];
  return Object.fromEntries(links.map((l) => [l.ifname, l.addr_info.map((a) => `${a.local}/${a.prefixlen}`)]));
}
