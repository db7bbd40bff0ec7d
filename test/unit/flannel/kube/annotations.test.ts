// flannel's Node annotations: the names for a prefix, the patch that gives our
// Node flanneld's annotations, and Nodes read as leases. The Nodes here are
// shaped as a real kube-flannel cluster has them (flanneld v0.2x writes these
// values; kubeadm and kubelet add their own annotations beside them).
import { describe, expect, it } from 'vitest';
import { DEFAULT_ANNOTATION_PREFIX, annotationNames, leaseAnnotationNames, nodeLease, ownNodePatch, podSubnets } from '../../../../src/flannel/kube/annotations';
import { networkUpPatch } from '../../../../src/flannel/kube/network-condition';
import type { KubeNode } from '../../../../src/flannel/kube/node';
import type { LeaseAttrs } from '../../../../src/flannel/lease';
import { IP } from '../../../../src/net/ip';
import { strategicMergePatch } from '../../../support/kube-patch';

const names = annotationNames();

/** A Node as flanneld --kube-subnet-mgr leaves it (IPv4 only, or dual stack). */
function flanneldNode(name: string, opts: { dual?: boolean } = {}): KubeNode {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      resourceVersion: '4711',
      annotations: {
        'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"6e:9a:1b:2c:3d:4e"}',
        'flannel.alpha.coreos.com/backend-type': 'vxlan',
        'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
        'flannel.alpha.coreos.com/public-ip': '192.168.56.11',
        ...(opts.dual
          ? { 'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"c2:5e:77:01:02:03"}', 'flannel.alpha.coreos.com/public-ipv6': '2001:db8:56::11' }
          : {}),
        'kubeadm.alpha.kubernetes.io/cri-socket': 'unix:///run/containerd/containerd.sock',
        'node.alpha.kubernetes.io/ttl': '0',
        'volumes.kubernetes.io/controller-managed-attach-detach': 'true',
      },
    },
    spec: opts.dual ? { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] } : { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] },
  };
}

const dualAttrs = (): LeaseAttrs => ({
  backendType: 'vxlan',
  publicIP: IP.parse('192.168.56.11'),
  publicIPv6: IP.parse('2001:db8:56::11'),
  vni: 1,
  vtepMAC: '6e:9a:1b:2c:3d:4e',
  v6Vni: 1,
  v6VtepMAC: 'c2:5e:77:01:02:03',
});

/** What a Node carries after `patch` (the stand-in's strategic merge, as kube-apiserver's). */
const applied = (node: KubeNode, patch: object | undefined): KubeNode => (patch ? (strategicMergePatch(node as never, patch as never) as unknown as KubeNode) : node);

describe('annotation names', () => {
  it('are flanneld\'s under the default prefix', () => {
    expect(DEFAULT_ANNOTATION_PREFIX).toBe('flannel.alpha.coreos.com');
    expect(names).toEqual({
      kubeSubnetManager: 'flannel.alpha.coreos.com/kube-subnet-manager',
      backendType: 'flannel.alpha.coreos.com/backend-type',
      backendData: 'flannel.alpha.coreos.com/backend-data',
      backendV6Data: 'flannel.alpha.coreos.com/backend-v6-data',
      publicIP: 'flannel.alpha.coreos.com/public-ip',
      publicIPv6: 'flannel.alpha.coreos.com/public-ipv6',
      publicIPOverwrite: 'flannel.alpha.coreos.com/public-ip-overwrite',
      publicIPv6Overwrite: 'flannel.alpha.coreos.com/public-ipv6-overwrite',
      nodePublicIP: 'flannel.alpha.coreos.com/node-public-ip',
      nodePublicIPv6: 'flannel.alpha.coreos.com/node-public-ipv6',
    });
  });
  it('follow flannel\'s prefix rules (a "/" appended, or a "-" after a name part)', () => {
    expect(annotationNames('example.com').backendData).toBe('example.com/backend-data');
    expect(annotationNames('example.com/').backendData).toBe('example.com/backend-data');
    expect(annotationNames('example.com/net').backendData).toBe('example.com/net-backend-data');
    expect(annotationNames('example.com/net-').publicIP).toBe('example.com/net-public-ip');
  });
  it.each([['a.com/b/c', /at most a single slash/], ['nodots/', /fqdn/], ['Example.COM/x y', /fqdn/]])('refuses %s', (prefix, msg) => {
    expect(() => annotationNames(prefix)).toThrow(msg);
  });
});

describe('our Node\'s annotations', () => {
  const bare: KubeNode = { metadata: { name: 'n1', annotations: { 'node.alpha.kubernetes.io/ttl': '0' } }, spec: { podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] } };

  it('are exactly flanneld\'s values, and no other annotation is touched', () => {
    const patch = ownNodePatch(bare, dualAttrs(), names);
    expect(patch).toEqual({
      metadata: {
        annotations: {
          'flannel.alpha.coreos.com/backend-type': 'vxlan',
          'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"6e:9a:1b:2c:3d:4e"}',
          'flannel.alpha.coreos.com/public-ip': '192.168.56.11',
          'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"c2:5e:77:01:02:03"}',
          'flannel.alpha.coreos.com/public-ipv6': '2001:db8:56::11',
          'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
        },
      },
    });
    const after = applied(bare, patch);
    const flanneld = flanneldNode('n1', { dual: true }).metadata.annotations!;
    for (const key of Object.values(names).filter((k) => k in flanneld)) expect(after.metadata.annotations![key], key).toBe(flanneld[key]);
    expect(after.metadata.annotations!['node.alpha.kubernetes.io/ttl']).toBe('0');
  });

  it('host-gw: flanneld\'s host-gw values (backend data "null" per family, public addresses), read back as a host-gw lease; a vxlan Node switching to host-gw', () => {
    const hostGw: LeaseAttrs = { backendType: 'host-gw', publicIP: IP.parse('192.168.56.11'), publicIPv6: IP.parse('2001:db8:56::11') };
    expect(ownNodePatch(bare, hostGw, names)).toEqual({
      metadata: {
        annotations: {
          'flannel.alpha.coreos.com/backend-type': 'host-gw',
          'flannel.alpha.coreos.com/backend-data': 'null',
          'flannel.alpha.coreos.com/public-ip': '192.168.56.11',
          'flannel.alpha.coreos.com/backend-v6-data': 'null',
          'flannel.alpha.coreos.com/public-ipv6': '2001:db8:56::11',
          'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
        },
      },
    });
    const switched = applied(flanneldNode('n1', { dual: true }), ownNodePatch(flanneldNode('n1', { dual: true }), hostGw, names));
    const r = nodeLease(switched, names);
    expect(r && 'lease' in r && [r.lease.attrs, r.lease.subnet?.toString(), r.lease.ipv6Subnet?.toString()]).toEqual([hostGw, '10.244.1.0/24', 'fd00:10:244:1::/64']);
    // IPv4 only: the IPv6 keys go
    const v4 = ownNodePatch(switched, { backendType: 'host-gw', publicIP: IP.parse('192.168.56.11') }, names);
    expect(v4?.metadata.annotations).toEqual({ 'flannel.alpha.coreos.com/backend-v6-data': null, 'flannel.alpha.coreos.com/public-ipv6': null });
  });

  it('is no patch at all when the Node already carries them (a restart), flanneld\'s own writing included', () => {
    expect(ownNodePatch(flanneldNode('n1', { dual: true }), dualAttrs(), names)).toBeUndefined();
    const once = applied(bare, ownNodePatch(bare, dualAttrs(), names));
    expect(ownNodePatch(once, dualAttrs(), names)).toBeUndefined();
  });

  it('changes only what changed (a new VTEP MAC)', () => {
    const attrs = { ...dualAttrs(), vtepMAC: '0a:00:00:00:00:01' };
    expect(ownNodePatch(flanneldNode('n1', { dual: true }), attrs, names)).toEqual({ metadata: { annotations: { 'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}' } } });
  });

  it('advertises an administrator\'s public-ip-overwrite, as flanneld does', () => {
    const node = flanneldNode('n1');
    node.metadata.annotations!['flannel.alpha.coreos.com/public-ip-overwrite'] = '203.0.113.7';
    const v4: LeaseAttrs = { backendType: 'vxlan', publicIP: IP.parse('192.168.56.11'), vni: 1, vtepMAC: '6e:9a:1b:2c:3d:4e' };
    expect(ownNodePatch(node, v4, names)).toEqual({ metadata: { annotations: { 'flannel.alpha.coreos.com/public-ip': '203.0.113.7' } } });
  });

  it('removes the annotations of a family it no longer runs (peers would still route it to us)', () => {
    const v4only: LeaseAttrs = { backendType: 'vxlan', publicIP: IP.parse('192.168.56.11'), vni: 1, vtepMAC: '6e:9a:1b:2c:3d:4e' };
    const patch = ownNodePatch(flanneldNode('n1', { dual: true }), v4only, names);
    expect(patch).toEqual({ metadata: { annotations: { 'flannel.alpha.coreos.com/backend-v6-data': null, 'flannel.alpha.coreos.com/public-ipv6': null } } });
    const after = applied(flanneldNode('n1', { dual: true }), patch);
    expect(after.metadata.annotations).not.toHaveProperty('flannel.alpha.coreos.com/public-ipv6');
    expect(after.metadata.annotations!['flannel.alpha.coreos.com/public-ip']).toBe('192.168.56.11');
  });

  it('writes an IPv6-only node as flanneld does: no backend-data, no public-ip', () => {
    const v6only: LeaseAttrs = { backendType: 'vxlan', publicIPv6: IP.parse('2001:db8:56::11'), v6Vni: 1, v6VtepMAC: 'c2:5e:77:01:02:03' };
    const keys = Object.keys(ownNodePatch({ metadata: { name: 'n' } }, v6only, names)!.metadata.annotations).sort();
    expect(keys).toEqual([names.backendType, names.backendV6Data, names.kubeSubnetManager, names.publicIPv6].sort());
  });
});

describe('Nodes read as leases', () => {
  it('reads no annotation but leaseAnnotationNames (the kube manager compares only those at a heartbeat): any value of the others changes no lease', () => {
    const read = new Set(leaseAnnotationNames(names));
    const others = Object.values(names).filter((k) => !read.has(k));
    expect(others.sort()).toEqual([names.nodePublicIP, names.nodePublicIPv6, names.publicIPOverwrite, names.publicIPv6Overwrite].sort());
    for (const opts of [{}, { dual: true }]) {
      const base = flanneldNode('w1', opts);
      for (const k of others) {
        for (const value of ['10.9.9.9', 'fd00::9', 'not an address', '']) {
          const node = { ...base, metadata: { ...base.metadata, annotations: { ...base.metadata.annotations, [k]: value } } };
          expect(nodeLease(node, names), `${k}=${value}`).toEqual(nodeLease(base, names));
        }
      }
    }
    // each one it does read can change the lease (or whether there is one)
    for (const k of read) {
      const base = flanneldNode('w1', { dual: true });
      const node = { ...base, metadata: { ...base.metadata, annotations: { ...base.metadata.annotations, [k]: 'x' } } };
      expect(nodeLease(node, names), k).not.toEqual(nodeLease(base, names));
    }
  });

  it('reads a flanneld Node (IPv4) as the lease flanneld\'s etcd schema would hold', () => {
    const r = nodeLease(flanneldNode('w1'), names);
    expect(r && 'lease' in r).toBe(true);
    const { lease } = r as { lease: import('../../../../src/flannel/lease').Lease };
    expect(lease.subnet?.toString()).toBe('10.244.1.0/24');
    expect(lease.ipv6Subnet).toBeUndefined();
    expect(lease.attrs).toEqual({ backendType: 'vxlan', publicIP: IP.parse('192.168.56.11'), vni: 1, vtepMAC: '6e:9a:1b:2c:3d:4e' });
  });

  it('reads a dual-stack flanneld Node, and one of ours written from the same attributes, alike', () => {
    const theirs = nodeLease(flanneldNode('w1', { dual: true }), names) as { lease: { attrs: LeaseAttrs } };
    expect(theirs.lease.attrs).toEqual(dualAttrs());
    const bare: KubeNode = { metadata: { name: 'w1' }, spec: { podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] } };
    const ours = nodeLease(applied(bare, ownNodePatch(bare, dualAttrs(), names)), names) as { lease: object };
    expect(ours).toEqual(theirs);
  });

  it('is not a peer without kube-subnet-manager "true" (as in flanneld), silently', () => {
    const node = flanneldNode('w1');
    delete node.metadata.annotations!['flannel.alpha.coreos.com/kube-subnet-manager'];
    expect(nodeLease(node, names)).toBeUndefined();
    node.metadata.annotations!['flannel.alpha.coreos.com/kube-subnet-manager'] = 'false';
    expect(nodeLease(node, names)).toBeUndefined();
    expect(nodeLease({ metadata: { name: 'plain' } }, names)).toBeUndefined();
  });

  it('reads spec.podCIDR when podCIDRs is empty (older clusters), and clears host bits as Go does', () => {
    const node = flanneldNode('w1');
    node.spec = { podCIDR: '10.244.7.9/24' };
    expect((nodeLease(node, names) as { lease: { subnet: object } }).lease.subnet.toString()).toBe('10.244.7.0/24');
  });

  it('keeps an IPv4-only flanneld in a dual-stack cluster as an IPv4 peer only', () => {
    const node = flanneldNode('w1');
    node.spec = { podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] };
    const { lease } = nodeLease(node, names) as { lease: { subnet?: object; ipv6Subnet?: object } };
    expect(lease.subnet?.toString()).toBe('10.244.1.0/24');
    expect(lease.ipv6Subnet).toBeUndefined();
  });

  it('reads "null" backend data (a host-gw flanneld) as a lease without a VTEP', () => {
    const node = flanneldNode('w1');
    node.metadata.annotations![names.backendType] = 'host-gw';
    node.metadata.annotations![names.backendData] = 'null';
    expect(nodeLease(node, names)).toEqual({ lease: { subnet: expect.anything(), attrs: { backendType: 'host-gw', publicIP: IP.parse('192.168.56.11') }, node: 'w1' } });
  });

  it('accepts MACs in either case and with dashes, and a missing VNI', () => {
    const node = flanneldNode('w1');
    node.metadata.annotations![names.backendData] = '{"VtepMAC":"6E-9A-1B-2C-3D-4E"}';
    expect((nodeLease(node, names) as { lease: { attrs: LeaseAttrs } }).lease.attrs).toMatchObject({ vtepMAC: '6e:9a:1b:2c:3d:4e' });
  });

  it.each([
    ['backend-data not JSON', { 'flannel.alpha.coreos.com/backend-data': '{"VNI":1,' }, /backend-data is not JSON/],
    ['backend-data a list', { 'flannel.alpha.coreos.com/backend-data': '[1]' }, /backend-data must be a JSON object/],
    ['a bad MAC', { 'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"zz:00"}' }, /VtepMAC "zz:00" is not a MAC/],
    ['a bad VNI', { 'flannel.alpha.coreos.com/backend-data': '{"VNI":-1,"VtepMAC":"6e:9a:1b:2c:3d:4e"}' }, /VNI -1 is not a VNI/],
    ['no public-ip', { 'flannel.alpha.coreos.com/public-ip': undefined }, /public-ip null is not an IPv4 address/],
    ['an IPv6 public-ip', { 'flannel.alpha.coreos.com/public-ip': '2001:db8::1' }, /public-ip "2001:db8::1" is not an IPv4/],
    ['v6 data without public-ipv6', { 'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"c2:5e:77:01:02:03"}' }, /no IPv6 pod CIDR/],
    ['no backend data at all', { 'flannel.alpha.coreos.com/backend-data': undefined }, /neither .*backend-data nor .*backend-v6-data/],
  ])('gives a reason for %s, naming the node and the annotation', (_what, changes, msg) => {
    const node = flanneldNode('w9');
    for (const [k, v] of Object.entries(changes)) {
      if (v === undefined) delete node.metadata.annotations![k];
      else node.metadata.annotations![k] = v;
    }
    const r = nodeLease(node, names) as { reason: string };
    expect(r.reason).toMatch(/^node "w9": /);
    expect(r.reason).toMatch(msg);
  });

  it.each([
    [{}, /no pod CIDR assigned/],
    [{ podCIDR: 'nope' }, /spec.podCIDR "nope" is not a CIDR/],
    [{ podCIDRs: ['10.244.1.0/24', '10.244.2.0/24'] }, /two IPv4 CIDRs/],
    [{ podCIDRs: ['10.244.1.0/24', 'fd00::/64', '10.1.0.0/24'] }, /3 entries/],
    [{ podCIDRs: ['10.244.1.0/24', 'fd00::/200'] }, /spec.podCIDRs\[1\] "fd00::\/200" is not a CIDR/],
  ])('pod CIDRs %j: %s', (spec, msg) => {
    expect(() => podSubnets({ metadata: { name: 'x' }, spec })).toThrow(msg);
    const node = flanneldNode('x');
    node.spec = spec;
    expect((nodeLease(node, names) as { reason: string }).reason).toMatch(msg);
  });
});

describe('the NetworkUnavailable condition', () => {
  it('is flanneld\'s: False, FlannelIsUp, times in RFC 3339 seconds', () => {
    expect(networkUpPatch(new Date('2025-03-04T05:06:07.890Z'))).toEqual({
      status: {
        conditions: [
          {
            type: 'NetworkUnavailable',
            status: 'False',
            lastHeartbeatTime: '2025-03-04T05:06:07Z',
            lastTransitionTime: '2025-03-04T05:06:07Z',
            reason: 'FlannelIsUp',
            message: 'Flannel is running on this node',
          },
        ],
      },
    });
  });
});
