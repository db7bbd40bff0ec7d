// flannel's Node annotations: what a node running flanneld --kube-subnet-mgr
// writes on its own Node, and how every node reads its peers from theirs.
// Facts from flannel's pkg/subnet/kube (annotations.go, kube.go) and its
// vxlan backend:
//
//   <prefix>/kube-subnet-manager  "true"                         marks a flannel node: the only peers
//   <prefix>/backend-type         "vxlan" (or "host-gw")
//   <prefix>/backend-data         {"VNI":1,"VtepMAC":"0a:..."}   the IPv4 VTEP (flannel.<VNI>), compact JSON;
//                                 "null" on a host-gw node (no backend data)
//   <prefix>/public-ip            "192.168.1.5"                   its IPv4 underlay address
//   <prefix>/backend-v6-data      {"VNI":1,"VtepMAC":"0a:..."}   the IPv6 VTEP (flannel-v6.<VNI>)
//   <prefix>/public-ipv6          "2001:db8::5"                   Go's net.IP.String(): RFC 5952
//
// The subnets are not in the annotations: they are the Node's spec.podCIDRs
// (spec.podCIDR on older clusters), assigned by kube-controller-manager.
// An administrator may set <prefix>/public-ip-overwrite (and -ipv6-): the
// address advertised in public-ip instead of the node's own; and
// <prefix>/node-public-ip (and -ipv6): the address flanneld uses as if it had
// been given --public-ip. The prefix defaults to flannel.alpha.coreos.com.
import { IP, Prefix } from '../../net/ip';
import { normalizeMac } from '../../net/mac';
import type { Lease, LeaseAttrs, LeaseSubnets } from '../lease';
import type { LeaseList } from '../manager';
import type { KubeNode } from './node';

export const DEFAULT_ANNOTATION_PREFIX = 'flannel.alpha.coreos.com';

export interface FlannelAnnotations {
  kubeSubnetManager: string;
  backendType: string;
  backendData: string;
  backendV6Data: string;
  publicIP: string;
  publicIPv6: string;
  publicIPOverwrite: string;
  publicIPv6Overwrite: string;
  nodePublicIP: string;
  nodePublicIPv6: string;
}

/**
 * The annotation names for --kube-annotation-prefix, by flannel's rules: at
 * most one "/"; without one, "/" is appended; a prefix not ending in "/" or
 * "-" gets "-" (so "example.com/net" names "example.com/net-backend-data").
 * Throws flannel's message for a prefix it refuses.
 */
export function annotationNames(prefix = DEFAULT_ANNOTATION_PREFIX): FlannelAnnotations {
  const slashes = prefix.split('/').length - 1;
  if (slashes > 1) throw new Error(`--kube-annotation-prefix ${JSON.stringify(prefix)}: a prefix can contain at most a single slash`);
  let p = slashes === 0 ? `${prefix}/` : prefix;
  if (!p.endsWith('/') && !p.endsWith('-')) p += '-';
  // flannel's own check, unanchored at the start as flannel's is
  if (!/(?:[a-z0-9_-]+\.)+[a-z0-9_-]+\/(?:[a-z0-9_-]+-)?$/.test(p)) {
    throw new Error(`--kube-annotation-prefix ${JSON.stringify(prefix)}: a prefix must be in the format fqdn/[0-9a-z-_]*`);
  }
  return {
    kubeSubnetManager: `${p}kube-subnet-manager`,
    backendType: `${p}backend-type`,
    backendData: `${p}backend-data`,
    backendV6Data: `${p}backend-v6-data`,
    publicIP: `${p}public-ip`,
    publicIPv6: `${p}public-ipv6`,
    publicIPOverwrite: `${p}public-ip-overwrite`,
    publicIPv6Overwrite: `${p}public-ipv6-overwrite`,
    nodePublicIP: `${p}node-public-ip`,
    nodePublicIPv6: `${p}node-public-ipv6`,
  };
}

/** flannel's vxlan BackendData: `{"VNI":1,"VtepMAC":"0a:58:0a:f4:05:00"}` (Go struct order, lower-case MAC). */
const backendData = (vni: number | undefined, mac: string | undefined) => JSON.stringify({ VNI: vni ?? 1, VtepMAC: mac });

/**
 * The strategic merge patch that gives our Node the annotations flanneld
 * would write for `attrs`, or undefined when it already carries them.
 * Only flannel's own keys are in it, so every other annotation stays as it
 * is. A family's keys are written when `attrs` has that family's VTEP (an
 * administrator's public-ip-overwrite / public-ipv6-overwrite wins for the
 * address, as in flanneld) and removed when it has not: flanneld leaves a
 * family it no longer runs on its Node, where peers would still route to it.
 * flanneld sends this patch to the Node's status subresource (its RBAC role
 * allows nothing else): send it there too.
 */
export function ownNodePatch(node: KubeNode, attrs: LeaseAttrs, names: FlannelAnnotations): { metadata: { annotations: Record<string, string | null> } } | undefined {
  const current = node.metadata.annotations ?? {};
  const want: Record<string, string | null> = { [names.backendType]: attrs.backendType };
  // vxlan: a family is there when it has a VTEP; host-gw (no backend data: flanneld writes "null") when it has a public address
  const vxlan = attrs.backendType === 'vxlan';
  const family = (data: string, publicKey: string, overwriteKey: string, vni: number | undefined, mac: string | undefined, ip: IP | undefined) => {
    if (vxlan ? vni === undefined && mac === undefined : !ip) {
      want[data] = null;
      want[publicKey] = null;
      return;
    }
    const address = current[overwriteKey] || ip?.toString();
    if (!address) throw new Error(`a lease with ${data} needs its public address`);
    want[data] = vxlan ? backendData(vni, mac) : 'null';
    want[publicKey] = address;
  };
  family(names.backendData, names.publicIP, names.publicIPOverwrite, attrs.vni, attrs.vtepMAC, attrs.publicIP);
  family(names.backendV6Data, names.publicIPv6, names.publicIPv6Overwrite, attrs.v6Vni, attrs.v6VtepMAC, attrs.publicIPv6);
  want[names.kubeSubnetManager] = 'true';
  const changes = Object.fromEntries(Object.entries(want).filter(([k, v]) => (v === null ? k in current : current[k] !== v)));
  return Object.keys(changes).length ? { metadata: { annotations: changes } } : undefined;
}

/**
 * The Node's subnets: spec.podCIDRs (one per family), or spec.podCIDR when
 * that list is empty, host bits cleared as Go's ParseCIDR does. Throws
 * naming the field when there is none or one is not a CIDR.
 */
export function podSubnets(node: KubeNode): LeaseSubnets {
  const list = node.spec?.podCIDRs?.length ? node.spec.podCIDRs : node.spec?.podCIDR ? [node.spec.podCIDR] : [];
  const field = node.spec?.podCIDRs?.length ? 'spec.podCIDRs' : 'spec.podCIDR';
  if (list.length === 0) throw new Error('no pod CIDR assigned (spec.podCIDR is empty)');
  if (list.length > 2) throw new Error(`${field} has ${list.length} entries: at most one IPv4 and one IPv6`);
  const out: LeaseSubnets = {};
  list.forEach((text, i) => {
    const p = Prefix.parse(text);
    const where = field === 'spec.podCIDRs' ? `${field}[${i}]` : field;
    if (!p) throw new Error(`${where} ${JSON.stringify(text)} is not a CIDR`);
    const key = p.family === 4 ? 'subnet' : 'ipv6Subnet';
    if (out[key]) throw new Error(`${field} has two IPv${p.family} CIDRs`);
    out[key] = Prefix.of(p.network, p.length);
  });
  return out;
}

/** Every annotation nodeLease reads, in step with it (the overwrite and node-public-ip ones are our own Node's business); made once per set of names. */
const leaseAnnotationLists = new WeakMap<FlannelAnnotations, readonly string[]>();
export function leaseAnnotationNames(names: FlannelAnnotations): readonly string[] {
  let list = leaseAnnotationLists.get(names);
  if (!list) leaseAnnotationLists.set(names, (list = [names.kubeSubnetManager, names.backendType, names.backendData, names.backendV6Data, names.publicIP, names.publicIPv6]));
  return list;
}

/**
 * A Node as a lease, read as flanneld reads it (nodeToLease): undefined for
 * a Node that is not a flannel node (no kube-subnet-manager "true": not a
 * peer, as in flanneld), `{ reason }` for one whose annotations or pod CIDRs
 * cannot be used (log it, never program it). A family is in the lease when
 * its backend data annotation is there (an IPv4-only flanneld in a
 * dual-stack cluster is a peer over IPv4 only) and needs its pod CIDR and
 * public address. The lease names its Node: the kube manager keeps it as it
 * is (a copy with the name added, one per Node, made 5,000 hidden classes of
 * V8's at 5,000 Nodes, ~1 MiB of heap).
 */
export function nodeLease(node: KubeNode, names: FlannelAnnotations): { lease: Lease } | { reason: string } | undefined {
  const a = node.metadata.annotations ?? {};
  if (a[names.kubeSubnetManager] !== 'true') return undefined;
  try {
    const cidrs = podSubnets(node);
    const attrs: LeaseAttrs = { backendType: a[names.backendType] ?? '' };
    const lease: Lease = { attrs };
    if (a[names.backendData] !== undefined) {
      if (!cidrs.subnet) throw new Error(`it has ${names.backendData} but no IPv4 pod CIDR`);
      lease.subnet = cidrs.subnet;
      attrs.publicIP = address(a, names.publicIP, 4);
      const vtep = readBackendData(a, names.backendData);
      if (vtep.vni !== undefined) attrs.vni = vtep.vni;
      if (vtep.mac !== undefined) attrs.vtepMAC = vtep.mac;
    }
    if (a[names.backendV6Data] !== undefined) {
      if (!cidrs.ipv6Subnet) throw new Error(`it has ${names.backendV6Data} but no IPv6 pod CIDR`);
      lease.ipv6Subnet = cidrs.ipv6Subnet;
      attrs.publicIPv6 = address(a, names.publicIPv6, 6);
      const vtep = readBackendData(a, names.backendV6Data);
      if (vtep.vni !== undefined) attrs.v6Vni = vtep.vni;
      if (vtep.mac !== undefined) attrs.v6VtepMAC = vtep.mac;
    }
    if (!lease.subnet && !lease.ipv6Subnet) throw new Error(`it has neither ${names.backendData} nor ${names.backendV6Data}`);
    const since = Date.parse(node.metadata.creationTimestamp ?? '');
    if (Number.isFinite(since)) lease.since = since; // of two overlapping Nodes' leases, the older one's stands
    lease.node = node.metadata.name;
    return { lease };
  } catch (err) {
    return { reason: `node ${JSON.stringify(node.metadata.name)}: ${(err as Error).message}` };
  }
}

/**
 * Every flannel node among `nodes` as a lease (naming its Node), and those
 * whose annotations cannot be used with why (keyed `nodes/<name>`).
 */
export function nodeLeaseList(nodes: Iterable<KubeNode>, names: FlannelAnnotations, revision?: string): LeaseList {
  const list: LeaseList = { leases: [], bad: [], ...(revision !== undefined ? { revision } : {}) };
  for (const node of nodes) {
    const r = nodeLease(node, names);
    if (!r) continue;
    if ('reason' in r) list.bad.push({ key: `nodes/${node.metadata.name}`, why: r.reason });
    else list.leases.push(r.lease);
  }
  return list;
}

function address(a: Record<string, string>, key: string, family: 4 | 6): IP {
  const ip = IP.parse(a[key] ?? '');
  if (!ip || ip.family !== family) throw new Error(`annotation ${key} ${JSON.stringify(a[key] ?? null)} is not an IPv${family} address`);
  return ip;
}

/** A backend data annotation; `null` (flanneld's host-gw nodes write it) carries no VTEP. */
function readBackendData(a: Record<string, string>, key: string): { vni?: number; mac?: string } {
  let data: unknown;
  try {
    data = JSON.parse(a[key]);
  } catch {
    throw new Error(`annotation ${key} is not JSON: ${JSON.stringify(a[key].slice(0, 100))}`);
  }
  if (data === null) return {};
  if (typeof data !== 'object' || Array.isArray(data)) throw new Error(`annotation ${key} must be a JSON object`);
  const { VNI, VtepMAC } = data as Record<string, unknown>;
  const out: { vni?: number; mac?: string } = {};
  if (VNI !== undefined) {
    if (typeof VNI !== 'number' || !Number.isInteger(VNI) || VNI < 0 || VNI > 0xffffffff) throw new Error(`annotation ${key}: VNI ${JSON.stringify(VNI)} is not a VNI`);
    out.vni = VNI;
  }
  if (VtepMAC !== undefined) {
    const mac = typeof VtepMAC === 'string' ? normalizeMac(VtepMAC) : undefined;
    if (!mac) throw new Error(`annotation ${key}: VtepMAC ${JSON.stringify(VtepMAC)} is not a MAC address`);
    out.mac = mac;
  }
  return out;
}
