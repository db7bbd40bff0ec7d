// The parts of a Kubernetes Node (core/v1) the kube subnet manager reads and
// writes. Everything else the API sends is kept as it came (these are plain
// JSON objects) but not typed.

export interface ObjectMeta {
  name: string;
  uid?: string;
  /** Opaque: compared for equality only, passed back to the server as it came. */
  resourceVersion?: string;
  /** RFC 3339, set by the API server when the object was created. */
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface NodeCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastHeartbeatTime?: string;
  lastTransitionTime?: string;
}

export interface KubeNode {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec?: {
    /** The first of podCIDRs (older clusters set only this). */
    podCIDR?: string;
    /** One per family, IPv4 first on dual-stack clusters. */
    podCIDRs?: string[];
  };
  status?: { conditions?: NodeCondition[] };
}

export interface NodeList {
  items: KubeNode[];
  /** The list's resourceVersion: watch from here to miss nothing. */
  resourceVersion: string;
  /** A page of a list: the token for the next page; absent on the last. */
  continue?: string;
}

/** A watch event as the API sends it (ERROR carries a Status object, BOOKMARK an empty Node with only a resourceVersion). */
export interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: KubeNode & { code?: number; reason?: string; message?: string };
}
