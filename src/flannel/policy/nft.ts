// The nftables text of policy enforcement (pure): the whole table, made anew
// in one transaction, and a batch of changes as one transaction.
//
//   table inet flannel-netpol {
//     counter ingress-dropped, egress-dropped   packets no rule allowed
//     set p-<hash>-4 / -6                       a peer group's pod addresses
//     set n-<hash>-4 / -6                       address . protocol . port (egress ports by name)
//     chain in-<hash>, eg-<hash>                one per local pod and isolated direction (chains.ts)
//     map ingress4/6, egress4/6                 local pod address : jump its chain
//     chain forward                             hook forward: replies pass; then the source's
//                                               egress chain, then the destination's ingress chain
//   }
//
// The forward hook sees both paths a pod's packet takes: routed (to or from
// another node, over the VXLAN device or host-gw's routes) and bridged
// (between two pods of this node, through br_netfilter, which the enforcer
// turns on). Traffic of the node itself (kubelet probes, host-network pods)
// is not forwarded and never reaches it.
import type { Family } from '../../net/ip';
import type { Changes, Desired, NftChain, NftSet, VmapName } from './engine';
import { DIRECTIONS, type Direction } from './model';
import { TABLE } from './table';

export { TABLE };
const T = `inet ${TABLE}`;

export interface Counters {
  ingress: { packets: number; bytes: number };
  egress: { packets: number; bytes: number };
}

export const ZERO_COUNTERS: Counters = { ingress: { packets: 0, bytes: 0 }, egress: { packets: 0, bytes: 0 } };

const ADDR_TYPE = { 4: 'ipv4_addr', 6: 'ipv6_addr' } as const;
const IPF = { 4: 'ip', 6: 'ip6' } as const;

/** A comment nft takes as it is (no quotes, at most 128 bytes). */
const comment = (s: string) =>
  `comment "${s
    .replace(/["\\\n\r]/g, "'")
    .replace(/[^\x20-\x7e]/g, '?')
    .slice(0, 120)}"`;

const setType = (s: Pick<NftSet, 'family' | 'ports'>) => `type ${ADDR_TYPE[s.family]}${s.ports ? ' . inet_proto . inet_service' : ''};`;

/** The base chain's rules for the families enforced. */
export function forwardRules(families: readonly Family[]): string[] {
  return [
    // replies (and ICMP errors about them) of connections that were allowed when they began
    'ct direction reply accept',
    'ct state related accept',
    // neighbour discovery between two pods of this node: without it IPv6 cannot reach a pod it is allowed to
    ...(families.includes(6) ? ['icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept'] : []),
    ...families.map((f) => `${IPF[f]} saddr vmap @egress${f}`),
    ...families.map((f) => `${IPF[f]} daddr vmap @ingress${f}`),
  ];
}

/** Elements in lines of at most `per` (a long line costs nft nothing, but people read it). */
function chunks<T>(items: readonly T[], per = 500): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += per) out.push(items.slice(i, i + per));
  return out;
}

const vmapElement = ([ip, chain]: [string, string]) => `${ip} : jump ${chain}`;

/**
 * The script that replaces the table with `d` in one transaction (the old
 * table, if any, stays in force until the new one is in: nft applies a file
 * whole or not at all). `counters` carry the drop counts over.
 */
export function fullScript(d: Desired, counters: Counters = ZERO_COUNTERS): string {
  const lines = [
    `add table ${T}`,
    `delete table ${T}`,
    `add table ${T} { ${comment("vxlan-flannel --network-policy: Kubernetes NetworkPolicy for this node's pods")}; }`,
  ];
  for (const dir of DIRECTIONS)
    lines.push(`add counter ${T} ${dir}-dropped { packets ${counters[dir].packets} bytes ${counters[dir].bytes} ; }`);
  for (const s of d.sets) {
    lines.push(`add set ${T} ${s.name} { ${setType(s)} ${comment(s.comment)}; }`);
    for (const c of chunks(s.elements)) lines.push(`add element ${T} ${s.name} { ${c.join(', ')} }`);
  }
  for (const c of d.chains) lines.push(...chainLines(c, true));
  for (const f of d.families) {
    for (const dir of DIRECTIONS) {
      const map = `${dir}${f}` as VmapName;
      lines.push(`add map ${T} ${map} { type ${ADDR_TYPE[f]} : verdict; }`);
      for (const c of chunks(d.vmaps.get(map) ?? [])) lines.push(`add element ${T} ${map} { ${c.map(vmapElement).join(', ')} }`);
    }
  }
  lines.push(`add chain ${T} forward { type filter hook forward priority filter; policy accept; }`);
  for (const r of forwardRules(d.families)) lines.push(`add rule ${T} forward ${r}`);
  return lines.join('\n') + '\n';
}

function chainLines(c: NftChain, created: boolean): string[] {
  return [
    ...(created ? [`add chain ${T} ${c.name} { ${comment(c.comment)}; }`] : [`flush chain ${T} ${c.name}`]),
    ...c.rules.map((r) => `add rule ${T} ${c.name} ${r}`),
  ];
}

/**
 * A batch of changes as one transaction, in an order the kernel accepts:
 * what refers to a thing goes before the thing (map entries before chains,
 * chains' rules before sets), what is referred to comes before what refers
 * to it. Empty when there is nothing to do.
 */
export function changesScript(c: Changes): string {
  const lines: string[] = [];
  for (const [map, ips] of c.deleteVmap) for (const chunk of chunks(ips)) lines.push(`delete element ${T} ${map} { ${chunk.join(', ')} }`);
  for (const w of c.writeChains) if (!w.created) lines.push(`flush chain ${T} ${w.name}`);
  for (const name of c.deleteChains) lines.push(`flush chain ${T} ${name}`, `delete chain ${T} ${name}`);
  for (const name of c.deleteSets) lines.push(`delete set ${T} ${name}`);
  for (const s of c.createSets) {
    lines.push(`add set ${T} ${s.name} { ${setType(s)} ${comment(s.comment)}; }`);
    for (const chunk of chunks(s.elements)) lines.push(`add element ${T} ${s.name} { ${chunk.join(', ')} }`);
  }
  for (const [set, elements] of c.deleteElements)
    for (const chunk of chunks(elements)) lines.push(`delete element ${T} ${set} { ${chunk.join(', ')} }`);
  for (const [set, elements] of c.addElements)
    for (const chunk of chunks(elements)) lines.push(`add element ${T} ${set} { ${chunk.join(', ')} }`);
  for (const w of c.writeChains) lines.push(...(w.created ? chainLines(w, true) : w.rules.map((r) => `add rule ${T} ${w.name} ${r}`)));
  for (const [map, entries] of c.addVmap)
    for (const chunk of chunks(entries)) lines.push(`add element ${T} ${map} { ${chunk.map(vmapElement).join(', ')} }`);
  return lines.length ? lines.join('\n') + '\n' : '';
}

/** The drop counters from `nft -j list counters table inet flannel-netpol`. */
export function readCounters(json: string): Counters {
  const out: Counters = { ingress: { packets: 0, bytes: 0 }, egress: { packets: 0, bytes: 0 } };
  const objects = (JSON.parse(json) as { nftables?: { counter?: { name?: string; packets?: number; bytes?: number } }[] }).nftables ?? [];
  for (const o of objects) {
    const dir = o.counter?.name?.replace(/-dropped$/, '') as Direction | undefined;
    if (dir && (DIRECTIONS as readonly string[]).includes(dir))
      out[dir] = { packets: o.counter!.packets ?? 0, bytes: o.counter!.bytes ?? 0 };
  }
  return out;
}
