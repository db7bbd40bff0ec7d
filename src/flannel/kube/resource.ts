// The API's collections the daemon lists and watches, and the shapes every
// object, list and watch event shares. Nodes for the subnet manager; Pods,
// Namespaces and NetworkPolicies for --network-policy.

export interface ObjectMeta {
  name: string;
  /** Namespaced objects only. */
  namespace?: string;
  uid?: string;
  /** Opaque: compared for equality only, passed back to the server as it came. */
  resourceVersion?: string;
  /** RFC 3339, set by the API server when the object was created. */
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Any object of the API: its metadata typed, the rest as it came. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

export interface ObjectList<T> {
  items: T[];
  /** The list's resourceVersion: watch from here to miss nothing. */
  resourceVersion: string;
  /** A page of a list: the token for the next page; absent on the last. */
  continue?: string;
}

/** A watch event as the API sends it (ERROR carries a Status object, BOOKMARK an empty object with only a resourceVersion). */
export interface WatchEvent<T = KubeObject> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T & { code?: number; reason?: string; message?: string };
}

/** A collection: where it is listed and watched (every namespace), and what names an object in it. */
export interface Resource {
  /** For log lines: "Node", "Pod". */
  kind: string;
  /** The collection's path across all namespaces, e.g. /api/v1/pods. */
  path: string;
  namespaced: boolean;
}

export const NODES: Resource = { kind: 'Node', path: '/api/v1/nodes', namespaced: false };
export const PODS: Resource = { kind: 'Pod', path: '/api/v1/pods', namespaced: true };
export const NAMESPACES: Resource = { kind: 'Namespace', path: '/api/v1/namespaces', namespaced: false };
export const NETWORK_POLICIES: Resource = { kind: 'NetworkPolicy', path: '/apis/networking.k8s.io/v1/networkpolicies', namespaced: true };

/**
 * What names an object of `r` (its name; namespace/name when namespaced), when
 * it has one: an object without (the API never sends one) names nothing.
 */
export function keyOf(r: Resource, item: unknown): string | undefined {
  const meta = (item as { metadata?: unknown }).metadata;
  if (typeof meta !== 'object' || !meta) return undefined;
  const { name, namespace } = meta as { name?: unknown; namespace?: unknown };
  if (typeof name !== 'string' || !name) return undefined;
  if (!r.namespaced) return name;
  return typeof namespace === 'string' && namespace ? `${namespace}/${name}` : undefined;
}
