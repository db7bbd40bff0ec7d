// The per-packet bench's tables (test/bench/netpol.mjs): the table the daemon
// would write on a node whose pod `server` (10.99.2.2, isolated for ingress)
// receives UDP 9 from `client` (10.99.1.2, a pod of another node), in a
// cluster of `pods` pods and `policies` policies of which `selecting` select
// the server (each allowing the client's group, among others); the other
// policies select the node's 109 other pods and pods of other nodes.
// Printed as the nft script (run with esbuild's bundle: node table.js JSON).
import { PolicyEngine } from '../../src/flannel/policy/engine';
import { fullScript } from '../../src/flannel/policy/nft';
import { parsePolicy, podInfo } from '../../src/flannel/policy/parse';

interface Config {
  pods: number;
  policies: number;
  selecting: number;
}

const cfg = JSON.parse(process.argv[2]) as Config;
const NAMESPACES = 100;
const e = new PolicyEngine('router', [4]);
for (let n = 0; n < NAMESPACES; n++) e.setNamespace(`ns-${n}`, { 'kubernetes.io/metadata.name': `ns-${n}`, team: `t${n % 10}` });
e.setNamespace('bench', { 'kubernetes.io/metadata.name': 'bench' });
e.setNamespace('clients', { 'kubernetes.io/metadata.name': 'clients' });

const pod = (namespace: string, name: string, node: string, ip: string, labels: Record<string, string>) =>
  podInfo({
    metadata: { namespace, name, labels },
    spec: { nodeName: node, containers: [{ ports: [{ name: 'sink', containerPort: 9, protocol: 'UDP' }] }] },
    status: { podIPs: [{ ip }] },
  })!;
const add = (p: ReturnType<typeof pod>) => e.setPod(`${p.namespace}/${p.name}`, p);

add(pod('bench', 'server', 'router', '10.99.2.2', { app: 'server' }));
add(pod('clients', 'client', 'other', '10.99.1.2', { role: 'client' }));
// the node's other pods, and the cluster's
for (let i = 0; i < 109; i++) add(pod(`ns-${i % NAMESPACES}`, `local-${i}`, 'router', `10.99.2.${3 + i}`, { app: `app-${i % 50}` }));
for (let i = 0; i < cfg.pods; i++)
  add(
    pod(`ns-${i % NAMESPACES}`, `pod-${i}`, `node-${i % 400}`, `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, {
      app: `app-${i % 50}`,
    }),
  );

for (let i = 0; i < cfg.policies; i++) {
  if (i < cfg.selecting) {
    // the server's: from the client (the first), or from other apps of other namespaces (the rest)
    const from =
      i === 0
        ? {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'clients' } },
            podSelector: { matchLabels: { role: 'client' } },
          }
        : { namespaceSelector: { matchLabels: { team: `t${i % 10}` } }, podSelector: { matchLabels: { app: `app-${i % 50}` } } };
    e.setPolicy(
      `bench/p${i}`,
      parsePolicy({
        metadata: { namespace: 'bench', name: `p${i}` },
        spec: {
          podSelector: { matchLabels: { app: 'server' } },
          ingress: [{ from: [from], ports: [{ protocol: 'UDP', port: 9 }, { port: 8000 + i }] }],
        },
      }),
    );
    continue;
  }
  const ns = `ns-${i % NAMESPACES}`;
  e.setPolicy(
    `${ns}/p${i}`,
    parsePolicy({
      metadata: { namespace: ns, name: `p${i}` },
      spec: {
        podSelector: { matchLabels: { app: `app-${i % 50}` } },
        ingress: [
          {
            from: [
              { podSelector: { matchLabels: { app: `app-${(i + 1) % 50}` } } },
              { namespaceSelector: { matchLabels: { team: `t${i % 10}` } } },
            ],
            ports: [{ port: 8080 }],
          },
        ],
      },
    }),
  );
}
process.stdout.write(fullScript(e.snapshot()));
