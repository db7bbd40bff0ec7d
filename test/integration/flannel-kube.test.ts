// vxlan-flannel in place of flanneld in a kube-flannel cluster, on one
// machine: three node namespaces on an underlay, the stand-in API server
// (test/support/kube-apiserver.ts, proven with kubectl by
// kube-standin-kubectl.test.ts) in a namespace of its own on the underlay,
// and a "world" host on the underlay outside the cluster. Each node has its
// own mount namespace (flannel-topology.ts `ownFiles`), so the daemon runs as
// kube-flannel runs flanneld, `daemon --kube-subnet-mgr --ip-masq` with the
// default paths (/etc/kube-flannel/net-conf.json, /run/flannel/subnet.env),
// and pods are attached through libcni (the project's libcni driver) with
// kube-flannel's cni-conf.json unchanged: "type": "flannel" chained with
// Debian's portmap.
//
// The nodes reach the API three ways: n1 in-cluster (KUBERNETES_SERVICE_HOST
// and the service account's token and CA at their default path), n2 with a
// kubeconfig holding the same token, n3 with a kubeconfig holding a client
// certificate. Every one of them has kube-flannel's RBAC role only. n1 knows
// its name from NODE_NAME, n2 from --node-name, n3 from its pod (POD_NAME and
// POD_NAMESPACE, as kube-flannel.yml sets them).
//
// Overlay 10.88.0.0/16 with Backend.MTU 1400; Node pod CIDRs 10.88.<n>.0/24;
// hand-written flanneld Nodes at 10.88.50.0/24 (a real VTEP made with ip) and
// 10.88.60.0/24 (no host behind it).
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DaemonHandle, Host, NETWORK, Topology, UNDERLAY_PREFIX, enter, fileOf, printDaemonLogsOnFailure } from './flannel-topology';
import { waitFor, waitAndReport } from '../support/wait';
import { OUR_BIN, memoryHolds, runProcess, sh } from './helpers';
import { TestCA } from '../support/pki';
import { kubeconfigYaml } from '../support/kubeconfig';
import { KubeApiServerProcess, spawnClusterApiServer, spawnKubeApiServer } from '../support/kube-apiserver-process';
import type { JsonObject } from '../support/kube-apiserver';

const P = 'flannel.alpha.coreos.com';
const API_IP = `${UNDERLAY_PREFIX}.100`;
const WORLD_IP = `${UNDERLAY_PREFIX}.200`;
const SA_USER = 'system:serviceaccount:kube-flannel:flannel';
const SA_TOKEN = 'kube-flannel-sa-token-7c1e';
const CERT_USER = 'flannel-n3';
/** kube-flannel's cni-conf.json, as its ConfigMap holds it. */
const CNI_CONF = '{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}';
const NET_CONF = { Network: NETWORK, EnableNFTables: false, Backend: { Type: 'vxlan', MTU: 1400 } };
const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';

let topo: Topology;
let server: KubeApiServerProcess;
let n1: Host, n2: Host, n3: Host, world: Host;
let d1: DaemonHandle, d2: DaemonHandle, d3: DaemonHandle | undefined;
/** How each node reaches the API: its environment and flags. */
const access: Record<string, { env: Record<string, string>; args: string[] }> = {};

interface Pod {
  name: string;
  ns: string;
  path: string;
  node: Host;
  ip: string;
}
let p1: Pod, p2: Pod;

/** kube-flannel.yml's daemon arguments. */
const DAEMON_ARGS = ['--ip-masq', '--kube-subnet-mgr', '--healthz-port=8081'];
const startDaemon = (node: Host, extra: string[] = []) => topo.startDaemon(node, [...DAEMON_ARGS, ...access[node.name].args], extra, { env: access[node.name].env });

/** A Node as the kubelet registers it and kube-controller-manager assigns its pod CIDR (none: not yet). */
const registeredNode = (name: string, octet?: number): JsonObject => ({
  metadata: { name, labels: { 'kubernetes.io/hostname': name }, annotations: { 'node.alpha.kubernetes.io/ttl': '0', 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' } },
  spec: octet === undefined ? {} : ({ podCIDR: `10.88.${octet}.0/24`, podCIDRs: [`10.88.${octet}.0/24`] } as JsonObject),
  status: {
    conditions: [
      { type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated', message: 'Node created without a route' },
      { type: 'Ready', status: 'False', reason: 'KubeletNotReady', message: 'container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized' },
    ],
  },
});

/** The annotations flanneld writes on its Node (vxlan, IPv4). */
const flannelAnnotations = (publicIP: string, mac: string) => ({
  [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${mac}"}`,
  [`${P}/backend-type`]: 'vxlan',
  [`${P}/kube-subnet-manager`]: 'true',
  [`${P}/public-ip`]: publicIP,
});

const vtep = (node: Host) => topo.json(node.ns, '-d link show dev flannel.1')[0];
const routesOn = (node: Host) => topo.json<{ dst: string; gateway?: string; dev?: string }[]>(node.ns, 'route show');
const hasRoute = (node: Host, subnet: string) => routesOn(node).some((r) => r.dst === subnet && r.dev === 'flannel.1');

/** Runs the libcni driver on the node (its own /etc/cni/net.d, /var/lib/cni), as a runtime there would. */
const libcni = (node: Host, command: string, pod: { path: string }, id: string, env: Record<string, string> = {}) =>
  runProcess([...enter(node), inject('libcniDriver'), command, 'cbr0', pod.path, id], { PATH, CNI_PATH: topo.cniBin, ...env }, '');

async function attach(node: Host, name: string, env: Record<string, string> = {}): Promise<Pod> {
  const ns = `flk-${name}`;
  const path = topo.netns(ns);
  const r = await libcni(node, 'add', { path }, `ctr-${name}`, env);
  if (r.code !== 0) throw new Error(`libcni ADD ${name} on ${node.name} failed: ${r.stdout}${r.stderr}`);
  const ip = (r.json.ips as { address: string }[])[0].address.split('/')[0];
  return { name, ns, path, node, ip };
}

/** Waits until every listed daemon has written subnet.env, and returns it (text). */
const subnetEnv = async (d: DaemonHandle) => (await topo.waitSubnet(d)).env;

beforeAll(async () => {
  topo = new Topology('flk');
  n1 = topo.addHost('n1', 1, 1500, { ownFiles: true });
  n2 = topo.addHost('n2', 2, 1500, { ownFiles: true });
  n3 = topo.addHost('n3', 3, 1500, { ownFiles: true });
  const api = topo.addHost('api', 100);
  world = topo.addHost('world', 200);

  const ca = new TestCA(join(topo.tmp.path, 'pki'));
  server = await spawnClusterApiServer(api.path, API_IP, ca, [
    { name: SA_USER, token: SA_TOKEN, role: 'flannel' },
    { name: CERT_USER, role: 'flannel' },
  ]);
  await server.createNode(registeredNode('n1', 1));
  await server.createNode(registeredNode('n2', 2));
  await server.createNode(registeredNode('n3')); // no pod CIDR yet

  // n1: in-cluster; n2: a kubeconfig with the token; n3: a kubeconfig with a client certificate
  const sa = '/var/run/secrets/kubernetes.io/serviceaccount';
  writeFileSync(fileOf(n1, `${sa}/token`), SA_TOKEN);
  writeFileSync(fileOf(n1, `${sa}/ca.crt`), ca.caPem);
  writeFileSync(fileOf(n1, `${sa}/namespace`), 'kube-flannel');
  access.n1 = { env: { KUBERNETES_SERVICE_HOST: API_IP, KUBERNETES_SERVICE_PORT: '6443', NODE_NAME: 'n1' }, args: [] };
  const kc2 = join(topo.tmp.path, 'n2.kubeconfig');
  writeFileSync(kc2, kubeconfigYaml({ server: server.url, caFile: ca.caFile, token: SA_TOKEN }), { mode: 0o600 });
  access.n2 = { env: {}, args: ['--kubeconfig-file', kc2, '--node-name', 'n2'] };
  const client = ca.client(CERT_USER);
  const kc3 = join(topo.tmp.path, 'n3.kubeconfig');
  writeFileSync(kc3, kubeconfigYaml({ server: server.url, caPem: ca.caPem, clientCertFile: client.cert, clientKeyFile: client.key }), { mode: 0o600 });
  access.n3 = { env: { POD_NAME: 'kube-flannel-ds-n3', POD_NAMESPACE: 'kube-flannel' }, args: ['--kubeconfig-file', kc3] };
  await server.createPod({ metadata: { namespace: 'kube-flannel', name: 'kube-flannel-ds-n3' }, spec: { nodeName: 'n3', serviceAccountName: 'flannel' } });

  for (const node of [n1, n2, n3]) {
    writeFileSync(fileOf(node, '/etc/kube-flannel/net-conf.json'), JSON.stringify(NET_CONF));
    writeFileSync(fileOf(node, '/etc/cni/net.d/10-flannel.conflist'), CNI_CONF);
  }
  sh(['ln', '-s', join(OUR_BIN, 'flannel'), join(topo.cniBin, 'flannel')]);
  sh(['ln', '-s', '/usr/lib/cni/portmap', join(topo.cniBin, 'portmap')]);

  d1 = startDaemon(n1);
  d2 = startDaemon(n2, ['--ip-blackhole-route']);
  await Promise.all([subnetEnv(d1), subnetEnv(d2)]);
  await topo.waitMesh([{ node: n1, subnet: '10.88.1.0/24' }, { node: n2, subnet: '10.88.2.0/24' }]);
}, 60_000);

printDaemonLogsOnFailure(() => ({ d1, d2, d3 }));

afterAll(async () => {
  await server?.stop();
  await topo?.cleanup();
});

describe('vxlan-flannel daemon --kube-subnet-mgr', () => {
  it('takes each node\'s subnet from its Node\'s pod CIDR and writes flanneld\'s subnet.env at the default path', async () => {
    for (const [d, n] of [[d1, 1], [d2, 2]] as const) {
      const mtu = vtep(d.node).mtu;
      expect(readFileSync(topo.subnetFile(d.node), 'utf8')).toBe(`FLANNEL_NETWORK=${NETWORK}\nFLANNEL_SUBNET=10.88.${n}.1/24\nFLANNEL_MTU=${mtu}\nFLANNEL_IPMASQ=true\n`);
      expect(d.log()).toContain(`lease 10.88.${n}.0/24 (node "n${n}"'s spec.podCIDRs)`);
      expect(topo.json(d.node.ns, '-4 addr show dev flannel.1')[0].addr_info.map((a: { local: string }) => a.local)).toEqual([`10.88.${n}.0`]);
    }
    expect(d1.log()).toContain(`Kubernetes API: in-cluster (https://${API_IP}:6443)`);
    expect(d2.log()).toContain(`Kubernetes API: kubeconfig ${join(topo.tmp.path, 'n2.kubeconfig')} (context test)`);
  });

  it('annotates each Node exactly as flanneld does, through nodes/status as the flannel service account, other annotations kept; NetworkUnavailable False', async () => {
    for (const [node, n] of [[n1, 1], [n2, 2]] as const) {
      const stored = (await server.getNode(node.name))!;
      expect(stored.metadata.annotations).toEqual({
        'node.alpha.kubernetes.io/ttl': '0',
        'volumes.kubernetes.io/controller-managed-attach-detach': 'true',
        ...flannelAnnotations(`${UNDERLAY_PREFIX}.${n}`, vtep(node).address),
      });
      expect(stored.status.conditions[0]).toEqual({
        type: 'NetworkUnavailable', status: 'False', reason: 'FlannelIsUp', message: 'Flannel is running on this node',
        lastHeartbeatTime: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/), lastTransitionTime: expect.stringMatching(/Z$/),
      });
      expect(stored.status.conditions[1].type).toBe('Ready'); // the other conditions stay
    }
    const writes = (await server.requests()).filter((r) => !r.control && r.method !== 'GET');
    expect(writes.length).toBeGreaterThanOrEqual(4);
    for (const w of writes) expect([w.method, w.path, w.user, w.status]).toEqual(['PATCH', expect.stringMatching(/^\/api\/v1\/nodes\/n[12]\/status$/), SA_USER, 200]);
  });

  it('pods attached through libcni with kube-flannel\'s cni-conf.json ping across nodes, and the receiver sees the sender\'s pod address', async () => {
    p1 = await attach(n1, 'p1');
    p2 = await attach(n2, 'p2', { CAP_ARGS: JSON.stringify({ portMappings: [{ hostPort: 18080, containerPort: 8080, protocol: 'tcp' }] }) });
    expect(p1.ip).toMatch(/^10\.88\.1\.\d+$/);
    expect(p2.ip).toMatch(/^10\.88\.2\.\d+$/);
    // the default paths, node by node: the delegate config flannel saved, host-local's reservation
    expect(readdirSync(fileOf(n1, '/var/lib/cni/flannel'))).toContain('ctr-p1');
    const saved = JSON.parse(readFileSync(fileOf(n1, '/var/lib/cni/flannel/ctr-p1'), 'utf8'));
    expect(saved).toMatchObject({ type: 'bridge', name: 'cbr0', ipMasq: false, hairpinMode: true, isDefaultGateway: true, mtu: vtep(n1).mtu });
    expect(readdirSync(fileOf(n2, '/var/lib/cni/networks/cbr0'))).toContain(p2.ip);
    expect(topo.json(p1.ns, 'link show dev eth0')[0].mtu).toBe(vtep(n1).mtu);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    expect(await topo.ping(p2, p1.ip)).toBe(true);
    await topo.startPeerEcho(p2, 8080);
    expect(await topo.addressSeenBy(p1, p2.ip, 8080)).toBe(p1.ip);
  });

  it('portmap, chained after flannel, publishes a pod\'s port on its node', async () => {
    expect(await topo.addressSeenBy(world, n2.ip, 18080)).toBe(WORLD_IP);
  });

  it('--ip-blackhole-route: a blackhole route to the node\'s subnet, below the bridge\'s route, so its pods stay reachable', async () => {
    const blackholes = topo.json<{ type: string; dst: string; metric?: number }[]>(n2.ns, '-4 route show type blackhole');
    expect(blackholes).toEqual([{ type: 'blackhole', dst: '10.88.2.0/24', metric: 1024, flags: [] }]);
    expect(topo.json(n2.ns, `route get ${p2.ip}`)[0]).toMatchObject({ dev: 'cni0' });
    expect(topo.json<unknown[]>(n1.ns, '-4 route show type blackhole')).toEqual([]); // only where asked for
    expect(d2.log()).toContain('added a blackhole route to 10.88.2.0/24 (metric 1024)');
  });

  it('a Node without a pod CIDR is waited for (its reason logged when it changes, not per event), then the node comes up and is programmed on the others (the time it took printed), without any ADD there', async () => {
    d3 = startDaemon(n3, ['--release-on-exit', '--ip-blackhole-route']);
    await waitFor('n3 to find its name from its pod', () => d3!.log().includes('node "n3", where pod kube-flannel/kube-flannel-ds-n3 runs'), 30_000);
    await waitFor('n3 to wait for its pod CIDR', () => d3!.log().includes('waiting for node "n3": no pod CIDR assigned (spec.podCIDR is empty); kube-controller-manager assigns it (--allocate-node-cidrs)'), 30_000);
    // The reason is logged when it changes, not at every change of the Node: a label the daemon does not
    // read must not log it again. The witness that the label's event was handled: a later event (the Node
    // deleted, as when a kubelet re-registers) whose new reason is logged; events are handled in order.
    const noCidr = /waiting for node "n3": no pod CIDR assigned/g;
    await server.patchNode('n3', { metadata: { labels: { 'example.com/rack': 'r3' } } });
    expect(await server.deleteNode('n3')).toBe(true);
    await waitFor('n3 to see its Node gone', () => d3!.log().includes('waiting for node "n3": it does not exist (yet)'), 30_000);
    expect(d3.log().match(noCidr)).toHaveLength(1);
    await server.createNode(registeredNode('n3')); // the kubelet registers it again, still without a pod CIDR
    await waitFor('n3 to wait for its pod CIDR again', () => (d3!.log().match(noCidr) ?? []).length === 2, 30_000);
    expect(Object.keys((await server.getNode('n3'))!.metadata.annotations)).not.toContain(`${P}/kube-subnet-manager`);
    expect(routesOn(n3).filter((r) => r.dev === 'flannel.1')).toEqual([]);

    await server.patchNode('n3', { spec: { podCIDR: '10.88.3.0/24', podCIDRs: ['10.88.3.0/24'] } }); // kube-controller-manager
    const { ms: annotated } = await waitFor('n3\'s annotations', async () => (await server.getNode('n3'))!.metadata.annotations[`${P}/kube-subnet-manager`] === 'true', 30_000, 20);
    const { ms } = await waitAndReport('n1 and n2 to program n3', () => hasRoute(n1, '10.88.3.0/24') && hasRoute(n2, '10.88.3.0/24'), 30_000, 20);
    process.stdout.write(`[flk] n3 annotated ${annotated} ms after its pod CIDR; programmed on n1 and n2 ${ms} ms after that\n`);
    await subnetEnv(d3);
    expect(await topo.ping(p1, '10.88.3.0')).toBe(true); // n3's VTEP, from a pod attached before n3 existed
    // no pod (no cni0) on n3: its blackhole route is what an address of its subnet meets there
    expect(topo.json(n3.ns, '-4 route show type blackhole')).toEqual([{ type: 'blackhole', dst: '10.88.3.0/24', metric: 1024, flags: [] }]);
    expect(() => topo.ip(n3.ns, 'route get 10.88.3.5')).toThrow(/Invalid argument/);
    await waitAndReport('n3\'s NetworkUnavailable False', async () => (await server.getNode('n3'))!.status.conditions[0].status === 'False', 30_000);
    const writes = (await server.requests()).filter((r) => !r.control && r.method === 'PATCH' && r.path === '/api/v1/nodes/n3/status');
    expect(new Set(writes.map((w) => w.user))).toEqual(new Set([CERT_USER]));
  });

  it('a Node written by hand the way flanneld writes it is programmed like ours (traffic crosses), and its deletion is cleaned (the times printed)', async () => {
    // a flanneld node: its VTEP and its route to n1 made with ip, its Node with flanneld's annotations
    const fl = topo.addHost('fl', 50);
    const mac = '0a:58:0a:58:32:00';
    const n1mac = vtep(n1).address;
    topo.ip(fl.ns, `link add flannel.1 address ${mac} mtu 1450 type vxlan id 1 local ${fl.ip} dev eth0 dstport 8472 nolearning`);
    topo.ip(fl.ns, 'addr add 10.88.50.0/32 dev flannel.1');
    topo.ip(fl.ns, 'link set flannel.1 up');
    topo.ip(fl.ns, `neigh replace 10.88.1.0 lladdr ${n1mac} dev flannel.1 nud permanent`);
    sh(['bridge', '-n', fl.ns, 'fdb', 'replace', n1mac, 'dst', n1.ip, 'dev', 'flannel.1', 'self', 'permanent']);
    topo.ip(fl.ns, 'route replace 10.88.1.0/24 via 10.88.1.0 dev flannel.1 onlink');
    await server.createNode({ ...registeredNode('fl', 50), metadata: { name: 'fl', annotations: flannelAnnotations(fl.ip, mac) } });
    const { ms } = await waitAndReport('n1 to program fl', () => {
      const s = topo.peerState(n1.ns, '10.88.50.0/24', mac, fl.ip);
      return s.neigh && s.fdb && s.route;
    }, 30_000, 20);
    expect(await topo.ping(p1, '10.88.50.0')).toBe(true);
    await server.deleteNode('fl');
    const { ms: gone } = await waitAndReport('n1 to drop fl', () => {
      const s = topo.peerState(n1.ns, '10.88.50.0/24', mac, fl.ip);
      return !s.neigh && !s.fdb && !s.route;
    }, 30_000, 20);
    process.stdout.write(`[flk] hand-written flanneld Node programmed in ${ms} ms, its deletion cleaned in ${gone} ms\n`);
  });

  it('a forced 410 Gone loses no change made while the watches were down: every node lists again and programs it', async () => {
    const mac = '0a:58:0a:58:3c:00';
    await server.forceGone(0, [n1.ip, n2.ip, n3.ip]); // each node's own next watch (one fast node could use up a shared count)
    expect(await server.dropWatches()).toBe(3);
    await server.createNode({ ...registeredNode('ghost', 60), metadata: { name: 'ghost', annotations: flannelAnnotations(`${UNDERLAY_PREFIX}.60`, mac) } });
    for (const node of [n1, n2, n3]) await waitAndReport(`${node.name} to program ghost`, () => topo.peerState(node.ns, '10.88.60.0/24', mac, `${UNDERLAY_PREFIX}.60`).route, 30_000, 20);
    for (const d of [d1, d2, d3!]) expect(d.log()).toMatch(/listing every Node again: .*410/);
    await server.deleteNode('ghost'); // and the watches run again after the list
    for (const node of [n1, n2, n3]) await waitAndReport(`${node.name} to drop ghost`, () => !hasRoute(node, '10.88.60.0/24'), 30_000, 20);
  });

  it('a broken API server (events of the wrong shape, a 160 MiB list page) stops no daemon: each lists again, refuses the page, and programs the next change', async () => {
    const before = [d1, d2, d3!].map((d) => d.log().length);
    const logSince = (d: DaemonHandle, i: number) => d.log().slice(before[i]);
    expect(await server.sendRawWatchText('{"type":"ADDED","object":null}\n')).toBe(3);
    for (const [i, d] of [d1, d2, d3!].entries()) {
      await waitAndReport(`${d.node.name} to list again`, () => /listing every Node again: .*the watch is broken: it sent an event \(ADDED\) whose object is not a JSON object/.test(logSince(d, i)), 20_000, 20);
    }
    await waitFor('the watches to open again', async () => (await server.openWatches()) === 3);
    await server.oversizeNextList(160 * 2 ** 20); // past the 64 MiB limit by more than the sockets can buffer
    await server.sendRawWatchText('null\n'); // the next list is the oversized one
    await waitAndReport('a daemon to refuse the oversized page', () => [d1, d2, d3!].some((d, i) => /larger than 64 MiB \(the limit\): aborted/.test(logSince(d, i))), 20_000, 20);
    expect((await server.oversizedListResult())?.closedByClient).toBe(true);
    const mac = '0a:58:0a:58:3d:00';
    await server.createNode({ ...registeredNode('ghost2', 61), metadata: { name: 'ghost2', annotations: flannelAnnotations(`${UNDERLAY_PREFIX}.61`, mac) } });
    for (const node of [n1, n2, n3]) await waitAndReport(`${node.name} to program ghost2`, () => topo.peerState(node.ns, '10.88.61.0/24', mac, `${UNDERLAY_PREFIX}.61`).route, 30_000, 20);
    for (const [i, d] of [d1, d2, d3!].entries()) {
      expect(d.proc.exitCode, d.node.name).toBeNull();
      const longest = Math.max(...logSince(d, i).split('\n').map((l) => l.length));
      expect(longest, `${d.node.name}'s longest log line`).toBeLessThan(2000);
    }
    await server.deleteNode('ghost2');
    for (const node of [n1, n2, n3]) await waitAndReport(`${node.name} to drop ghost2`, () => !hasRoute(node, '10.88.61.0/24'), 30_000, 20);
  });

  it('a Node whose pod CIDR lies inside n2\'s takes none of n2\'s traffic, nor does one at a loopback or broadcast public-ip: each is logged, nothing of theirs is programmed', async () => {
    const n2mac = vtep(n2).address;
    const rogue = (name: string, cidr: string, publicIP: string, mac: string): JsonObject => ({
      ...registeredNode(name),
      metadata: { name, annotations: flannelAnnotations(publicIP, mac) },
      spec: { podCIDR: cidr, podCIDRs: [cidr] } as JsonObject,
    });
    await server.createNode(rogue('nested', '10.88.2.128/25', `${UNDERLAY_PREFIX}.70`, '0a:58:0a:58:46:00'));
    await server.createNode(rogue('same-start', '10.88.2.0/25', `${UNDERLAY_PREFIX}.71`, '0a:58:0a:58:47:00'));
    await server.createNode(rogue('loopback', '10.88.72.0/24', '127.0.0.1', '0a:58:0a:58:48:00'));
    await server.createNode(rogue('broadcast', '10.88.73.0/24', '255.255.255.255', '0a:58:0a:58:49:00'));
    await server.createNode({ ...registeredNode('marker', 74), metadata: { name: 'marker', annotations: flannelAnnotations(`${UNDERLAY_PREFIX}.74`, '0a:58:0a:58:4a:00') } });
    try {
      await waitAndReport('n1 to program the marker Node created after them', () => topo.peerState(n1.ns, '10.88.74.0/24', '0a:58:0a:58:4a:00', `${UNDERLAY_PREFIX}.74`).route, 30_000, 20);
      const log = d1.log();
      expect(log).toMatch(/ignoring lease 10\.88\.2\.128\/25 \(node "nested"\): overlaps lease 10\.88\.2\.0\/24 \(node "n2"\), which was there first: not programmed/);
      expect(log).toMatch(/ignoring lease 10\.88\.2\.0\/25 \(node "same-start"\): overlaps lease 10\.88\.2\.0\/24 \(node "n2"\)/);
      expect(log).toMatch(/ignoring lease 10\.88\.72\.0\/24: PublicIP 127\.0\.0\.1 is a loopback address/);
      expect(log).toMatch(/ignoring lease 10\.88\.73\.0\/24: PublicIP 255\.255\.255\.255 is the broadcast address/);
      // n2 keeps its neighbour, FDB entry and route; nothing of the others is in the kernel
      expect(topo.peerState(n1.ns, '10.88.2.0/24', n2mac, n2.ip)).toMatchObject({ neigh: true, fdb: true, route: true });
      const routes = routesOn(n1).map((r) => r.dst);
      for (const dst of ['10.88.2.128/25', '10.88.2.0/25', '10.88.72.0/24', '10.88.73.0/24']) expect(routes).not.toContain(dst);
      const fdbDst = topo.fdb(n1.ns, 'flannel.1').map((e) => e.dst);
      expect(fdbDst).not.toContain('127.0.0.1');
      expect(fdbDst).not.toContain('255.255.255.255');
      expect(await topo.ping(p1, p2.ip)).toBe(true);
    } finally {
      for (const name of ['nested', 'same-start', 'loopback', 'broadcast', 'marker']) await server.deleteNode(name);
    }
    await waitAndReport('n1 to drop the marker', () => !hasRoute(n1, '10.88.74.0/24'), 30_000, 20);
  });

  it('loads only the code of its lease source: the etcd client (its chunk: etcd-http.ts) is nowhere in its memory', () => {
    // the CLI's own code is there (the scan sees what the daemon compiled); the etcd chunk never was
    expect(memoryHolds(d1.proc.pid!, 'kube-subnet-mgr')).toBe(true);
    for (const marker of ['/v3/kv/range', 'create_request']) expect(memoryHolds(d1.proc.pid!, marker), marker).toBe(false);
  });

  it('drift is repaired from the watched Nodes as with the stores: a peer\'s route, neighbour and FDB entry deleted by hand come back', async () => {
    const mac = vtep(n2).address;
    topo.ip(n1.ns, 'route del 10.88.2.0/24 dev flannel.1');
    topo.ip(n1.ns, 'neigh del 10.88.2.0 dev flannel.1');
    sh(['bridge', '-n', n1.ns, 'fdb', 'del', mac, 'dev', 'flannel.1', 'dst', n2.ip, 'self']);
    const { ms } = await waitAndReport('n1 to repair n2', () => {
      const st = topo.peerState(n1.ns, '10.88.2.0/24', mac, n2.ip);
      return st.neigh && st.fdb && st.route;
    }, 30_000, 20);
    process.stdout.write(`[flk] drift on n1 repaired in ${ms} ms (--reconcile-interval 1)\n`);
  });

  it('status --kube-subnet-mgr shows the Node, its condition and every peer by name, all in place; kube-flannel\'s probes answer', async () => {
    const st = await topo.cli(n1, ['status', '--kube-subnet-mgr', '--json'], access.n1.env);
    expect(st.code, st.stdout + st.stderr).toBe(0);
    expect(st.json).toMatchObject({
      store: `Kubernetes API https://${API_IP}:6443, node "n1"`,
      node: { name: 'n1', exists: true, networkUnavailable: { status: 'False', reason: 'FlannelIsUp' } },
      lease: { subnet: '10.88.1.0/24', inStore: true, publicIP: n1.ip, vtepMAC: vtep(n1).address },
      problems: [],
    });
    expect(st.json.peers.map((p: { node: string; subnet: string; neigh: boolean; fdb: boolean; route: boolean }) => [p.node, p.subnet, p.neigh && p.fdb && p.route])).toEqual([
      ['n2', '10.88.2.0/24', true],
      ['n3', '10.88.3.0/24', true],
    ]);
    // without flags or variables: the running daemon's (--kube-subnet-mgr from its command line; in-cluster, NODE_NAME and
    // KUBERNETES_SERVICE_* from its environment), the same report
    const bare = await topo.cli(n1, ['status', '--json']);
    expect(bare.code, bare.stdout + bare.stderr).toBe(0);
    expect(bare.json).toMatchObject({ ...st.json, daemon: expect.stringMatching(/^pid \d+: vxlan-flannel daemon .*--kube-subnet-mgr/), notes: [] });
    // kube-flannel's probes: /healthz (liveness) and /readyz (readiness) on port 8081
    for (const [path, answer] of [['/healthz', '200 ok'], ['/readyz', '200 ok']]) {
      expect(await topo.nodeIn(n1, `fetch('http://127.0.0.1:8081${path}').then(async (r) => console.log(r.status, (await r.text()).trim()))`)).toBe(answer);
    }
    // Prometheus on the same port: the peers status just counted, and host-local's reservations in n1's subnet
    const scraped = await topo.nodeIn(n1, `fetch('http://127.0.0.1:8081/metrics').then(async (r) => console.log(r.status, r.headers.get('content-type') + '\\n' + (await r.text())))`);
    const series = (name: string) => {
      const line = scraped.split('\n').find((l) => l.startsWith(`${name} `));
      return line === undefined ? undefined : Number(line.slice(name.length + 1));
    };
    expect(scraped.split('\n')[0]).toBe('200 text/plain; version=0.0.4; charset=utf-8');
    expect(series('flannel_peers{family="ipv4"}')).toBe(st.json.peers.length);
    expect(series('flannel_reconcile_passes_total{kind="full",result="ok"}')).toBeGreaterThan(0);
    expect(series('flannel_last_reconcile_success_timestamp_seconds')).toBeGreaterThan(Date.now() / 1000 - 60);
    const ipam = fileOf(n1, '/var/lib/cni/networks/cbr0');
    const reserved = existsSync(ipam) ? readdirSync(ipam).filter((f) => f.startsWith('10.88.1.')).length : 0;
    expect(series('flannel_pod_addresses{network="cbr0",family="ipv4",state="in_use"}')).toBe(reserved || undefined);
    if (reserved) expect(series('flannel_pod_addresses{network="cbr0",family="ipv4",state="free"}')).toBe(253 - reserved);
    process.stdout.write(`[flk] /metrics on n1: ${st.json.peers.length} peers, ${reserved} pod addresses in use\n`);
    const leases = await topo.cli(n1, ['leases', '--kube-subnet-mgr'], access.n1.env);
    expect([leases.code, leases.stderr]).toEqual([1, expect.stringContaining('with --kube-subnet-mgr the leases are the Nodes\' pod CIDRs and annotations: use kubectl')]);
  });

  it('a restart keeps the subnet, the VTEP and its MAC: the annotations need no write, pods keep talking', async () => {
    const mac = vtep(n2).address;
    const before = readFileSync(topo.subnetFile(n2), 'utf8');
    await server.clearRequests();
    expect(await topo.stopDaemon(d2)).toBe(0);
    const from = d2.log().length; // the same log file: this start's lines come after
    d2 = startDaemon(n2, ['--ip-blackhole-route']);
    await waitFor('n2 to run again', () => d2.log().slice(from).includes('running:'), 30_000);
    const log = d2.log().slice(from);
    expect(readFileSync(topo.subnetFile(n2), 'utf8')).toBe(before);
    expect(vtep(n2).address).toBe(mac);
    expect(log).toContain('reusing VTEP flannel.1');
    expect(log).not.toContain('annotated node');
    expect(log).not.toContain('cannot'); // nothing retried: the first list was awaited
    const patches = (await server.requests()).filter((r) => !r.control && r.method === 'PATCH');
    expect(patches.map((r) => r.path)).toEqual(['/api/v1/nodes/n2/status']); // the NetworkUnavailable condition, once
    expect(await topo.ping(p1, p2.ip)).toBe(true);
  });

  it('--release-on-exit takes flannel\'s annotations off the Node: the others drop it (the time it took printed)', async () => {
    expect(await topo.stopDaemon(d3!)).toBe(0);
    const annotations = (await server.getNode('n3'))!.metadata.annotations;
    expect(Object.keys(annotations).filter((k) => k.startsWith(P))).toEqual([]);
    expect(topo.json(n3.ns, '-4 route show type blackhole')).toEqual([]); // the node left: its blackhole route too
    const { ms } = await waitAndReport('n1 and n2 to drop n3', () => !hasRoute(n1, '10.88.3.0/24') && !hasRoute(n2, '10.88.3.0/24'), 30_000, 20);
    process.stdout.write(`[flk] n3 left: dropped by n1 and n2 in ${ms} ms\n`);
  });
});

// flanneld's traffic rules, Backend.MTU read as the underlay's, DirectRouting,
// with the Kubernetes subnet manager.
describe('vxlan-flannel daemon --kube-subnet-mgr with flanneld\'s traffic and backend options', () => {
  it('--ip-masq: traffic from a pod to the world leaves with its node\'s address', async () => {
    await topo.startPeerEcho(world, 9090);
    expect(await topo.addressSeenBy(p1, WORLD_IP, 9090)).toBe(n1.ip);
  });

  it('Backend.MTU 1400 in net-conf.json gives a VTEP of 1350, and FLANNEL_MTU 1350', () => {
    expect(vtep(n1).mtu).toBe(1350);
    expect(readFileSync(topo.subnetFile(n1), 'utf8')).toContain('FLANNEL_MTU=1350\n');
  });

  it('DirectRouting: a node on the same underlay subnet gets a direct route instead of VXLAN, and traffic still crosses', async () => {
    writeFileSync(fileOf(n1, '/etc/kube-flannel/net-conf.json'), JSON.stringify({ ...NET_CONF, Backend: { ...NET_CONF.Backend, DirectRouting: true } }));
    expect(await topo.stopDaemon(d1)).toBe(0);
    d1 = startDaemon(n1);
    await waitFor('a direct route from n1 to n2', () => routesOn(n1).some((r) => r.dst === '10.88.2.0/24' && r.gateway === n2.ip && r.dev === 'eth0'), 30_000);
    expect(hasRoute(n1, '10.88.2.0/24')).toBe(false);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    expect(await topo.addressSeenBy(p1, p2.ip, 8080)).toBe(p1.ip);
  });
});

// A dual-stack cluster: pod CIDRs of both families on each Node, flannel.1
// and flannel-v6.1, both families' annotations, pods pinging over both.
// Plain HTTP to the stand-in, without credentials (--kube-api-url alone).
describe('vxlan-flannel daemon --kube-subnet-mgr, dual stack', () => {
  let t: Topology;
  let api6: KubeApiServerProcess;
  const daemons: Record<string, DaemonHandle> = {};
  let a: Host, b: Host;
  printDaemonLogsOnFailure(() => daemons);

  beforeAll(async () => {
    t = new Topology('flk6');
    a = t.addHost('a', 11, 1500, { ownFiles: true });
    b = t.addHost('b', 12, 1500, { ownFiles: true });
    const apiHost = t.addHost('api', 100);
    api6 = await spawnKubeApiServer({ netns: apiHost.path, host: API_IP, port: 8080 });
    sh(['ln', '-s', join(OUR_BIN, 'flannel'), join(t.cniBin, 'flannel')]);
    sh(['ln', '-s', '/usr/lib/cni/portmap', join(t.cniBin, 'portmap')]);
    for (const [node, n] of [[a, 1], [b, 2]] as const) {
      await api6.createNode({ metadata: { name: node.name }, spec: { podCIDR: `10.87.${n}.0/24`, podCIDRs: [`10.87.${n}.0/24`, `fd87:0:0:${n}::/64`] } });
      writeFileSync(fileOf(node, '/etc/kube-flannel/net-conf.json'), JSON.stringify({ Network: '10.87.0.0/16', EnableIPv6: true, IPv6Network: 'fd87::/48', Backend: { Type: 'vxlan' } }));
      writeFileSync(fileOf(node, '/etc/cni/net.d/10-flannel.conflist'), CNI_CONF);
      daemons[node.name] = t.startDaemon(node, ['--kube-subnet-mgr', '--ip-masq', '--kube-api-url', api6.url, '--node-name', node.name]);
    }
    await Promise.all(Object.values(daemons).map((d) => t.waitSubnet(d)));
  }, 60_000);

  afterAll(async () => {
    await api6?.stop();
    await t?.cleanup();
  });

  it('both pod CIDRs are the lease: both VTEPs, flanneld\'s annotations of both families, subnet.env with both', async () => {
    for (const [node, n] of [[a, 1], [b, 2]] as const) {
      const v4 = t.json(node.ns, '-d link show dev flannel.1')[0];
      const v6 = t.json(node.ns, '-d link show dev flannel-v6.1')[0];
      expect((await api6.getNode(node.name))!.metadata.annotations).toEqual({
        ...flannelAnnotations(node.ip, v4.address),
        [`${P}/backend-v6-data`]: `{"VNI":1,"VtepMAC":"${v6.address}"}`,
        [`${P}/public-ipv6`]: node.ip6,
      });
      expect(readFileSync(t.subnetFile(node), 'utf8')).toBe(
        `FLANNEL_NETWORK=10.87.0.0/16\nFLANNEL_SUBNET=10.87.${n}.1/24\nFLANNEL_IPV6_NETWORK=fd87::/48\nFLANNEL_IPV6_SUBNET=fd87:0:0:${n}::1/64\nFLANNEL_MTU=${Math.min(v4.mtu, v6.mtu)}\nFLANNEL_IPMASQ=true\n`,
      );
    }
    await t.waitMesh([{ node: a, subnet: 'fd87:0:0:1::/64' }, { node: b, subnet: 'fd87:0:0:2::/64' }], 5000, 'flannel-v6.1');
  });

  it('pods attached through libcni with kube-flannel\'s cni-conf.json get an address of each family and ping across nodes over both', async () => {
    const pods = [];
    for (const [node, name] of [[a, 'q1'], [b, 'q2']] as const) {
      const path = t.netns(`flk6-${name}`);
      const r = await runProcess([...enter(node), inject('libcniDriver'), 'add', 'cbr0', path, `ctr-${name}`], { PATH, CNI_PATH: t.cniBin }, '');
      expect(r.code, r.stdout + r.stderr).toBe(0);
      const ips = (r.json.ips as { address: string }[]).map((i) => i.address.split('/')[0]);
      await waitFor(`${node.name}'s cni0 IPv6 gateway to finish DAD`, () => {
        const addrs = t.json(node.ns, '-6 addr show dev cni0 scope global')[0]?.addr_info ?? [];
        return addrs.length > 0 && addrs.every((x: { tentative?: boolean }) => !x.tentative);
      });
      pods.push({ path, v4: ips.find((ip) => !ip.includes(':'))!, v6: ips.find((ip) => ip.includes(':'))! });
    }
    expect(pods[0].v4).toMatch(/^10\.87\.1\./);
    expect(pods[1].v6).toMatch(/^fd87:0:0:2::/);
    expect(await t.ping(pods[0], pods[1].v4)).toBe(true);
    expect(await t.ping(pods[0], pods[1].v6)).toBe(true);
    expect(await t.ping(pods[1], pods[0].v6)).toBe(true);
  });
});
