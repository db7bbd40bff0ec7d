// Helpers for the bridge integration tests. Every test file builds its own
// "host" namespace and runs the plugin inside it (nsenter), so bridges,
// veths and firewall rules never touch the machine's own namespace; the
// containers are further namespaces. `Lab.close()` removes all of it.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OUR_BIN, GO_BIN, ROOT, makeNetns, removeNetns, runIn, sh, type PluginRun } from './helpers';

export { OUR_BIN, GO_BIN, ROOT, sh };
export const OUR_BRIDGE = join(OUR_BIN, 'bridge');
export const GO_BRIDGE = join(GO_BIN, 'bridge');

export interface CniCall {
  command: 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';
  conf: unknown;
  /** Container netns path (CNI_NETNS); '' for none. */
  netns?: string;
  id?: string;
  ifname?: string;
  /** CNI_PATH; our bin first by default. */
  path?: string;
  plugin?: string;
  env?: Record<string, string>;
}

/** One test file's world: a host namespace, container namespaces, a temp dir. */
export class Lab {
  readonly host: string;
  readonly hostPath: string;
  readonly dir: string;
  private readonly namespaces = new Set<string>();
  private readonly pids = new Set<number>();

  constructor(readonly prefix: string) {
    this.dir = mkdtempSync(join(tmpdir(), `${prefix}-`));
    this.host = this.netns('host');
    this.hostPath = `/run/netns/${this.host}`;
    // Forwarding and IPv6 as a node would have them.
    sh(['ip', 'netns', 'exec', this.host, 'sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=0']);
  }

  /** Creates (fresh) a named netns `<prefix>-<name>` with lo up; returns its name. */
  netns(name: string): string {
    const full = makeNetns(`${this.prefix}-${name}`).name;
    this.namespaces.add(full);
    return full;
  }

  path(name: string): string {
    return `/run/netns/${name}`;
  }

  delNetns(full: string): void {
    removeNetns(full);
    this.namespaces.delete(full);
  }

  /** A process sleeping in a new, unnamed netns: CNI_NETNS = /proc/<pid>/ns/net. */
  sleeper(): number {
    const child = spawn('unshare', ['--net', 'sleep', '600'], { stdio: 'ignore', detached: false });
    this.pids.add(child.pid!);
    return child.pid!;
  }

  kill(pid: number): void {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
    this.pids.delete(pid);
  }

  file(name: string, content: string): string {
    const p = join(this.dir, name);
    writeFileSync(p, content);
    return p;
  }

  /** Runs a CNI plugin inside the host namespace, as a runtime would. */
  cni(call: CniCall): Promise<PluginRun> {
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
      CNI_COMMAND: call.command,
      CNI_CONTAINERID: call.id ?? 'ctr',
      CNI_NETNS: call.netns ?? '',
      CNI_IFNAME: call.ifname ?? 'eth0',
      CNI_PATH: call.path ?? `${OUR_BIN}:${GO_BIN}`,
      ...call.env,
    };
    return runIn(this.hostPath, [call.plugin ?? OUR_BRIDGE], env, JSON.stringify(call.conf));
  }

  /** Runs argv in a namespace (name), returning stdout; throws on failure. */
  in(ns: string, argv: string[], input?: string): string {
    return sh(['ip', 'netns', 'exec', ns, ...argv], input);
  }

  /** Like `in`, but returns the exit status instead of throwing. */
  tryIn(ns: string, argv: string[]): { code: number; out: string } {
    try {
      return { code: 0, out: this.in(ns, argv) };
    } catch (err) {
      const e = err as { status?: number; stdout?: string; stderr?: string };
      return { code: e.status ?? 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
    }
  }

  /** `ip -json -details addr show` in a namespace. */
  links(ns: string): IpLinkJson[] {
    return JSON.parse(sh(['ip', '-n', ns, '-json', '-details', 'addr', 'show'])) as IpLinkJson[];
  }

  link(ns: string, name: string): IpLinkJson | undefined {
    return this.links(ns).find((l) => l.ifname === name);
  }

  /** Main-table routes of both families. */
  routes(ns: string): { dst: string; gateway?: string; dev?: string }[] {
    const v4 = JSON.parse(sh(['ip', '-n', ns, '-json', 'route', 'show'])) as { dst: string }[];
    const v6 = JSON.parse(sh(['ip', '-n', ns, '-6', '-json', 'route', 'show'])) as { dst: string }[];
    return [...v4, ...v6.map((r) => ({ ...r, dst: r.dst === 'default' ? '::/0' : r.dst }))];
  }

  /** Pings from a namespace, retrying (an IPv6 gateway may still be doing DAD). */
  ping(ns: string, addr: string, tries = 6): boolean {
    const argv = ['ping', '-c', '1', '-W', '1', addr];
    for (let i = 0; i < tries; i++) {
      if (this.tryIn(ns, argv).code === 0) return true;
      execFileSync('sleep', ['0.3']);
    }
    return false;
  }

  close(): void {
    for (const pid of this.pids) this.kill(pid);
    for (const ns of [...this.namespaces]) this.delNetns(ns);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export interface IpLinkJson {
  ifindex: number;
  ifname: string;
  flags: string[];
  mtu: number;
  master?: string;
  address?: string;
  link_index?: number;
  operstate?: string;
  linkinfo?: { info_kind?: string; info_data?: Record<string, unknown>; info_slave_data?: Record<string, unknown> };
  addr_info: { family: string; local: string; prefixlen: number; scope: string; broadcast?: string }[];
}


/** Global addresses (CIDR) of a link. */
export const globalAddrs = (l: IpLinkJson | undefined) =>
  (l?.addr_info ?? []).filter((a) => a.scope === 'global').map((a) => `${a.local}/${a.prefixlen}`);
