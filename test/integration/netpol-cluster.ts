// The network policy tests' cluster: two kube-flannel nodes in network
// namespaces (flannel-topology.ts), dual stack, each running
// `vxlan-flannel daemon --kube-subnet-mgr --network-policy` against the
// stand-in API server, which holds the Nodes, Namespaces, Pods and
// NetworkPolicies; pods attached through libcni with kube-flannel's
// cni-conf.json and registered in the API as a kubelet would (spec.nodeName,
// status.podIPs, their containers' named ports). Every pod runs one
// netpol-agent (test/netpol-agent): servers on TCP 80, TCP 81 and UDP 80 (and
// an SCTP receiver), and the prober, driven over its stdin. A probe round
// asks every pod to reach every pod on every port over both families, all at
// once; expect() repeats rounds until the table is the expected one.
import { inject } from 'vitest';
import { ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DaemonHandle, Host, Topology, UNDERLAY_PREFIX, enter, fileOf } from './flannel-topology';
import { OUR_BIN, runProcess, sh } from './helpers';
import { KubeApiServerProcess, spawnClusterApiServer } from '../support/kube-apiserver-process';
import type { JsonObject, KubeUser } from '../support/kube-apiserver';
import { kubeconfigYaml } from '../support/kubeconfig';
import { TestCA } from '../support/pki';
import { waitFor } from '../support/wait';
import { Observed, Port, Reach, differences, formatTables, observedKey } from './netpol-reachability';

const PATH = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin';
export const API_IP = `${UNDERLAY_PREFIX}.100`;
export const SA_USER = 'system:serviceaccount:kube-flannel:flannel';
const SA_TOKEN = 'netpol-sa-token-51ab';
const CNI_CONF =
  '{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}]}';
/** The probes' timeout: a blocked connection costs this much (all probes of a round run at once). */
const PROBE_TIMEOUT_MS = 1000;

export const NODE_CIDRS: Record<string, [string, string]> = {
  n1: ['10.86.1.0/24', 'fd86:0:0:1::/64'],
  n2: ['10.86.2.0/24', 'fd86:0:0:2::/64'],
};

/** An agent's answer to one command. */
interface Answer {
  id: number;
  ok: boolean;
  err?: string;
  seen?: string[];
}

/** One netpol-agent, in a pod's network namespace. */
class Agent {
  private readonly proc: ChildProcess;
  private readonly waiting = new Map<number, (a: Answer) => void>();
  private nextId = 1;
  readonly ready: Promise<void>;
  private stderr = '';

  constructor(netnsPath: string) {
    this.proc = spawn('nsenter', [`--net=${netnsPath}`, '--', inject('netpolAgent')], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc.stderr!.on('data', (b: Buffer) => (this.stderr += b.toString()));
    let buf = '';
    this.ready = new Promise((resolve, reject) => {
      this.proc.once('exit', (code) => reject(new Error(`netpol-agent in ${netnsPath} exited (${code}): ${this.stderr}`)));
      this.proc.stdout!.on('data', (b: Buffer) => {
        buf += b.toString();
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          const msg = JSON.parse(buf.slice(0, nl)) as Answer & { ready?: boolean };
          buf = buf.slice(nl + 1);
          if (msg.ready) resolve();
          else this.waiting.get(msg.id)?.(msg);
          this.waiting.delete(msg.id);
        }
      });
    });
    this.ready.catch(() => {});
  }

  call(cmd: Record<string, unknown>): Promise<Answer> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.proc.stdin!.write(JSON.stringify({ ...cmd, id }) + '\n');
    });
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGKILL');
    await exited;
  }
}

export interface PodHandle {
  /** namespace/name */
  key: string;
  node: Host;
  netns: string;
  path: string;
  ip4: string;
  ip6: string;
  agent: Agent;
  containerId: string;
}

export class NetpolCluster {
  readonly topo: Topology;
  server!: KubeApiServerProcess;
  readonly nodes: Record<'n1' | 'n2', Host>;
  readonly daemons: Record<string, DaemonHandle | undefined> = {};
  readonly pods = new Map<string, PodHandle>();
  private ca!: TestCA;
  private nextTag = 1;
  private podSeq = 0;

  private constructor(readonly prefix: string) {
    this.topo = new Topology(prefix);
    this.nodes = { n1: this.topo.addHost('n1', 1, 1500, { ownFiles: true }), n2: this.topo.addHost('n2', 2, 1500, { ownFiles: true }) };
  }

  /** The cluster, the API server holding `users` (their roles), both daemons running (their overlay up). */
  static async start(prefix: string, users: (token: string) => KubeUser[], backend: 'vxlan' | 'host-gw' = 'vxlan'): Promise<NetpolCluster> {
    const c = new NetpolCluster(prefix);
    try {
      const api = c.topo.addHost('api', 100);
      c.ca = new TestCA(join(c.topo.tmp.path, 'pki'));
      c.server = await spawnClusterApiServer(api.path, API_IP, c.ca, users(SA_TOKEN));
      for (const [name, cidrs] of Object.entries(NODE_CIDRS))
        await c.server.createNode({ metadata: { name }, spec: { podCIDR: cidrs[0], podCIDRs: cidrs } });
      for (const ns of ['x', 'y', 'z']) await c.server.create('namespaces', { metadata: { name: ns, labels: { ns } } });
      sh(['ln', '-s', join(OUR_BIN, 'flannel'), join(c.topo.cniBin, 'flannel')]);
      for (const node of Object.values(c.nodes)) writeFileSync(fileOf(node, '/etc/cni/net.d/10-flannel.conflist'), CNI_CONF);
      await c.startDaemons(backend);
      return c;
    } catch (err) {
      await c.cleanup();
      throw err;
    }
  }

  /** (Re)starts both daemons on `backend` (`extra`: more flags; `policy` false: without --network-policy); waits for their overlay. */
  /** The nodes' kubeconfig (the service account's token). */
  get kubeconfig(): string {
    return join(this.topo.tmp.path, 'kubeconfig');
  }

  async startDaemons(backend: 'vxlan' | 'host-gw', opts: { policy?: boolean; only?: Host } = {}): Promise<void> {
    const kc = this.kubeconfig;
    writeFileSync(kc, kubeconfigYaml({ server: this.server.url, caFile: this.ca.caFile, token: SA_TOKEN }), { mode: 0o600 });
    const nodes = opts.only ? [opts.only] : Object.values(this.nodes);
    for (const node of nodes) {
      writeFileSync(
        fileOf(node, '/etc/kube-flannel/net-conf.json'),
        JSON.stringify({ Network: '10.86.0.0/16', EnableIPv6: true, IPv6Network: 'fd86::/48', Backend: { Type: backend } }),
      );
      this.daemons[node.name] = this.topo.startDaemon(node, [
        '--kube-subnet-mgr',
        '--ip-masq',
        '--kubeconfig-file',
        kc,
        '--node-name',
        node.name,
        '--healthz-port',
        '8081',
        ...(opts.policy === false ? [] : ['--network-policy']),
      ]);
    }
    await Promise.all(nodes.map((n) => this.topo.waitSubnet(this.daemons[n.name]!, 30_000)));
    if (backend === 'vxlan') {
      await this.topo.waitMesh(
        [
          { node: this.nodes.n1, subnet: NODE_CIDRS.n1[0] },
          { node: this.nodes.n2, subnet: NODE_CIDRS.n2[0] },
        ],
        30_000,
      );
    }
  }

  async stopDaemons(): Promise<void> {
    for (const d of Object.values(this.daemons)) if (d) await this.topo.stopDaemon(d);
  }

  /** GET a path of a node's health server: "<status> <body>". */
  health(node: Host, path: string): Promise<string> {
    return this.topo.nodeIn(
      node,
      `fetch('http://127.0.0.1:8081${path}').then(async (r) => console.log(r.status, (await r.text()).trim()))`,
    );
  }

  /** A metric of a node's /metrics (name with its labels, as printed); undefined when absent. */
  async metric(node: Host, series: string): Promise<number | undefined> {
    const text = await this.topo.nodeIn(node, `fetch('http://127.0.0.1:8081/metrics').then(async (r) => console.log(await r.text()))`);
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  }

  /**
   * A pod: a namespace attached through libcni on `node`, its agent running,
   * then registered in the API (as the kubelet reports a pod once its sandbox
   * has its addresses), with the named ports every test pod has (`web`: 81,
   * but 80 in namespace z: a name that resolves differently per pod).
   */
  async addPod(key: string, node: Host, labels: Record<string, string> = {}): Promise<PodHandle> {
    const netns = `${this.prefix}-p${++this.podSeq}`;
    const path = this.topo.netns(netns);
    const containerId = `${this.prefix}-ctr-${this.podSeq}`;
    const r = await runProcess(
      [...enter(node), inject('libcniDriver'), 'add', 'cbr0', path, containerId],
      { PATH, CNI_PATH: this.topo.cniBin },
      '',
    );
    if (r.code !== 0) throw new Error(`libcni ADD ${key} on ${node.name} failed: ${r.stdout}${r.stderr}`);
    const ips = (r.json.ips as { address: string }[]).map((i) => i.address.split('/')[0]);
    const agent = new Agent(path);
    await agent.ready;
    const pod: PodHandle = {
      key,
      node,
      netns,
      path,
      ip4: ips.find((i) => !i.includes(':'))!,
      ip6: ips.find((i) => i.includes(':'))!,
      agent,
      containerId,
    };
    this.pods.set(key, pod);
    await this.server.create('pods', this.podObject(pod, labels));
    return pod;
  }

  podObject(pod: PodHandle, labels: Record<string, string>): JsonObject {
    const [ns, name] = pod.key.split('/');
    const ports: JsonObject[] = [
      { name: 'serve-80-tcp', containerPort: 80, protocol: 'TCP' },
      { name: 'serve-81-tcp', containerPort: 81, protocol: 'TCP' },
      { name: 'serve-80-udp', containerPort: 80, protocol: 'UDP' },
      { name: 'serve-80-sctp', containerPort: 80, protocol: 'SCTP' },
      { name: 'web', containerPort: ns === 'z' ? 80 : 81, protocol: 'TCP' },
    ];
    return {
      metadata: { namespace: ns, name, labels: { pod: name, ...labels } },
      spec: { nodeName: pod.node.name, containers: [{ name: 'agent', image: 'netpol-agent', ports }] },
      status: { phase: 'Running', podIP: pod.ip4, podIPs: [{ ip: pod.ip4 }, { ip: pod.ip6 }] },
    };
  }

  /** Deletes a pod: from the API first (as a kubelet's DELETE comes before its sandbox goes), then its sandbox. */
  async deletePod(key: string): Promise<void> {
    const pod = this.pods.get(key)!;
    await this.server.delete('pods', key);
    await pod.agent.stop();
    const r = await runProcess(
      [...enter(pod.node), inject('libcniDriver'), 'del', 'cbr0', pod.path, pod.containerId],
      { PATH, CNI_PATH: this.topo.cniBin },
      '',
    );
    if (r.code !== 0) throw new Error(`libcni DEL ${key} failed: ${r.stdout}${r.stderr}`);
    this.pods.delete(key);
  }

  /** Creates or replaces (one MODIFIED) a NetworkPolicy. */
  async policy(key: string, spec: unknown): Promise<void> {
    const [namespace, name] = key.split('/');
    const object = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace, name }, spec } as JsonObject;
    if (await this.server.get('networkpolicies', key)) await this.server.update('networkpolicies', object);
    else await this.server.create('networkpolicies', object);
  }

  async deletePolicies(): Promise<void> {
    for (const p of await this.server.list('networkpolicies'))
      await this.server.delete('networkpolicies', `${p.metadata.namespace}/${p.metadata.name}`);
  }

  /** One probe round: every pod of `pods` to every pod of `pods`, on `ports`, over `families`, all at once. */
  async observe(pods: readonly string[], ports: readonly Port[], families: readonly (4 | 6)[]): Promise<Observed> {
    const seen: Observed = new Map();
    const sctp = new Map<string, { key: string; to: PodHandle }>(); // "dport/tag" -> the cell it answers
    const probes: Promise<void>[] = [];
    for (const from of pods.map((p) => this.pods.get(p)!))
      for (const to of pods.map((p) => this.pods.get(p)!))
        for (const family of families)
          for (const port of ports) {
            const [proto, number] = port.split('/');
            const ip = family === 4 ? to.ip4 : to.ip6;
            const key = observedKey(family, from.key, to.key, port);
            if (proto === 'sctp') {
              const tag = this.nextTag++;
              sctp.set(`${number}/${tag}`, { key, to });
              seen.set(key, false);
              probes.push(from.agent.call({ op: 'probe', proto, ip, port: Number(number), tag }).then(() => {}));
            } else {
              probes.push(
                from.agent
                  .call({ op: 'probe', proto, ip, port: Number(number), timeoutMs: PROBE_TIMEOUT_MS })
                  .then((a) => void seen.set(key, a.ok)),
              );
            }
          }
    await Promise.all(probes);
    if (sctp.size) {
      // an SCTP packet has no answer here: the destinations say what reached them (within the probes' timeout)
      const agents = [...new Set([...sctp.values()].map((s) => s.to))];
      const t0 = Date.now();
      let pending = sctp.size;
      while (pending > 0 && Date.now() - t0 < PROBE_TIMEOUT_MS) {
        for (const a of await Promise.all(agents.map((p) => p.agent.call({ op: 'seen' })))) {
          for (const s of a.seen ?? []) {
            const cell = sctp.get(s);
            if (cell && !seen.get(cell.key)) {
              seen.set(cell.key, true);
              pending--;
            }
          }
        }
        if (pending > 0) await new Promise((r) => setTimeout(r, 50));
      }
    }
    return seen;
  }

  /**
   * Probes until what the pods reach is `expected` (the policies are
   * enforced), for both families unless told otherwise; returns how long it
   * took. On failure, the last tables with what differs.
   */
  async expect(what: string, expected: Reach, families: readonly (4 | 6)[] = [4, 6], timeoutMs = 30_000): Promise<number> {
    let last: Observed = new Map();
    let rounds = 0;
    try {
      const { ms } = await waitFor(
        what,
        async () => {
          rounds++;
          last = await this.observe(expected.pods, expected.ports, families);
          return differences(expected, last, families).length === 0;
        },
        timeoutMs,
        10,
      );
      return ms;
    } catch {
      const diff = differences(expected, last, families);
      throw new Error(
        `${what}: after ${rounds} probe rounds the table is not the expected one (${diff.length} cells differ):\n${formatTables(expected, last, families)}\n${diff.slice(0, 20).join('\n')}`,
      );
    }
  }

  async cleanup(): Promise<void> {
    for (const p of this.pods.values()) await p.agent.stop();
    await this.server?.stop();
    await this.topo.cleanup();
  }
}
