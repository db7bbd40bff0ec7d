// The API's objects read into the policy model (model.ts): a
// networking.k8s.io/v1 NetworkPolicy checked field by field with the API's
// defaulting applied (objects may reach us without it: policyTypes from the
// rules, a port's protocol TCP), a Pod cut down to what policy reads, a
// Namespace to its labels. A policy this daemon cannot enforce exactly (a
// field it does not know, a value the API would refuse) is read with its
// `problem`: see Policy.problem for what is then enforced.
import { IP, Prefix } from '../../net/ip';
import { type NamedPort, type Peer, type PodInfo, type Policy, type PortSpec, type Protocol, type Rule } from './model';
import { Interner, StringPool } from './intern';
import { ALL_PORTS, normalize, prefixRange, subtract } from './ranges';
import { EVERYTHING, type Labels, type Selector, parseSelector } from './selector';

type Json = Record<string, unknown>;
const isMap = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A value of the policy this daemon cannot enforce exactly. */
class Unenforceable extends Error {}

const fail = (msg: string): never => {
  throw new Unenforceable(msg);
};

/** Every key of `obj` with a value must be one of `known`. */
function knownFields(obj: Json, known: readonly string[], where: string): void {
  for (const k of Object.keys(obj)) if (obj[k] != null && !known.includes(k)) fail(`${where}.${k} is not a field this daemon knows`);
}

function list(v: unknown, where: string): unknown[] {
  if (v == null) return [];
  return Array.isArray(v) ? v : fail(`${where} is not a list`);
}

function selector(v: unknown, where: string): Selector {
  try {
    return parseSelector(v, where);
  } catch (err) {
    return fail((err as Error).message);
  }
}

const PROTOCOL: Record<string, Protocol> = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp' };

/** A port name as the API accepts it (IANA_SVC_NAME): 1-15 of [a-z0-9-], a letter among them, no "--", no "-" at the ends. */
export const isPortName = (s: string) =>
  s.length <= 15 && /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/.test(s) && /[a-z]/.test(s) && !s.includes('--');

function port(v: unknown, where: string): PortSpec {
  if (!isMap(v)) return fail(`${where} is not a port`);
  knownFields(v, ['protocol', 'port', 'endPort'], where);
  const name = v.protocol ?? 'TCP';
  const protocol =
    typeof name === 'string' && Object.hasOwn(PROTOCOL, name)
      ? PROTOCOL[name]
      : fail(`${where}.protocol ${JSON.stringify(name)} is not TCP, UDP or SCTP`);
  const isPort = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;
  const { port: p, endPort: end } = v;
  if (p == null) return end == null ? { protocol, range: ALL_PORTS } : fail(`${where}.endPort needs a port`);
  if (typeof p === 'string') {
    if (!isPortName(p)) return fail(`${where}.port ${JSON.stringify(p)} is neither a port number nor a port name`);
    return end == null ? { protocol, name: p } : fail(`${where}.endPort cannot go with a port name`);
  }
  if (!isPort(p)) return fail(`${where}.port ${JSON.stringify(p)} is not a port number from 1 to 65535`);
  if (end == null) return { protocol, range: [p, p] };
  if (!isPort(end) || end < p) return fail(`${where}.endPort ${JSON.stringify(end)} is not a port number from ${p} to 65535`);
  return { protocol, range: [p, end] };
}

function ipBlock(v: unknown, where: string): Peer {
  if (!isMap(v)) return fail(`${where} is not an ipBlock`);
  knownFields(v, ['cidr', 'except'], where);
  const cidr = typeof v.cidr === 'string' ? Prefix.parse(v.cidr) : undefined;
  if (!cidr) return fail(`${where}.cidr ${JSON.stringify(v.cidr)} is not a CIDR`);
  const except = list(v.except, `${where}.except`).map((e, i) => {
    const p = typeof e === 'string' ? Prefix.parse(e) : undefined;
    if (!p) return fail(`${where}.except[${i}] ${JSON.stringify(e)} is not a CIDR`);
    if (p.family !== cidr.family || p.length < cidr.length || !cidr.contains(p.network))
      return fail(`${where}.except[${i}] ${e} is not inside ${v.cidr}`);
    return p;
  });
  const ranges = subtract([prefixRange(cidr)], normalize(except.map(prefixRange)));
  return { kind: 'block', family: cidr.family, cidr: v.cidr as string, except: except.map((p) => p.toString()), ranges };
}

function peer(v: unknown, where: string, namespace: string): Peer {
  if (!isMap(v)) return fail(`${where} is not a peer`);
  knownFields(v, ['podSelector', 'namespaceSelector', 'ipBlock'], where);
  const { podSelector: ps, namespaceSelector: ns, ipBlock: block } = v;
  if (block != null)
    return ps == null && ns == null
      ? ipBlock(block, `${where}.ipBlock`)
      : fail(`${where}: ipBlock cannot go with a podSelector or namespaceSelector`);
  if (ps == null && ns == null) return fail(`${where} has no podSelector, namespaceSelector or ipBlock`);
  const podSelector = ps == null ? undefined : selector(ps, `${where}.podSelector`);
  if (ns == null) return { kind: 'pods', namespace, podSelector: podSelector ?? EVERYTHING };
  return {
    kind: 'pods',
    ...(podSelector && podSelector !== EVERYTHING ? { podSelector } : {}),
    namespaceSelector: selector(ns, `${where}.namespaceSelector`),
  };
}

function rule(v: unknown, where: string, peersField: 'from' | 'to', namespace: string): Rule {
  if (!isMap(v)) return fail(`${where} is not a rule`);
  knownFields(v, [peersField, 'ports'], where);
  const peers = list(v[peersField], `${where}.${peersField}`).map((p, i) => peer(p, `${where}.${peersField}[${i}]`, namespace));
  const ports = list(v.ports, `${where}.ports`).map((p, i) => port(p, `${where}.ports[${i}]`));
  return { peers: peers.length ? peers : 'all', ports: ports.length ? ports : 'all' };
}

/**
 * A NetworkPolicy as the API (or a watch event) gives it. Never throws for
 * its content: what cannot be enforced is in `problem`. The object must have
 * a namespace and a name.
 */
export function parsePolicy(obj: unknown): Policy {
  const meta = isMap(obj) && isMap(obj.metadata) ? obj.metadata : {};
  const base = { namespace: String(meta.namespace ?? ''), name: String(meta.name ?? '') };
  const spec = isMap(obj) ? obj.spec : undefined;
  // The directions the policy isolates: its policyTypes, else as the API defaults them
  // (Ingress always, Egress when it has egress rules); every direction when they cannot be read.
  let ingress = true;
  let egress = true;
  try {
    if (!isMap(spec)) return fail('spec is not a NetworkPolicySpec');
    const types = list(spec.policyTypes, 'spec.policyTypes');
    if (types.some((t) => t !== 'Ingress' && t !== 'Egress'))
      fail(`spec.policyTypes ${JSON.stringify(types)}: each must be Ingress or Egress`);
    ingress = types.length ? types.includes('Ingress') : true;
    egress = types.length ? types.includes('Egress') : list(spec.egress, 'spec.egress').length > 0;
  } catch (err) {
    if (!(err instanceof Unenforceable)) throw err;
    return {
      ...base,
      ...(isMap(spec) && isMap(spec.podSelector) ? tryPodSelector(spec.podSelector) : {}),
      ingress: [],
      egress: [],
      problem: err.message,
    };
  }
  const failed = (problem: string, podSelector?: Selector): Policy => ({
    ...base,
    ...(podSelector ? { podSelector } : {}),
    ...(ingress ? { ingress: [] } : {}),
    ...(egress ? { egress: [] } : {}),
    problem,
  });
  let podSelector: Selector | undefined;
  try {
    podSelector = spec.podSelector == null ? EVERYTHING : selector(spec.podSelector, 'spec.podSelector');
    knownFields(spec, ['podSelector', 'policyTypes', 'ingress', 'egress'], 'spec');
    const rules = (field: 'ingress' | 'egress', peers: 'from' | 'to') =>
      list(spec[field], `spec.${field}`).map((r, i) => rule(r, `spec.${field}[${i}]`, peers, base.namespace));
    const inRules = rules('ingress', 'from');
    const outRules = rules('egress', 'to');
    return { ...base, podSelector, ...(ingress ? { ingress: inRules } : {}), ...(egress ? { egress: outRules } : {}) };
  } catch (err) {
    if (!(err instanceof Unenforceable)) throw err;
    return failed(err.message, podSelector);
  }
}

function tryPodSelector(v: unknown): { podSelector?: Selector } {
  try {
    return { podSelector: parseSelector(v, 'spec.podSelector') };
  } catch {
    return {};
  }
}

const TERMINAL = new Set(['Succeeded', 'Failed']);
const EMPTY: Labels = Object.freeze({});
const NO_PORTS: readonly NamedPort[] = Object.freeze([]);

// the pods of a Deployment share their labels and ports: one object each (intern.ts)
const labelSets = new Interner<Labels>();
const portLists = new Interner<readonly NamedPort[]>();
const names = new StringPool();

/**
 * A Pod cut down to what policy reads (PodInfo); undefined for a pod that
 * policy leaves alone: on the host's network (its addresses are the node's),
 * or finished (Succeeded, Failed: its addresses go to other pods).
 */
export function podInfo(obj: unknown): PodInfo | undefined {
  if (!isMap(obj) || !isMap(obj.metadata)) return undefined;
  const meta = obj.metadata;
  const spec = isMap(obj.spec) ? obj.spec : {};
  const status = isMap(obj.status) ? obj.status : {};
  if (spec.hostNetwork === true || TERMINAL.has(status.phase as string)) return undefined;
  const ips: string[] = [];
  const texts = Array.isArray(status.podIPs) ? status.podIPs.map((p) => (isMap(p) ? p.ip : undefined)) : [status.podIP];
  for (const t of texts) {
    const ip = typeof t === 'string' ? IP.parse(t)?.toString() : undefined;
    if (ip && !ips.includes(ip)) ips.push(ip);
  }
  const ports: NamedPort[] = [];
  for (const c of Array.isArray(spec.containers) ? spec.containers : []) {
    for (const p of isMap(c) && Array.isArray(c.ports) ? c.ports : []) {
      if (!isMap(p) || typeof p.name !== 'string' || !p.name || typeof p.containerPort !== 'number') continue;
      const protocol = PROTOCOL[(p.protocol as string | undefined) ?? 'TCP'];
      if (protocol) ports.push({ name: p.name, protocol, port: p.containerPort });
    }
  }
  const labels = labelsOf(meta);
  return {
    namespace: names.get(String(meta.namespace ?? '')),
    name: String(meta.name ?? ''),
    node: names.get(typeof spec.nodeName === 'string' ? spec.nodeName : ''),
    labels: labels === EMPTY ? EMPTY : labelSets.get(JSON.stringify(labels), () => Object.freeze(labels)),
    ips,
    ports: ports.length ? portLists.get(JSON.stringify(ports), () => Object.freeze(ports)) : NO_PORTS,
  };
}

/** metadata.labels of any object, checked to be strings. */
export function labelsOf(meta: unknown): Labels {
  const l = isMap(meta) ? meta.labels : undefined;
  if (!isMap(l)) return EMPTY;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(l)) if (typeof v === 'string') out[k] = v;
  return out;
}
