// The state policy enforcement is computed from, kept up to date one API
// change at a time (pure: no I/O). It knows every pod of the cluster (peers
// are cluster-wide), every namespace's labels and every policy, and derives
// what the node's nftables table must hold for the pods of this node:
//   - a chain per local pod and direction it is isolated in (chains.ts),
//     reached through a verdict map keyed by the pod's addresses;
//   - the peer groups those chains use (groups.ts), one set per family each.
// Each change records only what it touches (the elements of the groups a pod
// joins or leaves, the chains of the pods a policy selects, the map entries
// of a local pod's addresses); takeChanges() hands them over as one batch,
// snapshot() the whole table (at start, or to repair).
import type { Family } from '../../net/ip';
import { sha256Hex } from '../../util/sha256';
import { isolating, planChain, selects, type ChainPlan } from './chains';
import { elementsOf, groupSetName, inGroup, scopeOf, type GroupDef } from './groups';
import { DIRECTIONS, familyOf, podKey, type Direction, type PodInfo, type Policy } from './model';
import type { Labels } from './selector';

/** The verdict maps: local pod address -> jump to its chain. */
export type VmapName = 'ingress4' | 'ingress6' | 'egress4' | 'egress6';
export const vmapName = (dir: Direction, family: Family) => `${dir}${family}` as VmapName;

export interface NftSet {
  name: string;
  family: Family;
  /** Elements are address . protocol . port (a group of a port by name), else addresses. */
  ports: boolean;
  comment: string;
  elements: string[];
}

export interface NftChain {
  name: string;
  comment: string;
  rules: readonly string[];
}

/** The whole table's content, for a replacement. */
export interface Desired {
  families: readonly Family[];
  sets: NftSet[];
  chains: NftChain[];
  vmaps: Map<VmapName, [string, string][]>;
}

/** One batch of changes, in the order they can be applied in one transaction (see nft.ts). */
export interface Changes {
  createSets: NftSet[];
  deleteSets: string[];
  addElements: [string, string[]][];
  deleteElements: [string, string[]][];
  /** New chains and chains whose rules changed (flushed and written again). */
  writeChains: (NftChain & { created: boolean })[];
  deleteChains: string[];
  deleteVmap: [VmapName, string[]][];
  addVmap: [VmapName, [string, string][]][];
}

export const noChanges = (c: Changes) =>
  !c.createSets.length &&
  !c.deleteSets.length &&
  !c.addElements.length &&
  !c.deleteElements.length &&
  !c.writeChains.length &&
  !c.deleteChains.length &&
  !c.deleteVmap.length &&
  !c.addVmap.length;

interface Group {
  def: GroupDef;
  key: string;
  /** Chains using it; at 0 it goes at the next batch. */
  refs: number;
  /** Per family: element -> how many pods bring it (two pods may briefly share an address). */
  elements: Map<Family, Map<string, number>>;
  /** Per family: its set's name (groupSetName, made once). */
  sets: Map<Family, string>;
}

interface Local {
  pod: PodInfo;
  chains: Partial<Record<Direction, ChainPlan>>;
}

/** The chain of a local pod: in-<hash> / eg-<hash> of its namespace/name. */
export const chainName = (dir: Direction, key: string) => `${dir === 'ingress' ? 'in' : 'eg'}-${sha256Hex(key).slice(0, 16)}`;

const EMPTY: Labels = Object.freeze({});

/** Puts `value` at index[group][key], or (undefined) removes it, and the group once it is empty. */
function putGrouped<V>(index: Map<string, Map<string, V>>, group: string, key: string, value: V | undefined): void {
  let inner = index.get(group);
  if (value !== undefined) {
    if (!inner) index.set(group, (inner = new Map()));
    inner.set(key, value);
  } else if (inner) {
    inner.delete(key);
    if (!inner.size) index.delete(group);
  }
}

export function samePod(a: PodInfo, b: PodInfo): boolean {
  if (a.node !== b.node || a.ips.length !== b.ips.length || a.ports.length !== b.ports.length) return false;
  if (a.ips.some((ip, i) => ip !== b.ips[i])) return false;
  if (a.ports.some((p, i) => p.name !== b.ports[i].name || p.protocol !== b.ports[i].protocol || p.port !== b.ports[i].port)) return false;
  return sameLabels(a.labels, b.labels);
}

export function sameLabels(a: Labels, b: Labels): boolean {
  if (a === b) return true;
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

export class PolicyEngine {
  private readonly namespaces = new Map<string, Labels>();
  private readonly pods = new Map<string, PodInfo>();
  private readonly podsByNs = new Map<string, Map<string, PodInfo>>();
  private readonly policies = new Map<string, Policy>();
  private readonly policiesByNs = new Map<string, Map<string, Policy>>();
  private readonly local = new Map<string, Local>();
  /** Local pods by address (the verdict maps' keys). */
  private readonly localByIp = new Map<string, Set<string>>();
  private readonly groups = new Map<string, Group>();
  /** Groups confined to one namespace (a podSelector alone), by it; the others in clusterGroups. */
  private readonly scopedGroups = new Map<string, Set<Group>>();
  private readonly clusterGroups = new Set<Group>();
  /** Each group's sets by name, and each chain's pod and direction by name. */
  private readonly setGroup = new Map<string, Group>();
  private readonly chainOwner = new Map<string, { key: string; dir: Direction }>();

  // what the last batch (or snapshot) handed over, and what changed since
  private readonly emittedSets = new Set<string>();
  private readonly emittedChains = new Map<string, readonly string[]>();
  private readonly emittedVmaps = new Map<string, string>();
  private readonly dirtyElements = new Map<string, Map<string, boolean>>();
  private readonly dirtyChains = new Set<string>();
  private readonly dirtyVmapKeys = new Set<string>();

  constructor(
    readonly nodeName: string,
    readonly families: readonly Family[] = [4, 6],
  ) {}

  // ---- the API's changes ----

  setNamespace(name: string, labels: Labels | undefined): void {
    const before = this.namespaces.get(name) ?? EMPTY;
    const after = labels ?? EMPTY;
    if (labels) this.namespaces.set(name, labels);
    else this.namespaces.delete(name);
    if (before === after || sameLabels(before, after)) return;
    const pods = [...(this.podsByNs.get(name)?.values() ?? [])];
    for (const g of this.clusterGroups) {
      if (g.def.match.kind !== 'selector' || !g.def.match.namespaceSelector) continue;
      for (const pod of pods) {
        const was = inGroup(g.def, pod, before);
        if (was !== inGroup(g.def, pod, after)) this.count(g, elementsOf(g.def, pod), was ? -1 : 1);
      }
    }
  }

  setPod(key: string, pod: PodInfo | undefined): void {
    const before = this.pods.get(key);
    if (!before && !pod) return;
    if (before && pod && samePod(before, pod)) return; // nothing policy reads changed (a status update)
    const ns = (pod ?? before)!.namespace;
    if (pod) this.pods.set(key, pod);
    else this.pods.delete(key);
    putGrouped(this.podsByNs, ns, key, pod);
    const labels = this.namespaces.get(ns) ?? EMPTY;
    const groups = [...(this.scopedGroups.get(ns) ?? []), ...this.clusterGroups];
    for (const g of groups) {
      const old = before && inGroup(g.def, before, labels) ? elementsOf(g.def, before) : [];
      const now = pod && inGroup(g.def, pod, labels) ? elementsOf(g.def, pod) : [];
      if (old.length === now.length && old.every((e, i) => e === now[i])) continue;
      this.count(g, old, -1);
      this.count(g, now, 1);
    }
    if (before?.node === this.nodeName || pod?.node === this.nodeName) this.plan(key);
  }

  setPolicy(key: string, policy: Policy | undefined): void {
    const before = this.policies.get(key);
    if (!before && !policy) return;
    const ns = (policy ?? before)!.namespace;
    if (policy) this.policies.set(key, policy);
    else this.policies.delete(key);
    putGrouped(this.policiesByNs, ns, key, policy);
    // the local pods it selected or selects now
    for (const [podKey, pod] of this.podsByNs.get(ns) ?? []) {
      if (pod.node !== this.nodeName) continue;
      if ((before && selects(before, pod)) || (policy && selects(policy, pod))) this.plan(podKey);
    }
  }

  // ---- reading ----

  policy(key: string): Policy | undefined {
    return this.policies.get(key);
  }

  allPolicies(): IterableIterator<Policy> {
    return this.policies.values();
  }

  pod(key: string): PodInfo | undefined {
    return this.pods.get(key);
  }

  allPods(): IterableIterator<PodInfo> {
    return this.pods.values();
  }

  namespaceLabels(name: string): Labels | undefined {
    return this.namespaces.get(name);
  }

  /** The policies of a namespace, in key order. */
  policiesIn(ns: string): Policy[] {
    return [...(this.policiesByNs.get(ns)?.entries() ?? [])].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, p]) => p);
  }

  /** A local pod's chain plans. */
  localChains(key: string): Partial<Record<Direction, ChainPlan>> | undefined {
    return this.local.get(key)?.chains;
  }

  /** The elements of a group set (tests, the policy command). */
  setElements(name: string): string[] {
    const g = this.setGroup.get(name);
    return g ? [...g.elements.get(Number(name.slice(-1)) as Family)!.keys()] : [];
  }

  stats(): {
    pods: number;
    localPods: number;
    isolated: Record<Direction, number>;
    policies: number;
    unenforceable: number;
    groups: number;
  } {
    let unenforceable = 0;
    for (const p of this.policies.values()) if (p.problem) unenforceable++;
    const isolated = { ingress: 0, egress: 0 };
    for (const l of this.local.values()) for (const d of DIRECTIONS) if (l.chains[d]) isolated[d]++;
    return {
      pods: this.pods.size,
      localPods: this.local.size,
      isolated,
      policies: this.policies.size,
      unenforceable,
      groups: this.groups.size,
    };
  }

  // ---- planning ----

  /** Plans local pod `key` again (its chains, their groups, its map entries). */
  private plan(key: string): void {
    const p = this.pods.get(key);
    const pod = p && p.node === this.nodeName ? p : undefined;
    const before = this.local.get(key);
    const chains: Partial<Record<Direction, ChainPlan>> = {};
    if (pod) {
      const policies = this.policiesIn(pod.namespace);
      const families = this.families.filter((f) => pod.ips.some((ip) => familyOf(ip) === f));
      for (const dir of DIRECTIONS) {
        const selecting = isolating(dir, pod, policies);
        if (selecting.length) chains[dir] = planChain(dir, pod, selecting, families);
      }
    }
    for (const dir of DIRECTIONS) {
      const old = before?.chains[dir];
      const now = chains[dir];
      for (const [k, def] of now?.groups ?? []) this.ref(k, def);
      for (const k of old?.groups.keys() ?? []) this.unref(k);
      const name = chainName(dir, key);
      this.chainOwner.set(name, { key, dir });
      this.dirtyChains.add(name);
    }
    if (pod) this.local.set(key, { pod, chains });
    else this.local.delete(key);
    // the map entries of every address it had or has
    for (const ip of before?.pod.ips ?? []) this.localByIp.get(ip)?.delete(key);
    for (const ip of pod?.ips ?? []) {
      let owners = this.localByIp.get(ip);
      if (!owners) this.localByIp.set(ip, (owners = new Set()));
      owners.add(key);
    }
    for (const ip of new Set([...(before?.pod.ips ?? []), ...(pod?.ips ?? [])])) {
      if (!this.localByIp.get(ip)?.size) this.localByIp.delete(ip);
      for (const dir of DIRECTIONS) this.dirtyVmapKeys.add(`${vmapName(dir, familyOf(ip))} ${ip}`);
    }
  }

  private ref(key: string, def: GroupDef): void {
    let g = this.groups.get(key);
    if (!g) {
      g = {
        def,
        key,
        refs: 0,
        elements: new Map(this.families.map((f) => [f, new Map()])),
        sets: new Map(this.families.map((f) => [f, groupSetName(def, key, f)])),
      };
      this.groups.set(key, g);
      for (const name of g.sets.values()) this.setGroup.set(name, g);
      const scope = scopeOf(def);
      if (scope === undefined) this.clusterGroups.add(g);
      else {
        let s = this.scopedGroups.get(scope);
        if (!s) this.scopedGroups.set(scope, (s = new Set()));
        s.add(g);
      }
      // its members now (the set is created with them)
      for (const pod of scope === undefined ? this.pods.values() : (this.podsByNs.get(scope)?.values() ?? [])) {
        if (inGroup(def, pod, this.namespaces.get(pod.namespace) ?? EMPTY)) this.count(g, elementsOf(def, pod), 1, false);
      }
    }
    g.refs++;
  }

  private unref(key: string): void {
    const g = this.groups.get(key);
    if (g) g.refs--; // removed at the next batch if nothing took it again meanwhile
  }

  private dropGroup(g: Group): void {
    this.groups.delete(g.key);
    for (const name of g.sets.values()) this.setGroup.delete(name);
    const scope = scopeOf(g.def);
    if (scope === undefined) this.clusterGroups.delete(g);
    else {
      const s = this.scopedGroups.get(scope)!;
      s.delete(g);
      if (!s.size) this.scopedGroups.delete(scope);
    }
  }

  /** Adds (+1) or removes (-1) elements a pod brings to a group; `track`: record what appears and disappears for the next batch. */
  private count(g: Group, elements: readonly string[], by: 1 | -1, track = true): void {
    for (const e of elements) {
      const family = familyOf(e.split(' ')[0]);
      const m = g.elements.get(family);
      if (!m) continue; // a family this node does not enforce
      const n = (m.get(e) ?? 0) + by;
      if (n > 0) m.set(e, n);
      else m.delete(e);
      const appeared = by === 1 && n === 1;
      const disappeared = by === -1 && n === 0;
      if (!track || !(appeared || disappeared)) continue;
      const set = g.sets.get(family)!;
      let d = this.dirtyElements.get(set);
      if (!d) this.dirtyElements.set(set, (d = new Map()));
      if (!d.has(e)) d.set(e, disappeared); // present at the start of the batch?
    }
  }

  // ---- handing over ----

  private setsOf(g: Group, only?: Family): NftSet[] {
    const m = g.def.match;
    const who = m.kind === 'selector' ? g.key : m.kind === 'block' ? `pods in ${m.text}` : 'all pods';
    return this.families
      .filter((f) => only === undefined || f === only)
      .map((family) => ({
        name: g.sets.get(family)!,
        family,
        ports: !!g.def.port,
        comment: (g.def.port ? `${who.split(' port ')[0]} port ${g.def.port.protocol}/${g.def.port.name}` : who).slice(0, 120),
        elements: [...g.elements.get(family)!.keys()],
      }));
  }

  private chainOf(name: string): NftChain | undefined {
    const owner = this.chainOwner.get(name);
    const plan = owner && this.local.get(owner.key)?.chains[owner.dir];
    if (!plan) return undefined;
    return { name, comment: `${owner.key} ${owner.dir}`, rules: plan.text };
  }

  private vmapValue(map: VmapName, ip: string): string | undefined {
    const dir: Direction = map.startsWith('ingress') ? 'ingress' : 'egress';
    // two local pods with one address (a moment of a restart): the first by key, for a stable answer
    const owner = [...(this.localByIp.get(ip) ?? [])].sort().find((k) => this.local.get(k)?.chains[dir]);
    return owner === undefined ? undefined : chainName(dir, owner);
  }

  /** Everything the table must hold; what is handed over from now on is relative to it. */
  snapshot(): Desired {
    for (const g of [...this.groups.values()]) if (g.refs <= 0) this.dropGroup(g);
    const sets = [...this.groups.values()].flatMap((g) => this.setsOf(g));
    const chains: NftChain[] = [];
    const vmaps = new Map<VmapName, [string, string][]>(
      this.families.flatMap((f) => DIRECTIONS.map((d) => [vmapName(d, f), []] as [VmapName, [string, string][]])),
    );
    for (const [key, l] of this.local) {
      for (const dir of DIRECTIONS) {
        const plan = l.chains[dir];
        if (!plan) continue;
        chains.push({ name: chainName(dir, key), comment: `${key} ${dir}`, rules: plan.text });
      }
    }
    for (const ip of this.localByIp.keys()) {
      for (const dir of DIRECTIONS) {
        const map = vmapName(dir, familyOf(ip));
        const chain = vmaps.has(map) ? this.vmapValue(map, ip) : undefined;
        if (chain) vmaps.get(map)!.push([ip, chain]);
      }
    }
    this.emittedSets.clear();
    for (const s of sets) this.emittedSets.add(s.name);
    this.emittedChains.clear();
    for (const c of chains) this.emittedChains.set(c.name, c.rules);
    for (const name of [...this.chainOwner.keys()]) if (!this.emittedChains.has(name)) this.chainOwner.delete(name);
    this.emittedVmaps.clear();
    for (const [map, entries] of vmaps) for (const [ip, chain] of entries) this.emittedVmaps.set(`${map} ${ip}`, chain);
    this.dirtyElements.clear();
    this.dirtyChains.clear();
    this.dirtyVmapKeys.clear();
    return { families: this.families, sets, chains, vmaps };
  }

  /** What changed since the last batch or snapshot. */
  takeChanges(): Changes {
    const c: Changes = {
      createSets: [],
      deleteSets: [],
      addElements: [],
      deleteElements: [],
      writeChains: [],
      deleteChains: [],
      deleteVmap: [],
      addVmap: [],
    };
    // groups nothing uses any more go; new ones come with their elements
    const live = new Set<string>();
    for (const g of [...this.groups.values()]) {
      if (g.refs <= 0) {
        this.dropGroup(g);
        continue;
      }
      for (const [family, name] of g.sets) {
        live.add(name);
        if (!this.emittedSets.has(name)) c.createSets.push(...this.setsOf(g, family)); // only a new set is written whole
      }
    }
    for (const name of this.emittedSets) if (!live.has(name)) c.deleteSets.push(name);
    for (const [set, elements] of this.dirtyElements) {
      if (!this.emittedSets.has(set) || !live.has(set)) continue; // created whole, or gone
      const g = this.setGroup.get(set);
      const family = Number(set.slice(-1)) as Family;
      const add: string[] = [];
      const del: string[] = [];
      for (const [e, was] of elements) {
        const now = !!g?.elements.get(family)?.has(e);
        if (now && !was) add.push(e);
        else if (!now && was) del.push(e);
      }
      if (add.length) c.addElements.push([set, add]);
      if (del.length) c.deleteElements.push([set, del]);
    }
    for (const name of c.deleteSets) this.emittedSets.delete(name);
    for (const s of c.createSets) this.emittedSets.add(s.name);

    for (const name of this.dirtyChains) {
      const now = this.chainOf(name);
      const had = this.emittedChains.get(name);
      if (!now) {
        if (had) c.deleteChains.push(name);
        this.emittedChains.delete(name);
        this.chainOwner.delete(name);
      } else if (!had || had.length !== now.rules.length || had.some((r, i) => r !== now.rules[i])) {
        c.writeChains.push({ ...now, created: !had });
        this.emittedChains.set(name, now.rules);
      }
    }
    const del = new Map<VmapName, string[]>();
    const add = new Map<VmapName, [string, string][]>();
    for (const k of this.dirtyVmapKeys) {
      const [map, ip] = k.split(' ') as [VmapName, string];
      if (!this.families.includes(familyOf(ip))) continue;
      const now = this.vmapValue(map, ip);
      const had = this.emittedVmaps.get(k);
      if (now === had) continue;
      if (had !== undefined) del.set(map, [...(del.get(map) ?? []), ip]);
      if (now !== undefined) add.set(map, [...(add.get(map) ?? []), [ip, now]]);
      if (now === undefined) this.emittedVmaps.delete(k);
      else this.emittedVmaps.set(k, now);
    }
    c.deleteVmap = [...del];
    c.addVmap = [...add];
    this.dirtyElements.clear();
    this.dirtyChains.clear();
    this.dirtyVmapKeys.clear();
    return c;
  }
}

export { podKey };
