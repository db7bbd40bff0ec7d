// What the policies say about one pod, in words (pure): which policies
// isolate it in each direction, and what each of their rules allows, peers
// resolved to the pods they stand for and ports by name resolved where they
// are (ingress: on the pod itself; egress: on each destination). What
// `vxlan-flannel policy` prints.
import { selects } from './chains';
import type { ClusterView } from './decide';
import { DIRECTIONS, podKey, type Direction, type Peer, type PodInfo, type Policy, type PortSpec, type Rule } from './model';
import { matches, selectorText } from './selector';

export interface RuleReport {
  /** "from ..." / "to ...", one per peer (or anyone). */
  peers: string[];
  /** "tcp/80", "udp/serve-80-udp = 80" ... (or any port). */
  ports: string[];
}

export interface PolicyReport {
  name: string;
  /** Why it cannot be enforced exactly: it then allows nothing. */
  problem?: string;
  rules: RuleReport[];
}

export type DirectionReport = { isolated: false } | { isolated: true; policies: PolicyReport[] };

export interface PodReport {
  pod: PodInfo;
  ingress: DirectionReport;
  egress: DirectionReport;
}

/** How many pods a peer lists before "... and N more". */
const SHOWN = 8;

function pods(peer: Extract<Peer, { kind: 'pods' }>, all: readonly PodInfo[], view: ClusterView): string {
  const who =
    peer.namespace !== undefined
      ? `pods of namespace ${peer.namespace}`
      : `pods of namespaces ${peer.namespaceSelector!.requirements.length ? `matching ${selectorText(peer.namespaceSelector!)}` : '(all)'}`;
  const what = peer.podSelector && peer.podSelector.requirements.length ? ` matching ${selectorText(peer.podSelector)}` : '';
  const found = all.filter(
    (p) =>
      (peer.namespace !== undefined
        ? p.namespace === peer.namespace
        : matches(peer.namespaceSelector!, view.namespaceLabels(p.namespace) ?? {})) &&
      (!peer.podSelector || matches(peer.podSelector, p.labels)),
  );
  const names = found.slice(0, SHOWN).map(podKey).join(', ');
  return `${who}${what}: ${found.length ? `${names}${found.length > SHOWN ? `, and ${found.length - SHOWN} more` : ''}` : 'none now'}`;
}

function port(spec: PortSpec, dir: Direction, pod: PodInfo): string {
  if ('range' in spec)
    return spec.range[0] === 0 && spec.range[1] === 65535
      ? `${spec.protocol} (any port)`
      : `${spec.protocol}/${spec.range[0] === spec.range[1] ? spec.range[0] : `${spec.range[0]}-${spec.range[1]}`}`;
  if (dir === 'egress') return `${spec.protocol}/${spec.name} (each destination's port of that name)`;
  const p = pod.ports.find((x) => x.name === spec.name && x.protocol === spec.protocol);
  return `${spec.protocol}/${spec.name} = ${p ? p.port : 'no such port on this pod: matches nothing'}`;
}

function rule(r: Rule, dir: Direction, pod: PodInfo, all: readonly PodInfo[], view: ClusterView): RuleReport {
  const word = dir === 'ingress' ? 'from' : 'to';
  const peers =
    r.peers === 'all'
      ? [`${word} anywhere`]
      : r.peers.map(
          (p) =>
            `${word} ${p.kind === 'block' ? `addresses in ${p.cidr}${p.except.length ? ` except ${p.except.join(', ')}` : ''}` : pods(p, all, view)}`,
        );
  return { peers, ports: r.ports === 'all' ? ['any port, any protocol'] : r.ports.map((s) => port(s, dir, pod)) };
}

/** The report for `pod`; `all`: every pod of the cluster (to resolve peers). */
export function explainPod(pod: PodInfo, all: readonly PodInfo[], view: ClusterView): PodReport {
  const out: Partial<Record<Direction, DirectionReport>> = {};
  for (const dir of DIRECTIONS) {
    const isolating = view.policiesIn(pod.namespace).filter((p: Policy) => p[dir] !== undefined && selects(p, pod));
    out[dir] = isolating.length
      ? {
          isolated: true,
          policies: isolating.map((p) => ({
            name: `${p.namespace}/${p.name}`,
            ...(p.problem ? { problem: p.problem } : {}),
            rules: p[dir]!.map((r) => rule(r, dir, pod, all, view)),
          })),
        }
      : { isolated: false };
  }
  return { pod, ingress: out.ingress!, egress: out.egress! };
}
