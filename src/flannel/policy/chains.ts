// One local pod's rules for one direction, as the chain its verdict map entry
// jumps to: the union of the rules of every policy that selects it (pure).
//
// The chain asks each question once, whatever the number of policies:
//   - per peer group (shared set of pod addresses): one rule, its ports the
//     union of the ports every rule gives that peer;
//   - address ranges (ipBlock, "any peer"): one rule for the ranges open on
//     every port, one for the (range, protocol, ports) triples, made
//     disjoint (interval sets refuse overlapping elements);
//   - egress ports by name: one rule per named-port group;
//   - then the drop, counted per direction.
// An allowed packet returns (to the base chain, which checks the other
// direction), a packet no rule allows is dropped.
import type { Family } from '../../net/ip';
import { groupKey, groupSetName, type GroupDef } from './groups';
import { PROTOCOLS, type Direction, type PodInfo, type Policy, type PortSpec, type Protocol } from './model';
import { ALL_ADDRESSES, addressRangeText, normalize, portRangeText, type Range } from './ranges';
import { matches } from './selector';

/** Ports per protocol (normalized); 'all' for every protocol and port. */
export type PortUnion = 'all' | Readonly<Record<Protocol, readonly Range<number>[]>>;

/** The rules of a chain, structured (tests evaluate them; text renders them). */
export type RuleIR =
  | { kind: 'group'; family: Family; set: string; ports: PortUnion }
  | { kind: 'ranges'; family: Family; ranges: readonly Range<bigint>[] }
  | { kind: 'rangePorts'; family: Family; elements: readonly { range: Range<bigint>; protocol: Protocol; ports: Range<number> }[] }
  | { kind: 'named'; family: Family; set: string };

export interface ChainPlan {
  rules: RuleIR[];
  /** The rules as nft statements, the drop last. */
  text: string[];
  /** The groups the rules use, by key. */
  groups: Map<string, GroupDef>;
}

const NO_PORTS: Record<Protocol, Range<number>[]> = { tcp: [], udp: [], sctp: [] };

export function unionPorts(a: PortUnion, b: PortUnion): PortUnion {
  if (a === 'all' || b === 'all') return 'all';
  return { tcp: normalize([...a.tcp, ...b.tcp]), udp: normalize([...a.udp, ...b.udp]), sctp: normalize([...a.sctp, ...b.sctp]) };
}

const emptyPorts = (p: PortUnion) => p !== 'all' && PROTOCOLS.every((x) => p[x].length === 0);
const portsText = (p: PortUnion) => (p === 'all' ? 'all' : PROTOCOLS.map((x) => `${x}:${p[x].map(portRangeText).join(',')}`).join(' '));

/** Whether policy `p` selects `pod` (same namespace, its podSelector; every pod when the selector could not be read). */
export const selects = (p: Policy, pod: PodInfo) => p.namespace === pod.namespace && (!p.podSelector || matches(p.podSelector, pod.labels));

/** The policies of `policies` that select `pod` and isolate it in `dir`. */
export const isolating = (dir: Direction, pod: PodInfo, policies: Iterable<Policy>) =>
  [...policies].filter((p) => p[dir] !== undefined && selects(p, pod));

/**
 * The chain of `pod` for `dir` from the policies that select it and isolate
 * that direction (`policies`: those, in a stable order); `families`: the
 * families the pod has addresses of.
 */
export function planChain(dir: Direction, pod: PodInfo, policies: readonly Policy[], families: readonly Family[]): ChainPlan {
  const groupPorts = new Map<string, { def: GroupDef; ports: PortUnion }>();
  const named = new Map<string, GroupDef>();
  const ranges: { family: Family; ranges: readonly Range<bigint>[]; ports: PortUnion }[] = [];
  const addGroup = (def: GroupDef, ports: PortUnion) => {
    const key = groupKey(def);
    const had = groupPorts.get(key);
    groupPorts.set(key, { def, ports: had ? unionPorts(had.ports, ports) : ports });
  };

  for (const policy of policies) {
    for (const rule of policy[dir] ?? []) {
      // numbers (and, for ingress, names resolved on this pod, the destination), and names left for egress's destinations
      let numbers: PortUnion = rule.ports === 'all' ? 'all' : { ...NO_PORTS };
      const names: { name: string; protocol: Protocol }[] = [];
      for (const spec of rule.ports === 'all' ? [] : rule.ports) {
        const range = numeric(spec, dir, pod);
        if (range) numbers = unionPorts(numbers, { ...NO_PORTS, [spec.protocol]: [range] });
        else if ('name' in spec && dir === 'egress') names.push({ name: spec.name, protocol: spec.protocol });
      }
      const open = !emptyPorts(numbers);
      for (const peer of rule.peers === 'all' ? ([{ kind: 'all' }] as const) : rule.peers) {
        if (peer.kind === 'pods') {
          const match = { ...peer, kind: 'selector' } as const;
          if (open) addGroup({ match }, numbers);
          for (const port of names) named.set(groupKey({ match, port }), { match, port });
        } else if (peer.kind === 'block') {
          if (open) ranges.push({ family: peer.family, ranges: peer.ranges, ports: numbers });
          const match = {
            kind: 'block',
            family: peer.family,
            ranges: peer.ranges,
            text: [peer.cidr, ...peer.except.map((e) => `!${e}`)].join(' '),
          } as const;
          for (const port of names) named.set(groupKey({ match, port }), { match, port });
        } else {
          if (open) for (const family of [4, 6] as const) ranges.push({ family, ranges: [ALL_ADDRESSES[family]], ports: numbers });
          for (const port of names) named.set(groupKey({ match: { kind: 'all' }, port }), { match: { kind: 'all' }, port });
        }
      }
    }
  }

  const rules: RuleIR[] = [];
  for (const family of families) {
    const fam = ranges.filter((r) => r.family === family);
    const { any, perPort } = decompose(fam);
    if (any.length) rules.push({ kind: 'ranges', family, ranges: any });
    if (any.length === 1 && isAll(family, any[0])) continue; // every peer on every port: nothing more to ask
    for (const [key, { def, ports }] of [...groupPorts].sort(([a], [b]) => (a < b ? -1 : 1)))
      rules.push({ kind: 'group', family, set: groupSetName(def, key, family), ports });
    if (perPort.length) rules.push({ kind: 'rangePorts', family, elements: perPort });
    for (const [key, def] of [...named].sort(([a], [b]) => (a < b ? -1 : 1)))
      rules.push({ kind: 'named', family, set: groupSetName(def, key, family) });
  }
  const groups = new Map<string, GroupDef>([...[...groupPorts].map(([k, v]) => [k, v.def] as const), ...named]);
  const addr = dir === 'ingress' ? 'saddr' : 'daddr';
  return { rules, text: [...rules.map((r) => ruleText(r, addr)), `counter name "${dir}-dropped" drop`], groups };
}

/** A port spec as numbers: ranges as they are; a name only for ingress, looked up on the pod itself (undefined when it has no such port). */
function numeric(spec: PortSpec, dir: Direction, pod: PodInfo): Range<number> | undefined {
  if ('range' in spec) return spec.range;
  if (dir === 'egress') return undefined;
  const p = pod.ports.find((x) => x.name === spec.name && x.protocol === spec.protocol);
  return p ? [p.port, p.port] : undefined;
}

/**
 * Address ranges with their ports, made disjoint: the ranges open to every
 * port (`any`, merged) and (range, protocol, ports) triples for the rest,
 * no two overlapping (an interval set refuses overlapping elements).
 */
export function decompose(entries: readonly { family: Family; ranges: readonly Range<bigint>[]; ports: PortUnion }[]): {
  any: Range<bigint>[];
  perPort: { range: Range<bigint>; protocol: Protocol; ports: Range<number> }[];
} {
  const points = new Set<bigint>();
  for (const e of entries) for (const [lo, hi] of e.ranges) points.add(lo).add(hi + 1n);
  const cuts = [...points].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  // each elementary interval [cuts[i], cuts[i+1]-1] with the union of the ports of the entries that cover it
  const pieces: { range: [bigint, bigint]; ports: PortUnion; key: string }[] = [];
  for (let i = 0; i + 1 < cuts.length; i++) {
    const lo = cuts[i];
    const hi = cuts[i + 1] - 1n;
    let ports: PortUnion | undefined;
    for (const e of entries) if (e.ranges.some(([a, b]) => a <= lo && hi <= b)) ports = ports ? unionPorts(ports, e.ports) : e.ports;
    if (!ports) continue;
    const key = portsText(ports);
    const last = pieces[pieces.length - 1];
    if (last && last.key === key && last.range[1] + 1n === lo) last.range[1] = hi;
    else pieces.push({ range: [lo, hi], ports, key });
  }
  const any: Range<bigint>[] = [];
  const perPort: { range: Range<bigint>; protocol: Protocol; ports: Range<number> }[] = [];
  for (const p of pieces) {
    if (p.ports === 'all') any.push(p.range);
    else for (const protocol of PROTOCOLS) for (const ports of p.ports[protocol]) perPort.push({ range: p.range, protocol, ports });
  }
  return { any: normalize(any), perPort };
}

const IPF = { 4: 'ip', 6: 'ip6' } as const;
const NFPROTO = { 4: 'ipv4', 6: 'ipv6' } as const;
const isAll = (family: Family, r: Range<bigint>) => r[0] === ALL_ADDRESSES[family][0] && r[1] === ALL_ADDRESSES[family][1];

function portElements(p: Exclude<PortUnion, 'all'>): string {
  return PROTOCOLS.flatMap((x) => p[x].map((r) => `${x} . ${portRangeText(r)}`)).join(', ');
}

/** One rule as an nft statement; `addr` is the peer's address (saddr for ingress, daddr for egress). */
export function ruleText(r: RuleIR, addr: 'saddr' | 'daddr'): string {
  const ip = IPF[r.family];
  switch (r.kind) {
    case 'group':
      return `${ip} ${addr} @${r.set}${r.ports === 'all' ? '' : ` meta l4proto . th dport { ${portElements(r.ports)} }`} return`;
    case 'ranges':
      if (r.ranges.length === 1 && isAll(r.family, r.ranges[0])) return `meta nfproto ${NFPROTO[r.family]} return`;
      return `${ip} ${addr} { ${r.ranges.map((x) => addressRangeText(r.family, x)).join(', ')} } return`;
    case 'rangePorts':
      if (r.elements.every((e) => isAll(r.family, e.range))) {
        return `meta nfproto ${NFPROTO[r.family]} meta l4proto . th dport { ${r.elements.map((e) => `${e.protocol} . ${portRangeText(e.ports)}`).join(', ')} } return`;
      }
      return `${ip} ${addr} . meta l4proto . th dport { ${r.elements.map((e) => `${addressRangeText(r.family, e.range)} . ${e.protocol} . ${portRangeText(e.ports)}`).join(', ')} } return`;
    case 'named':
      return `${ip} ${addr} . meta l4proto . th dport @${r.set} return`;
  }
}
