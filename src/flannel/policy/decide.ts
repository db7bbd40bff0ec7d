// Whether the policies allow one connection, read straight from the API's
// definition (pure): `vxlan-flannel policy` explains with it, and the tests
// hold what the node's nftables rules do against it.
//
// A connection from A to B is allowed when A's egress allows it and B's
// ingress allows it. A pod that no policy isolates in a direction is open in
// it; an isolated one is open to what at least one rule of one of the
// policies selecting it allows: a rule allows a peer it lists (any peer when
// it lists none) on a port it lists (any port when it lists none). A port
// given by name is the destination pod's container port of that name and
// protocol. A bare address (not a pod) is matched by ipBlock only; a
// policy's own rules never apply to it.
import { IP } from '../../net/ip';
import { selects } from './chains';
import type { Direction, PodInfo, Policy, PortSpec, Protocol, Rule } from './model';
import { rangeContains } from './ranges';
import { matches, type Labels } from './selector';

export interface Endpoint {
  ip: string;
  /** The pod holding `ip`, when a pod does. */
  pod?: PodInfo;
}

export interface ClusterView {
  /** The policies of a namespace. */
  policiesIn(namespace: string): readonly Policy[];
  namespaceLabels(namespace: string): Labels | undefined;
}

export interface Verdict {
  allowed: boolean;
  /** The policies isolating the pod in this direction ([] : not isolated, open). */
  isolatedBy: string[];
  /** The policies (namespace/name) with a rule allowing it. */
  allowedBy: string[];
}

const OPEN: Verdict = { allowed: true, isolatedBy: [], allowedBy: [] };

function peerMatches(rule: Rule, other: Endpoint, view: ClusterView): boolean {
  if (rule.peers === 'all') return true;
  return rule.peers.some((peer) => {
    if (peer.kind === 'block') {
      const ip = IP.parse(other.ip);
      return !!ip && ip.family === peer.family && rangeContains(peer.ranges, ip.value);
    }
    const pod = other.pod;
    if (!pod) return false;
    if (
      peer.namespace !== undefined
        ? pod.namespace !== peer.namespace
        : !matches(peer.namespaceSelector!, view.namespaceLabels(pod.namespace) ?? {})
    )
      return false;
    return !peer.podSelector || matches(peer.podSelector, pod.labels);
  });
}

function portMatches(spec: PortSpec, protocol: Protocol, port: number, destination: Endpoint): boolean {
  if (spec.protocol !== protocol) return false;
  if ('range' in spec) return spec.range[0] <= port && port <= spec.range[1];
  return !!destination.pod?.ports.some((p) => p.name === spec.name && p.protocol === protocol && p.port === port);
}

/** One side's verdict: `self`'s policies for `dir` about `other`; the destination is the one whose named ports count. */
export function sideVerdict(dir: Direction, self: Endpoint, other: Endpoint, protocol: Protocol, port: number, view: ClusterView): Verdict {
  const pod = self.pod;
  if (!pod) return OPEN;
  const isolating = view.policiesIn(pod.namespace).filter((p) => p[dir] !== undefined && selects(p, pod));
  if (!isolating.length) return OPEN;
  const destination = dir === 'ingress' ? self : other;
  const allowedBy = isolating
    .filter((p) =>
      p[dir]!.some(
        (rule) =>
          peerMatches(rule, other, view) && (rule.ports === 'all' || rule.ports.some((s) => portMatches(s, protocol, port, destination))),
      ),
    )
    .map((p) => `${p.namespace}/${p.name}`);
  return { allowed: allowedBy.length > 0, isolatedBy: isolating.map((p) => `${p.namespace}/${p.name}`), allowedBy };
}

/** Whether a connection from `from` to `to` on protocol/port is allowed, and by what. */
export function decide(
  from: Endpoint,
  to: Endpoint,
  protocol: Protocol,
  port: number,
  view: ClusterView,
): { allowed: boolean; egress: Verdict; ingress: Verdict } {
  const egress = sideVerdict('egress', from, to, protocol, port, view);
  const ingress = sideVerdict('ingress', to, from, protocol, port, view);
  return { allowed: egress.allowed && ingress.allowed, egress, ingress };
}
