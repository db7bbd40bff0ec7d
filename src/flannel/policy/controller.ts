// `vxlan-flannel daemon --kube-subnet-mgr --network-policy`: Kubernetes
// NetworkPolicy enforced for the pods of this node, in the kernel.
//
//   informers (Pods, Namespaces, NetworkPolicies: list + watch, kube/informer.ts)
//     -> the engine (engine.ts: every change recorded, only what it touches)
//     -> the table (enforcer.ts: one nft transaction per batch of changes)
//
// Nothing is written before all three collections are listed: a table left
// by the previous run stays in force meanwhile (a restart opens no window),
// and is then replaced whole in one transaction. From then on, changes that
// arrive together (within a few milliseconds) are one transaction. A batch
// the kernel refuses (someone changed our table) is followed by a
// replacement of the whole table. Every reconcile interval the table's
// presence, br_netfilter's switches and the drop counters are checked.
import type { Family } from '../../net/ip';
import { Serial } from '../../util/serial';
import type { KubeClient } from '../kube/client';
import { Informer, type Change, type InformerOptions } from '../kube/informer';
import { NAMESPACES, NETWORK_POLICIES, PODS, type KubeObject } from '../kube/resource';
import { Log, Reporter } from '../log';
import { PolicyEngine, noChanges } from './engine';
import { applyChanges, ensureBridgeNetfilter, readTableCounters, removeTable, replaceTable, tablePresent } from './enforcer';
import { PolicyMetrics, type UpdateKind } from './metrics';
import type { PodInfo, Policy } from './model';
import { TABLE } from './nft';
import { labelsOf, parsePolicy, podInfo } from './parse';
import type { Labels } from './selector';

export interface PolicyControllerOptions {
  client: KubeClient;
  /** This node's Node: its pods are the ones enforced. */
  nodeName: string;
  /** The overlay's families (net-conf.json's). */
  families: readonly Family[];
  log: Log;
  /** How often the table, br_netfilter and the counters are checked (--reconcile-interval). */
  resyncMs: number;
  /** For tests: the informers' retry delays. */
  backoff?: InformerOptions<KubeObject>['backoff'];
}

/** API changes this close together are one transaction. */
const BATCH_MS = 10;

type SlimPod = KubeObject & { info?: PodInfo };
type SlimNamespace = KubeObject & { labels?: Labels };
type SlimPolicy = KubeObject & { policy?: Policy };

/** An object's identity: all the cache keeps once its change is read. */
const identity = <T extends KubeObject>(o: T): T =>
  ({
    metadata: {
      name: o.metadata.name,
      ...(o.metadata.namespace !== undefined ? { namespace: o.metadata.namespace } : {}),
      ...(o.metadata.resourceVersion !== undefined ? { resourceVersion: o.metadata.resourceVersion } : {}),
    },
  }) as T;

export class PolicyController {
  readonly engine: PolicyEngine;
  readonly metrics: PolicyMetrics;
  private readonly informers: Informer<KubeObject>[];
  private readonly serial = new Serial();
  private readonly problems: Reporter;
  /** Policies that cannot be enforced exactly: key -> why. */
  private readonly unenforceable = new Map<string, string>();
  private synced = false;
  /** The table has been written from the lists (enforcement is what the policies say, as far as they go). */
  private written = false;
  private stopped = false;
  /** The next write replaces the whole table (the first, and after a refused batch). */
  private needFull = true;
  private batchTimer?: NodeJS.Timeout;
  private resyncTimer?: NodeJS.Timeout;
  /** Why enforcement is not what the policies say right now, by cause (for /readyz). */
  private readonly trouble = new Map<'list' | 'table' | 'bridge', string>();
  /** CPU the daemon spent on policy (reading changes, planning, writing), per kind of write. */
  private readonly cpu: Record<UpdateKind, number> = { full: 0, changes: 0 };
  /** The process's CPU at the start: the lists and the first write are counted from it. */
  private startCpu?: NodeJS.CpuUsage;
  /** CPU seconds the changes of the batch being gathered took to read (counted with its write). */
  private changeCpu = 0;
  private readonly startedAt = performance.now();

  constructor(private readonly o: PolicyControllerOptions) {
    this.engine = new PolicyEngine(o.nodeName, o.families);
    this.problems = new Reporter(o.log);
    this.metrics = new PolicyMetrics(
      () => ({ synced: this.synced, ...this.engine.stats() }),
      () => ({ ...this.cpu }),
    );
    const handlers = <T extends KubeObject>(what: string, apply: (c: Change<T>) => void) => ({
      onChange: (c: Change<T>) => this.changed(() => apply(c)),
      onError: (err: Error) => {
        this.metrics.watchError();
        if (!this.synced) this.trouble.set('list', `listing ${what}: ${err.message}`);
        this.problems.report(
          `watch ${what}`,
          `network policy: watching ${what}: ${err.message}${/ 403 /.test(err.message) ? ' (does the service account have the ClusterRole for --network-policy? docs/network-policy.md)' : ''}`,
        );
      },
      onRelist: (why: string) => {
        this.metrics.relisted();
        o.log(`network policy: listing ${what} again: ${why}`);
      },
    });
    const common = { ...(o.backoff ? { backoff: o.backoff } : {}) };
    const pods = new Informer<SlimPod>(
      o.client,
      PODS,
      handlers<SlimPod>('pods', (c) => this.engine.setPod(c.key, c.type === 'DELETED' ? undefined : c.object.info)),
      {
        ...common,
        keep: (p) => ({ ...identity(p), info: podInfo(p) }),
        retain: identity,
      },
    );
    const namespaces = new Informer<SlimNamespace>(
      o.client,
      NAMESPACES,
      handlers<SlimNamespace>('namespaces', (c) => this.engine.setNamespace(c.key, c.type === 'DELETED' ? undefined : c.object.labels)),
      {
        ...common,
        keep: (n) => ({ ...identity(n), labels: labelsOf(n.metadata) }),
        retain: identity,
      },
    );
    const policies = new Informer<SlimPolicy>(
      o.client,
      NETWORK_POLICIES,
      handlers<SlimPolicy>('network policies', (c) => this.setPolicy(c.key, c.type === 'DELETED' ? undefined : c.object.policy)),
      {
        ...common,
        keep: (p) => ({ ...identity(p), policy: parsePolicy(p) }),
        retain: identity,
      },
    );
    this.informers = [pods, namespaces, policies] as Informer<KubeObject>[];
  }

  /** Starts listing and watching; enforcement begins once all three are listed. Returns at once. */
  start(): void {
    this.startCpu = process.cpuUsage(); // the lists and the first write: counted as "full"
    void this.bridge();
    void Promise.all(this.informers.map((i) => i.start())).then(() => {
      if (this.stopped) return;
      this.synced = true;
      this.trouble.delete('list');
      this.problems.clearAll();
      for (const [key, why] of this.unenforceable) this.reportUnenforceable(key, why);
      void this.write().then(() => {
        const s = this.engine.stats();
        this.o.log(
          `network policy: enforcing ${s.policies} policies for the ${s.localPods} pods of this node (${s.isolated.ingress} isolated for ingress, ${s.isolated.egress} for egress) ` +
            `in nftables table inet ${TABLE}, ${Math.round(performance.now() - this.startedAt)} ms after start`,
        );
      });
      this.scheduleResync();
    });
  }

  /** Why enforcement is not what the policies say (for /readyz), or undefined. */
  ready(): string | undefined {
    if (!this.synced) return `network policy: not listed yet${this.trouble.has('list') ? ` (${this.trouble.get('list')})` : ''}`;
    for (const why of this.trouble.values()) return `network policy: ${why}`;
    if (!this.written) return 'network policy: the table is not written yet';
    const n = this.unenforceable.size;
    if (n) {
      const [key, why] = this.unenforceable.entries().next().value!;
      return `network policy ${key} cannot be enforced (${why})${n > 1 ? ` and ${n - 1} more` : ''}`;
    }
    return undefined;
  }

  /** Stops the informers and checks; the table stays in force (a restart opens no window). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.batchTimer);
    clearTimeout(this.resyncTimer);
    for (const i of this.informers) i.stop();
    await this.serial.run(async () => {});
  }

  /** Removes the table (the node leaves: --release-on-exit). */
  async remove(): Promise<void> {
    await this.serial.run(async () => {
      if (await removeTable()) this.o.log(`network policy: removed the nftables table inet ${TABLE}`);
    });
  }

  private setPolicy(key: string, policy: Policy | undefined): void {
    this.engine.setPolicy(key, policy);
    if (policy?.problem) {
      this.unenforceable.set(key, policy.problem);
      if (this.synced) this.reportUnenforceable(key, policy.problem);
    } else if (this.unenforceable.delete(key)) {
      this.problems.clear(`policy ${key}`, `network policy ${key}: ${policy ? 'enforced' : 'deleted'}`);
    }
    this.scheduleBatch();
  }

  private reportUnenforceable(key: string, why: string): void {
    this.problems.report(
      `policy ${key}`,
      `network policy ${key} cannot be enforced: ${why}; it isolates the pods it selects and allows nothing until it is fixed`,
    );
  }

  /**
   * Reads one API change and schedules a batch. Its CPU is policy's: until
   * the lists are in, all of it from the start (counted with the first
   * write); after, each change's own (they are few: timing each costs ~3 µs).
   */
  private changed(fn: () => void): void {
    if (!this.synced) return fn();
    const before = process.cpuUsage();
    fn();
    const used = process.cpuUsage(before);
    this.changeCpu += (used.user + used.system) / 1e6;
    this.scheduleBatch();
  }

  private scheduleBatch(): void {
    if (!this.synced || this.stopped || this.batchTimer) return;
    this.batchTimer = setTimeout(() => {
      this.batchTimer = undefined;
      void this.write();
    }, BATCH_MS);
  }

  /** Writes what changed (or the whole table); one write at a time. */
  private write(): Promise<void> {
    return this.serial.run(async () => {
      if (this.stopped && !this.needFull) return;
      const kind: UpdateKind = this.needFull ? 'full' : 'changes';
      const t0 = performance.now();
      // The CPU of a write: a whole table's from its start (the first: from the daemon's) to its end; a batch's,
      // its changes' and the planning, text and spawn of its transaction (not the time awaiting nft, in which
      // the daemon does other things, such as answering /metrics)
      const cpu0 = (kind === 'full' && this.startCpu) || process.cpuUsage();
      this.startCpu = undefined;
      const spent = () => {
        const cpu = process.cpuUsage(cpu0);
        this.cpu[kind] += (cpu.user + cpu.system) / 1e6 + (kind === 'changes' ? this.changeCpu : 0);
        if (kind === 'changes') this.changeCpu = 0;
      };
      const changes = kind === 'changes' ? this.engine.takeChanges() : undefined;
      if (changes && noChanges(changes)) return spent(); // API changes that change nothing here (a status update)
      let ok = false;
      let statements = 0;
      try {
        let written: Promise<number>;
        if (changes) {
          written = applyChanges(changes); // planned, written out and nft spawned: now
          spent();
        } else written = replaceTable(this.engine.snapshot());
        statements = await written;
        this.needFull = false;
        this.written = true;
        ok = true;
        if (this.trouble.delete('table')) this.o.log('network policy: the table is in place again');
      } catch (err) {
        this.needFull = true;
        const why = `cannot write the nftables table inet ${TABLE}: ${(err as Error).message.split('\n')[0]}`;
        this.trouble.set('table', why);
        this.problems.report(
          'table',
          `network policy: ${why}; ${kind === 'changes' ? 'writing it whole' : `retrying every ${this.o.resyncMs / 1000} s`}`,
        );
        if (kind === 'changes') setImmediate(() => void this.write());
      } finally {
        if (kind === 'full') spent();
        this.metrics.updated(kind, (performance.now() - t0) / 1000, ok, statements);
      }
    });
  }

  /** br_netfilter's switches on (and kept on). */
  private async bridge(): Promise<void> {
    try {
      for (const c of await ensureBridgeNetfilter(this.o.families))
        this.o.log(`network policy: set ${c}, so that traffic between two pods of this node meets the table`);
      if (this.trouble.delete('bridge')) this.o.log('network policy: br_netfilter is on again');
    } catch (err) {
      this.trouble.set('bridge', (err as Error).message);
      this.problems.report('bridge', `network policy: ${(err as Error).message}`);
    }
  }

  /** Every reconcile interval: br_netfilter, the table's presence (written whole when it went), the counters. */
  private scheduleResync(): void {
    if (this.stopped) return;
    this.resyncTimer = setTimeout(async () => {
      await this.bridge();
      try {
        if (!this.needFull && !(await tablePresent())) {
          this.o.log(`network policy: the nftables table inet ${TABLE} is gone: writing it again`);
          this.needFull = true;
        }
        if (this.needFull) await this.write();
        const counters = await readTableCounters();
        if (counters) this.metrics.dropped(counters);
      } catch (err) {
        this.problems.report('resync', `network policy: cannot check the table: ${(err as Error).message}`);
      }
      this.scheduleResync();
    }, this.o.resyncMs);
  }
}
