// `vxlan-flannel policy NAMESPACE/POD [--from POD-OR-ADDRESS --port PROTO/PORT]`:
// which NetworkPolicies select a pod and what they allow, read from the API
// (one list of Pods, Namespaces and NetworkPolicies) the way the daemon reads
// it; with --from, whether that connection is allowed and by which policies.
import { IP } from '../../net/ip';
import { KubeClient } from '../kube/client';
import { loadKubeConnection, type KubeConfigOptions } from '../kube/config';
import { NAMESPACES, NETWORK_POLICIES, PODS, type KubeObject } from '../kube/resource';
import { decide, type ClusterView, type Endpoint, type Verdict } from '../policy/decide';
import { explainPod, type DirectionReport, type PodReport } from '../policy/explain';
import { PROTOCOLS, podKey, type PodInfo, type Policy, type Protocol } from '../policy/model';
import { labelsOf, parsePolicy, podInfo } from '../policy/parse';
import type { Labels } from '../policy/selector';

export interface PolicyQuery {
  /** namespace/name */
  pod: string;
  /** Another pod (namespace/name) or an address: is a connection from it to the pod allowed? */
  from?: string;
  /** With --from: protocol/port, e.g. tcp/80 (a bare number is TCP). */
  port?: string;
}

export interface PolicyAnswer {
  report: PodReport;
  connection?: { from: string; protocol: Protocol; port: number; allowed: boolean; egress: Verdict; ingress: Verdict };
}

function parsePort(text: string): { protocol: Protocol; port: number } {
  const m = /^(?:(tcp|udp|sctp)\/)?(\d{1,5})$/i.exec(text);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port < 1 || port > 65535)
    throw new Error(`--port ${JSON.stringify(text)}: give protocol/port, e.g. tcp/80, udp/53 (${PROTOCOLS.join(', ')})`);
  return { protocol: (m[1]?.toLowerCase() ?? 'tcp') as Protocol, port };
}

/** The cluster as one list of each (namespaced objects by namespace/name). */
async function readCluster(client: KubeClient): Promise<{ pods: Map<string, PodInfo>; view: ClusterView }> {
  const [pods, namespaces, policies] = await Promise.all([
    client.list<KubeObject>(PODS),
    client.list<KubeObject>(NAMESPACES),
    client.list<KubeObject>(NETWORK_POLICIES),
  ]);
  const podMap = new Map<string, PodInfo>();
  for (const p of pods.items) {
    const info = podInfo(p);
    if (info) podMap.set(podKey(info), info);
  }
  const labels = new Map<string, Labels>(namespaces.items.map((n) => [n.metadata.name, labelsOf(n.metadata)]));
  const byNs = new Map<string, Policy[]>();
  for (const p of policies.items.map(parsePolicy).sort((a, b) => (podKey(a) < podKey(b) ? -1 : 1)))
    byNs.set(p.namespace, [...(byNs.get(p.namespace) ?? []), p]);
  return { pods: podMap, view: { policiesIn: (ns) => byNs.get(ns) ?? [], namespaceLabels: (ns) => labels.get(ns) } };
}

export async function policyAnswer(conn: KubeConfigOptions, q: PolicyQuery): Promise<PolicyAnswer> {
  const wanted = q.port !== undefined ? parsePort(q.port) : undefined;
  if (q.from !== undefined && !wanted) throw new Error('--from needs --port (e.g. --port tcp/80)');
  const client = new KubeClient(await loadKubeConnection(conn));
  try {
    const { pods, view } = await readCluster(client);
    const pod = pods.get(q.pod);
    if (!pod)
      throw new Error(`no pod ${q.pod} that policy applies to (none by that name, or it is on the host's network, or it has finished)`);
    const report = explainPod(pod, [...pods.values()], view);
    if (q.from === undefined || !wanted) return { report };
    const ip = IP.parse(q.from)?.toString();
    let from: Endpoint;
    if (ip) from = { ip, pod: [...pods.values()].find((p) => p.ips.includes(ip)) };
    else {
      const src = pods.get(q.from);
      if (!src) throw new Error(`--from ${JSON.stringify(q.from)}: neither an address nor a pod (namespace/name) that policy applies to`);
      from = { ip: src.ips[0] ?? '', pod: src };
    }
    const to: Endpoint = { ip: pod.ips.find((a) => a.includes(':') === from.ip.includes(':')) ?? pod.ips[0] ?? '', pod };
    const d = decide(from, to, wanted.protocol, wanted.port, view);
    return { report, connection: { from: q.from, ...wanted, ...d } };
  } finally {
    client.close();
  }
}

function direction(name: string, d: DirectionReport): string[] {
  if (!d.isolated) return [`${name}: open (no policy isolates it)`];
  const lines = [
    `${name}: isolated by ${d.policies.length} polic${d.policies.length === 1 ? 'y' : 'ies'}; what no rule below allows is dropped`,
  ];
  for (const p of d.policies) {
    lines.push(`  ${p.name}${p.problem ? ` CANNOT BE ENFORCED (${p.problem}): allows nothing` : p.rules.length ? '' : ': allows nothing'}`);
    if (p.problem) continue;
    for (const r of p.rules) {
      for (const peer of r.peers) lines.push(`    ${peer}`);
      lines.push(`      on ${r.ports.join(', ')}`);
    }
  }
  return lines;
}

const verdictText = (v: Verdict) =>
  !v.isolatedBy.length
    ? 'open'
    : v.allowed
      ? `allowed by ${v.allowedBy.join(', ')}`
      : `dropped (isolated by ${v.isolatedBy.join(', ')}; no rule allows it)`;

export function formatPolicyAnswer(a: PolicyAnswer): string {
  const { pod } = a.report;
  const labels =
    Object.entries(pod.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(',') || '(none)';
  const ports = pod.ports.map((p) => `${p.name} ${p.protocol}/${p.port}`).join(', ') || '(none)';
  const lines = [
    `pod ${podKey(pod)} on node ${pod.node || '(not scheduled)'}: ${pod.ips.join(', ') || '(no address yet)'}`,
    `  labels ${labels}; named ports ${ports}`,
    ...direction('ingress', a.report.ingress),
    ...direction('egress', a.report.egress),
  ];
  const c = a.connection;
  if (c) {
    lines.push(`${c.from} -> ${podKey(pod)} ${c.protocol}/${c.port}: ${c.allowed ? 'ALLOWED' : 'DROPPED'}`);
    lines.push(`  egress of ${c.from}: ${verdictText(c.egress)}`, `  ingress of ${podKey(pod)}: ${verdictText(c.ingress)}`);
  }
  return lines.join('\n') + '\n';
}
