// What the kernel says changed among a backend's entries, between passes: the
// monitors of iproute/monitor.ts kept running, and the last event seen per
// entry (a neighbour by device and address, an FDB entry by device and MAC, a
// route by family and destination). The kernel reports events in the order
// they happen, so the last one says what the entry is now. A changes pass
// takes them and plans against them as it plans against what it programmed:
// a route deleted by hand is put back within a pass, and the events our own
// commands cause agree with what was programmed and change nothing (no
// feedback loop). Events missed (a monitor fell behind, or ended) ask for a
// full pass, which reads every table; while a monitor is not running the
// daemon falls back to periodic full passes.
import { IP, Prefix } from '../../net/ip';
import { KeptMonitor, fdbMonitorArgv, ipMonitorArgv, parseFdbMonitorLine, parseIpMonitorLine, type FdbEvent, type KernelEvent, type NeighEvent, type RouteEvent } from '../../iproute/monitor';

export interface KernelWatchContext {
  /** Something of ours may differ now: a changes pass soon. */
  changed(why: string): void;
  /** Events may have been missed: a full pass soon. */
  missed(why: string): void;
  /** Every monitor runs (true), or one does not (false: drift is repaired by full passes only). */
  watching(up: boolean, why: string): void;
}

/** The last event of each entry since the last take. */
export interface Observed {
  /** By address (RFC 5952 text). */
  neigh: Map<string, NeighEvent>;
  /** By MAC, lowercase. */
  fdb: Map<string, FdbEvent>;
  /** By destination prefix (host routes with their length). */
  routes: Map<string, RouteEvent>;
}

const empty = (): Observed => ({ neigh: new Map(), fdb: new Map(), routes: new Map() });

/** The key an event's entry is kept under, or undefined when it cannot be read. */
function keyOf(e: KernelEvent, family: 4 | 6): string | undefined {
  if (e.kind === 'fdb') return e.entry.mac.toLowerCase();
  if (e.kind === 'neigh') return IP.parse(e.entry.dst)?.toString();
  const dst = e.route.dst;
  if (dst === 'default') return undefined;
  return Prefix.parse(dst.includes('/') ? dst : `${dst}/${family === 4 ? 32 : 128}`)?.toString();
}

export class KernelWatch {
  private readonly monitors: KeptMonitor[] = [];
  /** Per family for routes and neighbours; FDB entries per device (see take). */
  private readonly seen = new Map<string, Observed>();
  /** Monitors not running (by argv), with why. */
  private readonly down = new Map<string, string>();
  private started = false;

  /**
   * `families`: whose routes to watch, and with `neigh` their neighbours;
   * `fdb`: FDB entries too. `wants` keeps only the events about the
   * backend's entries (its devices, its network): the others (pods'
   * neighbours, other routes) are dropped as they come.
   */
  constructor(
    families: readonly (4 | 6)[],
    watch: { neigh: boolean; fdb: boolean },
    private readonly wants: (e: KernelEvent, family: 4 | 6) => boolean,
    private readonly ctx: KernelWatchContext,
  ) {
    for (const family of families) this.monitors.push(this.monitor(ipMonitorArgv(family, watch.neigh), (l) => parseIpMonitorLine(l), family));
    // FDB events name their device: they are kept with the family of the device's VTEP (wants decides)
    if (watch.fdb) this.monitors.push(this.monitor(fdbMonitorArgv(), (l) => parseFdbMonitorLine(l), undefined, families));
  }

  private monitor(argv: string[], parse: (l: string) => KernelEvent | undefined, family?: 4 | 6, fdbFamilies: readonly (4 | 6)[] = []): KeptMonitor {
    const name = argv.join(' ');
    return new KeptMonitor(argv, {
      line: (l) => {
        const e = parse(l);
        if (!e) return;
        for (const f of family ? [family] : fdbFamilies) if (this.wants(e, f)) this.record(e, f);
      },
      trouble: (why) => this.ctx.missed(why),
      running: () => {
        const wasDown = this.down.delete(name);
        // events between its end and now were missed: a full pass reads what they would have said
        if (wasDown) this.ctx.missed(`${argv[0]} monitor running again`);
        if (wasDown && this.down.size === 0) this.ctx.watching(true, `${argv[0]} monitor running again`);
      },
      ended: (why) => {
        const first = this.down.size === 0;
        this.down.set(name, why);
        if (first) this.ctx.watching(false, why);
      },
    });
  }

  private record(e: KernelEvent, family: 4 | 6): void {
    const key = keyOf(e, family);
    if (key === undefined) return;
    let o = this.seen.get(String(family));
    if (!o) this.seen.set(String(family), (o = empty()));
    if (e.kind === 'neigh') o.neigh.set(key, e);
    else if (e.kind === 'fdb') o.fdb.set(key, e);
    else o.routes.set(key, e);
    const what = e.kind === 'route' ? `route ${e.route.dst}` : e.kind === 'neigh' ? `neigh ${e.entry.dst}` : `fdb ${e.entry.mac}`;
    this.ctx.changed(`kernel: ${what} ${e.deleted ? 'deleted' : 'changed'}`);
  }

  /** Starts the monitors (once). */
  start(): void {
    if (this.started) return;
    this.started = true;
    for (const m of this.monitors) m.start();
  }

  /** Whether every monitor is running. */
  get running(): boolean {
    return this.started && this.down.size === 0;
  }

  /** What was seen of `family`'s entries since the last take (or clear); forgotten here. */
  take(family: 4 | 6): Observed {
    const o = this.seen.get(String(family));
    this.seen.delete(String(family));
    return o ?? empty();
  }

  stop(): void {
    for (const m of this.monitors) m.stop();
  }
}
