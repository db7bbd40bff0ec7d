// The kube subnet manager against the stand-in API server (in-process, plain
// HTTP, a bearer token with kube-flannel's RBAC role): the network config
// from net-conf.json, waiting for our Node and its pod CIDR, the annotations
// it writes (through nodes/status only), the peers read from the other Nodes,
// which Node changes wake the daemon, the own-annotation check, the
// NetworkUnavailable condition and the release.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP } from '../../../../src/net/ip';
import { KubeClient } from '../../../../src/flannel/kube/client';
import { KubeManager } from '../../../../src/flannel/kube/kube-manager';
import type { HeldLease, LeaseHooks } from '../../../../src/flannel/manager';
import { StoreUnavailable } from '../../../../src/flannel/manager';
import type { LeaseAttrs } from '../../../../src/flannel/lease';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import { KubeApiServer, startKubeApiServer } from '../../../support/kube-apiserver';
import { kubeconfigYaml } from '../../../support/kubeconfig';
import { waitFor } from '../../../support/wait';

const P = 'flannel.alpha.coreos.com';
const TOKEN = 'flannel-sa-token';
const CFG = parseNetworkConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
const DUAL = parseNetworkConfig('{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}');


const attrs = (mac = '0a:00:00:00:00:01'): LeaseAttrs => ({ publicIP: IP.parse('192.168.88.1')!, backendType: 'vxlan', vni: 1, vtepMAC: mac });

/** A Node as flanneld leaves it (backend-data etc.). */
const flannelNode = (name: string, octet: number, extra: Record<string, string> = {}) => ({
  metadata: {
    name,
    annotations: {
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"0a:00:00:00:00:0${octet}"}`,
      [`${P}/public-ip`]: `192.168.88.${octet}`,
      [`${P}/kube-subnet-manager`]: 'true',
      ...extra,
    },
  },
  spec: { podCIDR: `10.244.${octet}.0/24`, podCIDRs: [`10.244.${octet}.0/24`] },
});

describe('KubeManager', () => {
  let server: KubeApiServer;
  let dir: string;
  let manager: KubeManager | undefined;
  let logs: string[];
  let stopping: () => void;
  let hooks: LeaseHooks;

  beforeAll(async () => {
    server = await startKubeApiServer({ users: [{ name: 'system:serviceaccount:kube-flannel:flannel', token: TOKEN, role: 'flannel' }] });
    dir = mkdtempSync(join(tmpdir(), 'kube-manager-'));
  });
  afterAll(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    logs = [];
    hooks = { log: (m) => logs.push(m), resync: () => {}, stopping: new Promise<void>((r) => (stopping = r)) };
  });
  afterEach(async () => {
    stopping();
    await manager?.close();
    manager = undefined;
    for (const n of await server.listNodes()) await server.deleteNode(n.metadata.name);
    await server.clearRequests();
  });

  const open = (opts: { nodeName?: string; netConf?: string; setNodeNetworkUnavailable?: boolean; url?: string } = {}) => {
    const netConfPath = join(dir, 'net-conf.json');
    writeFileSync(netConfPath, opts.netConf ?? '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
    const client = new KubeClient({ server: opts.url ?? server.url, token: () => TOKEN, description: 'test' });
    manager = new KubeManager(
      client,
      { nodeName: opts.nodeName ?? 'n1', netConfPath, annotationPrefix: P, setNodeNetworkUnavailable: opts.setNodeNetworkUnavailable ?? true },
      (m) => logs.push(m),
      { backoff: { initialMs: 20, maxMs: 50 } },
    );
    manager.start();
    return manager;
  };
  const synced = (m: KubeManager) => waitFor('the first list', async () => !!(await m.listLeases().catch(() => undefined)));

  it('reads the network config from net-conf.json, naming the file when it is missing or wrong', async () => {
    const m = open({ netConf: '{"Network":"10.244.0.0/16","EnableNFTables":false,"Backend":{"Type":"vxlan"}}' });
    expect((await m.getNetworkConfig()).v4?.network.toString()).toBe('10.244.0.0/16');
    writeFileSync(join(dir, 'net-conf.json'), '{"Network":"10.244.0.0/16"}');
    await expect(m.getNetworkConfig()).rejects.toThrow(`bad network config in ${join(dir, 'net-conf.json')}: network config field "Backend" is missing`);
    rmSync(join(dir, 'net-conf.json'));
    await expect(m.getNetworkConfig()).rejects.toThrow(`cannot read the network config ${join(dir, 'net-conf.json')}: ENOENT`);
    expect(m.description).toBe(`Kubernetes API ${server.url}, node "n1"`);
  });

  it('before the first list: StoreUnavailable with the API\'s error; our Node missing: none; node-public-ip annotations win', async () => {
    const dead = open({ url: 'http://127.0.0.1:1' });
    await waitFor('a failed list', () => logs.some((l) => l.startsWith('watching Nodes: GET http://127.0.0.1:1/api/v1/nodes')));
    await expect(dead.nodePublicIPs()).rejects.toThrow(StoreUnavailable);
    await expect(dead.nodePublicIPs()).rejects.toThrow(/no list of Nodes yet: GET http:\/\/127.0.0.1:1\/api\/v1\/nodes\?limit=500: connect ECONNREFUSED/);
    await dead.close();

    const m = open();
    await synced(m);
    expect(await m.nodePublicIPs()).toEqual({}); // not registered yet: nobody can have annotated it
    await server.createNode({ metadata: { name: 'n1', annotations: { [`${P}/node-public-ip`]: '203.0.113.9', [`${P}/node-public-ipv6`]: '2001:DB8::9' } } });
    await waitFor('n1 in the cache', () => !!m.ownNode());
    expect(await m.nodePublicIPs()).toEqual({ publicIp: '203.0.113.9', publicIpv6: '2001:db8::9' });
    await server.patchNode('n1', { metadata: { annotations: { [`${P}/node-public-ip`]: 'nope' } } });
    await waitFor('the bad value', async () => (await m.nodePublicIPs().then(() => false, () => true)));
    await expect(m.nodePublicIPs()).rejects.toThrow(`annotation ${P}/node-public-ip of node "n1": "nope" is not an IPv4 address`);
  });

  it('waits for our Node and its pod CIDR (one log line per reason), then writes flanneld\'s annotations through nodes/status only', async () => {
    const m = open();
    await synced(m);
    let lease: HeldLease | undefined;
    const acquiring = m.acquireLease(CFG, attrs(), hooks).then((l) => (lease = l));
    await waitFor('the first reason', () => logs.some((l) => l.includes('does not exist (yet)')));
    await server.createNode({ metadata: { name: 'n1', annotations: { 'other.example.com/keep': 'me' } }, spec: {} });
    await waitFor('the second reason', () => logs.some((l) => l.includes('no pod CIDR assigned')));
    const patched = await server.patchNode('n1', { metadata: { labels: { heartbeat: '1' } } }); // a change that does not help
    // once the cache holds it, the wait has looked at it (the wake-up runs in the same turn as the cache update)
    await waitFor('the manager to see the change', () => m.ownNode()?.metadata.resourceVersion === patched.metadata.resourceVersion);
    expect(lease).toBeUndefined();
    expect(logs.filter((l) => l.startsWith('waiting for node "n1"'))).toEqual([
      'waiting for node "n1": it does not exist (yet): waiting for the kubelet to register it',
      'waiting for node "n1": no pod CIDR assigned (spec.podCIDR is empty); kube-controller-manager assigns it (--allocate-node-cidrs)',
    ]);
    const t0 = Date.now();
    await server.patchNode('n1', { spec: { podCIDR: '10.244.5.0/24', podCIDRs: ['10.244.5.0/24'] } });
    await acquiring;
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(lease!.subnet!.toString()).toBe('10.244.5.0/24');
    expect(lease!.how).toBe('node "n1"\'s spec.podCIDRs');
    const stored = (await server.getNode('n1'))!;
    expect(stored.metadata.annotations).toEqual({
      'other.example.com/keep': 'me',
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}',
      [`${P}/public-ip`]: '192.168.88.1',
      [`${P}/kube-subnet-manager`]: 'true',
    });
    const writes = (await server.requests()).filter((r) => r.method !== 'GET' && !r.control);
    expect(writes.map((r) => [r.method, r.path, r.user, r.status])).toEqual([['PATCH', '/api/v1/nodes/n1/status', 'system:serviceaccount:kube-flannel:flannel', 200]]);
  });

  it('a pod CIDR outside the network, or a family the config needs that the Node lacks, is waited out; the daemon stopping ends the wait', async () => {
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.99.1.0/24' } });
    const m = open();
    await synced(m);
    const acquiring = m.acquireLease(CFG, attrs(), hooks);
    await waitFor('the reason', () => logs.some((l) => l.includes('its IPv4 pod CIDR 10.99.1.0/24 is not inside the network config\'s 10.244.0.0/16')));
    await server.patchNode('n1', { spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] } });
    const v4 = await acquiring;
    expect(v4.subnet?.toString()).toBe('10.244.1.0/24');
    // dual stack needs the IPv6 pod CIDR as well
    const dual = m.acquireLease(DUAL, { ...attrs(), publicIPv6: IP.parse('fd88::1')!, v6Vni: 1, v6VtepMAC: '0a:00:00:00:06:01' }, hooks);
    await waitFor('the IPv6 reason', () => logs.some((l) => l.includes('spec.podCIDRs has no IPv6 CIDR, but the network config enables IPv6')));
    stopping();
    await expect(dual).rejects.toThrow('stopped while waiting for node "n1"');
  });

  it('dual stack: both pod CIDRs, both families\' annotations', async () => {
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.244.3.0/24', podCIDRs: ['10.244.3.0/24', 'fd00:10:244:3::/64'] } });
    const m = open();
    await synced(m);
    const lease = await m.acquireLease(DUAL, { ...attrs(), publicIPv6: IP.parse('fd88::1')!, v6Vni: 1, v6VtepMAC: '0a:00:00:00:06:01' }, hooks);
    expect([lease.subnet?.toString(), lease.ipv6Subnet?.toString()]).toEqual(['10.244.3.0/24', 'fd00:10:244:3::/64']);
    expect((await server.getNode('n1'))!.metadata.annotations).toMatchObject({
      [`${P}/backend-v6-data`]: '{"VNI":1,"VtepMAC":"0a:00:00:00:06:01"}',
      [`${P}/public-ipv6`]: 'fd88::1',
    });
  });

  it('peers: every Node that carries the annotations (flanneld\'s or ours), named; unusable ones with why; plain Nodes left out', async () => {
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.244.1.0/24' } });
    await server.createNode(flannelNode('n2', 2));
    await server.createNode(flannelNode('n3', 3, { [`${P}/public-ip`]: 'garbage' }));
    await server.createNode({ metadata: { name: 'plain' }, spec: { podCIDR: '10.244.9.0/24' } });
    const m = open();
    await synced(m);
    const held = await m.acquireLease(CFG, attrs(), hooks);
    await waitFor('our annotations in the cache', async () => (await m.listLeases()).leases.length === 2);
    const list = await m.listLeases();
    expect(list.leases.map((l) => [l.node, l.subnet?.toString(), l.attrs.publicIP?.toString(), l.attrs.vtepMAC])).toEqual([
      ['n1', '10.244.1.0/24', '192.168.88.1', '0a:00:00:00:00:01'],
      ['n2', '10.244.2.0/24', '192.168.88.2', '0a:00:00:00:00:02'],
    ]);
    expect(list.bad).toEqual([{ key: 'nodes/n3', why: `node "n3": annotation ${P}/public-ip "garbage" is not an IPv4 address` }]);
    // The list the lease was obtained from: the peers then, plus our own Node when the watch had already
    // delivered our annotation patch (a race the daemon does not care about: it skips its own lease).
    expect(held.listed.leases.map((l) => l.node).filter((n) => n !== 'n1')).toEqual(['n2']);
    expect(await m.previousAttrs()).toMatchObject({ vtepMAC: '0a:00:00:00:00:01' });
  });

  it('wakes the daemon for a Node\'s lease added, changed, deleted or un-annotated, not for other changes; a change since the list is reported at once', async () => {
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.244.1.0/24' } });
    const m = open();
    await synced(m);
    const held = await m.acquireLease(CFG, attrs(), hooks);
    await server.createNode(flannelNode('n2', 2)); // between the list and the watch
    await waitFor('n2 in the cache', async () => (await m.listLeases()).leases.some((l) => l.node === 'n2'));
    const changes: string[] = [];
    const unwatch = m.watchLeases((why) => changes.push(why), () => {}, held.listed.revision);
    expect(changes).toEqual(['Nodes changed since the list']);
    changes.length = 0;
    await server.patchNode('n2', { status: { conditions: [{ type: 'Ready', status: 'True' }] }, metadata: { labels: { x: 'y' } } });
    await server.createNode({ metadata: { name: 'plain' } });
    await server.patchNode('n2', { metadata: { annotations: { [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"0a:00:00:00:00:22"}' } } });
    await waitFor('the MAC change', () => changes.length === 1);
    await server.createNode(flannelNode('n3', 3));
    await server.patchNode('n3', { metadata: { annotations: { [`${P}/kube-subnet-manager`]: null } } });
    await server.deleteNode('n2');
    await waitFor('three more', () => changes.length === 4);
    // a last change as a fence: the watch delivers in order, so anything reported twice would come before it
    await server.createNode(flannelNode('n4', 4));
    await waitFor('the fence', () => changes.length >= 5);
    expect(changes).toEqual(['node "n2" changed', 'node "n3" added', 'node "n3" changed', 'node "n2" deleted', 'node "n4" added']);
    unwatch();
  });

  /** n1 (ours) and n2 listed; n2's lease object as listed. */
  const twoNodesListed = async () => {
    await server.createNode(flannelNode('n1', 1));
    await server.createNode(flannelNode('n2', 2));
    const m = open({ nodeName: 'n1' });
    await synced(m);
    const listed = await m.listLeases();
    const old2 = listed.leases.find((l) => l.node === 'n2')!;
    return { m, listed, old2 };
  };

  it('leaseChanges(): the lease objects removed and added since a revision (a changed lease is both; heartbeats none); undefined for an unknown revision', async () => {
    const { m, listed, old2 } = await twoNodesListed();
    expect(m.leaseChanges(listed.revision!)).toEqual({ removed: [], added: [], bad: [], revision: listed.revision });
    await server.patchNode('n2', { status: { conditions: [{ type: 'Ready', status: 'True' }] } }); // a heartbeat: the same lease object stays
    await server.patchNode('n2', { metadata: { annotations: { [`${P}/public-ip`]: '192.168.88.22' } } });
    await server.createNode(flannelNode('n3', 3));
    await server.patchNode('n3', { metadata: { annotations: { [`${P}/backend-data`]: 'not json' } } });
    await server.createNode(flannelNode('n4', 4));
    await server.deleteNode('n4'); // came and went within the window: nothing
    const fence = await server.createNode(flannelNode('n5', 5));
    await waitFor('the fence', async () => (await m.listLeases()).leases.some((l) => l.node === 'n5'));
    const d = m.leaseChanges(listed.revision!)!;
    expect(d.removed).toEqual([old2]);
    expect(d.removed[0]).toBe(old2);
    expect(d.added.map((l) => `${l.node} ${l.attrs.publicIP}`)).toEqual(['n2 192.168.88.22', 'n5 192.168.88.5']);
    expect(d.bad).toEqual([{ key: 'nodes/n3', why: expect.stringContaining('backend-data') }]);
    const now = await m.listLeases();
    expect(d.revision).toBe(now.revision);
    expect(now.leases.find((l) => l.node === 'n2')).toBe(d.added[0]);
    expect(m.leaseChanges(d.revision)).toMatchObject({ removed: [], added: [] });
    // asked from d.revision, the journal forgot what came before it (the reader is past it)
    expect(m.leaseChanges(listed.revision!)).toBeUndefined();
    expect(m.leaseChanges('999999')).toBeUndefined();
    // the first list is not journaled (no revision before it was handed out): a reader from before it lists
    expect(m.leaseChanges('0')).toBeUndefined();
    expect(fence.metadata.name).toBe('n5');
  });

  it('a Node whose lease reads the same (heartbeats; its backend-data re-spaced) is no change; what changes the lease after it still is one', async () => {
    const { m, listed, old2 } = await twoNodesListed();
    for (const status of ['True', 'False', 'True']) await server.patchNode('n2', { status: { conditions: [{ type: 'Ready', status }] } });
    await server.patchNode('n2', { metadata: { annotations: { [`${P}/backend-data`]: '{ "VNI": 1, "VtepMAC": "0a:00:00:00:00:02" }' } } });
    await server.patchNode('n2', { status: { conditions: [{ type: 'Ready', status: 'False' }] } });
    await server.createNode(flannelNode('n5', 5));
    await waitFor('the fence', async () => (await m.listLeases()).leases.some((l) => l.node === 'n5'));
    const quiet = m.leaseChanges(listed.revision!)!;
    expect(quiet.removed).toEqual([]);
    expect(quiet.added.map((l) => l.node)).toEqual(['n5']);
    expect((await m.listLeases()).leases.find((l) => l.node === 'n2')).toBe(old2); // the object the backends judged stays
    await server.patchNode('n2', { metadata: { annotations: { [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"0a:00:00:00:00:22"}' } } });
    await waitFor('the new MAC', async () => (await m.listLeases()).leases.some((l) => l.node === 'n2' && l.attrs.vtepMAC === '0a:00:00:00:00:22'));
    const d = m.leaseChanges(quiet.revision)!;
    expect(d.removed).toEqual([old2]);
    expect(d.added.map((l) => `${l.node} ${l.attrs.vtepMAC}`)).toEqual(['n2 0a:00:00:00:00:22']);
  });

  it('a peer\'s podCIDRs changed while its podCIDR stays is a change (the lease is read from podCIDRs first)', async () => {
    const { m, listed } = await twoNodesListed();
    await server.patchNode('n2', { spec: { podCIDRs: ['10.244.9.0/24'] } }); // a merge patch: the list replaced, podCIDR kept
    await waitFor('n2\'s new subnet', async () => (await m.listLeases()).leases.some((l) => l.node === 'n2' && `${l.subnet}` === '10.244.9.0/24'));
    const d = m.leaseChanges(listed.revision!)!;
    expect(d.added.map((l) => `${l.node} ${l.subnet}`)).toEqual(['n2 10.244.9.0/24']);
  });

  it('keeps of a peer only its key once its lease is read (nothing its heartbeats replace), and of our Node only flannel\'s annotations and its pod CIDRs', async () => {
    const kubelet = { status: { conditions: [{ type: 'Ready', status: 'True' }], images: [{ names: ['x'], sizeBytes: 1 }] } };
    await server.createNode({ ...flannelNode('n1', 1, { 'other.example.com/a': 'b' }), ...kubelet, metadata: { ...flannelNode('n1', 1).metadata, labels: { l: 'v' } } } as never);
    await server.createNode({ ...flannelNode('n2', 2), ...kubelet } as never);
    const m = open({ nodeName: 'n1' });
    await synced(m);
    const own = m.ownNode()!;
    expect(Object.keys(own)).toEqual(['metadata', 'spec']);
    expect(own.metadata.labels).toBeUndefined();
    expect(Object.keys(own.metadata.annotations!).sort()).toEqual([`${P}/backend-data`, `${P}/backend-type`, `${P}/kube-subnet-manager`, `${P}/public-ip`]);
    expect(own.spec).toEqual({ podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] });
    const cache = (m as unknown as { watch: { objects(): Map<string, unknown> } }).watch.objects();
    expect([...cache]).toEqual([['n1', own], ['n2', undefined]]); // a peer's key alone
    expect((await m.listLeases()).leases.map((l) => `${l.node} ${l.attrs.vtepMAC}`)).toEqual(['n1 0a:00:00:00:00:01', 'n2 0a:00:00:00:00:02']);
    await server.patchNode('n2', { status: { conditions: [{ type: 'Ready', status: 'False' }] } }); // a heartbeat
    await server.createNode(flannelNode('n5', 5));
    await waitFor('the fence', async () => (await m.listLeases()).leases.some((l) => l.node === 'n5'));
    expect(cache.get('n2')).toBeUndefined();
    expect(cache.has('n2')).toBe(true);
  });

  it('a new list (after 410 Gone) reports the leases that changed meanwhile, and none of the peers that did not (their resourceVersions are not kept)', async () => {
    const { m, listed, old2 } = await twoNodesListed();
    await server.createNode(flannelNode('n3', 3));
    await waitFor('n3', async () => (await m.listLeases()).leases.some((l) => l.node === 'n3'));
    const before = m.leaseChanges(listed.revision!)!;
    // changes the watch never sees: the next watch is answered 410 and the Nodes are listed again
    await server.forceGone();
    await server.dropWatches();
    await server.patchNode('n2', { status: { conditions: [{ type: 'Ready', status: 'False' }] } }); // a heartbeat
    await server.patchNode('n3', { metadata: { annotations: { [`${P}/public-ip`]: '192.168.88.33' } } });
    await waitFor('the new list', () => logs.some((l) => l.startsWith('listing every Node again')));
    await waitFor('n3\'s new address', async () => (await m.listLeases()).leases.some((l) => l.node === 'n3' && `${l.attrs.publicIP}` === '192.168.88.33'));
    const d = m.leaseChanges(before.revision)!;
    expect(d.added.map((l) => `${l.node} ${l.attrs.publicIP}`)).toEqual(['n3 192.168.88.33']);
    expect(d.removed.map((l) => l.node)).toEqual(['n3']);
    expect((await m.listLeases()).leases.find((l) => l.node === 'n2')).toBe(old2);
  });

  it('check(): our annotations, changed or removed by hand, are written again once; a pod CIDR that changed is reported', async () => {
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.244.1.0/24' } });
    const m = open();
    await synced(m);
    const held = await m.acquireLease(CFG, attrs(), hooks);
    await waitFor('our annotations in the cache', async () => (await m.listLeases()).leases.length === 1);
    expect(await held.check([])).toBe(false);
    await server.clearRequests();
    await server.patchNode('n1', { metadata: { annotations: { [`${P}/kube-subnet-manager`]: null, [`${P}/public-ip`]: '1.2.3.4' } } });
    await waitFor('the removal in the cache', async () => (await m.listLeases()).leases.length === 0);
    expect(await held.check([])).toBe(false);
    expect(await held.check([])).toBe(false); // the patch is on its way: not sent twice
    await waitFor('our annotations back', async () => (await m.listLeases()).leases.length === 1);
    expect(await held.check([])).toBe(false);
    const patches = (await server.requests()).filter((r) => r.method === 'PATCH');
    expect(patches.map((r) => r.path)).toEqual(['/api/v1/nodes/n1/status']);
    expect(logs).toContain(`node "n1": ${P}/public-ip, ${P}/kube-subnet-manager had been changed: written again`);
    expect((await server.getNode('n1'))!.metadata.annotations[`${P}/public-ip`]).toBe('192.168.88.1');

    await server.deleteNode('n1');
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.244.7.0/24' } });
    await waitFor('the new n1', () => m.ownNode()?.spec?.podCIDR === '10.244.7.0/24');
    expect(await held.check([])).toBe(false);
    expect(logs).toContain('node "n1" now has pod CIDRs 10.244.7.0/24, this daemon holds 10.244.1.0/24: restart it to follow');
  });

  it('overlayState() makes NetworkUnavailable follow the overlay, patched on changes only (False FlannelIsUp, True with the reason); nothing with --set-node-network-unavailable=false; release() takes the annotations off', async () => {
    await server.createNode({
      metadata: { name: 'n1' },
      spec: { podCIDR: '10.244.1.0/24' },
      status: { conditions: [{ type: 'Ready', status: 'True' }, { type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated' }] },
    });
    const m = open();
    await synced(m);
    const held = await m.acquireLease(CFG, attrs(), hooks);
    await held.overlayState(undefined);
    await held.overlayState(undefined);
    const node = (await server.getNode('n1'))!;
    expect(node.status.conditions).toEqual([
      { type: 'Ready', status: 'True' },
      { type: 'NetworkUnavailable', status: 'False', reason: 'FlannelIsUp', message: 'Flannel is running on this node', lastHeartbeatTime: expect.any(String), lastTransitionTime: expect.any(String) },
    ]);
    expect((await server.requests()).filter((r) => r.method === 'PATCH').map((r) => r.path)).toEqual(['/api/v1/nodes/n1/status', '/api/v1/nodes/n1/status']);
    // peers refused: the scheduler is told, once
    await held.overlayState('3 of 3 peers not programmed (10.244.2.0/24, 10.244.3.0/24, 10.244.4.0/24)');
    await held.overlayState('3 of 3 peers not programmed (10.244.2.0/24, 10.244.3.0/24, 10.244.4.0/24)');
    expect((await server.getNode('n1'))!.status.conditions[1]).toMatchObject({
      type: 'NetworkUnavailable', status: 'True', reason: 'FlannelIsNotReady',
      message: "Flannel's overlay is not in place on this node: 3 of 3 peers not programmed (10.244.2.0/24, 10.244.3.0/24, 10.244.4.0/24)",
    });
    await held.overlayState(undefined);
    expect((await server.getNode('n1'))!.status.conditions[1]).toMatchObject({ type: 'NetworkUnavailable', status: 'False', reason: 'FlannelIsUp' });
    expect((await server.requests()).filter((r) => r.method === 'PATCH')).toHaveLength(4);
    expect(logs).toContain('node "n1": condition NetworkUnavailable set to True (FlannelIsNotReady: 3 of 3 peers not programmed (10.244.2.0/24, 10.244.3.0/24, 10.244.4.0/24))');
    await held.release();
    expect(Object.keys((await server.getNode('n1'))!.metadata.annotations ?? {})).toEqual([]);
    await m.close();

    await server.clearRequests();
    const off = open({ setNodeNetworkUnavailable: false });
    await synced(off);
    const offHeld = await off.acquireLease(CFG, attrs(), hooks);
    await offHeld.overlayState(undefined);
    await offHeld.overlayState('VTEP flannel.1 not up');
    expect((await server.requests()).filter((r) => r.method === 'PATCH')).toHaveLength(1); // the annotations only
  });

  it('open(): the node name from NODE_NAME/--node-name, else from our pod (kube-flannel.yml\'s POD_NAME/POD_NAMESPACE), else a clear error', async () => {
    const kubeconfigFile = join(dir, 'kubeconfig');
    writeFileSync(kubeconfigFile, kubeconfigYaml({ server: server.url, token: TOKEN }));
    const base = { kubeconfigFile, netConfPath: join(dir, 'net-conf.json'), annotationPrefix: P, setNodeNetworkUnavailable: true };
    await expect(KubeManager.open({ ...base, nodeName: '' }, (m) => logs.push(m))).rejects.toThrow(
      '--kube-subnet-mgr needs the name of this node\'s Node: set NODE_NAME or --node-name (or POD_NAME and POD_NAMESPACE)',
    );
    const pod = { namespace: 'kube-flannel', name: 'kube-flannel-ds-x7k2p' };
    await expect(KubeManager.open({ ...base, nodeName: '', pod }, (m) => logs.push(m))).rejects.toThrow(
      `cannot find this node's name from pod kube-flannel/kube-flannel-ds-x7k2p: GET ${server.url}/api/v1/namespaces/kube-flannel/pods/kube-flannel-ds-x7k2p: 404 NotFound: pods "kube-flannel-ds-x7k2p" not found`,
    );
    await server.createPod({ metadata: { ...pod }, spec: { nodeName: 'worker-3' } });
    manager = await KubeManager.open({ ...base, nodeName: '', pod }, (m) => logs.push(m));
    expect(manager.description).toBe(`Kubernetes API ${server.url}, node "worker-3"`);
    expect(logs.slice(-2)).toEqual([
      `Kubernetes API: kubeconfig ${kubeconfigFile} (context test); node "worker-3", where pod kube-flannel/kube-flannel-ds-x7k2p runs`,
      `WARNING: the Kubernetes API ${server.url} is plain HTTP: nothing is encrypted or verified`, // this test's stand-in
    ]);
    await manager.close();
    manager = await KubeManager.open({ ...base, nodeName: 'n1', pod }, (m) => logs.push(m)); // a given name wins
    expect(manager.description).toBe(`Kubernetes API ${server.url}, node "n1"`);
  });

  it('--kube-annotation-prefix: the annotations are written and read under flannel\'s names for that prefix', async () => {
    await server.createNode({ metadata: { name: 'n1' }, spec: { podCIDR: '10.244.1.0/24' } });
    await server.createNode({ metadata: { name: 'n2', annotations: { 'example.com/net-kube-subnet-manager': 'true', 'example.com/net-backend-type': 'vxlan', 'example.com/net-backend-data': '{"VNI":1,"VtepMAC":"0a:00:00:00:00:02"}', 'example.com/net-public-ip': '192.168.88.2' } }, spec: { podCIDR: '10.244.2.0/24' } });
    await server.createNode(flannelNode('n3', 3)); // the default prefix: not a peer here
    const netConfPath = join(dir, 'net-conf.json');
    manager = new KubeManager(new KubeClient({ server: server.url, token: () => TOKEN, description: 'test' }), { nodeName: 'n1', netConfPath, annotationPrefix: 'example.com/net', setNodeNetworkUnavailable: false }, () => {});
    manager.start();
    await synced(manager);
    await manager.acquireLease(CFG, attrs(), hooks);
    expect(Object.keys((await server.getNode('n1'))!.metadata.annotations).sort()).toEqual(
      ['example.com/net-backend-data', 'example.com/net-backend-type', 'example.com/net-kube-subnet-manager', 'example.com/net-public-ip'],
    );
    await waitFor('n1 as a lease', async () => (await manager!.listLeases()).leases.length === 2);
    expect((await manager.listLeases()).leases.map((l) => l.node)).toEqual(['n1', 'n2']);
  });
});
