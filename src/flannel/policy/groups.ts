// Peer groups: the pods a rule's peer stands for, kept as one nftables set per
// family that every local pod's rules using that peer share. A pod joining or
// leaving a group is one element added or deleted: a change touches the sets
// of the groups it is in, not the chains that use them.
//
// A group is either the addresses of the pods a peer selects (pods of a
// namespace by podSelector, of the namespaces a namespaceSelector selects,
// both), or, for an egress rule whose port is a container port's name, the
// (address, protocol, port) of each such pod that has a port of that name,
// resolved on that pod (the destination) as the API says; that also holds
// for an ipBlock peer (the pods inside it) and for "any destination" (all
// pods).
import { IP, type Family } from '../../net/ip';
import { sha256Hex } from '../../util/sha256';
import { familyOf, type PodInfo, type Protocol } from './model';
import { rangeContains, type Range } from './ranges';
import { matches, type Labels, type Selector } from './selector';

export type PodMatch =
  | { kind: 'selector'; namespace?: string; podSelector?: Selector; namespaceSelector?: Selector }
  | { kind: 'block'; family: Family; ranges: readonly Range<bigint>[]; text: string }
  | { kind: 'all' };

export interface GroupDef {
  match: PodMatch;
  /** A port by name: the group's elements are address . protocol . port. */
  port?: { name: string; protocol: Protocol };
}

/** The canonical text of a group: equal definitions, one group. */
export function groupKey(def: GroupDef): string {
  const m = def.match;
  const who =
    m.kind === 'selector'
      ? `pods${m.namespace !== undefined ? ` in ${JSON.stringify(m.namespace)}` : ''}${m.namespaceSelector ? ` ns ${m.namespaceSelector.text}` : ''}${m.podSelector ? ` pod ${m.podSelector.text}` : ''}`
      : m.kind === 'block'
        ? `pods in ${m.text}`
        : 'all pods';
  return def.port ? `${who} port ${def.port.protocol}/${def.port.name}` : who;
}

/** The nftables set of a group for a family: p-<hash>-4 (addresses) or n-<hash>-4 (address . protocol . port). */
export const groupSetName = (def: GroupDef, key: string, family: Family) =>
  `${def.port ? 'n' : 'p'}-${sha256Hex(key).slice(0, 16)}-${family}`;

/** Whether `pod` (its namespace labelled `nsLabels`) is one of the group's pods. */
export function inGroup(def: GroupDef, pod: PodInfo, nsLabels: Labels): boolean {
  const m = def.match;
  if (m.kind !== 'selector') return true;
  if (m.namespace !== undefined ? pod.namespace !== m.namespace : !!m.namespaceSelector && !matches(m.namespaceSelector, nsLabels))
    return false;
  return !m.podSelector || matches(m.podSelector, pod.labels);
}

/** The set elements a member pod brings, per family (none for a pod without the named port, or outside the block). */
export function elementsOf(def: GroupDef, pod: PodInfo): string[] {
  if (!pod.ips.length) return [];
  const m = def.match;
  let suffix = '';
  if (def.port) {
    const { name, protocol } = def.port;
    const p = pod.ports.find((x) => x.name === name && x.protocol === protocol);
    if (!p) return [];
    suffix = ` . ${protocol} . ${p.port}`;
  }
  const out: string[] = [];
  for (const ip of pod.ips) {
    if (m.kind === 'block' && (familyOf(ip) !== m.family || !rangeContains(m.ranges, ipValue(ip)))) continue;
    out.push(ip + suffix);
  }
  return out;
}

/** The namespace a group is confined to (its pods are all there), if any: a pod elsewhere need not be looked at. */
export const scopeOf = (def: GroupDef): string | undefined => (def.match.kind === 'selector' ? def.match.namespace : undefined);

function ipValue(ip: string): bigint {
  return IP.parse(ip)!.value;
}
