// `vxlan-flannel status --kube-subnet-mgr`: the network config from
// net-conf.json, the leases from one list of the Nodes (as the daemon reads
// them), and this node's Node with its NetworkUnavailable condition.
import { annotationNames, nodeLeaseList } from '../kube/annotations';
import type { KubeNode } from '../kube/node';
import { KubeOptions, connect, readNetConf } from '../kube/kube-manager';
import type { StatusSource } from './status';

/** Runs `fn` on the Kubernetes API as a status source, and closes the connection however `fn` ends. */
export async function withKubeStatus<T>(o: KubeOptions, fn: (source: StatusSource) => Promise<T>): Promise<T> {
  const { client, nodeName } = await connect(o);
  const names = annotationNames(o.annotationPrefix);
  let nodes: Promise<KubeNode[]> | undefined;
  const listed = () => (nodes ??= client.listNodes().then((l) => l.items));
  try {
    return await fn({
      description: `Kubernetes API ${client.server}, node ${JSON.stringify(nodeName)}`,
      getConfig: async () => readNetConf(o.netConfPath),
      list: async () => nodeLeaseList(await listed(), names),
      ownNode: async () => {
        const node = (await listed()).find((n) => n.metadata.name === nodeName);
        const cond = node?.status?.conditions?.find((c) => c.type === 'NetworkUnavailable');
        return { name: nodeName, exists: !!node, ...(cond ? { networkUnavailable: { status: cond.status, ...(cond.reason ? { reason: cond.reason } : {}) } } : {}) };
      },
    });
  } finally {
    client.close();
  }
}
