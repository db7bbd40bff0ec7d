// The kinds the stand-in API server stores, each as kube-apiserver serves it
// (facts from the API reference and kubectl's printers): where it lives
// (group, namespaced), its status subresource, the field selectors it
// answers, the lists a strategic merge patch merges (the Go types'
// patchStrategy tags), kubectl's table columns, and what the server itself
// does to an object it creates.
import type { Json, JsonObject } from './kube-patch';
import { isObject } from './kube-patch';

export interface Column {
  name: string;
  type: string;
  format: string;
  description: string;
  priority: number;
}

export interface KindSpec {
  /** The plural resource name: nodes, pods. */
  resource: string;
  singular: string;
  kind: string;
  /** '' for the core group. */
  group: string;
  namespaced: boolean;
  shortNames: string[];
  /** A status subresource: a write to the object keeps its status, a write to /status keeps its spec (metadata changes through both). */
  status: boolean;
  /** Field selectors beyond metadata.name (and metadata.namespace for namespaced kinds). */
  fields: Record<string, (o: JsonObject) => string>;
  /** Lists a strategic merge patch merges, by path: their merge key ('' : a list of scalars merged as a set). */
  listMerge: Record<string, string>;
  columns: Column[];
  cells(o: JsonObject): Json[];
  /** What the server does to an object it creates; `hook`: written by a test, as another component would. */
  onCreate?(o: JsonObject, hook: boolean): void;
}

export const apiVersionOf = (k: KindSpec) => (k.group ? `${k.group}/v1` : 'v1');

const meta = (o: JsonObject) => (o.metadata ?? {}) as JsonObject;
const obj = (v: Json | undefined): JsonObject => (isObject(v) ? v : {});
const list = (v: Json | undefined): Json[] => (Array.isArray(v) ? v : []);

const METADATA_MERGE = { 'metadata.finalizers': '', 'metadata.ownerReferences': 'uid' };

const col = (name: string, description: string, priority = 0, type = 'string', format = ''): Column => ({
  name,
  type,
  format,
  description,
  priority,
});
const NAME = col('Name', 'Name must be unique within a namespace.', 0, 'string', 'name');
const AGE = col('Age', 'CreationTimestamp is a timestamp representing the server time when this object was created.');

/** k8s.io/apimachinery's duration.HumanDuration, to the day. */
export function humanAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 ? `${m}m${s % 60}s` : `${m}m`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 ? `${h}h${m % 60}m` : `${h}h`;
  if (h < 48) return `${h}h`;
  const d = Math.floor(h / 24);
  return d < 8 && h % 24 ? `${d}d${h % 24}h` : `${d}d`;
}

const age = (o: JsonObject) => humanAge(Date.now() - Date.parse(String(meta(o).creationTimestamp)));

/** metav1.FormatLabelSelector: requirements sorted by key, "<none>" for none. */
export function formatLabelSelector(sel: Json | undefined): string {
  const s = obj(sel);
  const reqs: [string, string][] = [];
  for (const [k, v] of Object.entries(obj(s.matchLabels))) reqs.push([k, `${k}=${String(v)}`]);
  for (const e of list(s.matchExpressions).map(obj)) {
    const key = String(e.key);
    const values = list(e.values).map(String).sort().join(',');
    const text =
      { In: `${key} in (${values})`, NotIn: `${key} notin (${values})`, Exists: key, DoesNotExist: `!${key}` }[String(e.operator)] ?? key;
    reqs.push([key, text]);
  }
  return (
    reqs
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, t]) => t)
      .join(',') || '<none>'
  );
}

const NODES: KindSpec = {
  resource: 'nodes',
  singular: 'node',
  kind: 'Node',
  group: '',
  namespaced: false,
  shortNames: ['no'],
  status: true,
  fields: { 'spec.unschedulable': (o) => String(obj(o.spec).unschedulable === true) },
  listMerge: { 'status.conditions': 'type', 'status.addresses': 'type', 'spec.podCIDRs': '', ...METADATA_MERGE },
  columns: [
    NAME,
    col('Status', 'The status of the node'),
    col('Roles', 'The roles of the node'),
    AGE,
    col('Version', 'Kubelet Version reported by the node.'),
    col('Internal-IP', 'List of internal IPs.', 1),
    col('External-IP', 'List of external IPs.', 1),
  ],
  cells(node) {
    const status = obj(node.status);
    const ready = list(status.conditions)
      .map(obj)
      .find((c) => c.type === 'Ready');
    let state = !ready ? 'Unknown' : ready.status === 'True' ? 'Ready' : 'NotReady';
    if (obj(node.spec).unschedulable === true) state += ',SchedulingDisabled';
    const labels = obj(meta(node).labels) as Record<string, string>;
    const roles = Object.keys(labels)
      .filter((k) => k.startsWith('node-role.kubernetes.io/'))
      .map((k) => k.slice('node-role.kubernetes.io/'.length));
    if (labels['kubernetes.io/role']) roles.push(labels['kubernetes.io/role']);
    const addresses = list(status.addresses).map(obj);
    const ip = (type: string) =>
      addresses
        .filter((a) => a.type === type)
        .map((a) => a.address)
        .join(',') || '<none>';
    return [
      meta(node).name,
      state,
      roles.length ? roles.sort().join(',') : '<none>',
      age(node),
      String(obj(status.nodeInfo).kubeletVersion ?? ''),
      ip('InternalIP'),
      ip('ExternalIP'),
    ];
  },
};

const NAMESPACES: KindSpec = {
  resource: 'namespaces',
  singular: 'namespace',
  kind: 'Namespace',
  group: '',
  namespaced: false,
  shortNames: ['ns'],
  status: true,
  fields: { 'status.phase': (o) => String(obj(o.status).phase ?? '') },
  listMerge: { ...METADATA_MERGE },
  columns: [NAME, col('Status', 'The status of the namespace'), AGE],
  cells: (ns) => [meta(ns).name, String(obj(ns.status).phase ?? ''), age(ns)],
  // kube-apiserver labels every namespace with its name (since 1.21; immutable) and makes it Active
  onCreate(ns) {
    const m = meta(ns);
    m.labels = { ...obj(m.labels), 'kubernetes.io/metadata.name': String(m.name) };
    ns.status = { phase: 'Active' };
  },
};

const PODS: KindSpec = {
  resource: 'pods',
  singular: 'pod',
  kind: 'Pod',
  group: '',
  namespaced: true,
  shortNames: ['po'],
  status: true,
  fields: {
    'spec.nodeName': (o) => String(obj(o.spec).nodeName ?? ''),
    'status.phase': (o) => String(obj(o.status).phase ?? ''),
    'status.podIP': (o) => String(obj(o.status).podIP ?? ''),
  },
  listMerge: {
    'spec.containers': 'name',
    'spec.containers.ports': 'containerPort',
    'status.conditions': 'type',
    'status.podIPs': 'ip',
    ...METADATA_MERGE,
  },
  columns: [
    NAME,
    col('Ready', 'The aggregate readiness state of this pod for accepting traffic.'),
    col('Status', 'The aggregate status of the containers in this pod.'),
    col(
      'Restarts',
      'The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.',
    ),
    AGE,
    col('IP', 'IP address allocated to the pod.', 1),
    col('Node', 'Name of the node this pod is running on.', 1),
    col('Nominated Node', 'Name of the node where the pod is nominated to run.', 1),
    col('Readiness Gates', 'Readiness gates of the pod.', 1),
  ],
  cells(pod) {
    const status = obj(pod.status);
    const containers = list(obj(pod.spec).containers);
    const statuses = list(status.containerStatuses).map(obj);
    const ready = statuses.filter((c) => c.ready === true).length;
    const restarts = statuses.reduce((n, c) => n + (typeof c.restartCount === 'number' ? c.restartCount : 0), 0);
    const phase = meta(pod).deletionTimestamp ? 'Terminating' : String(status.reason ?? status.phase ?? 'Pending');
    return [
      meta(pod).name,
      `${ready}/${containers.length}`,
      phase,
      String(restarts),
      age(pod),
      String(status.podIP ?? '<none>'),
      String(obj(pod.spec).nodeName ?? '<none>'),
      '<none>',
      '<none>',
    ];
  },
  // a created pod is Pending until its kubelet says otherwise (a test writing as the kubelet keeps its status)
  onCreate(pod, hook) {
    if (!hook || !isObject(pod.status)) pod.status = { phase: 'Pending' };
  },
};

const NETWORK_POLICIES: KindSpec = {
  resource: 'networkpolicies',
  singular: 'networkpolicy',
  kind: 'NetworkPolicy',
  group: 'networking.k8s.io',
  namespaced: true,
  shortNames: ['netpol'],
  status: false,
  fields: {},
  // NetworkPolicySpec's lists have no patch strategy: a patch replaces them
  listMerge: { ...METADATA_MERGE },
  columns: [NAME, col('Pod-Selector', 'Select which pods this network policy applies to'), AGE],
  cells: (p) => [meta(p).name, formatLabelSelector(obj(p.spec).podSelector), age(p)],
  // Not the API's defaulting (policyTypes): stored as given, so that the daemon's own defaulting is what is tested.
};

export const KINDS: readonly KindSpec[] = [NODES, NAMESPACES, PODS, NETWORK_POLICIES];

export const kindOf = (resource: string, group = '') => KINDS.find((k) => k.resource === resource && k.group === group);
