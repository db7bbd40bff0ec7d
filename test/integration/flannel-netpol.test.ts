// NetworkPolicy enforced by `vxlan-flannel daemon --kube-subnet-mgr
// --network-policy`, on a two-node dual-stack cluster (netpol-cluster.ts)
// with Kubernetes' netpol e2e layout: namespaces x, y, z (labelled ns=<name>)
// of pods a, b, c (labelled pod=<name>), each serving TCP 80, TCP 81 and
// UDP 80. Every case writes its policies, then probes every pod to every pod
// on every port over IPv4 and IPv6 until what is reached is the case's truth
// table (written by hand, as the e2e tests write theirs); the time that took
// is printed. Same-node traffic crosses the bridge (br_netfilter), cross-node
// traffic the overlay; the cases run with two placements of the pods on the
// nodes (every pair that is same-node in one is cross-node in the other, 20
// of the 36 pairs), then some again on host-gw.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { printDaemonLogsOnFailure } from './flannel-topology';
import { NODE_CIDRS, NetpolCluster, SA_USER } from './netpol-cluster';
import { Port, Reach, inNs } from './netpol-reachability';
import { waitFor } from '../support/wait';

const PODS = ['x/a', 'x/b', 'x/c', 'y/a', 'y/b', 'y/c', 'z/a', 'z/b', 'z/c'];
/** Interleaved, then in blocks: 20 of the 36 pairs change from same-node to cross-node or back. */
const PLACEMENTS: Record<string, Record<string, 'n1' | 'n2'>> = {
  interleaved: Object.fromEntries(PODS.map((p, i) => [p, i % 2 ? 'n2' : 'n1'])),
  blocks: Object.fromEntries(PODS.map((p, i) => [p, i < 5 ? 'n1' : 'n2'])),
};

let c: NetpolCluster;
const all = (ports?: readonly Port[]) => new Reach(PODS, ports);
const sel = (labels: Record<string, string>) => ({ matchLabels: labels });
const podsOn = (node: 'n1' | 'n2') => (p: string) => c.pods.get(p)?.node.name === node;
const nft = (node: 'n1' | 'n2', ...args: string[]) =>
  execFileSync('nsenter', [`--net=${c.nodes[node].path}`, '--', 'nft', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const tableThere = (node: 'n1' | 'n2') => {
  try {
    nft(node, 'list', 'table', 'inet', 'flannel-netpol');
    return true;
  } catch {
    return false;
  }
};

/** Waits for the expected table and prints what it took ("enforced": the API write to the last probe round that agreed). */
async function enforced(what: string, expected: Reach): Promise<void> {
  const ms = await c.expect(what, expected);
  process.stdout.write(`[fnp] ${what}: enforced in ${ms} ms\n`);
}

interface Case {
  name: string;
  /** Writes the case's policies (and changes), expecting its tables. */
  run(): Promise<void>;
}

/** The cases: Kubernetes' netpol e2e semantics, each from a cluster without policies. */
const CASES: Case[] = [
  {
    name: 'no policy: every pod reaches every pod',
    run: () => enforced('no policy', all()),
  },
  {
    name: 'deny all ingress in x: a policy selecting every pod of x with no rule',
    run: async () => {
      await c.policy('x/deny-ingress', { podSelector: {}, policyTypes: ['Ingress'] });
      await enforced('deny all ingress in x', all().deny('*', inNs('x')));
    },
  },
  {
    name: 'deny all egress in x',
    run: async () => {
      await c.policy('x/deny-egress', { podSelector: {}, policyTypes: ['Egress'] });
      await enforced('deny all egress in x', all().deny(inNs('x'), '*'));
    },
  },
  {
    name: "podSelector alone means the policy's namespace; the policy updated in place, then deleted",
    run: async () => {
      await c.policy('x/a-from-b', { podSelector: sel({ pod: 'a' }), ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }] });
      await enforced('x/a from x/b only (not y/b, z/b)', all().deny('*', 'x/a').allow('x/b', 'x/a'));
      await c.policy('x/a-from-b', { podSelector: sel({ pod: 'a' }), ingress: [{ from: [{ podSelector: sel({ pod: 'c' }) }] }] });
      await enforced('updated in place: x/a from x/c only', all().deny('*', 'x/a').allow('x/c', 'x/a'));
      await c.deletePolicies();
      await enforced('deleted: open again', all());
    },
  },
  {
    name: 'namespaceSelector alone: every pod of the namespaces it selects',
    run: async () => {
      await c.policy('x/a-from-y', { podSelector: sel({ pod: 'a' }), ingress: [{ from: [{ namespaceSelector: sel({ ns: 'y' }) }] }] });
      await enforced('x/a from namespace y', all().deny('*', 'x/a').allow(inNs('y'), 'x/a'));
    },
  },
  {
    name: 'namespaceSelector and podSelector in one peer are ANDed',
    run: async () => {
      await c.policy('x/a-from-y-b', {
        podSelector: sel({ pod: 'a' }),
        ingress: [{ from: [{ namespaceSelector: sel({ ns: 'y' }), podSelector: sel({ pod: 'b' }) }] }],
      });
      await enforced('x/a from y/b only', all().deny('*', 'x/a').allow('y/b', 'x/a'));
    },
  },
  {
    name: 'namespaceSelector and podSelector as two peers are ORed',
    run: async () => {
      await c.policy('x/a-from-y-or-b', {
        podSelector: sel({ pod: 'a' }),
        ingress: [{ from: [{ namespaceSelector: sel({ ns: 'y' }) }, { podSelector: sel({ pod: 'b' }) }] }],
      });
      await enforced('x/a from namespace y or x/b', all().deny('*', 'x/a').allow(inNs('y'), 'x/a').allow('x/b', 'x/a'));
    },
  },
  {
    name: 'a port: only TCP 81',
    run: async () => {
      await c.policy('x/a-81', { podSelector: sel({ pod: 'a' }), ingress: [{ ports: [{ protocol: 'TCP', port: 81 }] }] });
      await enforced('x/a on TCP 81 only', all().deny('*', 'x/a', ['tcp/80', 'udp/80']));
    },
  },
  {
    name: "a port without a protocol is TCP (the API's defaulting, applied by the daemon: the API server here stores policies as given)",
    run: async () => {
      await c.policy('x/a-80', { podSelector: sel({ pod: 'a' }), ingress: [{ ports: [{ port: 80 }] }] });
      await enforced('x/a on TCP 80 only', all().deny('*', 'x/a', ['tcp/81', 'udp/80']));
    },
  },
  {
    name: "an ingress port by name is the destination pod's container port of that name and protocol",
    run: async () => {
      await c.policy('x/a-named', { podSelector: sel({ pod: 'a' }), ingress: [{ ports: [{ protocol: 'UDP', port: 'serve-80-udp' }] }] });
      await enforced('x/a on UDP 80 (serve-80-udp) only', all().deny('*', 'x/a', ['tcp/80', 'tcp/81']));
    },
  },
  {
    name: 'an egress port range (endPort)',
    run: async () => {
      await c.policy('x/a-out-80-81', {
        podSelector: sel({ pod: 'a' }),
        policyTypes: ['Egress'],
        egress: [{ ports: [{ protocol: 'TCP', port: 80, endPort: 81 }] }],
      });
      await enforced('x/a out on TCP 80-81 only', all().deny('x/a', '*', ['udp/80']));
    },
  },
  {
    name: 'an egress port by name resolves on each destination pod ("web" is 81 in x and y, 80 in z)',
    run: async () => {
      await c.policy('x/a-out-web', { podSelector: sel({ pod: 'a' }), policyTypes: ['Egress'], egress: [{ ports: [{ port: 'web' }] }] });
      await enforced(
        'x/a out to "web" of each pod',
        all().deny('x/a', '*').allow('x/a', inNs('x', 'y'), ['tcp/81']).allow('x/a', inNs('z'), ['tcp/80']),
      );
    },
  },
  {
    name: 'ipBlock with except (both families): into x/a from the pods of node n2 but z/b',
    run: async () => {
      const zb = c.pods.get('z/b')!; // on n2 in both placements
      await c.policy('x/a-from-n2', {
        podSelector: sel({ pod: 'a' }),
        ingress: [
          {
            from: [
              { ipBlock: { cidr: NODE_CIDRS.n2[0], except: [`${zb.ip4}/32`] } },
              { ipBlock: { cidr: NODE_CIDRS.n2[1], except: [`${zb.ip6}/128`] } },
            ],
          },
        ],
      });
      await enforced("x/a from n2's pods but z/b", all().deny('*', 'x/a').allow(podsOn('n2'), 'x/a').deny('z/b', 'x/a'));
    },
  },
  {
    name: 'egress to an ipBlock: x/a reaches the pods of node n1 only',
    run: async () => {
      await c.policy('x/a-to-n1', {
        podSelector: sel({ pod: 'a' }),
        policyTypes: ['Egress'],
        egress: [{ to: [{ ipBlock: { cidr: NODE_CIDRS.n1[0] } }, { ipBlock: { cidr: NODE_CIDRS.n1[1] } }] }],
      });
      await enforced("x/a to n1's pods only", all().deny('x/a', '*').allow('x/a', podsOn('n1')));
    },
  },
  {
    name: 'the union of the policies that select a pod',
    run: async () => {
      await c.policy('x/a-80-from-b', {
        podSelector: sel({ pod: 'a' }),
        ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }], ports: [{ port: 80 }] }],
      });
      await c.policy('x/a-81-from-c', {
        podSelector: sel({ pod: 'a' }),
        ingress: [{ from: [{ podSelector: sel({ pod: 'c' }) }], ports: [{ port: 81 }] }],
      });
      await enforced(
        'x/a: TCP 80 from x/b, TCP 81 from x/c',
        all().deny('*', 'x/a').allow('x/b', 'x/a', ['tcp/80']).allow('x/c', 'x/a', ['tcp/81']),
      );
      await c.policy('x/all', { podSelector: {}, ingress: [{}] });
      await enforced('and an allow-all rule: everything into x again', all());
    },
  },
  {
    name: "policyTypes Egress only: the policy's ingress rules do not isolate",
    run: async () => {
      await c.policy('x/a-egress-only', {
        podSelector: sel({ pod: 'a' }),
        policyTypes: ['Egress'],
        ingress: [{ from: [{ podSelector: sel({ pod: 'b' }) }] }],
        egress: [{ to: [{ podSelector: sel({ pod: 'b' }) }] }],
      });
      await enforced('x/a out to x/b only, in from anyone', all().deny('x/a', '*').allow('x/a', 'x/b'));
    },
  },
  {
    name: 'egress of one namespace and ingress of another: y reaches z on TCP 80 only, nobody else reaches z',
    run: async () => {
      await c.policy('y/out-to-z-80', {
        podSelector: {},
        policyTypes: ['Egress'],
        egress: [{ to: [{ namespaceSelector: sel({ ns: 'z' }) }], ports: [{ port: 80 }] }],
      });
      await c.policy('z/in-from-y', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: sel({ ns: 'y' }) }] }] });
      await enforced('y -> z on TCP 80 only', all().deny(inNs('y'), '*').deny('*', inNs('z')).allow(inNs('y'), inNs('z'), ['tcp/80']));
    },
  },
  {
    name: 'a pod created after its policy is isolated when it appears, then deleted',
    run: async () => {
      await c.policy('x/d-from-a', { podSelector: sel({ pod: 'd' }), ingress: [{ from: [{ podSelector: sel({ pod: 'a' }) }] }] });
      await enforced('the policy selects no pod yet', all());
      await c.addPod('x/d', c.nodes.n2);
      const withD = new Reach([...PODS, 'x/d']);
      await enforced('x/d arrived: from x/a only', withD.deny('*', 'x/d').allow('x/a', 'x/d'));
      await c.deletePod('x/d');
      await enforced('x/d gone', all());
    },
  },
  {
    name: 'pods relabelled into and out of a selector (the pod selected, and a peer)',
    run: async () => {
      await c.policy('z/isolate-db', { podSelector: sel({ role: 'db' }), policyTypes: ['Ingress'] });
      await c.policy('x/a-from-clients', {
        podSelector: sel({ pod: 'a' }),
        ingress: [{ from: [{ namespaceSelector: {}, podSelector: sel({ role: 'client' }) }] }],
      });
      await enforced('no db, no client yet', all().deny('*', 'x/a'));
      await c.server.patch('pods', 'z/b', { metadata: { labels: { role: 'db' } } });
      await c.server.patch('pods', 'y/c', { metadata: { labels: { role: 'client' } } });
      await enforced('z/b is a db, y/c a client', all().deny('*', 'x/a').deny('*', 'z/b').allow('y/c', 'x/a'));
      await c.server.patch('pods', 'z/b', { metadata: { labels: { role: null } } });
      await c.server.patch('pods', 'y/c', { metadata: { labels: { role: null } } });
      await enforced('labels taken off again', all().deny('*', 'x/a'));
    },
  },
  {
    name: 'a namespace relabelled into a namespaceSelector',
    run: async () => {
      await c.policy('x/a-from-blue', {
        podSelector: sel({ pod: 'a' }),
        ingress: [{ from: [{ namespaceSelector: sel({ team: 'blue' }) }] }],
      });
      await enforced('no blue namespace', all().deny('*', 'x/a'));
      await c.server.patch('namespaces', 'z', { metadata: { labels: { team: 'blue' } } });
      await enforced('z is blue', all().deny('*', 'x/a').allow(inNs('z'), 'x/a'));
      await c.server.patch('namespaces', 'z', { metadata: { labels: { team: null } } });
      await enforced('z is not blue any more', all().deny('*', 'x/a'));
    },
  },
  {
    name: 'SCTP: a port of that protocol only',
    run: async () => {
      await c.policy('x/a-sctp', { podSelector: sel({ pod: 'a' }), ingress: [{ ports: [{ protocol: 'SCTP', port: 80 }] }] });
      await enforced('x/a on SCTP 80 only', all(['sctp/80', 'tcp/80']).deny('*', 'x/a', ['tcp/80']));
    },
  },
];

/** Puts the pods where `placement` says (moving those that are elsewhere: deleted, made again). */
async function place(placement: Record<string, 'n1' | 'n2'>): Promise<void> {
  for (const key of PODS) {
    const want = c.nodes[placement[key]];
    const pod = c.pods.get(key);
    if (pod?.node === want) continue;
    if (pod) await c.deletePod(key);
    await c.addPod(key, want);
  }
}

/** Back to a cluster without policies (labels as made), between cases. */
async function reset(): Promise<void> {
  await c.deletePolicies();
}

beforeAll(async () => {
  // the service account has kube-flannel's ClusterRole only, at first: the network policy one is granted by a test
  c = await NetpolCluster.start('fnp', (token) => [{ name: SA_USER, token, role: 'flannel' }]);
  await place(PLACEMENTS.interleaved);
}, 120_000);

printDaemonLogsOnFailure(() => c?.daemons ?? {});

afterAll(async () => {
  await c?.cleanup();
});

describe('vxlan-flannel daemon --kube-subnet-mgr --network-policy', () => {
  it('without the ClusterRole for --network-policy: /readyz says why (403); once it is granted, the table is written', async () => {
    for (const node of Object.values(c.nodes)) {
      await waitFor(
        `${node.name}'s /readyz to name the missing permission`,
        async () => /^503 not ready: network policy: not listed yet \(listing .*403 Forbidden/.test(await c.health(node, '/readyz')),
        30_000,
        200,
      );
    }
    expect(c.daemons.n1!.log()).toMatch(/does the service account have the ClusterRole for --network-policy\?/);
    await c.server.setUsers([{ name: SA_USER, token: 'netpol-sa-token-51ab', role: ['flannel', 'network-policy'] }]);
    for (const node of Object.values(c.nodes))
      await waitFor(`${node.name}'s /readyz`, async () => (await c.health(node, '/readyz')) === '200 ok', 30_000, 200);
    expect(tableThere('n1') && tableThere('n2')).toBe(true);
    expect(c.daemons.n1!.log()).toMatch(
      /network policy: enforcing 0 policies for the \d pods of this node \(0 isolated for ingress, 0 for egress\) in nftables table inet flannel-netpol/,
    );
  });

  for (const [placement, where] of Object.entries(PLACEMENTS)) {
    describe(`pods placed ${placement}`, () => {
      beforeAll(async () => {
        await reset();
        await place(where);
      }, 120_000);

      for (const k of CASES) {
        it(k.name, async () => {
          await reset();
          await k.run();
        });
      }
    });
  }

  it("the node itself always reaches its pods (kubelet probes); another node's host network is a bare address, which only an ipBlock admits", async () => {
    await reset();
    await c.policy('x/deny-ingress', { podSelector: {}, policyTypes: ['Ingress'] });
    await enforced('deny all ingress in x', all().deny('*', inNs('x')));
    const onN1 = PODS.filter((p) => inNs('x')(p) && c.pods.get(p)!.node.name === 'n1');
    expect(onN1.length).toBeGreaterThan(0);
    const pod = c.pods.get(onN1[0])!;
    const from = (node: 'n1' | 'n2') =>
      c.topo.nodeIn(
        c.nodes[node],
        `require('net').connect(80, ${JSON.stringify(pod.ip4)}).on('connect', () => { console.log('reached'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); }); setTimeout(() => { console.log('blocked'); process.exit(0); }, 1000)`,
      );
    expect(await from('n1')).toBe('reached');
    expect(await from('n2')).toBe('blocked');
  });

  it('a policy the daemon cannot enforce fails closed and is reported: log, /readyz, /metrics', async () => {
    await reset();
    await c.policy('x/bad', {
      podSelector: sel({ pod: 'a' }),
      ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['11.0.0.0/16'] } }] }],
    });
    await enforced('x/bad isolates x/a and allows nothing', all().deny('*', 'x/a'));
    for (const node of Object.values(c.nodes)) {
      await waitFor(
        '/readyz to say it',
        async () =>
          (await c.health(node, '/readyz')) ===
          '503 not ready: network policy x/bad cannot be enforced (spec.ingress[0].from[0].ipBlock.except[0] 11.0.0.0/16 is not inside 10.0.0.0/8)',
        10_000,
        100,
      );
      expect(await c.metric(node, 'flannel_network_policies{state="unenforceable"}')).toBe(1);
    }
    expect(c.daemons.n1!.log()).toContain(
      'network policy x/bad cannot be enforced: spec.ingress[0].from[0].ipBlock.except[0] 11.0.0.0/16 is not inside 10.0.0.0/8; it isolates the pods it selects and allows nothing until it is fixed',
    );
    await reset();
    for (const node of Object.values(c.nodes))
      await waitFor('/readyz', async () => (await c.health(node, '/readyz')) === '200 ok', 10_000, 100);
  });

  it("/metrics: the policies and pods enforced, the table's writes, the packets dropped per direction", async () => {
    await c.policy('x/deny-ingress', { podSelector: {}, policyTypes: ['Ingress'] });
    await enforced('deny all ingress in x', all().deny('*', inNs('x')));
    const n1 = c.nodes.n1;
    const xOnN1 = PODS.filter((p) => inNs('x')(p) && c.pods.get(p)!.node === n1).length;
    await waitFor(
      'the drop counter to be read (every reconcile interval)',
      async () => ((await c.metric(n1, 'flannel_network_policy_dropped_packets_total{direction="ingress"}')) ?? 0) > 0,
      10_000,
      200,
    );
    expect(await c.metric(n1, 'flannel_network_policy_isolated_pods{direction="ingress"}')).toBe(xOnN1);
    expect(await c.metric(n1, 'flannel_network_policies{state="enforced"}')).toBe(1);
    expect(await c.metric(n1, 'flannel_network_policy_synced')).toBe(1);
    expect(await c.metric(n1, 'flannel_network_policy_rule_updates_total{kind="changes",result="ok"}')).toBeGreaterThan(0);
    expect(await c.metric(n1, 'flannel_network_policy_rule_updates_total{kind="full",result="ok"}')).toBeGreaterThanOrEqual(1);
  });

  it('br_netfilter switched off on a node (same-node traffic would bypass the table): switched on again within a reconcile interval, and said', async () => {
    const key = 'net.bridge.bridge-nf-call-iptables';
    const from = c.daemons.n1!.log().length;
    c.topo.sysctl(c.nodes.n1.ns, key, '0');
    await waitFor(
      `${key} to be 1 again`,
      () => execFileSync('nsenter', [`--net=${c.nodes.n1.path}`, '--', 'sysctl', '-n', key], { encoding: 'utf8' }).trim() === '1',
      10_000,
      100,
    );
    await waitFor(
      'the log line',
      () =>
        c.daemons
          .n1!.log()
          .slice(from)
          .includes(`network policy: set ${key}=1, so that traffic between two pods of this node meets the table`),
      10_000,
      100,
    );
    await enforced('still enforced', all().deny('*', inNs('x')));
  });

  it('--network-policy without --kube-subnet-mgr is refused at once (policies come from the Kubernetes API), before anything is set up', async () => {
    const r = await c.topo.cli(c.nodes.n1, ['daemon', '--network-policy', '--lease-dir', '/run/flannel/no-such-store']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/fatal: --network-policy needs --kube-subnet-mgr \(the policies, pods and namespaces are read from the Kubernetes API\)\n$/);
  });

  it('vxlan-flannel policy (the executable, on a node, with its kubeconfig) says which policies select a pod and whether a connection is allowed', async () => {
    const kc = ['--kubeconfig-file', c.kubeconfig];
    const r = await c.topo.cli(c.nodes.n1, ['policy', 'x/a', '--from', 'y/b', '--port', 'tcp/80', ...kc]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('ingress: isolated by 1 policy; what no rule below allows is dropped\n  x/deny-ingress: allows nothing\n');
    expect(r.stdout).toContain('y/b -> x/a tcp/80: DROPPED\n');
    const open = await c.topo.cli(c.nodes.n1, ['policy', 'y/a', '--from', 'x/a', '--port', 'udp/80', ...kc]);
    expect(open.stdout).toContain('x/a -> y/a udp/80: ALLOWED\n  egress of x/a: open\n  ingress of y/a: open\n');
  });

  it('a restart keeps enforcement: the table stays while the daemon is down, and is replaced whole once it has listed again', async () => {
    await c.policy('x/deny-ingress', { podSelector: {}, policyTypes: ['Ingress'] });
    await enforced('deny all ingress in x', all().deny('*', inNs('x')));
    await c.stopDaemons();
    expect(tableThere('n1') && tableThere('n2')).toBe(true);
    await enforced('both daemons down: still enforced', all().deny('*', inNs('x')));
    await c.policy('x/deny-egress', { podSelector: {}, policyTypes: ['Egress'] }); // while they are away
    const from = c.daemons.n1!.log().length;
    await c.startDaemons('vxlan');
    await enforced('back: what changed meanwhile is enforced too', all().deny('*', inNs('x')).deny(inNs('x'), '*'));
    expect(c.daemons.n1!.log().slice(from)).toMatch(/network policy: enforcing 2 policies/);
  });

  describe('on host-gw (cross-node traffic routed over the underlay, not VXLAN)', () => {
    beforeAll(async () => {
      await reset();
      await c.stopDaemons();
      await c.startDaemons('host-gw');
      await waitFor(
        "n1 to route n2's pods via n2",
        () =>
          c.topo
            .json<{ dst: string; dev?: string }[]>(c.nodes.n1.ns, '-4 route show')
            .some((r) => r.dst === NODE_CIDRS.n2[0] && r.dev === 'eth0'),
        30_000,
      );
    }, 120_000);

    for (const k of CASES.filter((x) =>
      /deny all ingress|ANDed|only TCP 81|resolves on each destination|egress of one namespace/.test(x.name),
    )) {
      it(k.name, async () => {
        await reset();
        await k.run();
      });
    }
  });

  it('without --network-policy the table goes: nothing is filtered any more, and no Pod, Namespace or NetworkPolicy is asked for', async () => {
    await c.policy('x/deny-ingress', { podSelector: {}, policyTypes: ['Ingress'] });
    await c.stopDaemons();
    await c.server.clearRequests();
    await c.startDaemons('host-gw', { policy: false });
    await waitFor('the table to go', () => !tableThere('n1') && !tableThere('n2'), 30_000);
    await waitFor(
      'the daemon to say so',
      () => c.daemons.n1!.log().includes('removed the nftables table inet flannel-netpol: --network-policy is off'),
      10_000,
      50,
    );
    await enforced('no enforcement', all());
    const asked = (await c.server.requests()).filter((r) => r.user === SA_USER).map((r) => r.path);
    expect(asked.some((p) => p.startsWith('/api/v1/nodes'))).toBe(true);
    expect(asked.filter((p) => /pods|namespaces|networkpolicies/.test(p))).toEqual([]);
  });
});
