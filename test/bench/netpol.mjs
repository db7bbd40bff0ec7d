// Bench "network policy": `vxlan-flannel daemon --kube-subnet-mgr
// --network-policy` against the stand-in API server (test/support/kube-apiserver.ts)
// holding a cluster of N Pods (110 on our node, the rest on N/110 other
// Nodes), N/250 Namespaces and P NetworkPolicies, all in a throwaway network
// namespace; and the forwarding path of a node with the table the daemon
// writes, in three more.
//
//   node test/bench/netpol.mjs     (root; NETPOL_PODS=10000,50000 NETPOL_POLICIES=1000 NETPOL_REPEAT=5
//                                  NETPOL_SECTIONS=memory,changes,packets (off: only the daemon without the
//                                  flag, to compare builds); NETPOL_DAEMON: the build measured,
//                                  default dist/bin/vxlan-flannel; a script build (bin/) runs with this node and
//                                  NETPOL_NODE_ARGS, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof")
//
// memory   per N: the daemon's RSS (VmRSS, after the start settles) and peak (VmHWM) without the flag (the
//          Pods are not even listed) and with it, and the time from its start to the table written
// changes  per N, with the flag: one API change at a time (a remote pod relabelled into a peer group, a
//          local pod relabelled into a policy's selector, a policy created, a policy's peers changed, a
//          namespace relabelled, a pod created, a pod deleted): from the API write until the daemon's nft
//          transaction is done (its /metrics count of writes moved), the daemon's CPU for it (its /metrics
//          count of policy CPU) and the nft statements it wrote; medians of NETPOL_REPEAT
// packets  small UDP datagrams forwarded by a node (namespace) from a client to an isolated server pod,
//          received datagrams per second, medians of NETPOL_REPEAT 2 s floods, with: no table; the table
//          with 1 policy; with 1,000 policies in the cluster (1 or 10 of them selecting the server); and as
//          a control, a chain of 1,000 rules the packet passes one by one (what a rule per policy costs)
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { median, startStandIn, table } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const DAEMON = process.env.NETPOL_DAEMON ?? join(root, 'dist/bin/vxlan-flannel');
const NODE_ARGS = (process.env.NETPOL_NODE_ARGS ?? '').split(' ').filter(Boolean);
const NS = 'cnibench-netpol';
const SIZES = (process.env.NETPOL_PODS ?? '10000,50000').split(',').map(Number);
const POLICIES = Number(process.env.NETPOL_POLICIES ?? 1000);
const REPEAT = Number(process.env.NETPOL_REPEAT ?? 5);
const SECTIONS = (process.env.NETPOL_SECTIONS ?? 'memory,changes,packets').split(',');
const LOCAL = 110; // kubelet's default maxPods
const PER_NS = 250;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- outside: the namespace, then this script again inside it ----
if (!process.env.NETPOL_IN_NS) {
  if (!existsSync(DAEMON)) throw new Error(`${DAEMON} is missing: run \`make standalone\` (or set NETPOL_DAEMON)`);
  spawnSync('ip', ['netns', 'del', NS]);
  execFileSync('ip', ['netns', 'add', NS]);
  let status = 1;
  try {
    status =
      spawnSync('ip', ['netns', 'exec', NS, process.execPath, fileURLToPath(import.meta.url)], {
        stdio: 'inherit',
        env: { ...process.env, NETPOL_IN_NS: '1' },
      }).status ?? 1;
  } finally {
    for (const ns of [NS, `${NS}-cli`, `${NS}-rtr`, `${NS}-srv`]) spawnSync('ip', ['netns', 'del', ns]);
  }
  process.exit(status);
}

// ---- inside the namespace ----
const dir = mkdtempSync(join(tmpdir(), 'netpol-bench-'));
const sh = (...argv) => execFileSync(argv[0], argv.slice(1), { encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] });
const rssMiB = (pid, field = 'VmRSS') =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;

/** The stand-in API server on 127.0.0.1 (this namespace), driven through its control socket. */
const startApi = () => startStandIn(dir, { nodeArgs: ['--max-old-space-size=4096'], historyLimit: 5000 });

// ---- the cluster ----
const P = 'flannel.alpha.coreos.com';
const nodeName = (i) => `node-${i}`;
const subnetOf = (i) => `10.${128 + (i >> 8)}.${i & 255}.0/24`;
const podIp = (node, k) => `10.${128 + (node >> 8)}.${node & 255}.${2 + k}`;

function kubeNode(i) {
  return {
    metadata: {
      name: nodeName(i),
      labels: { 'kubernetes.io/hostname': nodeName(i) },
      annotations:
        i === 0
          ? {}
          : {
              [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"0a:58:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}"}`,
              [`${P}/backend-type`]: 'vxlan',
              [`${P}/kube-subnet-manager`]: 'true',
              [`${P}/public-ip`]: `172.16.${i >> 8}.${i & 255}`,
            },
    },
    spec: { podCIDR: subnetOf(i), podCIDRs: [subnetOf(i)] },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

/** A pod as the API holds it (a Deployment's: its template's labels, containers, status written by its kubelet): ~2.5 KB. */
function kubePod(i, nodes, namespaces, labels = {}) {
  const node = i % nodes;
  const k = Math.floor(i / nodes);
  const app = `app-${i % 50}`;
  const hash = `7f${(i % 200).toString(16).padStart(6, '0')}`;
  return {
    metadata: {
      namespace: `ns-${i % namespaces}`,
      name: `${app}-${hash}-${i.toString(36)}`,
      labels: { app, 'pod-template-hash': hash, tier: i % 3 ? 'backend' : 'frontend', ...labels },
      annotations: { 'kubectl.kubernetes.io/restartedAt': '2026-01-01T00:00:00Z' },
      ownerReferences: [
        {
          apiVersion: 'apps/v1',
          kind: 'ReplicaSet',
          name: `${app}-${hash}`,
          uid: `00000000-0000-0000-0000-${hash.padStart(12, '0')}`,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      nodeName: nodeName(node),
      serviceAccountName: 'default',
      containers: [
        {
          name: 'main',
          image: `registry.example/${app}:v1.2.3`,
          ports: [
            { name: 'http', containerPort: 8080, protocol: 'TCP' },
            { name: 'metrics', containerPort: 9090, protocol: 'TCP' },
          ],
          env: [
            { name: 'LOG_LEVEL', value: 'info' },
            { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
          ],
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
          volumeMounts: [{ name: 'kube-api-access', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }],
        },
      ],
      volumes: [{ name: 'kube-api-access', projected: { sources: [{ serviceAccountToken: { expirationSeconds: 3607, path: 'token' } }] } }],
    },
    status: {
      phase: 'Running',
      conditions: ['Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({
        type,
        status: 'True',
        lastTransitionTime: '2026-01-01T00:00:00Z',
      })),
      hostIP: `172.16.${node >> 8}.${node & 255}`,
      podIP: podIp(node, k),
      podIPs: [{ ip: podIp(node, k) }],
      startTime: '2026-01-01T00:00:00Z',
      containerStatuses: [
        {
          name: 'main',
          ready: true,
          restartCount: 0,
          started: true,
          image: `registry.example/${app}:v1.2.3`,
          imageID: `registry.example/${app}@sha256:${'ab'.repeat(32)}`,
          containerID: `containerd://${'cd'.repeat(32)}`,
          state: { running: { startedAt: '2026-01-01T00:00:00Z' } },
        },
      ],
    },
  };
}

/** Policies of the kinds clusters have: default deny, from the same app, from a team's namespaces, egress to DNS, to the world but the cluster. */
function kubePolicy(i, namespaces) {
  const ns = `ns-${i % namespaces}`;
  const app = `app-${i % 50}`;
  const specs = [
    { podSelector: {}, policyTypes: ['Ingress'] },
    {
      podSelector: { matchLabels: { app } },
      ingress: [{ from: [{ podSelector: { matchLabels: { app: `app-${(i + 1) % 50}` } } }], ports: [{ port: 'http' }] }],
    },
    {
      podSelector: { matchLabels: { app } },
      ingress: [
        {
          from: [{ namespaceSelector: { matchLabels: { team: `t${i % 10}` } }, podSelector: { matchLabels: { tier: 'frontend' } } }],
          ports: [{ port: 8080 }, { port: 'metrics' }],
        },
      ],
    },
    {
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [
        {
          to: [
            {
              namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
              podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } },
            },
          ],
          ports: [{ protocol: 'UDP', port: 53 }, { port: 53 }],
        },
      ],
    },
    {
      podSelector: { matchLabels: { tier: 'frontend' } },
      policyTypes: ['Egress'],
      egress: [{ to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8', '172.16.0.0/12'] } }] }, { to: [{ podSelector: {} }] }],
    },
  ];
  // every namespace gets every kind in turn (policy i goes to namespace i mod N, its kind changes every N)
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { namespace: ns, name: `policy-${i}` },
    spec: specs[Math.floor(i / namespaces) % specs.length],
  };
}

async function populate(api, n) {
  const nodes = Math.ceil(n / LOCAL);
  const namespaces = Math.max(1, Math.round(n / PER_NS));
  for (let i = 0; i < nodes; i += 500)
    await api.call(
      'createMany',
      'nodes',
      Array.from({ length: Math.min(500, nodes - i) }, (_, k) => kubeNode(i + k)),
    );
  await api.call('createMany', 'namespaces', [
    { metadata: { name: 'kube-system' } },
    ...Array.from({ length: namespaces }, (_, k) => ({ metadata: { name: `ns-${k}`, labels: { team: `t${k % 10}` } } })),
  ]);
  for (let i = 0; i < n; i += 500)
    await api.call(
      'createMany',
      'pods',
      Array.from({ length: Math.min(500, n - i) }, (_, k) => kubePod(i + k, nodes, namespaces)),
    );
  for (let i = 0; i < POLICIES; i += 500)
    await api.call(
      'createMany',
      'networkpolicies',
      Array.from({ length: Math.min(500, POLICIES - i) }, (_, k) => kubePolicy(i + k, namespaces)),
    );
  // the bench's own (the changes section changes what they select): ns-0 has pods of our node
  const bench = (name, spec) => ({
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { namespace: 'ns-0', name },
    spec,
  });
  await api.call('createMany', 'networkpolicies', [
    bench('bench-peers', {
      podSelector: {},
      ingress: [{ from: [{ namespaceSelector: {}, podSelector: { matchLabels: { bench: 'peer' } } }] }],
    }),
    bench('bench-selected', { podSelector: { matchLabels: { bench: 'selected' } }, ingress: [{ from: [{ podSelector: {} }] }] }),
    bench('bench-teams', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { bench: 'team' } } }] }] }),
  ]);
  return { nodes, namespaces };
}

// ---- the daemon ----
function startDaemon(url, policy) {
  writeFileSync(
    join(dir, 'kubeconfig'),
    `apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: "${url}"\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context:\n    cluster: s\n    user: u\ncurrent-context: c\n`,
  );
  writeFileSync(join(dir, 'net-conf.json'), JSON.stringify({ Network: '10.128.0.0/9', SubnetLen: 24, Backend: { Type: 'vxlan' } }));
  const args = [
    'daemon',
    '--iface',
    'ul0',
    '--subnet-file',
    join(dir, 'subnet.env'),
    '--healthz-ip',
    '127.0.0.1',
    '--healthz-port',
    '18082',
    '--kube-subnet-mgr',
    '--kubeconfig-file',
    join(dir, 'kubeconfig'),
    '--node-name',
    nodeName(0),
    '--net-config-path',
    join(dir, 'net-conf.json'),
    ...(policy ? ['--network-policy'] : []),
  ];
  const elf = readFileSync(DAEMON).subarray(0, 4).toString('latin1') === '\x7fELF';
  const child = elf
    ? spawn(DAEMON, args, { stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn(process.execPath, [...NODE_ARGS, DAEMON, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (b) => (log += b));
  const exited = new Promise((r) => child.once('exit', r));
  return { pid: child.pid, log: () => log, stop: async () => (child.kill('SIGTERM'), await exited) };
}

async function metrics() {
  const text = await new Promise((res, rej) => {
    http
      .get('http://127.0.0.1:18082/metrics', (r) => {
        let body = '';
        r.on('data', (b) => (body += b));
        r.on('end', () => res(body));
      })
      .on('error', rej);
  });
  return new Map(
    text
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => [l.slice(0, l.lastIndexOf(' ')), Number(l.slice(l.lastIndexOf(' ') + 1))]),
  );
}

async function until(cond, what, limitMs = 300_000) {
  const t0 = performance.now();
  for (;;) {
    try {
      if (await cond()) return performance.now() - t0;
    } catch {}
    if (performance.now() - t0 > limitMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

const ready = async () => (await fetch('http://127.0.0.1:18082/readyz')).status === 200;

function setupUnderlay() {
  sh('ip', 'link', 'set', 'lo', 'up');
  sh('ip', 'link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul1');
  sh('ip', 'link', 'set', 'ul1', 'up');
  sh('ip', 'addr', 'add', '192.168.201.1/24', 'dev', 'ul0');
  sh('ip', 'link', 'set', 'ul0', 'up');
}

// ---- memory and changes ----
async function benchCluster(n) {
  const api = await startApi();
  const out = { n };
  let daemon;
  try {
    const { nodes, namespaces } = await populate(api, n);
    // One paged list of each before the daemon starts, as other clients (the scheduler, the kubelets) would have
    // made: a real API server answers from a warm watch cache, not a process serializing each object the first time.
    for (const path of ['/api/v1/pods', '/api/v1/namespaces', '/apis/networking.k8s.io/v1/networkpolicies']) {
      for (let token = ''; ;) {
        const page = await (await fetch(`${api.url}${path}?limit=500${token ? `&continue=${encodeURIComponent(token)}` : ''}`)).json();
        if (!(token = page.metadata.continue)) break;
      }
    }
    // without the flag: the Pods are not listed; RSS after the start settles
    let d = (daemon = startDaemon(api.url, false));
    await until(ready, 'the overlay');
    await sleep(2000); // a measurement window: RSS after the start settles (not a wait for a condition)
    out.offRss = rssMiB(d.pid);
    out.offPeak = rssMiB(d.pid, 'VmHWM');
    await d.stop();
    if (!SECTIONS.includes('memory') && !SECTIONS.includes('changes')) return out;
    // with it: the time to the table written, RSS
    const t0 = performance.now();
    d = daemon = startDaemon(api.url, true);
    await until(() => d.log().includes('network policy: enforcing'), 'the table written');
    out.start = performance.now() - t0;
    await until(ready, '/readyz');
    await sleep(2000); // the same window
    out.onRss = rssMiB(d.pid);
    out.onPeak = rssMiB(d.pid, 'VmHWM');
    const m0 = await metrics();
    out.statements = m0.get('flannel_network_policy_rule_statements_total{kind="full"}');
    out.heap = m0.get('nodejs_heap_size_used_bytes') / 2 ** 20;
    out.isolated = [
      m0.get('flannel_network_policy_isolated_pods{direction="ingress"}'),
      m0.get('flannel_network_policy_isolated_pods{direction="egress"}'),
    ];
    out.groups = m0.get('flannel_network_policy_peer_groups');
    out.localPods = m0.get('flannel_network_policy_local_pods');

    if (SECTIONS.includes('changes')) {
      // each change touches something the table holds: the bench's own policies in ns-0 (populate()) use the labels changed
      const remote = (r) => podKey(1 + nodes * (r + 10), nodes, namespaces); // a pod of node-1
      const kinds = {
        'remote pod relabelled (joins a peer group)': (r) =>
          api.call('patch', 'pods', remote(r), { metadata: { labels: { bench: 'peer' } } }),
        'local pod relabelled (a policy selects it, or not)': (r) =>
          api.call('patch', 'pods', podKey(0, nodes, namespaces), { metadata: { labels: { bench: r % 2 ? 'selected' : null } } }),
        'policy created (selects local pods)': (r) =>
          api.call('create', 'networkpolicies', {
            metadata: { namespace: 'ns-0', name: `new-${r}` },
            spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: `new-${r}` } } }] }] },
          }),
        'policy changed (its peers)': (r) =>
          api.call('patch', 'networkpolicies', `ns-0/new-${r}`, {
            spec: { ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: `changed-${r}` } } }] }] },
          }),
        [`namespace relabelled (its ${Math.round(n / namespaces)} pods join a group)`]: (r) =>
          api.call('patch', 'namespaces', 'ns-1', { metadata: { labels: { bench: r % 2 ? 'team' : null } } }),
        'pod created (another node)': (r) => api.call('create', 'pods', kubePod(n + r, nodes, namespaces, { bench: 'peer' })),
        'pod deleted (another node)': (r) => api.call('delete', 'pods', podKey(n + r, nodes, namespaces)),
      };
      out.changes = {};
      for (const [what, write] of Object.entries(kinds)) {
        const runs = [];
        for (let r = 1; r <= REPEAT; r++) runs.push(await timedChange(write, r, what));
        out.changes[what] = {
          ms: median(runs.map((x) => x.ms)),
          cpuMs: median(runs.map((x) => x.cpuMs)),
          statements: median(runs.map((x) => x.statements)),
        };
      }
    }
    out.endRss = rssMiB(d.pid);
    await d.stop();
  } catch (err) {
    console.error(daemon?.log().slice(-4000));
    throw err;
  } finally {
    await api.stop();
    spawnSync('ip', ['link', 'del', 'flannel.1']);
    spawnSync('nft', ['delete', 'table', 'inet', 'flannel-netpol']);
  }
  return out;
}

/** Pod i's key (kubePod's naming). */
function podKey(i, nodes, namespaces) {
  const p = kubePod(i, nodes, namespaces);
  return `${p.metadata.namespace}/${p.metadata.name}`;
}

/** One API change: until the daemon's nft transaction for it is done; its CPU and statements from /metrics. */
async function timedChange(write, r, what) {
  const m0 = await metrics();
  const writes = (m) => m.get('flannel_network_policy_rule_updates_total{kind="changes",result="ok"}') ?? 0;
  const t0 = performance.now();
  await write(r);
  await until(async () => writes(await metrics()) > writes(m0), `the change "${what}" written`, 30_000);
  const ms = performance.now() - t0;
  await sleep(50); // a window for the batch's tail (its CPU is counted once its write returns)
  const m1 = await metrics();
  const cpu = (m) => (m.get('flannel_network_policy_cpu_seconds_total{kind="changes"}') ?? 0) * 1000;
  const st = (m) => m.get('flannel_network_policy_rule_statements_total{kind="changes"}') ?? 0;
  return { ms, cpuMs: cpu(m1) - cpu(m0), statements: st(m1) - st(m0) };
}

// ---- packets ----
async function benchPackets() {
  const agentDir = join(dir, 'agent');
  execFileSync('go', ['build', '-o', join(agentDir, 'netpol-agent'), '.'], {
    cwd: join(root, 'test/netpol-agent'),
    env: { ...process.env, GO111MODULE: 'off', GOCACHE: join(dir, 'gocache'), GOFLAGS: '' },
  });
  const bundle = join(dir, 'table.js');
  await build({
    entryPoints: [join(here, 'netpol-table.ts')],
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    outfile: bundle,
    logLevel: 'warning',
  });
  const [cli, rtr, srv] = ['cli', 'rtr', 'srv'].map((x) => `${NS}-${x}`);
  for (const ns of [cli, rtr, srv]) {
    spawnSync('ip', ['netns', 'del', ns]);
    sh('ip', 'netns', 'add', ns);
    sh('ip', '-n', ns, 'link', 'set', 'lo', 'up');
  }
  sh('ip', '-n', cli, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', rtr);
  sh('ip', '-n', srv, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 's0', 'netns', rtr);
  for (const [ns, dev, addr, gw] of [
    [cli, 'eth0', '10.99.1.2/24', '10.99.1.1'],
    [srv, 'eth0', '10.99.2.2/24', '10.99.2.1'],
    [rtr, 'c0', '10.99.1.1/24'],
    [rtr, 's0', '10.99.2.1/24'],
  ]) {
    sh('ip', '-n', ns, 'addr', 'add', addr, 'dev', dev);
    sh('ip', '-n', ns, 'link', 'set', dev, 'up');
    if (gw) sh('ip', '-n', ns, 'route', 'add', 'default', 'via', gw);
  }
  sh('ip', 'netns', 'exec', rtr, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
  const agent = (ns) => {
    const p = spawn('ip', ['netns', 'exec', ns, join(agentDir, 'netpol-agent')], { stdio: ['pipe', 'pipe', 'inherit'] });
    const waiting = new Map();
    let id = 0;
    let buf = '';
    const ready = new Promise((res) =>
      p.stdout.on('data', (b) => {
        buf += b;
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          const m = JSON.parse(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          if (m.ready) res();
          else waiting.get(m.id)?.(m);
        }
      }),
    );
    return {
      ready,
      call: (cmd) => new Promise((res) => (waiting.set(++id, res), p.stdin.write(JSON.stringify({ ...cmd, id }) + '\n'))),
      stop: () => p.kill('SIGKILL'),
    };
  };
  const [client, server] = [agent(cli), agent(srv)];
  await Promise.all([client.ready, server.ready]);
  const nft = (script) => execFileSync('ip', ['netns', 'exec', rtr, 'nft', '-f', '-'], { input: script });
  const tableOf = (cfg) => execFileSync(process.execPath, [bundle, JSON.stringify(cfg)], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const linear =
    [
      'add table inet linear',
      'add chain inet linear forward { type filter hook forward priority filter; policy accept; }',
      ...Array.from(
        { length: 1000 },
        (_, i) => `add rule inet linear forward ip saddr 192.0.${i >> 8}.${i & 255} udp dport ${1000 + (i % 1000)} drop`,
      ),
    ].join('\n') + '\n';
  const configs = [
    ['no table', () => {}],
    ["table: 1 policy (the server's)", () => nft(tableOf({ pods: 10000, policies: 1, selecting: 1 }))],
    ["table: 1,000 policies, 1 the server's", () => nft(tableOf({ pods: 10000, policies: 1000, selecting: 1 }))],
    ["table: 1,000 policies, 10 the server's", () => nft(tableOf({ pods: 10000, policies: 1000, selecting: 10 }))],
    ['control: 1,000 rules in a row', () => nft(linear)],
  ];
  const rows = [];
  try {
    for (const [what, load] of configs) {
      spawnSync('ip', ['netns', 'exec', rtr, 'nft', 'flush', 'ruleset']);
      load();
      const pps = [];
      for (let r = 0; r < REPEAT; r++) {
        await server.call({ op: 'count' });
        await client.call({ op: 'flood', ip: '10.99.2.2', port: 9, ms: 2000, size: 64 });
        await sleep(100); // the last datagrams in flight
        pps.push((await server.call({ op: 'count' })).count / 2);
      }
      rows.push([what, `${Math.round(median(pps) / 1000)} k/s`]);
    }
  } finally {
    client.stop();
    server.stop();
  }
  return rows;
}

const s = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`);
const mib = (v) => `${v.toFixed(0)} MiB`;

try {
  setupUnderlay();
  if (SECTIONS.includes('off')) {
    for (const n of SIZES) {
      const r = await benchCluster(n);
      console.log(`without --network-policy, ${n} pods in the cluster: RSS ${mib(r.offRss)}, peak ${mib(r.offPeak)} (daemon: ${DAEMON})`);
    }
  }
  if (SECTIONS.includes('memory') || SECTIONS.includes('changes')) {
    const results = [];
    for (const n of SIZES) results.push(await benchCluster(n));
    console.log(`\nnetwork policy, ${POLICIES} policies, ${LOCAL} pods on this node (daemon: ${DAEMON})`);
    table([
      ['pods', 'RSS off', 'peak off', 'RSS on', 'heap on', 'peak on', 'RSS end', 'to the table', 'statements', 'groups', 'isolated in/out'],
      ...results.map((r) => [
        r.n,
        mib(r.offRss),
        mib(r.offPeak),
        mib(r.onRss),
        mib(r.heap),
        mib(r.onPeak),
        mib(r.endRss),
        s(r.start),
        r.statements,
        r.groups,
        r.isolated.join('/'),
      ]),
    ]);
    if (SECTIONS.includes('changes')) {
      for (const r of results) {
        console.log(`\none change at ${r.n} pods (medians of ${REPEAT}): API write to nft done, daemon CPU, nft statements`);
        table([
          ['change', 'enforced after', 'CPU', 'statements'],
          ...Object.entries(r.changes).map(([k, v]) => [k, s(v.ms), s(v.cpuMs), v.statements]),
        ]);
      }
    }
  }
  if (SECTIONS.includes('packets')) {
    console.log(`\nforwarded 64-byte UDP datagrams per second, client -> node -> isolated server pod (medians of ${REPEAT} floods of 2 s)`);
    table([["the node's table", 'received'], ...(await benchPackets())]);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
