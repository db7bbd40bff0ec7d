// The parts of a Kubernetes Node (core/v1) the kube subnet manager reads and
// writes. Everything else the API sends is kept as it came (these are plain
// JSON objects) but not typed.
import type { KubeObject, ObjectList } from './resource';

export type { ObjectMeta } from './resource';

export interface NodeCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastHeartbeatTime?: string;
  lastTransitionTime?: string;
}

export interface KubeNode extends KubeObject {
  spec?: {
    /** The first of podCIDRs (older clusters set only this). */
    podCIDR?: string;
    /** One per family, IPv4 first on dual-stack clusters. */
    podCIDRs?: string[];
  };
  status?: { conditions?: NodeCondition[] };
}

export type NodeList = ObjectList<KubeNode>;
