// deploy/kube-flannel.yml run the way a kubelet runs it, with podman and the
// image `make image` built (dist/cni-ts-image.tar), on three node namespaces
// of one machine (flannel-topology.ts): for each node, the DaemonSet's init
// containers then its container, with the manifest's own command, args, env
// (the downward-API fields filled in as the kubelet fills them), volumes
// (each hostPath a directory of that node, the ConfigMap's keys as files),
// capabilities (containerd's default set plus the manifest's), the service
// account token and CA where Kubernetes mounts them and the in-cluster
// variables, against the stand-in API server over HTTPS with a bearer token.
// Pods are attached through libcni with the conflist the init container
// wrote, using the plugin it installed.
//
// Node n3 first runs "flanneld": its VTEP, MAC annotation, subnet.env,
// masquerade rules and peers made by hand the way flanneld makes them; it is
// then switched to ours, as a rolling update of the DaemonSet would, while a
// pod on it pings a pod on n1.
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAll } from 'js-yaml';
import { Host, Topology, UNDERLAY_PREFIX, enter, fileOf } from './flannel-topology';
import { waitFor } from '../support/wait';
import { ROOT, runProcess, sh } from './helpers';
import { ELF_MACHINE, elfMachines, foreignElf, unpackImage } from './artifacts';
import { TestCA } from '../support/pki';
import { KubeApiServerProcess, spawnClusterApiServer } from '../support/kube-apiserver-process';
import { PrivateContainerd } from './containerd';
import type { JsonObject } from '../support/kube-apiserver';

/* eslint-disable @typescript-eslint/no-explicit-any */
type Obj = Record<string, any>;

const IMAGE_TAR = join(ROOT, 'dist/cni-ts-image.tar');
const P = 'flannel.alpha.coreos.com';
const API_IP = `${UNDERLAY_PREFIX}.100`;
const SA_USER = 'system:serviceaccount:kube-flannel:flannel';
const SA_TOKEN = 'kube-flannel-ds-token-4f2a';
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** What containerd grants a container that asks for nothing more (its default spec). */
const RUNTIME_DEFAULT_CAPS = ['CHOWN', 'DAC_OVERRIDE', 'FSETID', 'FOWNER', 'MKNOD', 'NET_RAW', 'SETGID', 'SETUID', 'SETFCAP', 'SETPCAP', 'NET_BIND_SERVICE', 'SYS_CHROOT', 'KILL', 'AUDIT_WRITE'];
const PODMAN = ['podman', '--cgroup-manager=cgroupfs'];
const PODMAN_RUN = ['--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024'];
const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';

const manifest = loadAll(readFileSync(join(ROOT, 'deploy/kube-flannel.yml'), 'utf8')).filter(Boolean) as Obj[];
const ds = manifest.find((o) => o.kind === 'DaemonSet')!;
const configMap = manifest.find((o) => o.kind === 'ConfigMap')!;
const podSpec = ds.spec.template.spec;
const daemonContainer = podSpec.containers[0];
const healthzPort: number = daemonContainer.ports.find((p: Obj) => p.name === daemonContainer.livenessProbe.httpGet.port).containerPort;
const NETWORK: string = JSON.parse(configMap.data['net-conf.json']).Network;
const octet = (n: number) => NETWORK.split('.').slice(0, 2).join('.') + `.${n}`;
const subnetOfNode = (n: number) => `${octet(n)}.0/24`;

let topo: Topology;
let server: KubeApiServerProcess;
let ca: TestCA;
const nodes: Host[] = [];
const containers = new Set<string>();
const pings: ChildProcess[] = [];

const podman = (args: string[]) => runProcess([...PODMAN, ...args], { PATH }, '');

/** Each hostPath volume of the manifest: a directory (or file) of node `n`'s own; the ConfigMap: a directory of its keys. */
function volumeSource(node: Host, name: string): string {
  const v = podSpec.volumes.find((x: Obj) => x.name === name);
  if (v.configMap) {
    const dir = join(topo.tmp.path, `configmap-${v.configMap.name}`);
    if (!existsSync(dir)) {
      mkdirSync(dir);
      for (const [k, text] of Object.entries(configMap.data)) writeFileSync(join(dir, k), text as string);
    }
    return dir;
  }
  const path: string = v.hostPath.path;
  // the node's own mount namespace holds /run/flannel, /etc/cni/net.d and /var/lib/cni (flannel-topology.ts NODE_DIRS)
  if (path === '/run/flannel' || path === '/etc/cni/net.d') return fileOf(node, path);
  if (path.startsWith('/var/lib/cni/')) {
    mkdirSync(fileOf(node, path), { recursive: true });
    return fileOf(node, path);
  }
  const local = join(node.root!, 'host', path);
  if (v.hostPath.type === 'FileOrCreate') {
    mkdirSync(join(local, '..'), { recursive: true });
    if (!existsSync(local)) writeFileSync(local, '');
  } else mkdirSync(local, { recursive: true });
  return local;
}

/** podman run's arguments for one container of the manifest on `node`, as the kubelet would start it. */
function runArgs(node: Host, c: Obj, name: string): string[] {
  const pod = `kube-flannel-ds-${node.name}`;
  const args = [...PODMAN_RUN, '--name', name, '--network', `ns:${node.path}`, '--cap-drop', 'all'];
  for (const cap of [...RUNTIME_DEFAULT_CAPS, ...(c.securityContext?.capabilities?.add ?? [])]) args.push('--cap-add', cap);
  if (c.securityContext?.privileged) args.push('--privileged');
  // the kubelet's: the service's address, and the downward API's fields
  const env: Record<string, string> = { KUBERNETES_SERVICE_HOST: API_IP, KUBERNETES_SERVICE_PORT: '6443' };
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') env[e.name] = pod;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') env[e.name] = ds.metadata.namespace;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName') env[e.name] = node.name;
    else throw new Error(`env ${e.name}: a source this test does not fill in`);
  }
  for (const [k, v] of Object.entries(env)) args.push('--env', `${k}=${v}`);
  for (const m of c.volumeMounts ?? []) args.push('--volume', `${volumeSource(node, m.name)}:${m.mountPath.replace(/\/$/, '')}${m.readOnly ? ':ro' : ''}`);
  args.push('--volume', `${join(topo.tmp.path, 'serviceaccount')}:${SA_DIR}:ro`);
  args.push('--entrypoint', JSON.stringify(c.command), c.image, ...(c.args ?? []));
  return args;
}

/** The init containers, in order, each to completion; then the container, detached. Resolves with the container's name. */
async function startPod(node: Host, generation: number): Promise<string> {
  for (const c of podSpec.initContainers) {
    const name = `kfi-${node.name}-${c.name}-${generation}`;
    containers.add(name);
    const r = await podman(['run', '--rm', ...runArgs(node, c, name)]);
    containers.delete(name);
    if (r.code !== 0) throw new Error(`init container ${c.name} on ${node.name} failed (${r.code}): ${r.stdout}${r.stderr}`);
  }
  const name = `kfi-${node.name}-${daemonContainer.name}-${generation}`;
  containers.add(name);
  const r = await podman(['run', '--detach', ...runArgs(node, daemonContainer, name)]);
  if (r.code !== 0) throw new Error(`container on ${node.name} did not start (${r.code}): ${r.stderr}`);
  return name;
}

/** Stops a container the way the kubelet does (SIGTERM, then the grace period); resolves with how long it took. */
async function stopPod(name: string): Promise<number> {
  const t0 = Date.now();
  const r = await podman(['stop', '--time', String(podSpec.terminationGracePeriodSeconds ?? 30), name]);
  const ms = Date.now() - t0;
  if (r.code !== 0) throw new Error(`podman stop ${name}: ${r.stderr}`);
  await podman(['rm', '--force', name]);
  containers.delete(name);
  return ms;
}

const logsOf = async (name: string) => (await podman(['logs', name])).stderr;
const probe = async (node: Host, path: string) =>
  topo.nodeIn(node, `fetch('http://127.0.0.1:${healthzPort}${path}').then(async (r) => console.log(r.status, (await r.text()).trim()), (e) => console.log('error', e.message))`);
const vtepMac = (node: Host) => topo.json(node.ns, 'link show dev flannel.1')[0].address as string;

interface Pod {
  name: string;
  path: string;
  ip: string;
}

/** Attaches a pod namespace on `node` through libcni with the conflist the init container wrote and the plugin it installed. */
async function attach(node: Host, name: string): Promise<Pod> {
  const path = topo.netns(`kfi-${name}`);
  const cniPath = [volumeSource(node, 'cni-plugin'), topo.cniBin, '/usr/lib/cni'].join(':');
  const r = await runProcess([...enter(node), inject('libcniDriver'), 'add', 'cbr0', path, `ctr-${name}`], { PATH, CNI_PATH: cniPath }, '');
  if (r.code !== 0) throw new Error(`libcni ADD ${name} on ${node.name} failed: ${r.stdout}${r.stderr}`);
  return { name, path, ip: (r.json.ips as { address: string }[])[0].address.split('/')[0] };
}

/** A continuous ping (every 0.1 s) from `from` to `to`: replies() so far; stop() resolves with what it sent and got back. */
function continuousPing(from: Pod, to: Pod): { replies: () => number; stop: () => Promise<{ sent: number; received: number }> } {
  const proc = spawn('nsenter', [`--net=${from.path}`, '--', 'ping', '-n', '-i', '0.1', to.ip], { stdio: ['ignore', 'pipe', 'pipe'] });
  pings.push(proc);
  let out = '';
  proc.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  return {
    replies: () => out.split('\n').filter((l) => l.includes(' bytes from ')).length,
    stop: async () => {
      const done = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGINT');
      await done;
      const m = /(\d+) packets transmitted, (\d+) received/.exec(out);
      if (!m) throw new Error(`ping printed no summary: ${out.slice(-500)}`);
      return { sent: Number(m[1]), received: Number(m[2]) };
    },
  };
}

let n1: Host, n2: Host, n3: Host;
const running: Record<string, string> = {};
let p1: Pod, p2: Pod, p3: Pod;

beforeAll(async () => {
  if (!existsSync(IMAGE_TAR)) throw new Error(`${IMAGE_TAR} is missing: run \`make image\``);
  const t0 = Date.now();
  const loaded = await podman(['load', '--input', IMAGE_TAR]);
  if (loaded.code !== 0) throw new Error(`podman load failed: ${loaded.stderr}`);
  expect(loaded.stdout + loaded.stderr).toContain(`Loaded image: ${daemonContainer.image}`); // the manifest names the image make image built
  process.stdout.write(`[kfi] podman load of the image: ${Date.now() - t0} ms\n`);

  topo = new Topology('kfi');
  n1 = topo.addHost('n1', 1, 1500, { ownFiles: true });
  n2 = topo.addHost('n2', 2, 1500, { ownFiles: true });
  n3 = topo.addHost('n3', 3, 1500, { ownFiles: true });
  nodes.push(n1, n2, n3);
  const api = topo.addHost('api', 100);
  // the manifest gives no --iface: the daemon takes the default route's interface, as flanneld does
  for (const node of nodes) topo.ip(node.ns, `route add default via ${API_IP} dev eth0`);
  ca = new TestCA(join(topo.tmp.path, 'pki'));
  server = await spawnClusterApiServer(api.path, API_IP, ca, [{ name: SA_USER, token: SA_TOKEN, role: 'flannel' }]);
  // the service account volume the kubelet projects into every container
  const sa = join(topo.tmp.path, 'serviceaccount');
  mkdirSync(sa);
  writeFileSync(join(sa, 'token'), SA_TOKEN);
  writeFileSync(join(sa, 'ca.crt'), ca.caPem);
  writeFileSync(join(sa, 'namespace'), ds.metadata.namespace);
  for (const [i, node] of nodes.entries()) {
    const n = i + 1;
    await server.createNode({
      metadata: { name: node.name },
      spec: { podCIDR: subnetOfNode(n), podCIDRs: [subnetOfNode(n)] },
      status: { conditions: [{ type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated', message: 'Node created without a route' }] },
    } as JsonObject);
    await server.createPod({ metadata: { namespace: ds.metadata.namespace, name: `kube-flannel-ds-${node.name}` }, spec: { nodeName: node.name, serviceAccountName: podSpec.serviceAccountName } });
  }
  // the manifest's conflist chains portmap, which flannel's manifest leaves to the node
  sh(['ln', '-s', '/usr/lib/cni/portmap', join(topo.cniBin, 'portmap')]);
}, 120_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state !== 'fail') return;
  for (const name of containers) process.stdout.write(`--- podman logs ${name}:\n${(await podman(['logs', name])).stderr}\n`);
});

afterAll(async () => {
  for (const p of pings) p.kill('SIGKILL');
  for (const name of containers) await podman(['rm', '--force', '--time', '0', name]);
  await server?.stop();
  await topo?.cleanup();
}, 60_000);

describe('deploy/kube-flannel.yml with the image, run as a kubelet runs it', () => {
  it('on two nodes: the init containers install the plugin and the conflist, the daemon programs the overlay, pods attached through libcni ping across', async () => {
    const t0 = Date.now();
    running.n1 = await startPod(n1, 1);
    running.n2 = await startPod(n2, 1);
    // install-cni-plugin: our flannel in the node's /opt/cni/bin; install-cni: the ConfigMap's cni-conf.json
    expect(readFileSync(join(volumeSource(n1, 'cni-plugin'), 'flannel')).equals(readFileSync(join(ROOT, 'dist/bin/flannel')))).toBe(true);
    expect(readFileSync(fileOf(n1, '/etc/cni/net.d/10-flannel.conflist'), 'utf8')).toBe(configMap.data['cni-conf.json']);
    for (const [node, n] of [[n1, 1], [n2, 2]] as const) {
      await waitFor(`${node.name}'s subnet.env`, () => existsSync(fileOf(node, '/run/flannel/subnet.env')), 30_000, 100);
      expect(readFileSync(fileOf(node, '/run/flannel/subnet.env'), 'utf8')).toBe(`FLANNEL_NETWORK=${NETWORK}\nFLANNEL_SUBNET=${octet(n)}.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n`);
    }
    await topo.waitMesh([{ node: n1, subnet: subnetOfNode(1) }, { node: n2, subnet: subnetOfNode(2) }], 30_000);
    process.stdout.write(`[kfi] two nodes up through podman (init containers, daemon, mesh): ${Date.now() - t0} ms\n`);
    const log = await logsOf(running.n1);
    expect(log).toContain(`Kubernetes API: in-cluster (https://${API_IP}:6443)`);
    expect(log).toMatch(/running: (\d+) of \1 peers programmed/);
    // the node name came from GETting our own pod
    expect((await server.requests()).some((r) => r.method === 'GET' && r.path === `/api/v1/namespaces/kube-flannel/pods/kube-flannel-ds-n1`)).toBe(true);
    p1 = await attach(n1, 'p1');
    p2 = await attach(n2, 'p2');
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    expect(await topo.ping(p2, p1.ip)).toBe(true);
  }, 180_000);

  it('the probes answer on the manifest\'s port: /healthz and /readyz "200 ok"; the Node condition is False; /metrics counts the pod\'s address from host-local\'s directory', async () => {
    for (const node of [n1, n2]) {
      await waitFor(`${node.name}'s /readyz`, async () => (await probe(node, '/readyz')) === '200 ok', 20_000, 200);
      expect(await probe(node, '/healthz')).toBe('200 ok');
      // the pod attached on each node holds one address of its /24 (253 usable: the gateway .1 is the bridge's)
      const metrics = await probe(node, '/metrics');
      expect(metrics).toMatch(/flannel_pod_addresses\{network="cbr0",family="ipv4",state="in_use"\} 1(\n|$)/);
      expect(metrics).toMatch(/flannel_pod_addresses\{network="cbr0",family="ipv4",state="free"\} \d+(\n|$)/);
      const stored = (await server.getNode(node.name))!;
      expect(stored.status.conditions.find((c: Obj) => c.type === 'NetworkUnavailable')).toMatchObject({ status: 'False', reason: 'FlannelIsUp' });
    }
  }, 60_000);

  it('a rolling restart of n2\'s pod: SIGTERM stops the daemon at once, the VTEP and its MAC stay, a continuous ping between pods on n1 and n2 loses at most 1 s', async () => {
    const mac = vtepMac(n2);
    const ping = continuousPing(p1, p2);
    await waitFor('the continuous ping to get answers', () => ping.replies() >= 5, 10_000, 100);
    const stopMs = await stopPod(running.n2);
    process.stdout.write(`[kfi] n2's container stopped in ${stopMs} ms\n`);
    expect(stopMs).toBeLessThan(10_000); // the grace period is 30 s: a daemon that ignored SIGTERM would take all of it
    running.n2 = await startPod(n2, 2);
    await waitFor('n2\'s new daemon to be ready', async () => (await probe(n2, '/readyz')) === '200 ok', 60_000, 200);
    const after = ping.replies();
    await waitFor('ten more replies after the restart', () => ping.replies() >= after + 10, 10_000, 100);
    const { sent, received } = await ping.stop();
    process.stdout.write(`[kfi] rolling restart of n2: ${sent - received} of ${sent} pings lost (0.1 s apart)\n`);
    expect(sent).toBeGreaterThan(10);
    expect(sent - received).toBeLessThanOrEqual(10);
    expect(vtepMac(n2)).toBe(mac);
    expect(await logsOf(running.n2)).toMatch(/reusing VTEP flannel\.1/);
  }, 120_000);

  it('n3 switched from "flanneld" to ours: its VTEP, MAC and subnet are taken over, flanneld\'s rules replaced, and its pod keeps talking to n1\'s', async () => {
    // n3 as flanneld leaves it: VTEP with a MAC of its own, the MAC in the Node's annotations, subnet.env, its rules, its peers
    const mac = '0a:58:0a:f4:03:00';
    topo.ip(n3.ns, `link add flannel.1 address ${mac} mtu 1450 type vxlan id 1 local ${n3.ip} dev eth0 dstport 8472 nolearning`);
    topo.ip(n3.ns, `addr add ${octet(3)}.0/32 dev flannel.1`);
    topo.ip(n3.ns, 'link set flannel.1 up');
    await server.patchNode('n3', {
      metadata: { annotations: { [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"${mac}"}`, [`${P}/backend-type`]: 'vxlan', [`${P}/kube-subnet-manager`]: 'true', [`${P}/public-ip`]: n3.ip } },
    });
    writeFileSync(fileOf(n3, '/run/flannel/subnet.env'), `FLANNEL_NETWORK=${NETWORK}\nFLANNEL_SUBNET=${octet(3)}.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n`);
    const s3 = octet(3);
    sh(['ip', 'netns', 'exec', n3.ns, 'iptables-restore', '--noflush'], [
      '*nat',
      ':FLANNEL-POSTRTG - [0:0]',
      '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
      '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN',
      `-A FLANNEL-POSTRTG -s ${s3}.0/24 -d ${NETWORK} -m comment --comment "flanneld masq" -j RETURN`,
      `-A FLANNEL-POSTRTG -s ${NETWORK} -d ${s3}.0/24 -m comment --comment "flanneld masq" -j RETURN`,
      `-A FLANNEL-POSTRTG ! -s ${NETWORK} -d ${s3}.0/24 -m comment --comment "flanneld masq" -j RETURN`,
      `-A FLANNEL-POSTRTG -s ${NETWORK} ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`,
      `-A FLANNEL-POSTRTG ! -s ${NETWORK} -d ${NETWORK} -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`,
      'COMMIT',
      '*filter',
      ':FLANNEL-FWD - [0:0]',
      '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
      `-A FLANNEL-FWD -s ${NETWORK} -m comment --comment "flanneld forward" -j ACCEPT`,
      `-A FLANNEL-FWD -d ${NETWORK} -m comment --comment "flanneld forward" -j ACCEPT`,
      'COMMIT',
      '',
    ].join('\n'));
    for (const [peer, n] of [[n1, 1], [n2, 2]] as const) {
      const pm = vtepMac(peer);
      topo.ip(n3.ns, `neigh replace ${octet(n)}.0 lladdr ${pm} dev flannel.1 nud permanent`);
      sh(['bridge', '-n', n3.ns, 'fdb', 'replace', pm, 'dev', 'flannel.1', 'dst', peer.ip, 'self', 'permanent']);
      topo.ip(n3.ns, `route replace ${subnetOfNode(n)} via ${octet(n)}.0 dev flannel.1 onlink`);
    }
    // flannel's init containers' work: the plugin and the conflist (our plugin stands in for flannel's Go one here)
    const bin = volumeSource(n3, 'cni-plugin');
    copyFileSync(join(ROOT, 'dist/bin/flannel'), join(bin, 'flannel'));
    chmodSync(join(bin, 'flannel'), 0o755);
    writeFileSync(fileOf(n3, '/etc/cni/net.d/10-flannel.conflist'), configMap.data['cni-conf.json']);
    // n1 and n2 program n3 from its annotations; its pod reaches n1's
    await topo.waitMesh([{ node: n1, subnet: subnetOfNode(3) }, { node: n2, subnet: subnetOfNode(3) }], 30_000);
    p3 = await attach(n3, 'p3');
    expect(await topo.ping(p3, p1.ip)).toBe(true);

    const ping = continuousPing(p3, p1);
    await waitFor('the continuous ping to get answers', () => ping.replies() >= 5, 10_000, 100);
    const t0 = Date.now();
    running.n3 = await startPod(n3, 1);
    await waitFor('n3\'s daemon to be ready', async () => (await probe(n3, '/readyz')) === '200 ok', 60_000, 200);
    const switchMs = Date.now() - t0;
    const after = ping.replies();
    await waitFor('ten more replies after the switch', () => ping.replies() >= after + 10, 10_000, 100);
    const { sent, received } = await ping.stop();
    process.stdout.write(`[kfi] switch of n3 from "flanneld" to ours (pod start to ready ${switchMs} ms): ${sent - received} of ${sent} pings lost (0.1 s apart)\n`);
    expect(sent - received).toBeLessThanOrEqual(10);
    expect(vtepMac(n3)).toBe(mac);
    expect(readFileSync(fileOf(n3, '/run/flannel/subnet.env'), 'utf8')).toBe(`FLANNEL_NETWORK=${NETWORK}\nFLANNEL_SUBNET=${octet(3)}.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n`);
    expect(JSON.parse((await server.getNode('n3'))!.metadata.annotations[`${P}/backend-data`]).VtepMAC).toBe(mac);
    // flanneld's rules were replaced by ours (the same chains), not doubled
    const rules = sh(['ip', 'netns', 'exec', n3.ns, 'iptables-save']);
    expect(rules.split('\n').filter((l) => l === '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG')).toHaveLength(1);
    expect(rules.split('\n').filter((l) => l === '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD')).toHaveLength(1);
    expect(await logsOf(running.n3)).toMatch(/reusing VTEP flannel\.1/);
    expect(await topo.ping(p3, p2.ip)).toBe(true);
  }, 180_000);

  it('holds x86-64 executables and libraries only (its Debian layer\'s too); its config says linux/amd64 (arm64\'s: arm64.test.ts)', () => {
    const image = unpackImage(IMAGE_TAR, join(topo.tmp.path, 'unpacked'));
    expect(image.config).toMatchObject({ architecture: 'amd64', os: 'linux' });
    const machines = elfMachines(image.root);
    expect(machines.size).toBeGreaterThan(100);
    for (const f of ['opt/cni-ts/bin/vxlan-flannel', 'usr/sbin/xtables-nft-multi', 'usr/bin/ip', 'usr/bin/nsenter']) {
      expect(machines.has(f), f).toBe(true);
    }
    expect(foreignElf(machines, ELF_MACHINE.amd64)).toEqual([]);
  }, 60_000);

  it('the image carries our LICENSE and the build\'s third-party notices, and is dated by the commit it was built from', () => {
    const member = (archive: string | Buffer, name: string): Buffer =>
      execFileSync('tar', ['-xOf', typeof archive === 'string' ? archive : '-', name], { ...(typeof archive === 'string' ? {} : { input: archive }), maxBuffer: 1 << 30 });
    const [{ Config, Layers }] = JSON.parse(member(IMAGE_TAR, 'manifest.json').toString());
    const config = JSON.parse(member(IMAGE_TAR, Config).toString());
    const commit = Number(sh(['git', '-C', ROOT, 'log', '-1', '--format=%ct']).trim());
    expect(config.created).toBe(new Date(commit * 1000).toISOString());
    const ours = member(IMAGE_TAR, Layers.at(-1));
    expect(member(ours, 'usr/share/doc/cni-ts/LICENSE').toString()).toBe(readFileSync(join(ROOT, 'LICENSE'), 'utf8'));
    expect(member(ours, 'usr/share/doc/cni-ts/THIRD-PARTY-NOTICES').toString()).toBe(readFileSync(join(ROOT, 'dist/THIRD-PARTY-NOTICES'), 'utf8'));
  });

  it('containerd takes the same archive: `ctr images import` gives the image the manifest names', async () => {
    const ctrd = await PrivateContainerd.start({ name: 'kfi', bridge: 'kfi-ctrd', subnet: '10.77.241.0/24' });
    try {
      const ctr = (args: string[]) => sh(['ctr', '--address', ctrd.socket, '-n', 'cni-ts-image', ...args]);
      const t0 = Date.now();
      ctr(['images', 'import', IMAGE_TAR]);
      process.stdout.write(`[kfi] ctr images import: ${Date.now() - t0} ms\n`);
      expect(ctr(['images', 'ls', '-q'])).toContain(daemonContainer.image);
    } finally {
      await ctrd.stop();
    }
  }, 120_000);
});
