// --network-policy's series on /metrics (documented in docs/network-policy.md):
// what is enforced, each rule update of the table and what it took, and the
// packets the table dropped (its counters, as last read).
import { Histogram, family, type Sample } from '../../util/prometheus';
import type { Direction } from './model';
import type { Counters } from './nft';

export type UpdateKind = 'full' | 'changes';

export interface PolicyState {
  synced: boolean;
  policies: number;
  unenforceable: number;
  localPods: number;
  isolated: Record<Direction, number>;
  groups: number;
}

export class PolicyMetrics {
  private readonly updates = new Map<string, number>();
  private readonly durations = new Map<UpdateKind, Histogram>();
  private readonly statements = new Map<UpdateKind, number>();
  private counters?: Counters;
  private relistCount = 0;
  private errorCount = 0;

  constructor(
    private readonly state: () => PolicyState,
    /** CPU seconds spent on policy, per kind of write (the API changes' share counted with "changes"). */
    private readonly cpu: () => Record<UpdateKind, number>,
  ) {}

  /** One write of the table: a replacement or a batch of changes, of `statements` nft statements. */
  updated(kind: UpdateKind, seconds: number, ok: boolean, statements = 0): void {
    const key = `${kind} ${ok ? 'ok' : 'failed'}`;
    this.updates.set(key, (this.updates.get(key) ?? 0) + 1);
    this.statements.set(kind, (this.statements.get(kind) ?? 0) + statements);
    let h = this.durations.get(kind);
    if (!h) this.durations.set(kind, (h = new Histogram()));
    h.observe(seconds);
  }

  dropped(c: Counters): void {
    this.counters = c;
  }

  relisted(): void {
    this.relistCount++;
  }

  watchError(): void {
    this.errorCount++;
  }

  families(): string[] {
    const s = this.state();
    const updates: Sample[] = [...this.updates].sort().map(([key, v]) => {
      const [kind, result] = key.split(' ');
      return ['flannel_network_policy_rule_updates_total', { kind, result }, v];
    });
    const durations = [...this.durations]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .flatMap(([kind, h]) => h.samples('flannel_network_policy_rule_update_duration_seconds', { kind }));
    const dirs = ['ingress', 'egress'] as const;
    return [
      family(
        'flannel_network_policy_synced',
        'gauge',
        'Whether Pods, Namespaces and NetworkPolicies are listed and the table written from them (1) or not yet (0).',
        [['flannel_network_policy_synced', {}, s.synced ? 1 : 0]],
      ),
      family(
        'flannel_network_policies',
        'gauge',
        'NetworkPolicies in the cluster: state "enforced", or "unenforceable" (failing closed: see the log and /readyz).',
        [
          ['flannel_network_policies', { state: 'enforced' }, s.policies - s.unenforceable],
          ['flannel_network_policies', { state: 'unenforceable' }, s.unenforceable],
        ],
      ),
      family('flannel_network_policy_local_pods', 'gauge', 'Pods of this node (not on the host network) policy is enforced for.', [
        ['flannel_network_policy_local_pods', {}, s.localPods],
      ]),
      family(
        'flannel_network_policy_isolated_pods',
        'gauge',
        'Pods of this node isolated by at least one NetworkPolicy, per direction.',
        dirs.map((d): Sample => ['flannel_network_policy_isolated_pods', { direction: d }, s.isolated[d]]),
      ),
      family('flannel_network_policy_peer_groups', 'gauge', "Peer groups (an nftables set per family each) the local pods' rules use.", [
        ['flannel_network_policy_peer_groups', {}, s.groups],
      ]),
      family(
        'flannel_network_policy_rule_updates_total',
        'counter',
        'Writes of the nftables table: kind "full" (the whole table, in one transaction) or "changes" (what one batch of API changes touched); result "ok" or "failed".',
        updates,
      ),
      family(
        'flannel_network_policy_rule_update_duration_seconds',
        'histogram',
        'How long writes of the table took (computing and nft), per kind.',
        durations,
      ),
      family(
        'flannel_network_policy_rule_statements_total',
        'counter',
        'nft statements written to the table (a set element, a map entry, a rule, a set or chain made or deleted), per kind of write.',
        [...this.statements].sort().map(([kind, v]): Sample => ['flannel_network_policy_rule_statements_total', { kind }, v]),
      ),
      family(
        'flannel_network_policy_cpu_seconds_total',
        'counter',
        "CPU time the daemon spent on network policy (reading API changes, planning, writing; not nft's own), per kind of write.",
        Object.entries(this.cpu()).map(([kind, v]): Sample => ['flannel_network_policy_cpu_seconds_total', { kind }, v]),
      ),
      family(
        'flannel_network_policy_dropped_packets_total',
        'counter',
        "Packets the policies dropped on this node, per direction (the table's counters, read every reconcile interval).",
        dirs.map((d): Sample => ['flannel_network_policy_dropped_packets_total', { direction: d }, this.counters?.[d].packets ?? 0]),
      ),
      family(
        'flannel_network_policy_dropped_bytes_total',
        'counter',
        'Bytes of the packets the policies dropped on this node, per direction.',
        dirs.map((d): Sample => ['flannel_network_policy_dropped_bytes_total', { direction: d }, this.counters?.[d].bytes ?? 0]),
      ),
      family(
        'flannel_network_policy_relists_total',
        'counter',
        'Times Pods, Namespaces or NetworkPolicies were listed again because a watch fell behind (410 Gone) or broke.',
        [['flannel_network_policy_relists_total', {}, this.relistCount]],
      ),
      family(
        'flannel_network_policy_watch_errors_total',
        'counter',
        'Times a list or watch of Pods, Namespaces or NetworkPolicies failed and was retried.',
        [['flannel_network_policy_watch_errors_total', {}, this.errorCount]],
      ),
    ];
  }
}
