// What an operator watches in Prometheus: GET /metrics on the health
// listener (healthz.ts), in the Prometheus text exposition format 0.0.4.
// The daemon counts as it goes (peers programmed, changes applied and
// failed, reconcile passes and their duration, watch errors, lease
// renewals); the rest is read when scraped (the source's re-lists, and
// host-local's reservations in this node's subnets: "no IP addresses
// available" is foreseen by the free gauge; the process's memory and CPU, under
// the names Prometheus' client libraries give them, so that the dashboards
// and alerts operators have for other agents work as they are). Every series
// is documented in docs/vxlan-flannel.md.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { IP, type Prefix } from '../../net/ip';
import { DEFAULT_DATA_DIR } from '../../ipam/config';
import { Histogram, family, type Labels } from '../../util/prometheus';

/** Upper bounds of the lease change latency buckets, in seconds (the goal is 10 ms). */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

type Kind = 'full' | 'changes';

const fam = (family: 4 | 6) => `ipv${family}`;

export interface MetricsSources {
  /** How often the source listed everything again (kube: a watch's resourceVersion expired, 410 Gone). */
  relists?: () => number;
  /** host-local's data directory (/var/lib/cni/networks). */
  ipamDir?: string;
}

/** More metric families, rendered on each scrape (--network-policy's). */
export type MetricFamilies = () => string[];

export class DaemonMetrics {
  private readonly peerCount = new Map<string, number>();
  private readonly applied = new Map<string, number>();
  private readonly failed = new Map<string, number>();
  private readonly passes = new Map<string, number>();
  private readonly durations = new Map<Kind, Histogram>();
  private readonly cpu = new Map<Kind, number>();
  private readonly latency = new Histogram(LATENCY_BUCKETS);
  private lastSuccess?: number;
  private watchErrors = 0;
  private renewals = 0;
  private subnets: Prefix[] = [];

  /** When the process started, in Unix seconds (process_start_time_seconds). */
  private readonly startedAt = Date.now() / 1000 - process.uptime();

  /** Families other parts of the daemon export (--network-policy's). */
  private readonly more: MetricFamilies[] = [];

  constructor(private readonly sources: MetricsSources = {}) {}

  /** Exports `families` too, from the next scrape on. */
  add(families: MetricFamilies): void {
    this.more.push(families);
  }

  peers(family: 4 | 6, n: number): void {
    this.peerCount.set(fam(family), n);
  }

  changesApplied(family: 4 | 6, n: number): void {
    this.applied.set(fam(family), (this.applied.get(fam(family)) ?? 0) + n);
  }

  changesFailed(family: 4 | 6, n: number): void {
    this.failed.set(fam(family), (this.failed.get(fam(family)) ?? 0) + n);
  }

  /** One reconcile pass; `ok`: every VTEP up, the source listed, every peer programmed. */
  reconciled(kind: Kind, seconds: number, ok: boolean, cpuSeconds = 0, now = Date.now()): void {
    this.cpu.set(kind, (this.cpu.get(kind) ?? 0) + cpuSeconds);
    const key = `${kind} ${ok ? 'ok' : 'failed'}`;
    this.passes.set(key, (this.passes.get(key) ?? 0) + 1);
    let h = this.durations.get(kind);
    if (!h) this.durations.set(kind, (h = new Histogram()));
    h.observe(seconds);
    if (ok) this.lastSuccess = now / 1000;
  }

  /** A pass applied the lease changes the watch reported, the oldest `seconds` after it reached the daemon. */
  leaseChangeApplied(seconds: number): void {
    this.latency.observe(seconds);
  }

  watchError(): void {
    this.watchErrors++;
  }

  leaseRenewed(): void {
    this.renewals++;
  }

  /** This node's subnets (one per family): the pod addresses counted are those inside them. */
  nodeSubnets(subnets: Prefix[]): void {
    this.subnets = subnets;
  }

  /** host-local's reservations inside this node's subnets, per network directory and family. */
  private podAddresses(): [string, Labels, number][] {
    const dir = this.sources.ipamDir ?? DEFAULT_DATA_DIR;
    if (!this.subnets.length) return [];
    let networks: string[];
    try {
      networks = readdirSync(dir);
    } catch {
      return [];
    }
    const out: [string, Labels, number][] = [];
    for (const network of networks.sort()) {
      let names: string[];
      try {
        names = readdirSync(join(dir, network));
      } catch {
        continue;
      }
      for (const subnet of this.subnets) {
        const inUse = names.filter((n) => {
          const ip = IP.parse(n);
          return !!ip && subnet.contains(ip);
        }).length;
        if (!inUse) continue; // a network that does not allocate from this node's subnet
        const hostBits = (subnet.family === 4 ? 32 : 128) - subnet.length;
        // host-local never hands out the network address, the gateway (.1) nor, in IPv4, the broadcast address
        const usable = Math.max(0, 2 ** hostBits - (subnet.family === 4 ? 3 : 2));
        const labels = { network, family: fam(subnet.family) };
        out.push(['flannel_pod_addresses', { ...labels, state: 'in_use' }, inUse], ['flannel_pod_addresses', { ...labels, state: 'free' }, Math.max(0, usable - inUse)]);
      }
    }
    return out;
  }

  /** The process's own series: memory (resident, and the JavaScript heap inside it), CPU, start time. */
  private processFamilies(): string[] {
    const mem = process.memoryUsage();
    const cpu = process.cpuUsage();
    return [
      family('process_resident_memory_bytes', 'gauge', 'Resident memory size in bytes.', [['process_resident_memory_bytes', {}, mem.rss]]),
      family('process_cpu_seconds_total', 'counter', 'Total user and system CPU time spent in seconds.', [['process_cpu_seconds_total', {}, (cpu.user + cpu.system) / 1e6]]),
      family('process_start_time_seconds', 'gauge', 'Start time of the process since unix epoch in seconds.', [['process_start_time_seconds', {}, this.startedAt]]),
      family('nodejs_heap_size_total_bytes', 'gauge', 'Process heap size from Node.js in bytes.', [['nodejs_heap_size_total_bytes', {}, mem.heapTotal]]),
      family('nodejs_heap_size_used_bytes', 'gauge', 'Process heap size used from Node.js in bytes.', [['nodejs_heap_size_used_bytes', {}, mem.heapUsed]]),
      family('nodejs_external_memory_bytes', 'gauge', 'Node.js external memory size in bytes.', [['nodejs_external_memory_bytes', {}, mem.external]]),
    ];
  }

  /** The exposition text. */
  render(): string {
    const perFamily = (name: string, m: Map<string, number>): [string, Labels, number][] => [...m].sort().map(([family, v]) => [name, { family }, v]);
    const hist: [string, Labels, number][] = [];
    for (const kind of ['full', 'changes'] as const) {
      const h = this.durations.get(kind);
      if (h) hist.push(...h.samples('flannel_reconcile_duration_seconds', { kind }));
    }
    const latency = this.latency.samples('flannel_lease_change_apply_seconds', {});
    const passes: [string, Labels, number][] = [...this.passes].sort().map(([key, v]) => {
      const [kind, result] = key.split(' ');
      return ['flannel_reconcile_passes_total', { kind, result }, v];
    });
    return (
      [
        family('flannel_peers', 'gauge', 'Peers programmed on this node\'s VTEP (neighbour, FDB entry and route each), per family.', perFamily('flannel_peers', this.peerCount)),
        family('flannel_peer_changes_applied_total', 'counter', 'Kernel changes (one neighbour, FDB entry or route each) applied for peers.', perFamily('flannel_peer_changes_applied_total', this.applied)),
        family('flannel_peer_changes_failed_total', 'counter', 'Kernel changes for peers the kernel refused (retried by the next full pass).', perFamily('flannel_peer_changes_failed_total', this.failed)),
        family('flannel_reconcile_passes_total', 'counter', 'Reconcile passes: kind "full" (start, periodic: compared with the kernel) or "changes" (a change seen by the watch); result "ok" or "failed".', passes),
        family('flannel_reconcile_duration_seconds', 'histogram', 'How long reconcile passes took, per kind.', hist),
        family('flannel_lease_change_apply_seconds', 'histogram', 'From a lease change reaching the daemon (the watch\'s event) until the pass that applied it had the kernel programmed; the oldest change of each pass.', latency),
        family('flannel_reconcile_cpu_seconds_total', 'counter', 'CPU time the daemon process used while passes of each kind ran (user + system).', [...this.cpu].map(([kind, v]) => ['flannel_reconcile_cpu_seconds_total', { kind }, v] as [string, Labels, number])),
        family('flannel_last_reconcile_success_timestamp_seconds', 'gauge', 'Unix time of the last pass that left every VTEP up and every peer programmed.', this.lastSuccess === undefined ? [] : [['flannel_last_reconcile_success_timestamp_seconds', {}, this.lastSuccess]]),
        family('flannel_watch_errors_total', 'counter', 'Times the watch on the lease source failed and was opened again.', [['flannel_watch_errors_total', {}, this.watchErrors]]),
        family('flannel_relists_total', 'counter', 'Times the lease source was listed again in full because the watch fell behind (Kubernetes: 410 Gone).', [['flannel_relists_total', {}, this.sources.relists?.() ?? 0]]),
        family('flannel_lease_renewals_total', 'counter', 'Renewals of this node\'s lease (etcd and file stores; Kubernetes leases are not renewed).', [['flannel_lease_renewals_total', {}, this.renewals]]),
        family('flannel_pod_addresses', 'gauge', 'Pod addresses of this node\'s subnet per host-local network: state "in_use" (reserved) or "free".', this.podAddresses()),
        ...this.more.flatMap((f) => f()),
        ...this.processFamilies(),
      ].join('\n') + '\n'
    );
  }
}
