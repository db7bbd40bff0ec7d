// The kernel's own change notifications: `ip monitor` and `bridge monitor` as
// long-running children, their lines parsed into the entries the listings
// give (NeighEntry, IpRoute, FdbEntry), each with whether it went. The flannel
// daemon repairs drift from them instead of reading every table back.
//
// iproute2 6.1 prints monitor lines as text only (`-json` is ignored), so the
// parsers read the few words that matter and give up on anything else (a
// multipath route, a line they do not know): an event they miss is repaired by
// the next full pass. `ip monitor neigh` also reports the bridge family's
// entries (a VXLAN device's FDB) as if they were neighbours: the ip monitors
// run with -4 or -6, which leaves those out; `bridge monitor fdb` has them.
// Each line is handed over as soon as it is read: both tools flush per event.
import type { NeighEntry } from './neigh';
import type { FdbEntry } from './fdb';
import type { IpRoute } from './route';

export interface NeighEvent {
  kind: 'neigh';
  deleted: boolean;
  dev: string;
  entry: NeighEntry;
}

export interface RouteEvent {
  kind: 'route';
  deleted: boolean;
  /** With its device; `table` absent for the main table, as in the listings. */
  route: IpRoute;
}

export interface FdbEvent {
  kind: 'fdb';
  deleted: boolean;
  dev: string;
  entry: FdbEntry;
}

export type KernelEvent = NeighEvent | RouteEvent | FdbEvent;

/** `ip` watching one family's routes (and neighbours), each line labelled with its kind. */
export const ipMonitorArgv = (family: 4 | 6, neigh: boolean): string[] => ['ip', `-${family}`, '-oneline', 'monitor', 'label', ...(neigh ? ['neigh'] : []), 'route'];
/** `bridge` watching FDB entries. */
export const fdbMonitorArgv = (): string[] => ['bridge', 'monitor', 'fdb'];

/** Route types printed before the destination; only unicast routes (printed without a type) are parsed. */
const ROUTE_TYPES = new Set(['unicast', 'local', 'broadcast', 'multicast', 'anycast', 'blackhole', 'unreachable', 'prohibit', 'throw', 'nat', 'xresolve']);
/** Route attributes printed with a value after them: the value is never taken for a flag. */
const ROUTE_VALUED = new Set(['via', 'dev', 'proto', 'scope', 'src', 'metric', 'table', 'pref', 'mtu', 'advmss', 'expires', 'from', 'tos', 'dsfield', 'realm', 'realms', 'hoplimit', 'initcwnd', 'initrwnd', 'rtt', 'rttvar', 'rto_min', 'features', 'quickack', 'congctl', 'fastopen_no_cookie', 'ttl-propagate', 'nhid', 'encap', 'cache', 'error', 'window', 'reordering', 'ssthresh', 'cwnd', 'lock']);
/** The neighbour states ip prints in capitals (NUD_*). */
const NEIGH_STATES = new Set(['PERMANENT', 'NOARP', 'REACHABLE', 'STALE', 'DELAY', 'PROBE', 'FAILED', 'INCOMPLETE', 'NONE']);

/** Splits "[LABEL]Deleted words..." into its label, whether it says Deleted, and its words. */
function words(line: string): { label?: string; deleted: boolean; w: string[] } {
  let rest = line;
  let label: string | undefined;
  const m = /^\[([A-Z]+)\]/.exec(rest);
  if (m) {
    label = m[1];
    rest = rest.slice(m[0].length);
  }
  const w = rest.trim().split(/\s+/).filter(Boolean);
  const deleted = w[0] === 'Deleted';
  if (deleted) w.shift();
  return { label, deleted, w };
}

/** The value after `key` among `w`, or undefined. */
const after = (w: readonly string[], key: string) => {
  const i = w.indexOf(key);
  return i >= 0 && i + 1 < w.length ? w[i + 1] : undefined;
};

/** A line of `ip -oneline monitor label neigh route` (one family), or undefined when it is neither or not understood. */
export function parseIpMonitorLine(line: string): NeighEvent | RouteEvent | undefined {
  const { label, deleted, w } = words(line);
  if (label === 'NEIGH') return neighEvent(w, deleted);
  if (label === 'ROUTE') return routeEvent(w, deleted);
  return undefined;
}

function neighEvent(w: string[], deleted: boolean): NeighEvent | undefined {
  // "miss" lines are the kernel asking a resolver; "proxy" entries are not neighbours
  if (w.length < 3 || w[0] === 'miss' || w[1] !== 'dev' || w.includes('proxy')) return undefined;
  const lladdr = after(w, 'lladdr');
  const state = w.filter((x) => NEIGH_STATES.has(x));
  return { kind: 'neigh', deleted, dev: w[2], entry: { dst: w[0], ...(lladdr ? { lladdr } : {}), state } };
}

function routeEvent(w: string[], deleted: boolean): RouteEvent | undefined {
  if (!w.length || ROUTE_TYPES.has(w[0]) || w.includes('nexthop')) return undefined;
  const route: IpRoute = { dst: w[0] };
  const flags: string[] = [];
  for (let i = 1; i < w.length; i++) {
    const key = w[i];
    if (ROUTE_VALUED.has(key)) {
      const value = w[++i];
      if (value === undefined) return undefined;
      // an IPv4 route via an IPv6 next hop says so: "via inet6 fe80::1"
      if (key === 'via') route.gateway = value === 'inet' || value === 'inet6' ? w[++i] : value;
      else if (key === 'dev') route.dev = value;
      else if (key === 'proto') route.protocol = value;
      else if (key === 'table') route.table = value;
      else if (key === 'metric') route.metric = Number(value);
      else if (key === 'scope') route.scope = value;
    } else if (/^[a-z_]+$/.test(key)) flags.push(key);
  }
  if (!route.dev || (route.table !== undefined && route.table !== 'main')) return undefined;
  delete route.table;
  if (flags.length) route.flags = flags;
  return { kind: 'route', deleted, route };
}

/** A line of `bridge monitor fdb`, or undefined when it is not a device's entry. */
export function parseFdbMonitorLine(line: string): FdbEvent | undefined {
  const { deleted, w } = words(line);
  const dev = after(w, 'dev');
  if (!w.length || !/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(w[0]) || !dev) return undefined;
  const dst = after(w, 'dst');
  const state = ['permanent', 'static', 'stale'].find((s) => w.includes(s));
  const flags = ['self', 'master', 'extern_learn', 'router', 'offload'].filter((f) => w.includes(f));
  return { kind: 'fdb', deleted, dev, entry: { mac: w[0], ...(dst ? { dst } : {}), ...(flags.length ? { flags } : {}), ...(state ? { state } : {}) } };
}

/** What a monitor child tells its owner. */
export interface MonitorHandlers {
  /** One line of its output. */
  line(text: string): void;
  /** Events may have been missed: it fell behind (the kernel dropped events), or it ended. */
  trouble(why: string): void;
}

/** A running monitor child. */
export interface MonitorChild {
  /** Ends it; no handler is called after. */
  stop(): void;
}

/**
 * Starts one monitor child (the seam unit tests replace: a fake kernel feeds
 * lines). `started` is called once it runs, `exited` once when it ends on its own.
 */
export type MonitorSpawn = (argv: readonly string[], handlers: MonitorHandlers & { started(): void; exited(why: string): void }) => MonitorChild;

const spawnMonitor: MonitorSpawn = (argv, h) => {
  const { spawn } = require('node:child_process') as typeof import('node:child_process');
  let stopped = false;
  const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = (each: (l: string) => void) => {
    let partial = '';
    return (chunk: Buffer) => {
      const text = partial + chunk.toString('latin1');
      const parts = text.split('\n');
      partial = parts.pop()!;
      for (const l of parts) if (!stopped && l) each(l);
    };
  };
  child.stdout!.on('data', lines((l) => h.line(l)));
  // "netlink receive error No buffer space available": the kernel dropped events ip could not take in time
  child.stderr!.on('data', lines((l) => h.trouble(`${argv[0]} monitor: ${l.trim()}`)));
  let ended = false;
  const end = (why: string) => {
    if (ended || stopped) return;
    ended = true;
    h.exited(why);
  };
  child.once('spawn', () => !stopped && h.started());
  child.on('error', (err) => end(`${argv[0]} monitor could not run: ${err.message}`));
  child.on('exit', (code, signal) => end(`${argv[0]} monitor exited (${signal ?? `status ${code}`})`));
  return {
    stop() {
      stopped = true;
      child.kill('SIGTERM');
    },
  };
};

let spawner: MonitorSpawn = spawnMonitor;

/** Replaces how monitor children start (tests); returns the previous way. */
export function setMonitorSpawn(next: MonitorSpawn): MonitorSpawn {
  const prev = spawner;
  spawner = next;
  return prev;
}

/** How long a monitor that ended waits before it starts again: doubling from 1 s to 30 s, back to 1 s once one ran a minute. */
const RESTART_MS = [1000, 30_000] as const;
const STEADY_MS = 60_000;

/**
 * One monitor, kept running: started again after it ends (with backoff),
 * telling `trouble` each time it ended (events may be missed until it runs
 * again) and `running` each time it started.
 */
export class KeptMonitor {
  private child?: MonitorChild;
  private timer?: NodeJS.Timeout;
  private delay: number = RESTART_MS[0];
  private startedAt = 0;
  private stopped = false;

  constructor(
    readonly argv: readonly string[],
    private readonly handlers: MonitorHandlers & { running(): void; ended(why: string): void },
  ) {}

  start(): void {
    if (this.stopped) return;
    this.startedAt = Date.now();
    try {
      this.child = spawner(this.argv, { line: this.handlers.line, trouble: this.handlers.trouble, started: this.handlers.running, exited: (why) => this.exited(why) });
    } catch (err) {
      this.exited(`${this.argv[0]} monitor could not run: ${(err as Error).message}`);
    }
  }

  private exited(why: string): void {
    this.child = undefined;
    if (this.stopped) return;
    if (Date.now() - this.startedAt >= STEADY_MS) this.delay = RESTART_MS[0];
    this.handlers.ended(`${why}; starting it again in ${this.delay / 1000} s`);
    this.timer = setTimeout(() => this.start(), this.delay);
    this.delay = Math.min(this.delay * 2, RESTART_MS[1]);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.child?.stop();
    this.child = undefined;
  }
}
